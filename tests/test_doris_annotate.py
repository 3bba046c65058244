"""Anno-GPT against the scripted loopback server: label parsing, annotation, resumable files, the cost
estimate, Eq. 1-2 compilation, agreement statistics checked against scipy/sklearn, and the CLI."""

import argparse
import json
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import needs_data
from llm_server import Reply, ScriptedServer, prompt_of
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score

from pyterrier_sci.datasets import doris_mae as dm
from pyterrier_sci.datasets.doris_mae import Aspect, AspectQuery
from pyterrier_sci.plugins.doris_mae import anno_gpt as ag
from pyterrier_sci.plugins.doris_mae import measures as dmm

FIXTURE = Path(__file__).parent / "fixtures" / "doris_mae_v1_tiny.json"


def settings(srv, **kw):
    s = {
        "base_url": srv.base_url,
        "model": "test-model",
        "cache_dir": "",
        "backoff": 0.01,
        "backoff_max": 0.02,
        "max_retries": 1,
        "progress": False,
        "timeout": 5,
        "mode": "chat",
        "concurrency": 2,
    }
    s.update(kw)
    return s


def oracle(kind, body):
    """Reasons, then ends with the label written in the abstract ("[label=CONCUR]")."""
    p = prompt_of(kind, body)
    abstract = p.split("Here is the abstract:", 1)[1]
    label = abstract.split("[label=", 1)[1].split("]", 1)[0] if "[label=" in abstract else "none"
    if label == "none":
        return Reply("I cannot tell whether the abstract agrees or concurs with it.")
    if label == "FAIL":
        return Reply(status=400)
    return Reply(
        f"The user requirement asks for something; the abstract discusses it. Disagree would mean ... "
        f"Therefore I {label} that the abstract satisfies the requirement.\n\n{label}"
    )


def pairs(labels):
    return pd.DataFrame(
        [
            {
                "aspect_id": f"a{i}",
                "aspect": f"requirement {i}",
                "docno": f"d{i}",
                "abstract": f"abstract {i} [label={lab}]",
                "qids": ["q"],
            }
            for i, lab in enumerate(labels)
        ]
    )


@pytest.fixture
def server():
    with ScriptedServer(oracle) as srv:
        yield srv


# ---------------------------------------------------------------- parsing and annotation


def test_parse_label_takes_the_last_capitalised_label():
    assert ag.parse_label("I DISAGREE that ... so my final answer: CONCUR") == "CONCUR"
    assert ag.parse_label("The abstract DISAGREES with the requirement.") == "DISAGREE"
    assert ag.parse_label("Based on this information, I CONCUR that the abstract satisfies it.") == "CONCUR"
    assert ag.parse_label("it might agree or dispute; hard to say") is None  # lower case: the rules, not a decision
    assert ag.parse_label("DISPUTE") == "DISPUTE" and ag.parse_label("") is None
    assert ag.LABEL_SCORES == {"DISAGREE": 0, "DISPUTE": 1, "AGREE": 1, "CONCUR": 2}


def test_annotate_with_the_papers_prompt(server):
    ann = ag.AnnoGPT(settings(server))
    out = ann.annotate(pairs(["CONCUR", "AGREE", "DISPUTE", "DISAGREE", "none"]))
    assert out["label"].tolist()[:4] == ["CONCUR", "AGREE", "DISPUTE", "DISAGREE"]
    assert out["score"].tolist()[:4] == [2, 1, 1, 0] and math.isnan(out["score"].iloc[4])
    assert out["usable"].tolist() == [True, True, True, True, False]
    assert out["reasoning"].iloc[0].startswith("The user requirement") and (out["model"] == "test-model").all()
    assert ann.usage.calls == 5 and ann.usage.unusable == 1
    prompt = prompt_of(*server.requests[0])
    assert prompt.startswith("You are a reference librarian.") and "Here is the user requirement: requirement" in prompt
    assert "[DISAGREE, DISPUTE, AGREE, CONCUR]" in prompt and "*all capital* letters" in prompt


def test_choice_mode_reads_log_probabilities():
    top = {" CONCUR": math.log(0.7), " DISAGREE": math.log(0.2), " AGREE": math.log(0.1)}
    with ScriptedServer(lambda k, b: Reply(" CONCUR", top_logprobs=[top])) as srv:
        ann = ag.AnnoGPT(settings(srv, mode="completion"), mode="choice")
        out = ann.annotate(pairs(["x"]))
        assert out["label"].iloc[0] == "CONCUR" and out["score"].iloc[0] == 2
        assert srv.requests[0][0] == "completion" and prompt_of(*srv.requests[0]).rstrip().endswith("Answer:")


