"""The documentation site (``make docs``): Sphinx and MyST build docs/ into HTML offline with every warning an
error; every page of docs/ is reached from the index, the generated reference pages are there with what the code
declares (a component, a CLI subcommand, a measure, an HTTP route, every public name of the Python API), the built
pages load nothing from the internet, each class of the Python API page has an example in its docstring, and the
docstrings' ``>>>`` examples run.  Skipped (with the reason) where the docs extra is not installed."""
import ast
import html
import importlib
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import ROOT

import pyterrier_sci as ps

pytest.importorskip("sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'")
pytest.importorskip("myst_parser", reason="the docs extra is not installed: pip install -e '.[docs]'")

DOCS = ROOT / "docs"
PYTHON_PAGE = DOCS / "reference" / "python.md"
#: autodoc directives of the Python API page: (directive, dotted name)
DIRECTIVE = re.compile(r"^\.\. (auto\w+):: ([\w.]+)", re.M)


def pages():
    """Every Markdown page of the site, as its name relative to docs/ without .md."""
    return sorted(p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")
                  if "_build" not in p.relative_to(DOCS).parts)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built into a temporary folder, as ``make docs`` builds it (in a fresh process: autodoc imports
    the package as a reader of the docs would)."""
    out = tmp_path_factory.mktemp("site") / "html"
    env = {**os.environ, "PYTERRIER_SCI_HOME": str(out.parent / "work")}
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                           str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, f"the site does not build without warnings:\n{done.stdout}\n{done.stderr}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


def text_of(html_file: Path) -> str:
    return html_file.read_text(encoding="utf-8")


def words_of(html_file: Path) -> str:
    """The page's text, tags left out (code spans are one element per word)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text_of(html_file))).split())


class Links(HTMLParser):
    """``href`` of links, and what a page loads by itself (``src`` of scripts and images, stylesheets)."""

    def __init__(self):
        super().__init__()
        self.hrefs, self.loads = set(), set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.hrefs.add(a["href"].split("#")[0])
        if tag in ("script", "img", "iframe") and a.get("src"):
            self.loads.add(a["src"])
        if tag == "link" and a.get("href") and a.get("rel") in ("stylesheet", "icon", "preload"):
            self.loads.add(a["href"])


def links(html_file: Path) -> Links:
    parser = Links()
    parser.feed(text_of(html_file))
    return parser


def test_every_page_is_built_and_reached_from_the_index(site):
    index = links(site / "index.html").hrefs
    for page in pages():
        assert (site / f"{page}.html").is_file(), f"docs/{page}.md was not built"
        if page != "index":
            assert f"{page}.html" in index, f"docs/{page}.md is in no toctree the index shows"
    assert {"getting-started", "guide", "tutorials/compare-systems", "mir", "reference/python"} <= set(pages())


def test_the_reference_pages_hold_what_the_code_declares(site):
    ref = site / "reference"
    assert 'id="bm25"' in text_of(ref / "components.html")
    assert "bm25 ¶ BM25" in words_of(ref / "components.html") and "k1 a number from 0 to 100 0.9" in words_of(
        ref / "components.html")
    cli = words_of(ref / "cli.html")
    for command in ("run", "experiment", "serve", "reference", "manifest diff"):
        assert f"pyterrier-sci {command} ¶" in cli, command
        anchor = "pyterrier-sci-" + command.replace(" ", "-")
        assert f'id="{anchor}"' in text_of(ref / "cli.html"), anchor
    assert "--dry-run" in cli and "--trust-config" in cli
    assert "sciface.NDCG%20 nDCG at 20% of the ranked pool" in words_of(ref / "measures.html")
    assert "irds:sci/csfcube/method" in words_of(ref / "datasets.html")
    http = words_of(ref / "http-api.html")
    for route in ("GET /v1/search", "POST /v1/search", "POST /v1/batch_search", "GET /v1/papers/{docno}",
                  "POST /v1/suggest_citations"):
        assert f"{route} ¶" in http, route
    assert "queries list of string yes" in http


def test_the_python_api_page_documents_every_public_name(site):
    page = text_of(site / "reference" / "python.html")
    for name in ps.__all__:
        target = f"pyterrier_sci.{name}"
        assert f'id="{target}"' in page or f'id="module-{target}"' in page, f"ps.{name} is not documented"


def test_the_built_pages_load_nothing_from_the_internet(site):
    for page in pages():
        remote = {u for u in links(site / f"{page}.html").loads if re.match(r"(https?:)?//", u)}
        assert not remote, f"{page}.html loads {remote}"


def documented():
    """(directive, object) of each autodoc directive of the Python API page."""
    out = []
    for directive, dotted in DIRECTIVE.findall(PYTHON_PAGE.read_text(encoding="utf-8")):
        if directive == "automodule":
            continue
        module, _, name = dotted.rpartition(".")
        out.append((directive, getattr(importlib.import_module(module), name)))
    return out


def test_each_documented_class_has_an_example():
    classes = [obj for directive, obj in documented() if directive in ("autoclass", "autoexception")]
    assert ps.PipelineConfig in classes and ps.Context in classes
    missing = [c.__qualname__ for c in classes if not re.search(r"^\s*Examples?:", c.__doc__ or "", re.M)]
    assert not missing, f"classes of docs/reference/python.md without an Example section: {missing}"


DOCTESTS = """
import doctest, sys
import pyterrier_sci as ps
failed = 0
for dotted in sys.argv[1:]:
    module, _, name = dotted.rpartition(".")
    obj = getattr(__import__(module, fromlist=[name]), name)
    attempted = 0
    for test in doctest.DocTestFinder(recurse=False).find(obj, dotted, globs={}):
        result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
        failed, attempted = failed + result.failed, attempted + result.attempted
    if not attempted:
        print(f"{dotted}: no example ran")
        failed += 1
sys.exit(1 if failed else 0)
"""


def test_the_docstring_examples_run(tmp_path):
    """The ``>>>`` examples of the objects on the Python API page, in a fresh process (they define measures and
    configs of their own)."""
    names = [dotted for directive, dotted in DIRECTIVE.findall(PYTHON_PAGE.read_text(encoding="utf-8"))
             if directive != "automodule"]
    with_examples = [n for n, (_, obj) in zip(names, documented()) if ">>>" in (obj.__doc__ or "")]
    assert len(with_examples) >= 8, with_examples
    done = subprocess.run([sys.executable, "-c", DOCTESTS, *with_examples], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTERRIER_SCI_HOME": str(tmp_path / "work")}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_make_docs_and_ci_build_the_site():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    rule = re.search(r"^docs:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert rule and "sphinx-build -W --keep-going -b html docs docs/_build/html" in rule.group(1)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").split("\n")
    assert ci.index("make lint") < ci.index("make docs") < ci.index("make test")
    conf = ast.parse((DOCS / "conf.py").read_text(encoding="utf-8"))
    names = {t.id for node in ast.walk(conf) if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name)}
    assert "suppress_warnings" not in names, "fix the warnings instead of suppressing them"
