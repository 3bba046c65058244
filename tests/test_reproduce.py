"""The reproduction engine (pyterrier_sci.reproduce): the schema, running a table with shared prefixes,
resuming from saved runs, published / recorded / reproduced and tolerances, the exit status, the dry
run, the matrix (rendered in Chromium) and the generated docs tables.  On CSFCube with BM25 (seconds)."""
import copy
import io
import json
import re
import shutil
import subprocess

import pandas as pd
import pyterrier as pt
import pytest
import yaml
from conftest import needs_data

import pyterrier_sci as ps
from pyterrier_sci import agreement
from pyterrier_sci import reproduce as R
from pyterrier_sci.cli import main

pytestmark = needs_data("csfcube")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CALLS = {"n": 0}


class Counting(pt.Transformer):
    """Counts the queries it sees, to tell whether a shared prefix ran once."""

    def __init__(self, inner):
        self.inner = inner

    def transform(self, inp):
        CALLS["n"] += len(inp) > 0      # PyTerrier's validation runs pipelines on empty frames
        return self.inner.transform(inp)


def _paper(tmp_path, **over):
    ps.register("counted_pool", lambda context=None: Counting(ps.pipeline("pool", context=context)), replace=True)
    doc = {
        "paper": {"id": "toy", "title": "a toy reproduction"},
        "components": {"bm25": {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4}},
        "tables": {"t5": {
            "number": "5", "title": "CSFCube", "source": {"table": "5", "section": "4.12", "page": None},
            "datasets": {"Background": {"id": "irds:sci/csfcube/background", "vars": {"facet": "background"}},
                         "Method": {"id": "irds:sci/csfcube/method", "vars": {"facet": "method"}}},
            "measures": ["NDCG%20", "MAP"], "scale": 100, "tolerance": 0.01,
            "differs": "a toy table",
            "systems": {
                "SPECTER": {"run": {"path": "csfcube/sample_ranked_pools/"
                                            "test-pid2pool-csfcube-specter-{facet}-ranked.json",
                                    "format": "ranked_lists_json", "qid": "{key}_{facet}"},
                            "tiers": ["quick", "full"], "reproduces": True,
                            "published": {"Background": {"NDCG%20": 66.70, "MAP": 43.95},
                                          "Method": {"NDCG%20": 37.41, "MAP": 22.44}}},
                "BM25": {"pipeline": "counted_pool >> bm25", "tiers": ["quick", "full"], "reproduces": True,
                         "published": {"Background": {"NDCG%20": 61.05}}},
                "BM25_tuned": {"pipeline": "counted_pool >> bm25(k1=1.2, b=0.75)", "tiers": ["quick", "full"]},
                "Judge": {"pipeline": "counted_pool >> bm25 % 5 >> text >> judge", "needs": ["llm"]},
                "Ghost": {"needs": {"checkpoint": "a checkpoint that is not public"},
                          "published": {"Method": {"NDCG%20": 49.06}}},
            }}}}
    for k, v in over.items():
        doc[k] = v
    d = tmp_path / "reproduce"
    d.mkdir(exist_ok=True)
    (d / "toy.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return d


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "work"))
    return tmp_path


def test_the_shipped_files_parse_and_name_known_measures_and_datasets():
    files = R.paper_files()
    assert {"sciface", "mir", "doris_mae"} <= set(files)
    for pid in files:
        paper = R.load_paper(pid)
        for table in paper.tables.values():
            assert table.differs, f"{pid}/{table.key} must say how it differs from the paper"
            for ds in table.datasets.values():
                if table.is_agreement:   # agreement between annotators: pyterrier_sci.agreement's measures
                    assert all(agreement.is_agreement_measure(m) for m in table.measures)
                else:
                    ps.measures.parse(table.measures, dataset=ds["id"])
            for s in table.systems.values():
                assert s.runs_here or s.needs


@pytest.mark.parametrize("patch,message", [
    (lambda t: t["systems"]["BM25"].update(published={"Result": {"MAP": 1.0}}), "not one of the datasets"),
    (lambda t: t["systems"]["BM25"].update(published={"Method": {"P@5": 1.0}}), "not one of"),
    (lambda t: t["systems"]["BM25"].update(tolerance="small"), "finite number"),
    (lambda t: t["systems"]["BM25"].update(colour="red"), "unknown keys"),
    (lambda t: t["systems"]["BM25"].update(run={"path": "x"}), "give one of"),
    (lambda t: t.pop("differs"), "'differs' is required"),
    (lambda t: t["systems"]["BM25"].update(tiers=["nightly"]), "tiers"),
    (lambda t: t["systems"]["BM25"].update(pipeline=None, agreement={"between": ["adjudicated", "x"]}),
     "an 'agreement' row needs agreement measures"),
    (lambda t: t.update(measures=["MAP", "Spearman"]), "mix agreement measures"),
])
def test_schema_errors_name_the_file_and_the_cause(tmp_path, patch, message):
    d = _paper(tmp_path)
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    patch(doc["tables"]["t5"])
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(R.ReproductionError) as e:
        R.load_paper("toy", d)
    assert message in str(e.value) and "toy.yaml" in str(e.value)


AGREEMENT_TABLE = {
    "number": "3", "measures": ["Spearman", "Kappa"], "differs": "a toy agreement table", "digits": 4,
    "datasets": {"Method": {"id": "irds:sci/csfcube/method", "vars": {"facet": "method"}}},
    "systems": {
        "Annotators": {"agreement": {"between": ["first_annotator", "second_annotator"], "per_query": True},
                       "tiers": ["quick", "full"]},
        "Pooled": {"agreement": {"between": ["first_annotator", "second_annotator"]}, "tiers": ["quick", "full"]},
        "Sampled": {"agreement": {"between": ["adjudicated", "first_annotator"], "sample": 50, "seed": 3},
                    "tiers": ["quick", "full"]},
        "Labeller": {"agreement": {"between": [{"pipeline": "text >> x", "column": "{facet}"}, "adjudicated"]},
                     "needs": ["llm"]},
    }}