def test_errors_raise_or_are_flagged(server):
    with pytest.raises(ag.LLMError):
        ag.AnnoGPT(settings(server)).annotate(pairs(["CONCUR", "FAIL"]))
    out = ag.AnnoGPT(settings(server), on_error="flag").annotate(pairs(["CONCUR", "FAIL"]))
    assert out["usable"].tolist() == [True, False] and "400" in out["error"].iloc[1]


def test_estimate_counts_prompt_tokens_and_prices(server):
    ann = ag.AnnoGPT(settings(server, prices={"test-model": {"prompt": 2.0, "completion": 8.0}}))
    p = pairs(["CONCUR", "AGREE"])
    est = ann.estimate(p, completion_tokens=100)
    want = sum(ag.estimate_tokens(ann.prompt(a, b)) for a, b in zip(p["aspect"], p["abstract"]))
    assert est.prompt_tokens == want and est.completion_tokens == 200 and est.pairs == 2
    assert est.cost_usd == pytest.approx((want * 2.0 + 200 * 8.0) / 1e6)
    assert "$" in est.describe()
    assert ag.AnnoGPT(settings(server)).estimate(p).cost_usd is None
    assert server.calls == 0


def test_annotate_file_resumes(server, tmp_path):
    out = tmp_path / "ann.jsonl"
    labels = ["CONCUR", "AGREE", "FAIL", "DISAGREE", "DISPUTE", "CONCUR"]
    ann = ag.AnnoGPT(settings(server, concurrency=1))
    with pytest.raises(ag.LLMError):
        ann.annotate_file(pairs(labels), out, chunk_size=2, progress=False)
    first = ag.read_annotations(out)
    assert first["docno"].tolist() == ["d0", "d1"]  # the finished chunk is kept
    n_before = server.calls
    fixed = pairs(labels)
    fixed.loc[2, "abstract"] = "abstract 2 [label=AGREE]"
    # an interrupted write leaves a truncated line: it is ignored
    with open(out, "a") as f:
        f.write('{"aspect_id": "a9", "doc')
    done = ann.annotate_file(fixed, out, chunk_size=2, progress=False)
    assert server.calls - n_before == 4  # d0, d1 were not asked again
    assert done["docno"].tolist() == ["d0", "d1", "d2", "d3", "d4", "d5"]
    assert done["score"].tolist() == [2, 1, 1, 0, 1, 2]
    n = server.calls
    ann.annotate_file(fixed, out, chunk_size=2, progress=False)
    assert server.calls == n
    rec = json.loads(out.read_text().splitlines()[0])
    assert set(rec) >= {"aspect_id", "aspect", "docno", "abstract", "label", "score", "reasoning", "usable", "model"}


# ---------------------------------------------------------------- Eq. 1 and Eq. 2


def _query():
    # aspects A1 (subs s1, s2), A2 (no sub), A3 (sub s1 again: counted once) -> |Q| = 5
    return AspectQuery(
        "7",
        "text",
        (
            Aspect("A1", "aspect one", (("s1", "sub one"), ("s2", "sub two"))),
            Aspect("A2", "aspect two", ()),
            Aspect("A3", "aspect three", (("s1", "sub one"),)),
        ),
        "ML",
        "7",
    )


def _annotations():
    scores = {
        "A1": {"p": 2, "q": 0, "r": 1},
        "s1": {"p": 2, "q": 1, "r": 0},
        "s2": {"p": 1, "q": 0, "r": 2},
        "A2": {"p": 1, "q": 0, "r": 2},
        "A3": {"p": 0, "q": 0, "r": 2},
    }
    return pd.DataFrame(
        [(a, d, s) for a, ds in scores.items() for d, s in ds.items()], columns=["aspect_id", "docno", "score"]
    )


