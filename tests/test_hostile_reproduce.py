"""A paper's reproduction file is untrusted input, like a pipeline file (issue 55, item 0): its table keys and
system names are plain names (they name folders of the saved runs), its templates are plain substitutions of
declared fields, ``--llm URL`` trusts that URL only and never the file's expressions, the loader shares the
pipeline files' limits, and every malformed declared or recorded value is one error naming the file and key."""
import json
import os
import time

import pytest
import yaml
from conftest import needs_data
from test_reproduce import _paper

from pyterrier_sci import reproduce as R
from pyterrier_sci.cli import main
from pyterrier_sci.llm.loopback import ScriptedServer
from pyterrier_sci.llm.trust import TRUSTED_URLS_ENV

pytestmark = needs_data("csfcube")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "work"))
    return tmp_path


def _edit(d, fn):
    doc = yaml.safe_load((d / "toy.yaml").read_text())
    fn(doc)
    (d / "toy.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return d


def _refused(d, *needles):
    with pytest.raises(R.ReproductionError) as e:
        R.load_paper("toy", d)
    msg = str(e.value)
    assert "toy.yaml" in msg and all(n in msg for n in needles), msg
    return msg


@pytest.mark.parametrize("key", ["../../../indexes/sci__csfcube/pisa", "/tmp/elsewhere", "a/b", "..", ".hidden",
                                 "a\x00b", "x" * 101])
def test_a_table_key_that_is_not_a_plain_name_is_refused(tmp_path, key):
    d = _edit(_paper(tmp_path), lambda doc: doc.update(tables={key: doc["tables"]["t5"]}))
    _refused(d, "table key", "names a folder of the saved runs")


@pytest.mark.parametrize("name", ["../BM25", "/abs", "a/b", "..", "a b"])
def test_a_system_name_that_is_not_a_plain_name_is_refused(tmp_path, name):
    d = _edit(_paper(tmp_path), lambda doc: doc["tables"]["t5"]["systems"].update(
        {name: doc["tables"]["t5"]["systems"].pop("BM25")}))
    _refused(d, "system name")


def test_a_hostile_table_key_writes_nothing_outside_the_work_directory(home):
    """Before, this file's table exited 0 and overwrote the PISA index's manifest.json."""
    d = _edit(_paper(home), lambda doc: doc.update(tables={"../../../x": doc["tables"]["t5"]}))
    before = sorted(str(p) for p in home.rglob("*"))
    assert main(["reproduce", str(d / "toy.yaml"), "--tier", "quick"]) == 2
    assert sorted(str(p) for p in home.rglob("*")) == before


@pytest.mark.parametrize("template,needle", [
    ("{facet.__class__.__mro__}", "no attribute access"),
    ("{facet.__class__.__init__.__globals__}", "no attribute access"),
    ("{facet[0]}", "no attribute access"),
    ("{facet!r}", "no attribute access"),
    ("{", "lone brace"),
    ("x}", "lone brace"),
    ("{nokey}", "does not declare"),
])
def test_a_run_path_template_is_a_plain_substitution(tmp_path, template, needle):
    d = _edit(_paper(tmp_path), lambda doc: doc["tables"]["t5"]["systems"]["SPECTER"]["run"].update(
        path="csfcube/" + template))
    _refused(d, "run path", needle)


def test_a_qid_template_and_an_agreement_column_are_checked_too(tmp_path):
    d = _edit(_paper(tmp_path), lambda doc: doc["tables"]["t5"]["systems"]["SPECTER"]["run"].update(
        qid="{key.__len__}"))
    _refused(d, "run qid")
    assert R.fill("{key}_{facet}", {"key": "1", "facet": "method"}) == "1_method"


@pytest.mark.parametrize("edit,needles", [
    (lambda t: t.update(digits="abc"), ("'digits'", "'abc'")),
    (lambda t: t.update(digits=10 ** 9), ("'digits'",)),
    (lambda t: t.update(tiers={"quick": {"topics": "abc"}}), ("topics", "'abc'")),
    (lambda t: t.update(tiers={"quick": {"topics": -1}}), ("topics", "-1")),
    (lambda t: t.update(tiers={"quick": {"topics": 0}}), ("topics",)),
    (lambda t: t["datasets"]["Method"].update(full={"topics": -1}), ("dataset 'Method'", "topics")),
    (lambda t: t["datasets"]["Method"].update(vars={"facet": {"a": 1}}), ("'vars'",)),
    (lambda t: t["datasets"]["Method"].update(colour="red"), ("unknown keys",)),
    (lambda t: t.update(measures=[{"a": 1}]), ("'measures'",)),
    (lambda t: t["systems"].update(BM25=5), ("BM25", "pipeline expression or a mapping")),
    (lambda t: t["systems"]["BM25"].update(tiers=5), ("tiers",)),
    (lambda t: t["systems"]["BM25"].update(published=["x"]), ("'published'",)),
    (lambda t: t["systems"]["BM25"].update(published={"Method": [1, 2]}), ("published figures for 'Method'",)),
    (lambda t: t["systems"]["BM25"].update(needs={"a": 1}), ("'needs'",)),
    (lambda t: t["systems"]["BM25"].update(pipeline=["bm25"]), ("'pipeline'",)),
])
def test_malformed_declared_values_are_one_error_naming_the_file_and_key(tmp_path, edit, needles):
    d = _edit(_paper(tmp_path), lambda doc: edit(doc["tables"]["t5"]))
    _refused(d, *needles)


def test_the_paper_loader_shares_the_pipeline_files_limits(tmp_path):
    """A billion-laughs paper file took 131 s and 2.6 GB before running out of memory; now it is refused at once."""
    d = tmp_path / "reproduce"
    d.mkdir()
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    (d / "toy.yaml").write_text("\n".join(lines) + "\ntables: {}\n")
    start = time.perf_counter()
    msg = _refused(d, "refused")
    assert time.perf_counter() - start < 5, msg
    (d / "toy.yaml").write_bytes(b"paper: {id: \xff}\n")
    _refused(d, "UTF-8")


@pytest.mark.parametrize("recorded,needles", [
    ({"tables": {"t5": {"quick": "a string"}}}, ("tables.t5.quick",)),
    ({"tables": {"t5": "a string"}}, ("tables.t5",)),
    ({"tables": {"t5": {"quick": {"figures": {"BM25": {"Method": {"MAP": "33.9"}}}}}}},
     ("tables.t5.quick.figures.BM25.Method.MAP", "finite number")),
    ({"tables": {"t5": {"quick": {"figures": {"BM25": [1, 2]}}}}}, ("tables.t5.quick.figures.BM25",)),
    ({"tables": {"t5": {"quick": {"figures": {"BM25": {"Method": [33.9]}}}}}}, ("figures.BM25.Method",)),
])
def test_malformed_recorded_figures_are_one_error_naming_the_file_and_key(home, recorded, needles):
    d = _paper(home)
    (d / "recorded").mkdir()
    (d / "recorded" / "toy.json").write_text(json.dumps(recorded))
    with pytest.raises(R.ReproductionError) as e:
        R.reproduce("toy/t5", tier="quick", directory=d)
    msg = str(e.value)
    assert "toy.json" in msg and all(n in msg for n in needles), msg


@pytest.mark.parametrize("content,needle", [(b"\xff\xfe{}", "UTF-8"), (b"[" * 100_000 + b"]" * 100_000, "nested"),
                                            (b"{", "not JSON")])
def test_recorded_figures_that_are_not_json_name_the_file(home, content, needle):
    d = _paper(home)
    (d / "recorded").mkdir()
    (d / "recorded" / "toy.json").write_bytes(content)
    with pytest.raises(R.ReproductionError) as e:
        R.read_recorded(R.load_paper("toy", d))
    assert "toy.json" in str(e.value) and needle in str(e.value)


def test_llm_url_trusts_that_url_only_never_the_files_expressions(home, monkeypatch):
    """Before, ``--llm URL`` made every expression trusted: a system's own llm={'base_url': B} sent the API key
    to B.  Now B gets no key (its requests carry the placeholder), the --llm server gets it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-key-12345")
    monkeypatch.delenv(TRUSTED_URLS_ENV, raising=False)
    with ScriptedServer(responder=lambda kind, body: " Yes") as given, \
            ScriptedServer(responder=lambda kind, body: " Yes") as other:
        d = _paper(home, llm={"mode": "completion", "cache_dir": ""},
                   components={"bm25": {"component": "bm25", "backend": "pisa", "k1": 0.9, "b": 0.4},
                               "judge": {"component": "mir_pointwise", "text_field": "abstract", "on_error": "flag"}})
        expr = ("counted_pool >> bm25 % 2 >> text >> mir_pointwise(text_field='abstract', on_error='flag', "
                f"llm={{'base_url': '{other.base_url}', 'mode': 'completion', 'cache_dir': ''}})")

        def edit(doc):
            t = doc["tables"]["t5"]
            t["tiers"] = {"full": {"topics": 1}}
            t["systems"] = {"Judge": {"pipeline": "counted_pool >> bm25 % 2 >> text >> judge", "needs": ["llm"]},
                            "Elsewhere": {"pipeline": expr, "needs": ["llm"]}}
        _edit(d, edit)
        R.reproduce("toy/t5", tier="full", llm=given.base_url, directory=d)
        assert given.calls > 0 and other.calls > 0
        assert all({k.lower(): v for k, v in h.items()}.get("authorization") == "Bearer sk-secret-key-12345"
                   for h in given.headers)
        assert not any("sk-secret-key-12345" in json.dumps(h) for h in other.headers)
    assert TRUSTED_URLS_ENV not in os.environ     # the trust ends with the run


def test_the_dry_run_of_every_shipped_table_works(home, capsys):
    """Issue 56, item 7: `reproduce --dry-run` stopped at doris_mae/table1 (no system runs in the quick tier) with
    a pandas KeyError shown as the user's mistake."""
    assert main(["reproduce", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for paper, table in R.select():
        assert f"\n{paper.id}/{table.key} (Table {table.number}), tier quick:" in out
    assert "doris_mae/table1 (Table 1), tier quick:\n  no system of this table runs in the quick tier" in out
    assert "estimated time:" in out