@pytest.mark.parametrize("patch,message", [
    (lambda a: a.update(between=["first_annotator"]), "between: [SOURCE, SOURCE]"),
    (lambda a: a.update(between=[{"pipeline": "text"}, "adjudicated"]), "judgement set's name or"),
    (lambda a: a.update(between=[{"pipeline": "a", "column": "c"}, {"pipeline": "b", "column": "c"}]),
     "at least one judgement set"),
    (lambda a: a.update(sample=0), "'sample' must be an integer >= 1"),
    (lambda a: a.update(per_query="yes"), "'per_query' must be true or false"),
    (lambda a: a.update(colour="red"), "must be a mapping"),
])
def test_agreement_rows_are_checked(tmp_path, patch, message):
    table = copy.deepcopy(AGREEMENT_TABLE)
    patch(table["systems"]["Annotators"]["agreement"])
    d = _paper(tmp_path, tables={"t3": table})
    with pytest.raises(R.ReproductionError) as e:
        R.load_paper("toy", d)
    assert message in str(e.value) and "toy.yaml" in str(e.value) and "Annotators" in str(e.value)


def test_an_agreement_table_is_the_libraries_statistics_on_the_judgement_sets(home):
    """An agreement row: the measure between two judgement sets of the dataset on the tier's queries, pooled
    over the pairs or the mean of each query's figure, on a seeded sample when asked; scipy's and sklearn's own
    statistics on CSFCube's two annotators per query before adjudication."""
    from scipy.stats import spearmanr
    from sklearn.metrics import cohen_kappa_score

    d = _paper(home, tables={"t3": copy.deepcopy(AGREEMENT_TABLE)})
    (res,) = R.reproduce("toy/t3", tier="full", directory=d)
    got = {(c.system, c.measure): c.reproduced for c in res.cells}
    a = agreement.judgements("sci/csfcube/method", "first_annotator")
    b = agreement.judgements("sci/csfcube/method", "second_annotator")
    assert (a["qid"] + a["docno"]).tolist() == (b["qid"] + b["docno"]).tolist()
    assert got[("Pooled", "Spearman")] == pytest.approx(spearmanr(a["label"], b["label"]).statistic, abs=1e-6)
    assert got[("Pooled", "Kappa")] == pytest.approx(cohen_kappa_score(a["label"], b["label"]), abs=1e-6)
    per = [spearmanr(ga["label"], b.loc[ga.index, "label"]).statistic for _, ga in a.groupby("qid")]
    assert got[("Annotators", "Spearman")] == pytest.approx(float(pd.Series(per).mean()), abs=1e-6)
    assert got[("Annotators", "Spearman")] != pytest.approx(got[("Pooled", "Spearman")], abs=1e-3)
    sampled = got[("Sampled", "Spearman")]
    assert sampled is not None and -1 <= sampled <= 1
    assert [c.status for c in res.cells if c.system == "Labeller"] == [R.STATUS_NEEDS_LLM] * 2
    # a judgement set the dataset does not have: one error naming the sets it has
    table = copy.deepcopy(AGREEMENT_TABLE)
    table["systems"]["Pooled"]["agreement"]["between"][1] = "third_annotator"
    d = _paper(home, tables={"t3": table})
    with pytest.raises(R.ReproductionError, match="no judgement set 'third_annotator'.*first_annotator"):
        R.reproduce("toy/t3", tier="full", directory=d, systems=["Pooled"])


def test_a_table_runs_shares_its_prefix_resumes_and_compares(home):
    d = _paper(home)
    CALLS["n"] = 0
    (res,) = R.reproduce("toy/t5", tier="quick", directory=d)
    # two BM25 systems behind one pool: the tree plan runs the pool once per dataset
    assert CALLS["n"] == 2
    cells = {(c.system, c.dataset, c.measure): c for c in res.cells}
    for (ds, m), v in {("Background", "NDCG%20"): 66.70, ("Background", "MAP"): 43.95,
                       ("Method", "NDCG%20"): 37.41, ("Method", "MAP"): 22.44}.items():
        c = cells[("SPECTER", ds, m)]
        assert c.status == R.STATUS_REPRODUCED and abs(c.reproduced - v) <= 0.005, c
    bm25 = cells[("BM25", "Background", "NDCG%20")]
    assert bm25.status == R.STATUS_REPRODUCED and abs(bm25.reproduced - 61.05) < 0.01
    assert cells[("BM25_tuned", "Background", "NDCG%20")].status == R.STATUS_UNPUBLISHED
    assert cells[("BM25_tuned", "Background", "NDCG%20")].reproduced != bm25.reproduced
    assert ("Judge", "Background", "MAP") not in cells      # a full-tier row
    assert not res.failed
    m = json.loads(res.manifest_path.read_text())
    assert m["kind"] == "reproduction" and m["reproduction"]["table"] == "t5"
    assert {f["system"] for f in m["figures"]} == {"SPECTER", "BM25", "BM25_tuned"}
    runs = m["reproduction"]["runs"]["Method"]
    assert set(runs) == {"BM25", "BM25_tuned"}
    # a rerun reads the saved runs back: nothing runs, the figures are the same
    CALLS["n"] = 0
    (again,) = R.reproduce("toy/t5", tier="quick", directory=d)
    assert CALLS["n"] == 0
    assert [c.reproduced for c in again.cells] == [c.reproduced for c in res.cells]
    # a damaged saved run is computed again
    path = next(iter(m["reproduction"]["runs"]["Method"].values()))
    with open(path, "ab") as f:
        f.write(b"garbage")
    with pytest.warns(Warning):
        (third,) = R.reproduce("toy/t5", tier="quick", directory=d)
    assert CALLS["n"] == 1
    assert [c.reproduced for c in third.cells] == [c.reproduced for c in res.cells]