def test_compile_scores_is_eq1():
    sc = ag.compile_scores(_annotations(), [_query()], pools={"7": ["p", "q", "r"]})
    assert sc["score"].tolist() == [2 + 2 + 1 + 1 + 0, 0 + 1 + 0 + 0 + 0, 1 + 0 + 2 + 2 + 2]
    assert (sc["n_aspects"] == 5).all() and sc["relevant"].tolist() == [True, False, True]
    assert sc["normalised"].tolist() == pytest.approx([6 / 5, 1 / 5, 7 / 5])
    assert ag.rankings(sc) == {"7": ["r", "p", "q"]}
    q = ag.to_qrels(sc)
    assert list(q.columns) == ["qid", "docno", "label", "n_aspects"]
    # the compiled qrels feed the paper's measures
    run = pd.DataFrame({"qid": ["7"] * 3, "docno": ["p", "r", "q"], "score": [3.0, 2.0, 1.0]})
    assert dmm.measure("MRR@10").per_query(q, run)["7"] == 0.5


def test_compile_scores_missing_pairs():
    ann = _annotations()
    ann = ann[~((ann["aspect_id"] == "A2") & (ann["docno"] == "q"))]
    with pytest.raises(ValueError, match="abstract q for aspect"):
        ag.compile_scores(ann, [_query()], pools={"7": ["p", "q", "r"]})
    assert ag.compile_scores(ann, [_query()], pools={"7": ["p", "q", "r"]}, missing="zero")["score"].tolist() == [
        6,
        1,
        7,
    ]
    assert ag.compile_scores(ann, [_query()], pools={"7": ["p", "q", "r"]}, missing="skip")["docno"].tolist() == [
        "p",
        "r",
    ]
    # without pools: every abstract annotated for one of the query's aspects
    assert ag.compile_scores(_annotations(), {"7": _query()})["docno"].tolist() == ["p", "q", "r"]


def test_subquery_scores_are_eq2():
    sc = ag.subquery_scores(_annotations(), [_query()], k=2, pools={"7": ["p", "q", "r"]})
    assert sc["qid"].unique().tolist() == ["7_1_2", "7_1_3", "7_2_3"]
    s = sc.set_index(["qid", "docno"])["score"]
    assert s["7_1_2", "p"] == 2 + 2 + 1 + 1  # A1, s1, s2, A2
    assert s["7_2_3", "r"] == 2 + 2 + 0  # A2, A3, s1
    n = sc.groupby("qid")["n_aspects"].first().to_dict()
    assert n == {"7_1_2": 4, "7_1_3": 4, "7_2_3": 3}


def _release_from_fixture(tmp_path, monkeypatch):
    """The tiny v1-layout fixture as the data directory's DORIS-MAE release."""
    d = tmp_path / "data"
    (d / "doris-mae").mkdir(parents=True)
    shutil.copy(FIXTURE, d / "doris-mae" / "DORIS-MAE_dataset_v1.json")
    monkeypatch.setenv("PYTERRIER_SCI_DATA", str(d))
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "home"))
    return dm.release()


def test_compiling_the_release_annotations_gives_the_dataset_qrels(tmp_path, monkeypatch):
    rel = _release_from_fixture(tmp_path, monkeypatch)
    ann = pd.DataFrame([(a, doc, s) for (a, doc), s in rel.scores.items()], columns=["aspect_id", "docno", "score"])
    pools = {q.query_id: rel.pool(q.query_id) for q in rel.queries}
    mine = ag.compile_scores(ann, rel.queries, pools=pools)
    theirs = dm.scores_frame("sci/doris-mae")
    pd.testing.assert_frame_equal(mine.reset_index(drop=True), theirs.reset_index(drop=True), check_dtype=False)
    sub = ag.subquery_scores(ann, rel.queries, k=2, pools=pools)
    ds_sub = dm.scores_frame("sci/doris-mae/subquery-2").set_index(["qid", "docno"])["score"]
    mine_sub = sub.set_index(["qid", "docno"])["score"]
    assert (mine_sub.loc[ds_sub.index] == ds_sub).all()  # the release keeps a subset of the combinations
    hts = dm.human_test_set()
    table = ag.agreement_report(hts, ["annotator_1", "annotator_2", "annotator_3"], ["gpt"], n=50)
    assert table["pairs"].iloc[0] == 6


# ---------------------------------------------------------------- agreement statistics

RNG = np.random.default_rng(7)
H1 = RNG.integers(0, 3, 120)
H2 = np.where(RNG.random(120) < 0.7, H1, RNG.integers(0, 3, 120))
H3 = np.where(RNG.random(120) < 0.6, H1, RNG.integers(0, 3, 120))
G = np.where(RNG.random(120) < 0.65, H1, RNG.integers(0, 3, 120))


