"""Run manifests, replay and manifest diffs (docs/reproducibility.md): a real small BM25 experiment on
CSFCube's method facet writes a manifest; a replay from its saved runs reproduces every figure; a
tampered manifest, a missing saved run and a manifest of another experiment are reported."""
import copy
import hashlib
import json
from pathlib import Path

import conftest  # noqa: F401 (its fixtures and environment)
import numpy as np
import pyterrier as pt
import pytest

from pyterrier_sci import manifest as mf
from pyterrier_sci.artifacts import build_atomically
from pyterrier_sci.cli import main

CONFIG = """
dataset: irds:sci/csfcube
components:
  bm25: {{component: bm25, k1: 0.9, b: 0.4}}
pipelines:
  BM25: pool >> bm25
  Tuned: pool >> bm25(k1=1.2, b=0.75)
experiments:
  small:
    datasets: [irds:sci/csfcube/method]
    pipelines: [BM25, Tuned]
    measures: [NDCG%20, MAP]
    baseline: BM25
    save_dir: {save_dir}
"""


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, csfcube):
    """The experiment run once through the CLI: (config path, save dir, manifest, printed table)."""
    root = tmp_path_factory.mktemp("manifest")
    cfg = root / "exp.yaml"
    cfg.write_text(CONFIG.format(save_dir=root / "runs"))
    out = _run(["experiment", str(cfg), "--json"])
    assert out[0] == 0, out[2]
    path = root / "runs" / "small.manifest.json"
    assert f"manifest: {path}" in out[2]
    return cfg, root / "runs", json.loads(path.read_text()), json.loads(out[1])


def _run(argv):
    """``pyterrier-sci ARGV`` in this process: (exit status, stdout, stderr)."""
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_the_manifest_records_what_produced_the_figures(experiment):
    cfg, runs, m, rows = experiment
    from pyterrier_sci.datasets import csfcube
    assert m["kind"] == "experiment" and m["manifest_version"] == mf.MANIFEST_VERSION
    env = m["environment"]
    assert env["versions"]["numpy"] == np.__version__ and env["versions"]["pyterrier"] == pt.__version__
    assert set(env["versions"]) == set(mf.LIBRARIES)
    assert env["python"].split()[-1] == __import__("platform").python_version() and env["cpu"]["cores"] >= 1
    assert env["git"]["commit"] is None or len(env["git"]["commit"]) == 40
    # data: the files of CSFCube, hashed (the released files' own checksums)
    for key in ("queries", "method", "splits"):
        f = csfcube.FILES[key]
        assert m["data"]["$DATA/" + f.path] == f.sha256
    # the resolved configuration: what the YAML and the expression set, over the factory's defaults
    comps = m["config"]["components"]
    assert comps["bm25"]["params"]["k1"] == 0.9 and comps["bm25"]["params"]["num_results"] == 1000
    assert comps["bm25(k1=1.2, b=0.75)"]["params"]["b"] == 0.75
    assert m["experiment"]["pipelines"] == {"BM25": "pool >> bm25", "Tuned": "pool >> bm25(k1=1.2, b=0.75)"}
    # the saved runs' hashes and the figures the command printed
    (bm25_run,) = (runs / "irds_sci_csfcube_method").glob("BM25-*.res.gz")
    assert m["runs"]["irds:sci/csfcube/method"]["BM25"]["sha256"] == hashlib.sha256(bm25_run.read_bytes()).hexdigest()
    printed = [(r["name"], pytest.approx(r["NDCG%20"], abs=1e-9), pytest.approx(r["MAP"], abs=1e-9))
               for r in rows]  # --json prints 10 digits
    assert [(r["name"], r["NDCG%20"], r["MAP"]) for r in m["figures"]] == printed
    assert 0.3 < m["figures"][0]["NDCG%20"] < 0.6


def test_replay_reproduces_every_figure(experiment):
    cfg, *_ = experiment
    rc, out, err = _run(["experiment", str(cfg), "--replay"])
    assert rc == 0, err
    assert "all 16 figures equal the recorded ones" in out and "Traceback" not in err


def test_replay_reports_a_tampered_figure_and_a_changed_entry(experiment, tmp_path):
    cfg, runs, m, _ = experiment
    bad = copy.deepcopy(m)
    tuned = next(r for r in bad["figures"] if r["name"] == "Tuned")
    tuned["MAP"] += 0.01
    bad["environment"]["versions"]["torch"] = "0.0.1"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    rc, out, err = _run(["experiment", str(cfg), "--replay", "--manifest", str(tmp_path / "bad.json"), "--json"])
    assert rc == 1, err
    rep = json.loads(out)
    assert not rep["identical"] and len(rep["figures"]) == 1
    (fig,) = rep["figures"]
    assert fig["key"] == "irds:sci/csfcube/method / Tuned: MAP"
    assert fig["recorded"] - fig["now"] == pytest.approx(0.01, abs=1e-12)
    assert {"section": "environment", "key": "versions.torch", "recorded": "0.0.1",
            "now": m["environment"]["versions"]["torch"]} in rep["entries"]
    # a difference below the tolerance is no difference
    close = copy.deepcopy(m)
    close["figures"][0]["NDCG%20"] += 1e-12
    (tmp_path / "close.json").write_text(json.dumps(close))
    assert _run(["experiment", str(cfg), "--replay", "--manifest", str(tmp_path / "close.json")])[0] == 0