def test_a_saved_run_for_fewer_queries_is_computed_again(home, monkeypatch):
    """A saved run is read back only when it holds every query the tier asks for: after a tier's ``topics``
    grew, the run saved for fewer queries is computed again (it would have scored the new queries 0), and one
    saved for more queries gives the figures of the queries asked for."""
    def table_with(n):
        d = _paper(home)
        doc = yaml.safe_load((d / "toy.yaml").read_text())
        doc["tables"]["t5"]["tiers"] = {"quick": {"topics": n}}
        (d / "toy.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        return d

    def bm25(res):
        return {(c.dataset, c.measure): c.reproduced for c in res.cells if c.system == "BM25"}

    fresh = {}
    for n in (3, 6):   # each in a work directory of its own
        monkeypatch.setenv("PYTERRIER_SCI_HOME", str(home / f"fresh{n}"))
        (res,) = R.reproduce("toy/t5", tier="quick", directory=table_with(n))
        fresh[n] = bm25(res)
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(home / "work"))
    assert fresh[3] != fresh[6]
    (res,) = R.reproduce("toy/t5", tier="quick", directory=table_with(3))
    assert bm25(res) == fresh[3]
    CALLS["n"] = 0
    (res,) = R.reproduce("toy/t5", tier="quick", directory=table_with(6))   # grew: run again, not read back
    assert CALLS["n"] == 2 and bm25(res) == fresh[6] and "BM25" not in res.read_back
    CALLS["n"] = 0
    (res,) = R.reproduce("toy/t5", tier="quick", directory=table_with(3))   # shrank: read back, cut to 3
    assert CALLS["n"] == 0 and bm25(res) == fresh[3]


