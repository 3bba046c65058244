"""The reference pages are generated from the code and cannot go stale: docs/reference/components.md is every
registered component with its declared parameters and defaults, datasets.md every benchmark id with what it is and
holds, measures.md every measure name, cli.md every command with its arguments (the argparse parser), http-api.md
every route of the HTTP API (the app's OpenAPI schema); the command line prints the same text.  Regenerate with::

    pyterrier-sci reference --write docs/reference
"""
import os
import subprocess
import sys

import pytest
from conftest import DATA, ROOT, needs_data

from pyterrier_sci import measures, reference
from pyterrier_sci.cli import build_parser, main
from pyterrier_sci.registry import REGISTRY


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The pages as a user regenerates them: in a fresh process (nothing registered by other tests)."""
    out = tmp_path_factory.mktemp("reference")
    subprocess.run([sys.executable, "-m", "pyterrier_sci.cli", "reference", "--write", str(out / "pages")],
                   capture_output=True, text=True, check=True, cwd=out,
                   env={**os.environ, "PYTERRIER_SCI_HOME": str(out / "work"), "COLUMNS": "53"})
    return out / "pages"


@pytest.mark.parametrize("page", sorted(reference.REFERENCE_PAGES))
def test_the_reference_page_is_what_the_code_says(page, generated):
    got = (ROOT / "docs" / "reference" / page).read_text(encoding="utf-8")
    assert got == (generated / page).read_text(encoding="utf-8"), (
        f"docs/reference/{page} is stale: pyterrier-sci reference --write docs/reference")


def test_every_generated_page_is_a_page_of_the_site():
    """Each generated page is in docs/reference/ and in the site's reference toctree (docs/index.md)."""
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for page in reference.REFERENCE_PAGES:
        assert (ROOT / "docs" / "reference" / page).is_file()
        assert f"\nreference/{page[:-3]}\n" in index, page


def test_the_check_names_a_stale_page(tmp_path, capsys):
    assert main(["reference", "--write", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(reference.REFERENCE_PAGES)
    assert main(["reference", "--check", str(tmp_path)]) == 0
    (tmp_path / "cli.md").write_text("# Command line\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["reference", "--check", str(tmp_path)]) == 1
    assert "stale: " + str(tmp_path / "cli.md") in capsys.readouterr().out
    assert main(["reference", "measures.md"]) == 0 and capsys.readouterr().out == reference.measures_markdown()


def test_the_command_line_prints_the_generated_page(capsys):
    assert main(["datasets", "--markdown"]) == 0 and capsys.readouterr().out == reference.datasets_markdown()
    assert main(["components", "--markdown"]) == 0 and capsys.readouterr().out == reference.components_markdown()
    assert main(["measures", "--markdown"]) == 0 and capsys.readouterr().out == reference.measures_markdown()


def test_every_component_and_its_declared_parameters_are_listed():
    text = reference.components_markdown()
    for name in REGISTRY.names():
        assert (f"## `{name}`" in text) == (REGISTRY.get(name).source != "runtime")
    decl = REGISTRY.get("bm25").params
    for pname, takes, default in decl.describe():
        assert f"| `{pname}` |" in text
    assert "| `k1` | a number from 0 to 100 | `0.9` |" in text


def test_every_benchmark_id_is_listed_with_what_it_holds():
    rows = {r["id"]: r for r in reference.dataset_rows(include_local=False)}
    assert rows["irds:sci/csfcube/method"]["holds"] == "documents, queries, qrels, pools"
    assert rows["irds:sci/acl-fulltext/chunks-256"]["holds"] == "documents"
    assert "CSFCube" in rows["irds:sci/csfcube/method"]["description"]
    text = reference.datasets_markdown()
    assert all(f"| `{i}` |" in text for i in rows) and "sci/local/" not in text.split("| id |")[1]


def test_every_measure_and_short_name_is_listed():
    text = reference.measures_markdown()
    for name in measures.names():
        assert f"| `{name}` |" in text
    assert "| `sci/csfcube` | `NDCG%20` | `sciface.NDCG%20` |" in text
    assert "| `sci/mir-multicite` | `MAP` | `mir.mAP` |" in text
    assert "| `NDCG%20` | `sciface.NDCG%20` |" in text   # a former name


def test_every_command_and_argument_is_listed():
    """Every subcommand (plugins' too, nested ones too) with each of its arguments, help and default; the usage
    lines do not depend on the terminal's width."""
    parser = build_parser()
    text = reference.cli_markdown(parser)

    def walk(p):
        yield p
        for _, _, sub in reference.subcommands(p):
            yield from walk(sub)
    parsers = list(walk(parser))
    assert {p.prog for p in parsers} >= {"pyterrier-sci run", "pyterrier-sci manifest diff", "pyterrier-sci serve",
                                         "pyterrier-sci reference", "pyterrier-sci annotate run"}
    for p in parsers:
        assert f" `{p.prog}`\n" in text, p.prog
        for action in p._actions:
            for flag in action.option_strings:
                assert flag in text, (p.prog, flag)
    assert "| `--dataset DATASET` | ir_datasets id, e.g. irds:sci/csfcube |  |" in text
    assert "| `--port PORT` | port (0: any free port; the URL is printed) | `8000` |" in text
    assert "'NDCG%20,MAP'" in text   # argparse's %% written as one %
    assert "[`run`](#pyterrier-sci-run)" in text


def test_every_route_of_the_openapi_schema_is_listed():
    schema = reference.openapi_schema()
    text = reference.http_api_markdown(schema)
    routes = [(m.upper(), path) for path, ops in schema["paths"].items() for m in ops]
    assert ("POST", "/v1/search") in routes and ("GET", "/v1/papers/{docno}") in routes
    for method, path in routes:
        assert f"## `{method} {path}`" in text
    assert "| `q` | query | string (at most 1,000,000) or null | no |  |" in text
    assert "| `queries` | list of string | yes |  |" in text
    assert "Request body (JSON, `SearchBody`, required; no other fields)" in text


@needs_data("csfcube")
def test_the_recorded_dataset_counts_are_the_datas():
    """The counts the datasets page shows (pyterrier_sci/dataset_counts.json) are those of the data, recounted for
    the benchmarks at hand; the page shows them."""
    from pyterrier_sci.reference import dataset_counts, datasets_markdown, recorded_counts
    recorded = recorded_counts()
    ids = ["sci/csfcube", "sci/csfcube/method", "sci/csfcube/background/fold2-test", "sci/acl-fulltext/references",
           "sci/doris-mae/birco-dev"]
    for name in ids:
        if name.startswith("sci/doris-mae") and not (DATA / "doris-mae").exists():
            continue
        assert dataset_counts(name) == recorded[name], name
    assert recorded["sci/csfcube/method"] == {"documents": 4205, "queries": 17, "judgements": 2174}
    assert "| `irds:sci/csfcube/method` | " in datasets_markdown()
    row = next(line for line in datasets_markdown().splitlines() if line.startswith("| `irds:sci/csfcube/method` |"))
    assert row.endswith("| 4,205 | 17 | 2,174 |")
