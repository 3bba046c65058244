"""One naming convention (issue 32): component names carry their paper's prefix (``sciface_``, ``prism_``,
``mir_``, ``doris_``, ``hlm_``) and paper measures their paper's namespace (``sciface.*``, ``hlm.*``,
``mir.*``, ``doris.*``); the former names keep working as deprecated aliases, with one
``DeprecatedNameWarning`` naming the new name, and give the same transformers and the same figures."""
import configparser
import re
import subprocess
import sys
import warnings
from pathlib import Path

import ir_measures
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.errors import DeprecatedNameWarning
from pyterrier_sci.registry import REGISTRY, Registry

ROOT = Path(__file__).resolve().parent.parent

#: the renames of issue 32; a former name must never come back as a current one
RENAMED_COMPONENTS = {
    "facet_rerank": "sciface_rerank", "facet_label": "sciface_label",
    "paper_fields": "prism_paper_fields", "query_field": "prism_query_field",
    "chunks_to_papers": "prism_chunks_to_papers", "exclude_query_paper": "prism_exclude_query_paper",
    "aspect_fusion": "prism_aspect_fusion",
}
RENAMED_MEASURES = {
    "csfcube.MAP": "sciface.MAP", "csfcube.NDCG%20": "sciface.NDCG%20", "csfcube.RP": "sciface.RP",
    "csfcube.P@20": "sciface.P@20", "csfcube.R@20": "sciface.R@20", "csfcube.RR": "sciface.RR",
    "csfcube.NDCG": "sciface.NDCG", "csfcube.NDCG@20": "sciface.NDCG@20", "NDCG%20": "sciface.NDCG%20",
    "PREC@3": "hlm.PREC@3", "PREC@5": "hlm.PREC@5",
}


def _setup_cfg_group(group):
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return dict(line.split(" = ", 1) for line in cfg["options.entry_points"][group].strip().splitlines()
                if line.strip() and not line.strip().startswith("#"))


def test_every_paper_component_carries_its_papers_prefix():
    """A component registered by a paper plugin starts with that paper's prefix."""
    prefixes = {"mir": "mir_", "doris_mae": "doris_", "sciface": "sciface_", "prism": "prism", "hlm_cite": "hlm_"}
    for name, target in _setup_cfg_group("pyterrier_sci.components").items():
        plugin = target.split(":")[0].split(".")
        if len(plugin) > 2 and plugin[1] == "plugins" and plugin[2] in prefixes:
            assert name.startswith(prefixes[plugin[2]]), f"component {name!r} of {plugin[2]} lacks its paper's prefix"


def test_the_registry_knows_the_renames_as_aliases():
    assert REGISTRY.aliases() == RENAMED_COMPONENTS
    for old, new in RENAMED_COMPONENTS.items():
        assert new in REGISTRY.names() and old not in REGISTRY.names() and old in REGISTRY


def test_a_former_component_name_builds_the_same_component_and_warns_once():
    registry = Registry()   # a fresh registry: the once-per-name warning state is its own
    with pytest.warns(DeprecatedNameWarning, match="'exclude_query_paper' is now called 'prism_exclude_query_paper'"):
        spec = registry.get("exclude_query_paper")
    assert spec.name == "prism_exclude_query_paper"
    assert spec.factory is registry.get("prism_exclude_query_paper").factory
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.get("exclude_query_paper")     # once per name


def test_a_former_name_in_a_pipeline_expression_gives_the_same_pipeline():
    with pytest.warns(DeprecatedNameWarning):
        old = ps.pipeline('query_field(field="text") >> chunks_to_papers(agg="max")')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = ps.pipeline('prism_query_field(field="text") >> prism_chunks_to_papers(agg="max")')
    assert repr(old) == repr(new)
    frame = pd.DataFrame({"qid": ["q1"] * 3, "query": ["x"] * 3, "text": ["seed paper"] * 3,
                          "docno": ["p1%p0", "p1%p1", "p2%p0"], "score": [3.0, 2.0, 1.0], "rank": [0, 1, 2]})
    pd.testing.assert_frame_equal(old(frame), new(frame))


def test_the_cli_lists_former_component_names_apart():
    out = subprocess.run([sys.executable, "-m", "pyterrier_sci.cli", "components"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    current, _, former = out.stdout.partition("deprecated names")
    assert "sciface_rerank" in current and "facet_rerank " not in current
    assert "facet_rerank           now sciface_rerank" in former


def test_former_measure_names_are_aliases_with_the_same_values(csfcube):
    assert ps.measures.old_names() == RENAMED_MEASURES
    ds = pt.get_dataset("irds:sci/csfcube/method")
    qrels, run = ds.get_qrels(), ds.get_results()
    qrels_m = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    run_m = run.rename(columns={"qid": "query_id", "docno": "doc_id"})
    for old, new in RENAMED_MEASURES.items():
        if not new.startswith("sciface.") or "." not in old:   # a bare short name needs its dataset (below)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old_m = ps.measures.get(old)
        assert str(old_m) == old, "an old name keeps its column name in result tables"
        assert [type(w.message) for w in caught] in ([DeprecatedNameWarning], [])   # once per process
        assert ps.measures.aggregate(old_m, old_m.per_query(qrels_m, run_m)) == \
            ps.measures.aggregate(ps.measures.get(new), ps.measures.get(new).per_query(qrels_m, run_m))
    # the short names of experiments on the dataset are not deprecated: they mean the paper's measure
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert str(ps.measures.get("NDCG%20", dataset="irds:sci/csfcube/method")) == "sciface.NDCG%20"
        assert str(ps.measures.get("PREC@3", dataset="irds:sci/hlm")) == "hlm.PREC@3"
    # issue 55, item 3: without its dataset a bare short name is an error naming what to write, never a silent
    # substitute beside names (MAP) that keep their ir_measures meaning
    for short, full in (("NDCG%20", "sciface.NDCG%20"), ("PREC@3", "hlm.PREC@3")):
        with pytest.raises(ValueError, match=re.escape(full)):
            ps.measures.get(short)


def test_hlm_prec_counts_core_citations_in_the_top_k():
    qrels = pd.DataFrame({"query_id": ["q"] * 4, "doc_id": ["a", "b", "c", "d"], "relevance": [2, 0, 2, 2]})
    run = pd.DataFrame({"query_id": ["q"] * 4, "doc_id": ["a", "b", "c", "d"], "score": [4.0, 3.0, 2.0, 1.0]})
    res = ir_measures.calc_aggregate([ps.measures.get("hlm.PREC@3")], qrels, run)
    assert res[ps.measures.get("hlm.PREC@3")] == pytest.approx(2 / 3)