@pytest.mark.parametrize(
    "a, b",
    [
        (H1, H2),
        (H2, G),
        (H3, G),
        (np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1])),
        (np.array([0, 2, 2]), np.array([1, 1, 1])),
    ],
)
def test_agreement_matches_sklearn_and_scipy(a, b):
    got = ag.agreement(a, b)
    assert got["f1_macro"] == pytest.approx(f1_score(a, b, average="macro", zero_division=0))
    assert got["f1_macro"] == pytest.approx(ag.macro_f1(b, a))
    assert got["accuracy"] == pytest.approx(accuracy_score(a, b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        rho = stats.spearmanr(a, b).statistic
    if np.isnan(rho):
        assert np.isnan(got["spearman"])
    else:
        assert got["spearman"] == pytest.approx(rho)


def test_agreement_with_half_scores_matches_sklearn():
    """The adjudicated scores of an even number of annotators may hold halves (a median): scikit-learn
    refuses such "continuous" labels, so they are passed as codes; the values stay those of the labels."""
    a, b = np.array([0, 0.5, 1, 2, 0.5, 1]), np.array([0, 1, 1, 2, 0.5, 0])
    names = lambda x: [str(v) for v in x]  # noqa: E731
    assert ag.macro_f1(a, b) == pytest.approx(f1_score(names(a), names(b), average="macro", zero_division=0))
    assert ag.accuracy(a, b) == accuracy_score(names(a), names(b)) == 4 / 6
    assert ag.spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic)
    assert np.isnan(ag.macro_f1([], [])) and np.isnan(ag.spearman([1, 1], [0, 2]))


@pytest.mark.parametrize(
    "a, b",
    [
        (H1, G),
        (H2, H3),
        (np.array([0, 0.5, 1, 2, 2]), np.array([1, 0.5, 1, 2, 0])),
        (np.array([1, 1, 1]), np.array([0, 1, 2])),
    ],
)
def test_resampled_metrics_are_the_metrics_of_each_resample(a, b):
    idx = np.random.default_rng(3).integers(0, len(a), size=(200, len(a)))
    for name, metric in ag.METRICS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.array([metric(a[i], b[i]) for i in idx])
        got = ag.resampled(name, a, b, idx)
        if name == "spearman":  # scipy's Pearson of rows vs spearmanr: the same up to rounding
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
            assert np.array_equal(np.isnan(got), np.isnan(want))
        else:
            assert np.array_equal(got, want, equal_nan=True), name


def test_bootstrap_ci_agrees_with_scipy():
    low, high, values = ag.bootstrap_ci(ag.accuracy, H1, G, n=4000, seed=1)
    res = stats.bootstrap(
        (H1, G),
        lambda x, y: np.mean(x == y),
        paired=True,
        vectorized=False,
        n_resamples=4000,
        method="percentile",
        confidence_level=0.95,
        random_state=np.random.default_rng(1),
    )
    assert low == pytest.approx(res.confidence_interval.low, abs=0.02)
    assert high == pytest.approx(res.confidence_interval.high, abs=0.02)
    assert low < ag.accuracy(H1, G) < high and len(values) == 4000
    assert (
        ag.bootstrap_ci(ag.accuracy, H1, G, n=200, seed=5)[:2] == ag.bootstrap_ci(ag.accuracy, H1, G, n=200, seed=5)[:2]
    )


def test_adjudication_is_the_majority():
    assert ag.adjudicate([0, 1, 2, 2], [0, 1, 1, 0], [1, 2, 0, 2]).tolist() == [0, 1, 1, 2]


def test_agreement_report_and_hypothesis_test():
    df = pd.DataFrame({"h1": H1, "h2": H2, "h3": H3, "g": G, "noise": np.random.default_rng(3).integers(0, 3, 120)})
    table = ag.agreement_report(df, ["h1", "h2", "h3"], ["g"], n=500, seed=0)
    assert table["metric"].tolist() == ["F1-score (macro)", "Accuracy", "Spearman's rho"]
    acc = table.set_index("metric").loc["Accuracy"]
    want_hh = np.mean([accuracy_score(H1, H2), accuracy_score(H1, H3), accuracy_score(H2, H3)])
    want_gh = np.mean([accuracy_score(G, H1), accuracy_score(G, H2), accuracy_score(G, H3)])
    assert acc["avg H&H"] == pytest.approx(want_hh) and acc["avg LLM&H"] == pytest.approx(want_gh)
    assert acc["LLM&Adj"] == pytest.approx(accuracy_score(ag.adjudicate(H1, H2, H3), G))
    assert acc["H&H CI"][0] < want_hh < acc["H&H CI"][1] and acc["LLM&H CI"][0] < want_gh < acc["LLM&H CI"][1]
    assert acc["p-value"] > 0.05  # an LLM about as consistent as the humans
    noisy = ag.agreement_report(df, ["h1", "h2", "h3"], ["noise"], n=500, seed=0).set_index("metric")
    assert (noisy["p-value"] < 0.01).all()  # a random annotator is told apart
    two_runs = ag.agreement_report(df, ["h1", "h2", "h3"], ["g", "noise"], n=100, seed=0).set_index("metric")
    assert two_runs.loc["Accuracy", "avg LLM&H"] == pytest.approx(
        np.mean([accuracy_score(x, h) for x in (G, df["noise"]) for h in (H1, H2, H3)])
    )
    with pytest.raises(ValueError, match="two human"):
        ag.agreement_report(df, ["h1"], ["g"])


# ---------------------------------------------------------------- the command line


def cli(argv):
    parser = argparse.ArgumentParser(prog="pyterrier-sci")
    sub = parser.add_subparsers(dest="command")
    ag.add_annotate_commands(sub)
    args = parser.parse_args(argv)
    return args.func(args)


@needs_data("doris-mae", "birco_dev", "qrels.tsv")
def test_cli_run_estimates_first_then_annotates_and_resumes(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYTERRIER_SCI_LLM_CACHE", "off")
    out = tmp_path / "ann.jsonl"
    base = [
        "annotate",
        "run",
        "irds:sci/doris-mae/birco-dev",
        "--queries",
        "0",
        "--limit",
        "5",
        "--output",
        str(out),
        "--base-url",
        server.base_url,
        "--model",
        "m",
        "--price-prompt",
        "1",
        "--price-completion",
        "2",
    ]
    assert cli(base + ["--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "5 question pairs" in text and "estimated cost: $" in text and server.calls == 0
    assert cli(base) == 2 and not out.exists()  # no terminal and no --yes: nothing is spent
    assert cli(base + ["--yes"]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 5 and server.calls == 5
    rec = json.loads(lines[0])
    assert (
        rec["aspect"] == dm.offline_queries()["0"].aspects[0].text and rec["usable"] is False
    )  # real abstracts: no label marker
    assert cli(base + ["--yes"]) == 0 and server.calls == 5  # resumed: nothing left
    assert "5 already in" in capsys.readouterr().out


def test_cli_compile_and_agreement(tmp_path, monkeypatch, capsys):
    rel = _release_from_fixture(tmp_path, monkeypatch)
    ann_file = tmp_path / "ann.jsonl"
    with open(ann_file, "w") as f:
        for (a, doc), s in rel.scores.items():
            f.write(json.dumps({"aspect_id": a, "docno": doc, "score": s, "label": "x"}) + "\n")
    qrels = tmp_path / "qrels.tsv"
    assert cli(["annotate", "compile", str(ann_file), "--dataset", "sci/doris-mae", "--output", str(qrels)]) == 0
    got = pd.read_csv(qrels, sep="\t", dtype={"qid": str, "docno": str})
    assert got["score"].tolist() == dm.scores_frame("sci/doris-mae")["score"].tolist()
    assert (
        cli(
            [
                "annotate",
                "compile",
                str(ann_file),
                "--dataset",
                "sci/doris-mae",
                "--subquery",
                "2",
                "--output",
                str(qrels),
            ]
        )
        == 0
    )
    assert set(pd.read_csv(qrels, sep="\t", dtype={"qid": str})["qid"]) == {"0_1_2", "0_1_3", "0_2_3", "1_1_2"}
    csv_file = tmp_path / "agree.csv"
    pd.DataFrame({"h1": H1, "h2": H2, "g": G}).to_csv(csv_file, index=False)
    capsys.readouterr()
    assert cli(["annotate", "agreement", str(csv_file), "--humans", "h1,h2", "--llm", "g", "--bootstrap", "100"]) == 0
    out = capsys.readouterr().out
    assert "Accuracy" in out and "p-value" in out
    assert (
        cli(["annotate", "agreement", str(csv_file), "--humans", "h1,h2", "--llm", "g", "--bootstrap", "100", "--json"])
        == 0
    )
    assert len(json.loads(capsys.readouterr().out)) == 3
    with pytest.raises(ValueError, match="columns not in"):
        cli(["annotate", "agreement", str(csv_file), "--humans", "h1,hx", "--llm", "g"])