def test_a_system_whose_expression_or_components_changed_is_computed_again(home):
    """A saved run is keyed by what its system computes: after the YAML changes a component the system uses
    (a model's settings, say) or the system's expression, the run saved before is not read back as the new
    system's (it was, while runs were keyed by the system's name alone)."""
    def table_with(k1=0.9, expression="counted_pool >> bm25"):
        d = _paper(home)
        doc = yaml.safe_load((d / "toy.yaml").read_text())
        doc["components"]["bm25"]["k1"] = k1
        doc["tables"]["t5"]["systems"]["BM25"]["pipeline"] = expression
        (d / "toy.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        return d

    def bm25(res):
        return {(c.dataset, c.measure): c.reproduced for c in res.cells if c.system == "BM25"}

    (first,) = R.reproduce("toy/t5", tier="quick", directory=table_with(), systems=["BM25"])
    CALLS["n"] = 0
    (same,) = R.reproduce("toy/t5", tier="quick", directory=table_with(), systems=["BM25"])
    assert CALLS["n"] == 0 and bm25(same) == bm25(first) and "BM25" in same.read_back
    (tuned,) = R.reproduce("toy/t5", tier="quick", directory=table_with(k1=2.0), systems=["BM25"])
    assert CALLS["n"] == 2 and "BM25" not in tuned.read_back and bm25(tuned) != bm25(first)
    CALLS["n"] = 0
    (cut,) = R.reproduce("toy/t5", tier="quick", directory=table_with(expression="counted_pool >> bm25 % 5"),
                         systems=["BM25"])
    assert CALLS["n"] == 2 and "BM25" not in cut.read_back and bm25(cut) != bm25(first)


def test_the_validation_call_on_an_empty_frame_saves_no_run(home, tmp_path):
    """PyTerrier's validation runs each pipeline on an empty frame first: a run saved from it (what an
    earlier version wrote) would be read back as the system's run by a resumed reproduction, every
    figure 0; it is not written, and an empty saved run is computed again."""
    path = tmp_path / "runs" / "BM25-0.res.gz"
    path.parent.mkdir()
    empty = pd.DataFrame(columns=["qid", "docno", "score", "rank"])
    assert R._SaveRun(path, "BM25")(empty) is not None and not path.exists()
    from pyterrier_sci.experiment import write_run
    write_run(empty, path, run_name="BM25", what="a saved run", checksum=True)
    assert path.exists() and R._saved(path) is None and not path.exists()
    one = pd.DataFrame({"qid": ["1"], "docno": ["d"], "score": [1.0], "rank": [0]})
    R._SaveRun(path, "BM25")(one)
    assert R._saved(path)[["qid", "docno"]].values.tolist() == [["1", "d"]]


def test_full_tier_marks_what_cannot_run_here(home):
    d = _paper(home)
    (res,) = R.reproduce("toy/t5", tier="full", directory=d)
    judge = [c for c in res.cells if c.system == "Judge"]
    assert judge and all(c.status == R.STATUS_NEEDS_LLM and "LLM endpoint" in c.reason for c in judge)
    ghost = [c for c in res.cells if c.system == "Ghost" and c.dataset == "Method" and c.measure == "NDCG%20"][0]
    assert ghost.status == R.STATUS_NEEDS_CHECKPOINT and ghost.published == 49.06 and "checkpoint" in ghost.reason
    assert not res.failed


def test_record_then_drift_fails_with_exit_status_1(home, capsys, monkeypatch):
    d = _paper(home)
    monkeypatch.setattr(R, "papers_dir", lambda: d)
    assert main(["reproduce", "toy/t5", "--tier", "quick", "--record"]) == 0
    rec = json.loads((d / "recorded" / "toy.json").read_text())
    entry = rec["tables"]["t5"]["quick"]
    assert abs(entry["figures"]["BM25"]["Background"]["NDCG%20"] - 61.05) < 0.01
    assert entry["seconds"] >= 0 and entry["cpu"] and "--record" in entry["command"]
    out = capsys.readouterr().out
    assert "published" in out and "recorded" in out and "reproduced" in out
    # a second run compares with what was recorded: within tolerance
    assert main(["reproduce", "toy/t5", "--tier", "quick"]) == 0
    out = capsys.readouterr().out
    assert "+0.00" in out
    # the recorded figure moves away (as if the code had changed the figure): exit 1, the cell named
    entry["figures"]["BM25_tuned"]["Method"]["MAP"] += 0.5
    (d / "recorded" / "toy.json").write_text(json.dumps(rec))
    assert main(["reproduce", "toy/t5", "--tier", "quick"]) == 1
    captured = capsys.readouterr()
    assert "FAIL BM25_tuned Method MAP" in captured.out and "drifted -0.50" in captured.out
    assert "outside their tolerance" in captured.err
    # a figure declared to reproduce the paper that does not is a failure too
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    doc["tables"]["t5"]["systems"]["SPECTER"]["published"]["Method"]["MAP"] = 25.0
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    rec["tables"]["t5"]["quick"]["figures"]["BM25_tuned"]["Method"]["MAP"] -= 0.5
    (d / "recorded" / "toy.json").write_text(json.dumps(rec))
    assert main(["reproduce", "toy/t5", "--tier", "quick"]) == 1
    assert "FAIL SPECTER Method MAP" in capsys.readouterr().out


def test_dry_run_lists_what_would_run_and_the_llm_calls(home, capsys, monkeypatch):
    from pyterrier_sci.llm.loopback import ScriptedServer
    d = _paper(home, llm={"mode": "completion", "cache_dir": ""},
               components={"bm25": {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4},
                           "judge": {"component": "mir_pointwise", "text_field": "abstract", "on_error": "flag"}})
    monkeypatch.setattr(R, "papers_dir", lambda: d)
    with ScriptedServer(responder=lambda kind, body: " Yes") as srv:
        assert main(["reproduce", "toy/t5", "--tier", "full", "--dry-run", "--llm", srv.base_url]) == 0
        assert srv.calls == 0          # a dry run sends nothing
    out = capsys.readouterr().out
    assert "run counted_pool >> bm25" in out and "read the released run csfcube/sample_ranked_pools" in out
    # 16 background and 17 method queries, top 5 each: one pointwise judgement per document
    assert "total: 165 calls" in out, out
    assert "estimated time" in out
    # after a real run of the quick tier, the dry run says its runs are read back
    R.reproduce("toy/t5", tier="quick", directory=d)
    assert main(["reproduce", "toy/t5", "--tier", "quick", "--dry-run"]) == 0
    assert "read back its saved run" in capsys.readouterr().out


def _judge_dry_run(home, capsys, monkeypatch, edit, cache_dir: str = "", **over) -> str:
    """The dry run of the toy paper with a mir_pointwise judge, its table changed by ``edit(table)``, against
    the loopback server (which must get no request); its printed output."""
    from pyterrier_sci.llm.loopback import ScriptedServer
    d = _paper(home, llm={"mode": "completion", "cache_dir": cache_dir},
               components={"bm25": {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4},
                           "judge": {"component": "mir_pointwise", "text_field": "abstract", "on_error": "flag"}},
               **over)
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    edit(doc["tables"]["t5"])
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(R, "papers_dir", lambda: d)
    with ScriptedServer(responder=lambda kind, body: " Yes") as srv:
        assert main(["reproduce", "toy/t5", "--tier", "full", "--dry-run", "--llm", srv.base_url]) == 0
        assert srv.calls == 0
    return capsys.readouterr().out


def test_a_dry_run_trains_nothing_and_says_which_llm_rows_wait_for_a_model(home, capsys, monkeypatch):
    """An LLM row whose first stage trains a model on first use (SciFACE's fold cross-encoders): the dry run
    neither trains it nor sends a request; it names the model, and its calls are not counted."""
    def edit(t):
        t["systems"]["Judge"]["pipeline"] = "counted_pool >> facet_ce % 5 >> text >> judge"
    out = _judge_dry_run(home, capsys, monkeypatch, edit,
                         models={"facet_ce": {"component": "sciface_rerank", "train": True, "epochs": 1,
                                              "triplets_per_seed": 2, "val_seeds": 0, "max_length": 64}})
    assert "LLM calls not counted: the run first trains or builds the SciFACE background cross-encoder for fold1" in out
    assert "LLM calls of t5/Judge on Method not counted: its first stage needs the SciFACE method" in out
    assert "not counted: 2 LLM row(s) whose first stage needs a model not trained yet" in out
    assert "no LLM calls" not in out
    assert not list((home / "work").rglob("pt_meta.json")), "the dry run trained a model"
    # without the dry run's guard the same pipeline trains on first use
    from pyterrier_sci.training import about_to_train
    about_to_train(home / "anything", "a model")      # outside no_training: nothing happens


def test_a_dry_run_estimates_the_training_a_run_from_empty_does_first(home, capsys, monkeypatch):
    """The time estimate says whether the recorded time includes training the table's models: a record that
    trained them says how long; one made with them already trained says a run from empty trains them first, and
    a training another table timed is named with its time."""
    from pyterrier_sci.training import about_to_train, trainings

    model_dir = home / "models" / "sciface" / "toy-model"
    mark = len(trainings())
    about_to_train(model_dir, "a toy model")       # what a component calls right before it trains
    model_dir.mkdir(parents=True)
    (model_dir / "pt_meta.json").write_text("{}")
    (done,) = trainings(mark)
    assert done["model"] == "toy-model" and done["what"] == "a toy model" and 0 <= done["seconds"] < 60

    models = {"facet_ce": {"component": "sciface_rerank", "train": True, "epochs": 1, "triplets_per_seed": 2,
                           "val_seeds": 0, "max_length": 64}}

    def edit(t):
        t["systems"]["Judge"]["pipeline"] = "counted_pool >> facet_ce % 5 >> text >> judge"

    def with_record(trained):
        d = _paper(home, models=models)
        entry = {"figures": {}, "seconds": 30.0, "cpu": {"model": "a CPU"}, "trained": trained}
        (d / "recorded").mkdir(exist_ok=True)
        (d / "recorded" / "toy.json").write_text(json.dumps({"paper": "toy", "tables": {"t5": {"full": entry}}}))

    with_record([])
    out = _judge_dry_run(home, capsys, monkeypatch, edit, models=models)
    assert ("30.0 s when recorded on a CPU (its models (facet_ce) were trained before that run: a run from empty "
            "trains them first)") in out
    assert "plus the training of toy/t5's models where they are not trained yet" in out
    with_record([{"model": "m", "what": "facet_ce", "seconds": 12.0}])
    out = _judge_dry_run(home, capsys, monkeypatch, edit, models=models)
    assert "(from empty, training 1 model(s) in 12 s of it; saved runs and models make it shorter)" in out
    assert "plus the training" not in out


def _llm_paper(home):
    """The toy paper with an LLM judge row, its full tier on two queries per dataset."""
    d = _paper(home, llm={"mode": "completion", "cache_dir": ""},
               components={"bm25": {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4},
                           "judge": {"component": "mir_pointwise", "text_field": "abstract", "on_error": "flag"}})
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    doc["tables"]["t5"]["tiers"] = {"full": {"topics": 2}}
    bm25 = doc["tables"]["t5"]["systems"]["BM25"]
    bm25["reproduces"], bm25["other_data"] = False, "two queries per facet, not the paper's 33"
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    return d


def test_llm_rows_run_against_an_endpoint(home):
    from pyterrier_sci.llm.loopback import ScriptedServer
    d = _llm_paper(home)
    with ScriptedServer(responder=lambda kind, body: " Yes") as srv:
        (res,) = R.reproduce("toy/t5", tier="full", llm=srv.base_url, directory=d)
        assert srv.calls == 2 * 2 * 5       # two datasets, two queries each, top 5
    judge = {(c.dataset, c.measure): c for c in res.cells if c.system == "Judge"}
    assert all(c.reproduced is not None and c.status == R.STATUS_UNPUBLISHED for c in judge.values())


def test_matrix_html_and_markdown(home):
    """--report: the counts per status, then one row per system with published, ours, Δ (comparable cells only),
    the status, the reason and the command that reruns the row; the HTML rendered in Chromium."""
    d = _paper(home)
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    systems = doc["tables"]["t5"]["systems"]
    systems["BM25"].update(reproduces=False, stand_in="a toy stand-in for the paper's model")
    systems["Old_BM25"] = {"pipeline": "pool >> bm25(k1=1.2, b=0.75)", "reproduces": True,
                           "published": {"Method": {"MAP": 99.0}}, "differs": "it should not differ"}
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    results = R.reproduce("toy/t5", tier="full", directory=d)
    h, m = R.write_matrix(results, home / "report")
    md = m.read_text()
    # 4 SPECTER cells reproduced, one Old_BM25 cell differs, BM25's published cell a stand-in, Judge's cells need
    # an LLM (no published figure: counted apart), Ghost's one published cell needs a checkpoint
    counts = R.status_counts(results)["toy"]
    assert counts["cells"] == 7 and counts[R.STATUS_REPRODUCED] == 4 and counts[R.STATUS_DIFFERS] == 1
    assert counts[R.STATUS_STAND_IN] == 1 and counts[R.STATUS_NEEDS_CHECKPOINT] == 1
    assert "7 published cells: 4 reproduced / 1 differ / 1 stand-in / 0 other data" in md
    assert ("| SPECTER | 66.70 · 43.95 · 37.41 · 22.44 | 66.70 · 43.95 · 37.41 · 22.44 | +0.00 · +0.00 · +0.00 · "
            "+0.00 | reproduced |  | `pyterrier-sci reproduce toy/t5 --tier full --systems SPECTER` |") in md
    bm25 = next(line for line in md.splitlines() if line.startswith("| BM25 |"))
    assert "| 61.05 · - · - · - |" in bm25
    assert "| - | 1 stand-in, 3 not in the paper | a toy stand-in for the paper's model |" in bm25
    old = next(line for line in md.splitlines() if line.startswith("| Old_BM25 |"))
    assert "FAIL: 3 not in the paper, 1 differs" in old and "--systems Old_BM25" in old
    judge = next(line for line in md.splitlines() if line.startswith("| Judge |"))
    assert "needs LLM" in judge and "--systems Judge --llm URL" in judge
    ghost = next(line for line in md.splitlines() if line.startswith("| Ghost |"))
    assert "needs checkpoint | a checkpoint that is not public |  |" in ghost
    text = h.read_text()
    assert text.count("<tr style=") == len(doc["tables"]["t5"]["systems"])
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed")
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={home / 'profile'}", "--dump-dom", h.as_uri()],
                         capture_output=True, text=True, timeout=120)
    dom = out.stdout
    frame = pd.read_html(io.StringIO(dom), attrs={"id": "matrix-0"})[0]
    assert len(frame) == len(doc["tables"]["t5"]["systems"])
    row = frame[frame["system"] == "SPECTER"]
    assert row["published"].iloc[0] == "66.70 · 43.95 · 37.41 · 22.44" and row["status"].iloc[0] == "reproduced"
    summary = pd.read_html(io.StringIO(dom), attrs={"id": "counts"})[0]
    assert summary[summary["paper"] == "all"]["reproduced"].iloc[0] == 4


