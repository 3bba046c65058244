"""The reference pages are generated from the code and cannot go stale: docs/reference/components.md is every
registered component with its declared parameters and defaults, docs/reference/datasets.md every benchmark id
with what it is and holds; the command line prints the same text.  Regenerate with::

    pyterrier-sci components --markdown > docs/reference/components.md
    pyterrier-sci datasets --markdown > docs/reference/datasets.md
"""
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from pyterrier_sci import reference
from pyterrier_sci.cli import main
from pyterrier_sci.registry import REGISTRY


@pytest.mark.parametrize("page", sorted(reference.REFERENCE_PAGES))
def test_the_reference_page_is_what_the_code_says(page, tmp_path):
    """In a fresh process (nothing registered by other tests), as a user would regenerate it."""
    out = subprocess.run([sys.executable, "-m", "pyterrier_sci.cli", page[:-3], "--markdown"], capture_output=True,
                         text=True, check=True, cwd=tmp_path,
                         env={**os.environ, "PYTERRIER_SCI_HOME": str(tmp_path / "work")}).stdout
    got = (ROOT / "docs" / "reference" / page).read_text(encoding="utf-8")
    assert got == out, (f"docs/reference/{page} is stale: pyterrier-sci {page[:-3]} --markdown > "
                        f"docs/reference/{page}")


def test_the_command_line_prints_the_generated_page(capsys):
    assert main(["datasets", "--markdown"]) == 0 and capsys.readouterr().out == reference.datasets_markdown()
    assert main(["components", "--markdown"]) == 0 and capsys.readouterr().out == reference.components_markdown()


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
