"""Evaluating MIR models on any chronological part of the dev split: the shared pool rule, the
rolling-origin folds and per-proposal evaluation (pinned to the registered ids' figures); the declared
rolling-origin table and examples/mir.py's paired tests over it."""
import pandas as pd
import pytest

#: docs/mir.md, "Rolling origin": the base model's six figures and their mean on the 37 proposals
BASE_ROLLING = [67.34, 73.65, 65.59, 71.4, 78.6, 65.02, 70.27]


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


def test_the_example_pairs_the_rolling_tables_runs_over_the_proposals(mir_dev, tmp_path, monkeypatch):
    """examples/mir.py on mir/rolling's quick tier: the paired margins are the differences of the table's
    figures, over the 37 proposals with ground truth, and the base row is the documented one."""
    from conftest import load_example

    from pyterrier_sci import reproduce as R  # noqa: N812
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    example = load_example("mir")
    [res] = R.reproduce("mir/rolling", tier="quick")
    fig = res.figures
    assert [round(fig["MiniLM"][c][m], 2) for c in ("Extended", "Restricted") for m in ("R@3", "R@5", "mAP")] == \
        BASE_ROLLING[:6]
    t = example.paired(res, "MiniLM")
    assert set(t.index.get_level_values("system")) == {"BM25"}
    assert t["queries"].eq(37).all()
    for c in ("Extended", "Restricted"):
        for m in ("R@3", "R@5", "mAP"):
            row = t.loc[("BM25", f"{c} {m}")]
            assert row.margin == pytest.approx(fig["BM25"][c][m] - fig["MiniLM"][c][m], abs=1e-6)
            assert row.better + row.worse <= 37 and 0 < row.p <= 1
    assert t.loc[("BM25", "mean")].margin == pytest.approx(
        sum(fig["BM25"][c][m] - fig["MiniLM"][c][m] for c in ("Extended", "Restricted")
            for m in ("R@3", "R@5", "mAP")) / 6, abs=1e-6)
    assert t.loc[("BM25", "mean")].p < 0.05          # MiniLM is ahead of BM25 on these proposals


def test_the_example_averages_each_validation_setting_over_its_seeds():
    from conftest import load_example
    example = load_example("mir")
    diff = pd.DataFrame({"mean": [1.0, -2.0, 4.0, 0.5, 0.5]},
                        index=["A_s0", "A_s1", "A_s2", "B_x_s0", "B_x_s1"])
    out = example.seed_means(diff)
    assert list(out.index) == ["A", "B_x"]
    assert out.loc["A"].tolist() == [1.0, -2.0, 4.0, 1.0]
    assert out.loc["B_x", "mean"] == 0.5 and out.loc["B_x", "seed 2"] != out.loc["B_x", "seed 2"]   # NaN