def test_generated_docs_tables_and_the_staleness_check(home, monkeypatch):
    d = _paper(home)
    monkeypatch.setattr(R, "papers_dir", lambda: d)
    R.record(R.reproduce("toy/t5", tier="quick", directory=d))
    root = home / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("intro\n<!-- reproduce:begin toy/t5 -->\nold typed table\n"
                                    "<!-- reproduce:end -->\nafter\n")
    (root / "docs" / "toy.md").write_text("no markers here\n")
    assert R.stale_docs(root, d) == [root / "README.md"]
    assert R.update_docs(root, d) == [root / "README.md"]
    text = (root / "README.md").read_text()
    assert "old typed table" not in text and text.startswith("intro\n") and text.endswith("after\n")
    assert "| SPECTER | 66.70 (66.70) | 43.95 (43.95) | 37.41 (37.41) | 22.44 (22.44) |" in text
    assert "| BM25 | 61.05 (61.05) |" in text
    assert "tier quick" in text
    assert R.stale_docs(root, d) == []
    assert R.update_docs(root, d) == []


def test_the_readme_and_docs_tables_are_not_stale():
    """CI guard: the generated tables of README.md and docs/*.md equal what the recorded figures give
    (regenerate them with `pyterrier-sci reproduce --write-docs`)."""
    from conftest import ROOT
    assert R.stale_docs(ROOT) == []


