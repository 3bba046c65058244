"""Sphinx configuration of the documentation site: ``make docs`` builds it into docs/_build/html, offline, with
every warning an error (``sphinx-build -W --keep-going``); ``.ci/run`` builds it, tests/test_docs_site.py too.

The pages are the Markdown files of docs/ (MyST), readable on GitHub as they are.  docs/reference/ is generated
from the code (``pyterrier-sci reference --write docs/reference``), except python.md, whose autodoc directives
read the docstrings when the site is built."""
import importlib.metadata
import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

project = "pyterrier-sci"
author = "the pyterrier-sci authors"
copyright = "the pyterrier-sci authors, Apache License 2.0"
try:
    release = importlib.metadata.version("pyterrier-sci")
except importlib.metadata.PackageNotFoundError:   # a checkout that is not installed
    release = "(not installed)"
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",   # the docstrings' "Args:" / "Returns:" / "Example:" sections (Google style)
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# every page of docs/ is in a toctree of index.md; only the build's own output is left out
exclude_patterns = ["_build"]

# MyST: "#some-heading" links between pages, as GitHub writes the anchors of headings; no syntax extensions (the
# pages are written for GitHub's Markdown, and read the same on the site)
myst_heading_anchors = 4

# autodoc: the members in the order of the source, type hints in the signature only
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
python_use_unqualified_type_names = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Furo (the docs extra) ships its CSS and JavaScript in the wheel and uses the system's fonts: the built pages load
# nothing from the internet (tests/test_docs_site.py checks)
html_theme = "furo"
html_title = f"pyterrier-sci {release}"
html_static_path = []
html_show_sourcelink = False


def _plain_typing_names(app, what, name, obj, options, signature, return_annotation):
    """Sphinx 9 writes the nested types of a dataclass's generated ``__init__`` as ``~typing.Dict`` (the "short
    name" marker left in the text: ``Dict[str, ~typing.Any]``); the signatures show them as the others do."""
    def clean(text):
        return text.replace("~typing.", "") if text else text
    return clean(signature), clean(return_annotation)


def setup(app):
    app.connect("autodoc-process-signature", _plain_typing_names)
