"""Evaluating MIR models on any chronological part of the dev split: the shared pool rule, the
rolling-origin folds, per-proposal evaluation (pinned to the registered ids' figures) and the
rolling-origin example end to end."""
import pandas as pd
import pytest
from conftest import load_example

#: docs/mir.md, "Rolling origin": the base model's six figures and their mean on the 37 proposals
BASE_ROLLING = [67.34, 73.65, 65.59, 71.4, 78.6, 65.02, 70.27]


@pytest.fixture(scope="module")
def example():
    return load_example("mir_rolling")


def test_rolling_parts_train_only_on_earlier_proposals(mir_dev):
    from pyterrier_sci.datasets import mir_multicite as M
    order = M.chronological_order(mir_dev)
    folds = M.rolling_parts(mir_dev)
    assert [(len(tr), len(te)) for tr, te in folds] == [(34, 18), (52, 17), (69, 17)]
    for train, test in folds:
        assert train == order[:len(train)] and not set(train) & set(test)
        assert max(M.proposal_date(q) for q in train) <= min(M.proposal_date(q) for q in test)
    tested = [q for _, te in folds for q in te]
    assert tested == order[34:] and len(set(tested)) == len(tested)      # each proposal tested once
    # the middle fold is the chrono-train part of the registered protocol
    assert folds[1][0] == M.chrono_parts(mir_dev)[0]
    for bad in ([], [0.6, 0.4], [0.0, 0.5], [0.5, 1.0], [0.5, 0.5]):
        with pytest.raises(ValueError):
            M.rolling_parts(mir_dev, bad)
    with pytest.raises(ValueError, match="without"):
        M.rolling_parts(mir_dev, [0.001])


def test_candidate_pools_are_the_registered_ids_pools(mir_dev):
    from pyterrier_sci.datasets import mir_multicite as M
    train_q, test_q = M.chrono_parts(mir_dev)
    judged = mir_dev.cited(test_q)
    train_docs = list(dict.fromkeys(d for docs in mir_dev.cited(train_q).values() for d in docs))
    for corpus in ("restricted", "extended"):
        pools = M.candidate_pools(judged, test_q, corpus, train_docs)
        assert pools == dict(M.View("dev", "chrono-test", corpus).pools())
    ext = M.candidate_pools(judged, test_q, "extended", train_docs)
    q = next(q for q in test_q if any(judged[q].values()))
    own = [d for d, r in judged[q].items() if r]
    assert ext[q][:len(train_docs)] == train_docs and set(ext[q]) == set(train_docs) | set(own)
    with pytest.raises(ValueError, match="corpus"):
        M.candidate_pools(judged, test_q, "everything")


def test_evaluate_part_reproduces_the_chronological_split_figures(mir_dev):
    """The base model through evaluate_part equals pt.Experiment on the registered chrono-test ids
    (README / docs/mir.md: 70.18 / 71.93 / 69.36 and 67.54 / 74.56 / 60.10)."""
    from pyterrier_sci.datasets import mir_multicite as M
    from pyterrier_sci.plugins.dense import DEFAULT_MODEL, load_sentence_transformer
    from pyterrier_sci.plugins.mir.training import evaluate_part, table2_figures
    train_q, test_q = M.chrono_parts(mir_dev)
    rows = evaluate_part(load_sentence_transformer(DEFAULT_MODEL, "cpu"), mir_dev, train_q, test_q)
    assert set(rows.columns) == {"corpus", "measure", "qid", "value"}
    assert rows.groupby(["corpus", "measure"])["qid"].nunique().eq(19).all()      # proposals with ground truth
    figures = {k: round(v, 2) for k, v in table2_figures(rows).items()}
    assert figures == {"extended R@3": 70.18, "extended R@5": 71.93, "extended mAP": 69.36, "restricted R@3": 67.54,
                       "restricted R@5": 74.56, "restricted mAP": 60.10, "mean": 68.95}


def test_paired_comparison_counts_and_tests_per_proposal(example):
    rows = []
    for corpus in ("extended", "restricted"):
        for q, base, tuned in (("a", 50.0, 100.0), ("b", 50.0, 50.0), ("c", 100.0, 50.0), ("d", 0.0, 50.0)):
            rows += [("MiniLM", corpus, "R@3", q, base), ("FT", corpus, "R@3", q, tuned)]
    per_query = pd.DataFrame(rows, columns=["system", "corpus", "measure", "qid", "value"])
    t = example.paired(per_query, "MiniLM", "FT")
    assert list(t.index) == ["extended R@3", "restricted R@3", "mean of six"]
    row = t.loc["extended R@3"]
    assert (row.margin, row.better, row.worse, row.n) == (12.5, 2, 1, 4)
    assert 0.5 < row.p < 1.0
    same = example.paired(per_query.assign(value=50.0), "MiniLM", "FT")
    assert (same.p == 1.0).all() and (same.margin == 0).all()


def test_rolling_example_one_step_per_fold(example, mir_dev, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    out = tmp_path / "rolling.json"
    table, tests = example.main(["--seeds", "0", "--max-steps", "1", "--max-seq-length", "64", "--json", str(out)])
    assert list(table.index) == ["MiniLM", "MiniLM (FT) seed 0"]
    assert list(tests) == ["MiniLM (FT) seed 0"] and tests["MiniLM (FT) seed 0"]["n"].eq(37).all()
    assert len(list((tmp_path / "models" / "mir-rolling").iterdir())) == 3       # one model per fold
    assert out.exists() and not list(tmp_path.glob("*.partial-*"))
    assert table.loc["MiniLM"].tolist() == BASE_ROLLING


def test_rolling_example_rejects_bad_origins_with_one_error(example, mir_dev, capsys):
    for bad, message in (("a,b", "comma-separated fractions"), ("0.6,0.4", "increasing fractions")):
        with pytest.raises(SystemExit) as e:
            example.main(["--origins", bad])
        assert e.value.code == 2 and message in capsys.readouterr().err