def test_a_manifest_of_another_experiment_is_one_error(experiment, tmp_path):
    cfg, runs, m, _ = experiment
    other = copy.deepcopy(m)
    other["experiment"]["pipelines"]["Tuned"] = "pool >> bm25(k1=2.0)"
    (tmp_path / "other.json").write_text(json.dumps(other))
    rc, out, err = _run(["experiment", str(cfg), "--replay", "--manifest", str(tmp_path / "other.json")])
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "manifest of another experiment: its pipelines" in err and "Traceback" not in err
    (tmp_path / "junk.json").write_text("{not json")
    rc, _, err = _run(["experiment", str(cfg), "--replay", "--manifest", str(tmp_path / "junk.json")])
    assert rc == 2 and "is not a manifest: it is not valid JSON" in err


def test_replay_without_saved_runs_is_one_error(experiment, tmp_path):
    cfg, *_ = experiment
    rc, out, err = _run(["experiment", str(cfg), "--replay", "--save-dir", str(tmp_path / "empty")])
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "no saved run of pipeline 'BM25' on irds:sci/csfcube/method" in line
    assert "run the experiment without --replay first" in line
    assert not (tmp_path / "empty").exists()  # a replay writes nothing


def test_manifest_diff_shows_changed_versions_and_seeds(experiment, tmp_path):
    _, runs, m, _ = experiment
    a = runs / "small.manifest.json"
    assert _run(["manifest", "diff", str(a), str(a)])[:2] == (0, f"no differences between {a} and {a}\n")
    b = copy.deepcopy(m)
    b["environment"]["versions"]["sentence-transformers"] = "9.9.9"
    b["seeds"]["config.components.mir.seed"] = 1
    b["config"]["components"]["bm25"]["params"]["k1"] = 1.5
    (tmp_path / "b.json").write_text(json.dumps(b))
    rc, out, _ = _run(["manifest", "diff", str(a), str(tmp_path / "b.json")])
    assert rc == 1
    assert out.startswith("3 differences")
    assert f"versions.sentence-transformers: {m['environment']['versions']['sentence-transformers']} -> 9.9.9" in out
    assert "seeds       config.components.mir.seed: <absent> -> 1" in out
    assert "config      components.bm25.params.k1: 0.9 -> 1.5 (difference +0.6)" in out


def test_manifest_diff_compares_every_section(experiment, tmp_path):
    """Issue 32, item 5: a pair of manifests differing in each section in turn is one difference there,
    sections the diff did not know included (a run's ``run``, a builder's own entries, ``kind``)."""
    _, runs, m, _ = experiment
    base = copy.deepcopy(m)
    base["run"] = {"expression": "pool >> bm25", "dataset": "irds:sci/csfcube/method", "results": 2174}
    base["index"] = {"backend": "pisa", "documents": 4205}
    seen = set()
    for section, value in base.items():
        if section == "created":
            continue
        b = copy.deepcopy(base)
        if section == "figures":
            b["figures"][0]["MAP"] += 0.01
        elif isinstance(value, dict) and value:
            b[section][next(k for k in value if k != "cpu")] = ["changed"]
        else:
            b[section] = "changed"
        changes = mf.diff_manifests(base, b)
        assert changes and {c.section for c in changes} == {section}, (section, changes)
        seen.add(section)
    assert {"environment", "models", "data", "seeds", "config", "templates", "experiment", "runs", "figures",
            "run", "index", "kind", "manifest_version"} <= seen
    assert mf.diff_manifests(base, {**base, "created": "2000-01-01T00:00:00+00:00"}) == []
    # a section only one side has
    assert [tuple(c) for c in mf.diff_manifests(base, {k: v for k, v in base.items() if k != "index"})] == \
        [("index", "backend", "pisa", mf.MISSING), ("index", "documents", 4205, mf.MISSING)]


def test_manifest_diff_of_one_pipeline_on_two_datasets_differs(tmp_path, csfcube):
    """Issue 32: the run manifests of ``pool >> bm25`` on the method and result facets (another dataset,
    another output) were "No differences", exit 0: the ``run`` section was not compared."""
    paths = []
    for facet in ("method", "result"):
        out_file = tmp_path / f"{facet}.trec"
        rc, _, err = _run(["run", "pool >> bm25", "--dataset", f"irds:sci/csfcube/{facet}", "--output", str(out_file)])
        assert rc == 0, err
        paths.append(f"{out_file}.manifest.json")
    rc, out, _ = _run(["manifest", "diff", *paths])
    assert rc == 1
    assert "run         dataset: irds:sci/csfcube/method -> irds:sci/csfcube/result" in out
    assert "run         sha256: " in out and "run         results: " in out
    assert out.startswith("4 differences") and "run         output: " in out   # the facets share their files


