import json
import os
import subprocess
import sys
from pathlib import Path

import conftest  # noqa: F401 (its fixtures and environment)
import pandas as pd
import pyterrier as pt
import pytest
from conftest import specter_run

import pyterrier_sci as ps
from pyterrier_sci.cli import main
from pyterrier_sci.experiment import run_experiment

EXE = Path(sys.executable).with_name("pyterrier-sci")


def _cli(*args):
    env = dict(os.environ, PYTHONSAFEPATH="1")
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=env, timeout=300)


def test_datasets_command_lists_ids_and_presence(csfcube):
    out = _cli("datasets", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["id"]: r for r in json.loads(out.stdout)}
    assert rows["irds:sci/csfcube"]["present"] and "irds:sci/csfcube/result/fold2-dev" in rows


def test_evaluate_reproduces_specter_from_a_trec_file(tmp_path, csfcube):
    run = tmp_path / "specter.trec"
    pt.io.write_results(specter_run(["background", "method", "result"]), str(run))
    out = _cli("evaluate", str(run), "--dataset", "irds:sci/csfcube", "--measures", "NDCG%20,MAP", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["NDCG%20"] * 100 == pytest.approx(53.28, abs=0.01)
    assert row["MAP"] * 100 == pytest.approx(34.23, abs=0.01)


def test_run_writes_a_trec_run_and_errors_are_one_line(tmp_path, csfcube, capsys):
    out_file = tmp_path / "bm25.trec"
    assert main(["run", "pool >> bm25 % 10", "--dataset", "irds:sci/csfcube/method", "--output", str(out_file)]) == 0
    res = pt.io.read_results(str(out_file))
    assert res["qid"].nunique() == 17 and res.groupby("qid").size().max() == 10
    assert main(["run", "pool >> bm52", "--dataset", "irds:sci/csfcube/method", "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "unknown component 'bm52'" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()
    assert main(["evaluate", str(out_file), "--dataset", "irds:sci/csfcube/method", "--measures", "NDCG%99"]) == 2
    assert "unknown measure 'NDCG%99'" in capsys.readouterr().err


CALLS = []


class Counting(pt.Transformer):
    def __init__(self, inner):
        self.inner = inner

    def transform(self, inp):
        CALLS.append(len(inp))
        return self.inner(inp)


def test_experiment_from_yaml_with_resume(tmp_path, csfcube):
    ps.register("counted_bm25", lambda context=None: Counting(ps.pipeline("bm25", context=context)), replace=True)
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(f"""
dataset: irds:sci/csfcube
pipelines:
  BM25: pool >> bm25
  Counted: pool >> counted_bm25
  Tuned: pool >> bm25(k1=1.2, b=0.75)
experiments:
  small:
    datasets: [irds:sci/csfcube/method, irds:sci/csfcube/background]
    pipelines: [BM25, Counted, Tuned]
    measures: [NDCG%20, MAP, nDCG@10]
    baseline: BM25
    test: t
    save_dir: {tmp_path / "runs"}
""")
    CALLS.clear()
    table = run_experiment(cfg)
    assert list(table.columns[:5]) == ["dataset", "name", "NDCG%20", "MAP", "nDCG@10"]
    assert len(table) == 6 and len(CALLS) == 2
    bm25 = table[(table["name"] == "BM25")].set_index("dataset")
    counted = table[(table["name"] == "Counted")].set_index("dataset")
    pd.testing.assert_series_equal(bm25["NDCG%20"], counted["NDCG%20"], check_names=False)
    assert 0.3 < bm25.loc["irds:sci/csfcube/method", "NDCG%20"] < 0.6
    assert "MAP p-value" in table.columns
    # a rerun reads the finished runs back: the pipeline is not run again
    runs = sorted(p.name for p in (tmp_path / "runs").rglob("*.res.gz"))
    assert len(runs) == 6
    again = run_experiment(cfg)
    assert len(CALLS) == 2
    pd.testing.assert_frame_equal(again, table)
    # the console command (a new process, without the runtime component) prints the same table
    cfg2 = tmp_path / "exp2.yaml"
    cfg2.write_text(cfg.read_text().replace("counted_bm25", "bm25"))
    out = _cli("experiment", str(cfg2), "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 6
    assert [r["NDCG%20"] for r in rows] == pytest.approx(list(table["NDCG%20"]))


def test_an_llm_pipelines_saved_run_is_keyed_by_its_llm(csfcube, tmp_path):
    """A saved run of an LLM pipeline is the answer of one LLM: changing the config's model computes it again
    (the other pipelines are read back), the earlier model's run stays, and going back reads it back."""
    from llm_server import ScriptedServer

    from pyterrier_sci.experiment import dry_run_experiment
    with ScriptedServer(responder=lambda kind, body: " Yes") as srv:
        def config(model):
            cfg = tmp_path / f"llm-{model}.yaml"
            cfg.write_text(f"""
dataset: irds:sci/csfcube
llm: {{base_url: "{srv.base_url}", model: {model}, mode: completion, cache_dir: "", progress: false}}
components:
  judge: {{component: mir_pointwise, text_field: abstract}}
pipelines:
  BM25: pool >> bm25
  Judged: pool >> bm25 % 3 >> text >> judge
experiments:
  small:
    datasets: [irds:sci/csfcube/method]
    pipelines: [BM25, Judged]
    measures: [MAP]
    save_dir: {tmp_path / "runs"}
""")
            return cfg
        run_experiment(config("model-a"), trusted=True)
        calls = srv.calls
        assert calls == 17 * 3        # 17 method queries, the top 3 judged
        runs = sorted(p.name for p in (tmp_path / "runs").rglob("*.res.gz"))
        assert len(runs) == 2
        report = dry_run_experiment(config("model-a"), trusted=True)
        assert any("Judged: its run is saved" in n for n in report.notes)
        run_experiment(config("model-b"), trusted=True)     # another model: the judged run is computed again
        assert srv.calls == 2 * calls
        again = sorted(p.name for p in (tmp_path / "runs").rglob("*.res.gz"))
        assert len(again) == 3 and set(runs) <= set(again)
        assert sum(n.startswith("BM25-") for n in again) == 1
        run_experiment(config("model-a"), trusted=True)     # back to the first model: read back, no call
        assert srv.calls == 2 * calls


def test_experiment_config_errors(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(
        "pipelines: {A: ra}\nexperiments:\n  e: {dataset: irds:sci/csfcube, pipelines: [A], measures: [MAP], baseline: B}\n"  # noqa: E501
    )
    with pytest.raises(ps.PipelineError, match="baseline 'B' is not one of the pipelines"):
        run_experiment(cfg)