def test_on_ray_gives_the_local_figures(home):
    pytest.importorskip("ray")
    d = _paper(home)
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    systems = doc["tables"]["t5"]["systems"]
    doc["tables"]["t5"]["systems"] = {"SPECTER": systems["SPECTER"],
                                      "BM25": {**systems["BM25"], "pipeline": "pool >> bm25"},
                                      "BM25_tuned": {**systems["BM25_tuned"],
                                                     "pipeline": "pool >> bm25(k1=1.2, b=0.75)"}}
    doc["tables"]["t6"] = {**doc["tables"]["t5"], "number": "6",
                           "systems": {"BM25": {"pipeline": "pool >> bm25(k1=1.2, b=0.75)"}}}
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    local = R.reproduce("toy", tier="full", directory=d)
    shutil.rmtree(home / "work" / "reproduce")          # the Ray tasks compute the runs again
    try:
        remote = R.reproduce("toy", tier="full", directory=d, on_ray=True, num_cpus=2)
    finally:
        import ray
        ray.shutdown()
    assert [r.table.key for r in remote] == ["t5", "t6"]
    assert [[(c.system, c.dataset, c.measure, c.reproduced) for c in r.cells] for r in remote] == \
        [[(c.system, c.dataset, c.measure, c.reproduced) for c in r.cells] for r in local]
    assert all(r.manifest_path.is_file() for r in remote)
    # every system was a task of its own, which computed its runs; the driver read them back
    assert [r.computed for r in remote] == [("BM25", "BM25_tuned"), ("BM25",)]
    assert all(not r.read_back and r.seconds > 0 for r in remote)
    runs = json.loads(remote[0].manifest_path.read_text())["reproduction"]["runs"]
    assert set(runs["Method"]) == {"BM25", "BM25_tuned"}


def test_an_llm_row_is_recorded_with_its_model_and_not_compared_with_another_models(home, monkeypatch):
    """A figure of an LLM row belongs to the LLM that gave it: the record names the model and the endpoint,
    a rerun with the same model is held to the record, one with another model is not compared with it."""
    from pyterrier_sci.llm.loopback import ScriptedServer
    d = _llm_paper(home)
    monkeypatch.setenv("PYTERRIER_SCI_LLM_MODEL", "small-model")
    path = d / "recorded" / "toy.json"
    with ScriptedServer(responder=lambda kind, body: " Yes") as srv:
        R.record(R.reproduce("toy/t5", tier="full", llm=srv.base_url, directory=d, systems=["BM25", "Judge"]))
        entry = json.loads(path.read_text())["tables"]["t5"]["full"]
        assert entry["llm_models"] == {"Judge": "small-model"}
        # what the calls gave: 2 datasets x 2 queries x top 5, every answer usable
        assert entry["llm_usage"]["Judge"]["calls"] == 20 and entry["llm_usage"]["Judge"]["unusable"] == 0
        assert entry["command"].endswith(f"--llm {srv.base_url} --record")
        paper = R.load_paper(d / "toy.yaml")
        assert "LLM rows with `small-model` (Judge: 20 calls, 0 unusable answers, 0 repaired rankings)" in \
            R.docs_table(paper, paper.tables["t5"], "full")
        rec = json.loads(path.read_text())
        rec["tables"]["t5"]["full"]["figures"]["Judge"]["Method"]["MAP"] += 5.0
        path.write_text(json.dumps(rec))
        (same,) = R.reproduce("toy/t5", tier="full", llm=srv.base_url, directory=d, systems=["BM25", "Judge"])
        assert [(c.system, c.dataset, c.measure) for c in same.failed] == [("Judge", "Method", "MAP")]
        assert "Judge" in same.read_back      # the same LLM: its saved run is read back
        monkeypatch.setenv("PYTERRIER_SCI_LLM_MODEL", "another-model")
        (other,) = R.reproduce("toy/t5", tier="full", llm=srv.base_url, directory=d, systems=["BM25", "Judge"])
    assert not other.failed
    assert "Judge" in other.computed and "BM25" in other.read_back   # another LLM's saved run is never read back
    judge = [c for c in other.cells if c.system == "Judge"]
    assert judge and all(c.reproduced is not None and c.recorded is None for c in judge)
    assert all("recorded with the LLM 'small-model', this run asked 'another-model'" in c.reason for c in judge)
    # without an endpoint the row does not run, and a partial record of the other rows keeps the model
    R.record(R.reproduce("toy/t5", tier="full", directory=d, systems=["BM25"]))
    kept = json.loads(path.read_text())["tables"]["t5"]["full"]
    assert kept["llm_models"] == {"Judge": "small-model"} and kept["llm_usage"]["Judge"]["calls"] == 20


