"""Saved runs notice code (pyterrier_sci.code_identity): a change to the source of a module a pipeline reaches
changes its saved run's key, so a reproduction computes it again instead of reading back what the old code saved;
a module it does not reach does not; the identity does not depend on what the process has imported so far.  On
CSFCube with BM25 and a component written to a file of its own (seconds)."""
import importlib
import json
import subprocess
import sys
import textwrap

import pytest
import yaml
from conftest import ROOT, needs_data

import pyterrier_sci as ps
from pyterrier_sci import reproduce as R
from pyterrier_sci.code_identity import code_identity
from pyterrier_sci.experiment import pipeline_key
from pyterrier_sci.registry import REGISTRY

pytestmark = needs_data("csfcube")

COMPONENT = '''
import pyterrier as pt
import {helper}

def boost_component(context=None):
    """`boost`: adds a constant to every score."""
    return pt.apply.score(lambda row: row["score"] + {helper}.BOOST * (row["rank"] % 2))
'''


@pytest.fixture
def boost(tmp_path, monkeypatch):
    """A component ``boost`` whose module (and the helper module it imports) live in files of their own."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"boostmod_{tmp_path.name.replace('-', '_')}"
    helper = f"{name}_helper"
    (tmp_path / f"{helper}.py").write_text("BOOST = 0.0\n")
    (tmp_path / f"{name}.py").write_text(COMPONENT.format(helper=helper))
    (tmp_path / "unrelated.py").write_text("X = 1\n")
    module = importlib.import_module(name)
    ps.register("boost", module.boost_component, replace=True)

    def edit(file: str, text: str):
        path = tmp_path / file
        path.write_text(text)
        importlib.invalidate_caches()
        importlib.reload(sys.modules[helper]) if file.startswith(helper) else None
        ps.register("boost", importlib.reload(sys.modules[name]).boost_component, replace=True)
    yield {"edit": edit, "helper": f"{helper}.py", "module": f"{name}.py"}


def test_a_change_to_a_reached_module_changes_the_key(boost):
    cfg = ps.PipelineConfig.from_dict({"components": {"b": {"component": "boost"}}})
    before = pipeline_key(cfg, "x", "pool >> bm25 >> b")
    assert pipeline_key(cfg, "x", "pool >> bm25 >> b") == before          # stable
    boost["edit"]("unrelated.py", "X = 2\n")                             # a module the pipeline does not reach
    assert pipeline_key(cfg, "x", "pool >> bm25 >> b") == before
    boost["edit"](boost["helper"], "BOOST = 5.0\n")                      # imported by the component's module
    after = pipeline_key(cfg, "x", "pool >> bm25 >> b")
    assert after != before
    assert pipeline_key(cfg, "x", "pool >> bm25") == pipeline_key(cfg, "x", "pool >> bm25")
    assert pipeline_key(cfg, "x", "pool >> bm25") != after


def test_the_identity_does_not_depend_on_what_was_imported(tmp_path):
    """A fresh process that has imported only the registry gives the same identity as this one, which has run
    pipelines (their lazily imported modules loaded)."""
    names = ["bm25", "dense", "mir_pointwise", "sciface_rerank", "prism_agents"]
    here = {n: code_identity([REGISTRY.get(n).factory])["code"] for n in names}
    script = textwrap.dedent(f"""
        import json
        from pyterrier_sci.code_identity import code_identity
        from pyterrier_sci.registry import REGISTRY
        print(json.dumps({{n: code_identity([REGISTRY.get(n).factory])["code"] for n in {names!r}}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here
    assert len(set(here.values())) == len(here)   # each component reaches code of its own


def test_a_paper_module_change_changes_the_paper_components_key_only():
    """The identity covers the toolkit's own source: a paper plugin's components reach its modules, BM25 does not."""
    bm25 = code_identity([REGISTRY.get("bm25").factory])
    mir = code_identity([REGISTRY.get("mir_pointwise").factory])
    assert bm25["modules"] > 3 and mir["modules"] > bm25["modules"] and mir["libraries"] >= 1


def _toy(tmp_path):
    doc = {"paper": {"id": "toy"},
           "components": {"bm25": {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4}},
           "tables": {"t5": {
               "number": "5", "differs": "a toy", "measures": ["NDCG%20"], "scale": 100, "tolerance": 0.01,
               "drift": 0.001,
               "datasets": {"Method": {"id": "irds:sci/csfcube/method", "vars": {"facet": "method"}}},
               "systems": {"Boosted": {"pipeline": "pool >> bm25 >> boost", "tiers": ["quick", "full"]},
                           "BM25": {"pipeline": "pool >> bm25", "tiers": ["medium"]}}}}}
    d = tmp_path / "papers"
    d.mkdir()
    (d / "toy.yaml").write_text(yaml.safe_dump(doc))
    return d


def test_a_reproduction_computes_a_changed_component_again_and_verify_notices(boost, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "work"))
    d = _toy(tmp_path)
    R.record(R.reproduce("toy/t5", tier="quick", directory=d))
    (again,) = R.reproduce("toy/t5", tier="quick", directory=d)
    assert again.read_back == ("Boosted",) and not again.failed
    # the component's code changes (its helper module): its saved run is not read back; the figure moves and the
    # drift from the recorded figure fails, as a regression should
    boost["edit"](boost["helper"], "BOOST = 50.0\n")
    (changed,) = R.reproduce("toy/t5", tier="quick", directory=d)
    assert changed.computed == ("Boosted",) and changed.read_back == ()
    assert [c.system for c in changed.failed] == ["Boosted"] and "drifted" in changed.failed[0].reason
    # the old code back: its saved run (keyed by that code) is read back again and agrees with the record
    boost["edit"](boost["helper"], "BOOST = 0.0\n")
    (back,) = R.reproduce("toy/t5", tier="quick", directory=d)
    assert back.read_back == ("Boosted",) and not back.failed
    # --verify reads nothing back and agrees with the record
    (verified,) = R.reproduce("toy/t5", tier="quick", directory=d, verify=True)
    assert verified.read_back == () and verified.computed == ("Boosted",) and not verified.failed
    # the medium tier runs the rows marked medium as the full tier runs them: nothing recorded there yet, so
    # --verify fails each cell it cannot verify, and a plain run records it into the full tier
    (medium,) = R.reproduce("toy/t5", tier="medium", directory=d, verify=True)
    assert medium.tier == "full" and [c.system for c in medium.cells] == ["BM25"]
    assert medium.failed and "nothing recorded in the full tier" in medium.failed[0].reason
    R.record([medium])
    recorded = json.loads((d / "recorded" / "toy.json").read_text())["tables"]["t5"]
    assert set(recorded["full"]["figures"]) == {"BM25"} and "--systems BM25" in recorded["full"]["command"]
    (medium,) = R.reproduce("toy/t5", tier="medium", directory=d, verify=True)
    assert not medium.failed and medium.cells[0].recorded == medium.cells[0].reproduced


def test_verify_on_the_command_line(boost, tmp_path, monkeypatch, capsys):
    from pyterrier_sci.cli import main
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "work"))
    d = _toy(tmp_path)
    monkeypatch.setattr(R, "papers_dir", lambda: d)
    assert main(["reproduce", "toy/t5", "--tier", "quick", "--record"]) == 0
    assert main(["reproduce", "toy/t5", "--tier", "quick", "--verify"]) == 0
    rec = json.loads((d / "recorded" / "toy.json").read_text())
    rec["tables"]["t5"]["quick"]["figures"]["Boosted"]["Method"]["NDCG%20"] += 1.0
    (d / "recorded" / "toy.json").write_text(json.dumps(rec))
    assert main(["reproduce", "toy/t5", "--tier", "quick", "--verify"]) == 1
    assert "1 figure(s) outside their tolerance" in capsys.readouterr().err


def test_the_shipped_medium_tier_names_cheap_rows_of_every_paper():
    """CI verifies the medium tier (tests/test_reproduce_medium.py): every paper has rows in it, each with a
    recorded full-tier figure to verify."""
    papers = {}
    for paper, table in R.select():
        rows = [s.name for s in table.systems.values() if "medium" in s.tiers]
        figures = (R.read_recorded(paper)["tables"].get(table.key, {}).get("full") or {}).get("figures") or {}
        assert all(r in figures for r in rows), f"{paper.id}/{table.key}: medium rows without full-tier figures"
        papers.setdefault(paper.id, []).extend(rows)
    assert set(papers) == set(R.paper_files()) and all(papers.values()), papers
    assert (ROOT / "tests" / "test_reproduce_medium.py").is_file()
