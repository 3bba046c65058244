"""The layering of docs/architecture.md, enforced by parsing every import with ``ast``:

* the core (``pyterrier_sci/``) imports no plugin and no dataset module (plugins reach it through
  entry-point groups);
* a technique plugin (``bm25``, ``dense``, ``colbert``, ``fusion``, ``llm``) imports only the core;
* a paper plugin (``mir``, ``doris_mae``, ``sciface``, ``prism``, ``hlm_cite``) imports the core,
  technique plugins and its own dataset modules, never another paper's plugin;
* a dataset module imports only the core;
* ``__init__.py`` files of plugins hold no implementation.
"""
import ast
import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TECHNIQUE = {"bm25", "dense", "colbert", "fusion", "llm"}
#: each paper plugin and the dataset modules it may read
PAPERS = {"mir": {"mir_multicite"}, "doris_mae": {"doris_mae"}, "sciface": {"csfcube"},
          "prism": {"acl_fulltext", "scifullbench"}, "hlm_cite": {"core_citations"}}


def _module_name(path: Path) -> str:
    """The installed name of a source file (setup.cfg maps plugins/ and datasets/ into the package)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("plugins", "datasets"):
        parts = ["pyterrier_sci"] + parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path):
    """Every module ``path`` imports (absolute names; relative imports resolved), with line numbers."""
    tree = ast.parse(path.read_text(encoding="utf8"), filename=str(path))
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod, node.lineno
            for alias in node.names:  # "from pyterrier_sci.plugins import mir" imports the plugin mir
                yield f"{mod}.{alias.name}", node.lineno


def _layer(module: str):
    """("core",), ("technique", name), ("paper", name), ("dataset", name) or None (third party)."""
    parts = module.split(".")
    if parts[0] != "pyterrier_sci":
        return None
    if len(parts) >= 3 and parts[1] == "plugins":
        return ("technique" if parts[2] in TECHNIQUE else "paper", parts[2])
    if len(parts) >= 3 and parts[1] == "datasets":
        return ("dataset", parts[2])
    if len(parts) == 2 and parts[1] in ("plugins", "datasets"):
        return ("package", parts[1])
    return ("core",)


def _sources(folder: str):
    return sorted((ROOT / folder).rglob("*.py"))


def _violations(path: Path):
    own = _layer(_module_name(path))
    out = []
    for mod, line in _imports(path):
        target = _layer(mod)
        if target is None or target == ("core",) or target[0] == "package":
            continue  # third party, the core, or the (empty) pyterrier_sci.plugins / .datasets packages
        where = f"{path.relative_to(ROOT)}:{line} imports {mod}"
        if own == ("core",) or own[0] in ("package", "dataset"):
            if own[0] == "dataset" and target[0] == "dataset":
                continue  # benchmark modules may share (none do today)
            out.append(where)
        elif own[0] == "technique":
            if target != own:
                out.append(where)
        elif own[0] == "paper":
            if target[0] == "paper" and target != own:
                out.append(where)
            elif target[0] == "dataset" and target[1] not in PAPERS[own[1]]:
                out.append(where)
    return out


def test_every_plugin_is_known():
    names = {p.name for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").exists()}
    assert names == TECHNIQUE | set(PAPERS)


@pytest.mark.parametrize("folder", ["pyterrier_sci", "plugins", "datasets"])
def test_imports_follow_the_layers(folder):
    bad = [v for path in _sources(folder) for v in _violations(path)]
    assert not bad, "imports across the layers of docs/architecture.md:\n" + "\n".join(bad)


def test_the_checker_sees_violations(tmp_path, monkeypatch):
    """The rules catch what they must: a core module importing a plugin, a paper importing another
    paper, a technique plugin importing a paper, a paper reading another paper's dataset."""
    cases = {
        "pyterrier_sci/bad.py": "from pyterrier_sci.plugins.mir import training\n",
        "plugins/mir/bad.py": "from pyterrier_sci.plugins.doris_mae import maxsim\n",
        "plugins/dense/bad.py": "from ...plugins.sciface import rerank\n",
        "plugins/prism/bad.py": "import pyterrier_sci.datasets.csfcube\n",
        "datasets/bad.py": "from pyterrier_sci.plugins import bm25\n",
    }
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    for rel, text in cases.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        assert _violations(p), rel
    ok = tmp_path / "plugins/mir/good.py"
    ok.write_text("from pyterrier_sci.plugins.dense import models\nfrom pyterrier_sci.datasets import mir_multicite\n"
                  "from . import mag\nfrom pyterrier_sci import corpus\n")
    assert _violations(ok) == []


def test_plugin_init_files_only_re_export():
    """``__init__.py`` of a plugin defines no function or class of its own except the lazy
    re-export hooks (PEP 562 ``__getattr__`` / ``__dir__``)."""
    for init in sorted((ROOT / "plugins").glob("*/__init__.py")):
        tree = ast.parse(init.read_text())
        defs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert set(defs) <= {"__getattr__", "__dir__"}, f"{init.relative_to(ROOT)} implements {defs}"


def test_entry_points_name_existing_objects():
    """Every entry point of setup.cfg names a module (and object) that exists, so the core finds
    every plugin's components, measures, datasets and CLI commands."""
    import importlib
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    groups = cfg["options.entry_points"]
    for group in ("pyterrier_sci.components", "pyterrier_sci.datasets", "pyterrier_sci.measures", "pyterrier_sci.cli",
                  "pyterrier.artifact"):
        lines = [x.strip() for x in groups[group].splitlines() if x.strip() and not x.strip().startswith("#")]
        assert lines, group
        for line in lines:
            name, _, target = (s.strip() for s in line.partition("="))
            module, _, attr = target.partition(":")
            obj = importlib.import_module(module)
            if attr:
                assert hasattr(obj, attr), f"{group} {name}: {target}"