def test_the_model_recorded_is_the_one_a_component_asked_for(home, monkeypatch):
    """A component's own ``llm=`` overrides the config's model: the record names the model the component asked
    for (as its saved run is keyed), not the config's."""
    from pyterrier_sci.llm.loopback import ScriptedServer
    d = _llm_paper(home)
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    doc["components"]["judge"]["llm"] = {"model": "own-model"}
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("PYTERRIER_SCI_LLM_MODEL", "config-model")
    asked = set()

    def responder(kind, body):
        asked.add(body.get("model"))
        return " Yes"

    with ScriptedServer(responder=responder) as srv:
        R.record(R.reproduce("toy/t5", tier="full", llm=srv.base_url, directory=d, systems=["Judge"]))
    assert asked == {"own-model"}
    entry = json.loads((d / "recorded" / "toy.json").read_text())["tables"]["t5"]["full"]
    assert entry["llm_models"] == {"Judge": "own-model"}


def test_systems_runs_part_of_a_table_and_record_merges(home, capsys, monkeypatch):
    d = _paper(home)
    monkeypatch.setattr(R, "papers_dir", lambda: d)
    assert main(["reproduce", "toy/t5", "--tier", "quick", "--record"]) == 0
    capsys.readouterr()
    path = d / "recorded" / "toy.json"
    rec = json.loads(path.read_text())
    kept = rec["tables"]["t5"]["quick"]["figures"]["BM25_tuned"]
    rec["tables"]["t5"]["quick"]["figures"]["BM25"]["Method"]["MAP"] = 99.0     # to be replaced by the run
    path.write_text(json.dumps(rec))
    CALLS["n"] = 0
    assert main(["reproduce", "toy/t5", "--tier", "quick", "--systems", "BM25", "--record"]) == 1   # 99.0 drifted
    out = capsys.readouterr().out
    assert "BM25_tuned" not in out and "SPECTER" not in out.split("tier quick")[1]
    after = json.loads(path.read_text())["tables"]["t5"]["quick"]
    assert abs(after["figures"]["BM25"]["Method"]["MAP"] - 22.27) < 0.01
    assert after["figures"]["BM25_tuned"] == kept and "--systems BM25" in after["command"]
    # the record names both runs that wrote it, and so does the generated table's line
    whole = "pyterrier-sci reproduce toy/t5 --tier quick --record"
    assert after["commands"] == [whole, after["command"]] and after["command"] != whole
    paper = R.load_paper(d / "toy.yaml")
    text = R.docs_table(paper, paper.tables["t5"], "quick")
    assert f"Recorded by 2 runs of some systems each (`{whole}`; `{after['command']}`), the last (" in text
    assert main(["reproduce", "toy/t5", "--tier", "quick"]) == 0
    with pytest.raises(R.ReproductionError, match="no system 'Nope'"):
        R.reproduce("toy/t5", tier="quick", directory=d, systems=["Nope"])


def test_a_dry_run_counts_a_call_repeated_on_another_dataset_as_cached(home, capsys, monkeypatch):
    """Two datasets with the same topics (PRISM's References and References-or-citers): a real run's
    response cache answers the second dataset's calls, so the dry run counts them as cached."""
    def edit(t):
        t["datasets"] = {"Method": {"id": "irds:sci/csfcube/method", "vars": {"facet": "method"}},
                         "Again": {"id": "irds:sci/csfcube/method", "vars": {"facet": "method"}}}
        t["systems"] = {"Judge": t["systems"]["Judge"]}
    out = _judge_dry_run(home, capsys, monkeypatch, edit, cache_dir=str(home / "llm-cache"))
    # 17 method queries, top 5: 85 judgements on the first dataset, the same 85 again on the second
    assert "total: 170 calls, 85 cached, 85 to send" in out, out