def test_run_writes_a_manifest_beside_its_output(tmp_path, csfcube):
    out_file = tmp_path / "bm25.trec"
    rc, _, err = _run(["run", "pool >> bm25 % 5", "--dataset", "irds:sci/csfcube/method", "--output", str(out_file)])
    assert rc == 0, err
    m = json.loads((tmp_path / "bm25.trec.manifest.json").read_text())
    assert m["kind"] == "run" and m["run"]["sha256"] == hashlib.sha256(out_file.read_bytes()).hexdigest()
    assert m["run"]["results"] == 17 * 5 and m["config"]["pipelines"] == {"pool >> bm25 % 5": "pool >> bm25 % 5"}


def test_every_built_artifact_gets_a_manifest(tmp_path):
    def build(tmp):
        tmp.mkdir()
        (tmp / "vectors.bin").write_bytes(b"\0" * 16)

    path = build_atomically(tmp_path / "idx", build, manifest=lambda tmp: {"documents": 2})
    m = json.loads((path / "manifest.json").read_text())
    assert m["kind"] == "artifact" and m["documents"] == 2 and m["artifact"] == str(path.absolute())
    assert m["environment"]["versions"]["numpy"] == np.__version__
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "vectors.bin"]
    # a builder's own manifest.json is kept; an empty build stays empty (it counts as not built)
    own = build_atomically(tmp_path / "own", lambda t: (t.mkdir(), (t / "manifest.json").write_text("{}")))
    assert (own / "manifest.json").read_text() == "{}"
    empty = build_atomically(tmp_path / "empty", lambda t: t.mkdir())
    assert list(empty.iterdir()) == []
    # a file artifact is written as it was
    f = build_atomically(tmp_path / "one.txt", lambda t: t.write_text("x"))
    assert f.read_text() == "x" and not (tmp_path / "manifest.json").exists()


def test_model_weights_are_hashed_once(tmp_path, monkeypatch):
    from pyterrier_sci.models import resolve_model
    from pyterrier_sci.plugins.dense import DenseRetriever
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    weights = Path(resolve_model("default")) / "model.safetensors"
    entries = mf.model_entries([pt.apply.generic(lambda df: df) >> DenseRetriever("default")])
    (entry,) = entries.values()
    expected = hashlib.sha256(f"model.safetensors\0{hashlib.sha256(weights.read_bytes()).hexdigest()}\n"
                              .encode()).hexdigest()
    assert list(entries) == ["default"] and entry["sha256"] == expected and entry["weight_files"] == 1
    cache = json.loads((tmp_path / "manifest-hashes.json").read_text())
    assert any(k.startswith(str(weights.resolve()) + "|") for k in cache)
    # a rerun reads the cache: a planted (wrong) digest for the same size and mtime is what it returns
    key = next(k for k in cache if k.startswith(str(weights.resolve()) + "|"))
    cache[key] = "0" * 64
    (tmp_path / "manifest-hashes.json").write_text(json.dumps(cache))
    assert mf.file_sha256(weights) == "0" * 64


def test_llm_templates_and_models_are_recorded():
    from importlib import resources

    import pyterrier_sci as ps
    t = ps.pipeline('listwise(llm={"model": "m", "base_url": "http://127.0.0.1:9/v1"}, template="pairwise")')
    shipped = resources.files("pyterrier_sci.plugins.llm").joinpath("templates", "pairwise.txt").read_bytes()
    templates = mf.template_entries([t])
    assert templates["pyterrier_sci.plugins.llm/templates/pairwise.txt"] == hashlib.sha256(shipped).hexdigest()
    assert templates["Listwise:pairwise"] == hashlib.sha256(shipped.decode("utf-8").encode()).hexdigest()
    assert mf.model_entries([t]) == {"llm:m": {"kind": "llm", "used_by": "Listwise", "path": None, "sha256": None,
                                               "note": "served by an OpenAI-compatible endpoint"}}


@pytest.mark.parametrize("flags", [["--replay", "--dry-run"], ["--replay", "--report", "r"],
                                   ["--dry-run", "--report", "r"], ["--manifest", "m.json"]])
def test_experiment_modes_that_exclude_each_other_are_one_error(flags, tmp_path, capsys):
    cfg = tmp_path / "x.yaml"
    cfg.write_text("pipelines: {A: pool}\n")
    assert main(["experiment", str(cfg), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("cannot be combined" in err[0] or "--manifest is for --replay" in err[0])
    assert not (tmp_path / "r").exists()