def test_a_record_made_from_saved_runs_keeps_their_time_and_says_so(home, monkeypatch):
    """A rerun that reads saved runs back costs seconds: recording it must not replace the table's time
    with those seconds.  A record from read-back runs keeps the earlier record's time (adding the time of
    the systems computed now) and names the systems read back; the docs line says so."""
    d = _paper(home)
    monkeypatch.setattr(R, "papers_dir", lambda: d)
    R.record(R.reproduce("toy/t5", tier="quick", directory=d))
    path = d / "recorded" / "toy.json"
    rec = json.loads(path.read_text())
    assert "read_back" not in rec["tables"]["t5"]["quick"]          # everything ran
    rec["tables"]["t5"]["quick"]["seconds"] = 1000.0                 # as if the first run had taken long
    path.write_text(json.dumps(rec))
    (again,) = R.reproduce("toy/t5", tier="quick", directory=d)
    assert set(again.read_back) == {"BM25", "BM25_tuned"} and not again.computed
    R.record([again])
    entry = json.loads(path.read_text())["tables"]["t5"]["quick"]
    assert entry["seconds"] == 1000.0 and entry["read_back"] == ["BM25", "BM25_tuned"]
    # one system's saved runs gone: it runs again, its time is added to the earlier one
    for p in (home / "work").rglob("BM25_tuned-*.res.gz"):
        p.unlink()
    (third,) = R.reproduce("toy/t5", tier="quick", directory=d)
    assert third.computed == ("BM25_tuned",) and third.read_back == ("BM25",)
    R.record([third])
    entry = json.loads(path.read_text())["tables"]["t5"]["quick"]
    assert entry["seconds"] == round(1000.0 + third.seconds, 1) and entry["read_back"] == ["BM25"]
    paper = R.load_paper(d / "toy.yaml")
    text = R.docs_table(paper, paper.tables["t5"], "quick")
    assert "the runs of BM25 read back from an earlier run, whose recorded time is included" in text


def test_a_tables_cpu_time_is_recorded_beside_its_wall_clock_time(home, monkeypatch):
    """The wall-clock seconds of a table grow with whatever else runs on the cores; the record keeps the CPU
    time of the process and its finished workers too (summed over partial runs, dropped when a part lacks it),
    and the generated line names it."""
    import resource
    d = _paper(home)
    monkeypatch.setattr(R, "papers_dir", lambda: d)
    before = resource.getrusage(resource.RUSAGE_SELF)
    (res,) = R.reproduce("toy/t5", tier="quick", directory=d)
    after = resource.getrusage(resource.RUSAGE_SELF)
    spent = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert 0 < res.cpu_seconds <= spent + 0.05
    R.record([res])
    path = d / "recorded" / "toy.json"
    entry = json.loads(path.read_text())["tables"]["t5"]["quick"]
    assert entry["cpu_seconds"] == round(res.cpu_seconds, 1)
    paper = R.load_paper(d / "toy.yaml")
    assert f"{entry['cpu_seconds']} s of CPU time" in R.docs_table(paper, paper.tables["t5"], "quick")
    # a part run later adds its CPU time; a record of before without one makes the sum unknown
    for p in (home / "work").rglob("BM25-*.res.gz"):
        p.unlink()
    (part,) = R.reproduce("toy/t5", tier="quick", directory=d, systems=["BM25"])
    R.record([part])
    merged = json.loads(path.read_text())["tables"]["t5"]["quick"]
    assert merged["cpu_seconds"] == round(entry["cpu_seconds"] + round(part.cpu_seconds, 1), 1)
    rec = json.loads(path.read_text())
    del rec["tables"]["t5"]["quick"]["cpu_seconds"]
    path.write_text(json.dumps(rec))
    R.record([part])
    assert "cpu_seconds" not in json.loads(path.read_text())["tables"]["t5"]["quick"]
    assert "CPU time" not in R.docs_table(paper, paper.tables["t5"], "quick")


def test_a_generated_table_escapes_pipes_in_its_column_labels():
    """HLM-Cite's candidate-set sizes are labelled |C| = 100 ...: unescaped, each pipe would split a header cell
    and the table would have more header cells than columns."""
    (paper, table), = [(p, t) for p, t in R.select("hlm_cite/sizes")]
    lines = R.docs_table(paper, table).split("\n")
    cells = [re.split(r"(?<!\\)\|", line)[1:-1] for line in lines[:3]]
    assert len(cells[0]) == len(cells[1]) == len(cells[2]) == 1 + 3 * 4
    assert cells[0][1].strip() == r"\|C\| = 100 PREC@3"


def test_csfcube_judgement_sets_need_two_annotators_per_query(monkeypatch):
    """CSFCube's judgement sets read each query's two annotators (relevance_annN): a query with one is damaged
    data, named with its file, not a silent half-empty set."""
    from pyterrier_sci.data import DamagedDataError
    from pyterrier_sci.datasets import csfcube
    real = csfcube.annotations
    sets = csfcube.judgement_sets("method")
    assert [len(f) for f in sets.values()] == [len(sets["adjudicated"])] * 3
    assert set(sets) == set(csfcube.JUDGEMENT_SETS)

    def one_annotator(facet):
        data = {k: dict(v) for k, v in real(facet).items()}
        first = data[next(iter(data))]
        for key in [k for k in first if k.startswith("relevance_ann")][1:]:
            del first[key]
        return data
    monkeypatch.setattr(csfcube, "annotations", one_annotator)
    with pytest.raises(DamagedDataError, match="two annotators' grade lists.*test-pid2anns-csfcube-method.json"):
        csfcube.judgement_sets("method")


def test_a_dry_run_counts_the_calls_of_an_agreement_row(home):
    """SciFACE's Table 3 labeller row in a dry run: one call per sampled pair of each facet (100 each), the
    pairs sampled on both facets counted as cached the second time, and no request sent."""
    paper = R.load_paper("sciface")
    out = R.dry_run_table(paper, paper.tables["table3"], "full")
    report = pd.concat([r.table for r in out["llm"]], ignore_index=True)
    assert list(report["dataset"]) == ["Background", "Method"] and report["calls"].tolist() == [100, 100]
    assert report["cached"].sum() == 200 - report["to_send"].sum() > 0
    rows = {(r["dataset"], r["system"]): r for r in out["rows"]}
    assert "100 sampled pairs (seed 0)" in rows[("Method", "LLM_vs_adjudicated")]["action"]
    assert "first_annotator and second_annotator" in rows[("Method", "CSFCube_pre_adjudication")]["action"]
