"""The architecture of docs/architecture.md, enforced by parsing every import with ``ast``.

Layers (``test_imports_follow_the_layers``):

* the core (``pyterrier_sci/``) imports no plugin and no dataset module (plugins reach it through
  entry-point groups);
* a technique plugin imports only the core;
* a paper plugin imports the core, technique plugins and its own dataset modules, never another
  paper's plugin; a benchmark (dataset module) is read by one paper plugin only;
* a dataset module imports only the core;
* ``__init__.py`` files of plugins hold no implementation.

Which plugins are papers is derived, never listed here: a paper plugin is one that registers its
measures in setup.cfg's ``pyterrier_sci.measures`` entry-point group; every other folder of
``plugins/`` is a technique plugin.  A paper's benchmarks are the dataset modules it imports.  So a
sixth paper is its folder plus its entry points (docs/architecture.md, "Adding a paper").

Import structure (``test_import_structure``, for the core, each plugin and the datasets separately):
no import cycle, no import of a project module inside a function (heavy optional third-party
libraries may load lazily), no private name (one leading underscore) imported from another module.
``IMPORT_ALLOWLIST`` is empty since issue 32 removed the last violation: keep it so.

Packaging (``test_package_data_declares_every_data_file``): setup.cfg ships every package folder and
every data file in them (plugin templates, pipeline YAML files) in the wheel, and setuptools has
nothing to warn about while computing it.
"""
import ast
import collections
import configparser
import os
import re
import warnings
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the folders holding the package's modules (setup.cfg maps plugins/ and datasets/ into pyterrier_sci)
SOURCE_FOLDERS = ("pyterrier_sci", "plugins", "datasets")
MEASURES_GROUP = "pyterrier_sci.measures"
DATASETS_GROUP = "pyterrier_sci.datasets"

#: Violations of the import rules that remain in the code, generated from it (the failure message of
#: test_import_structure prints this literal for the current code; paste it over this one).  Entries
#: read "importer -> imported", module names without the leading "pyterrier_sci.":
#: "cycle": an import edge between two modules of one import cycle (each edge once);
#: "function-level": an import of a project module inside a function (one entry per import statement
#: and module, so an entry may repeat);
#: "private": a name with one leading underscore imported from another module (one per import).
#: THIS LIST MAY ONLY SHRINK: never add an entry, remove the violation instead.  The test fails on a
#: violation that is not listed and on a listed one that is gone, so the list follows the code down.
IMPORT_ALLOWLIST = {
    "cycle": [],
    "function-level": [],
    "private": [],
}


# ---------------------------------------------------------------------------------------------------
# the checkout: modules, imports, plugins, papers


def _module_name(path: Path, root: Path = None) -> str:
    """The installed name of a source file (setup.cfg maps plugins/ and datasets/ into the package)."""
    rel = path.relative_to(root or ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("plugins", "datasets", "pipelines"):
        parts = ["pyterrier_sci"] + parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _short(module: str) -> str:
    """``pyterrier_sci.plugins.dense.retriever`` -> ``plugins.dense.retriever`` (the package keeps its name)."""
    return module[len("pyterrier_sci."):] if module.startswith("pyterrier_sci.") else module


def _is_project(module: str) -> bool:
    return module == "pyterrier_sci" or module.startswith("pyterrier_sci.")


Import = collections.namedtuple("Import", "path line targets names in_function")
Import.__doc__ = """One import statement: ``targets`` the dotted names it imports (``from a import b``
imports ``a.b``), ``names`` (base module, imported name) of a ``from`` import, ``in_function``
whether it sits inside a function or method."""


def _statements(path: Path, root: Path):
    """Every import statement of a source file, relative imports resolved to absolute names."""
    tree = ast.parse(path.read_text(encoding="utf8"), filename=str(path))
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(child) for child in ast.walk(node) if child is not node)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield Import(path, node.lineno, [a.name for a in node.names], [], id(node) in in_function)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield Import(path, node.lineno, [f"{base}.{a.name}" for a in node.names],
                         [(base, a.name) for a in node.names], id(node) in in_function)


class Project:
    """The modules of a checkout and their import statements, parsed once."""

    def __init__(self, root: Path):
        self.root = root
        self.files = {}
        for folder in SOURCE_FOLDERS:
            for path in sorted((root / folder).rglob("*.py")):
                self.files[_module_name(path, root)] = path
        self.imports = {module: list(_statements(path, root)) for module, path in self.files.items()}

    def module_of(self, dotted: str):
        """The project module a dotted name lives in (its longest prefix that is a module), or None."""
        while dotted and dotted not in self.files:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def unit(self, module: str) -> str:
        """What the import rules are checked for separately: the core, each plugin, the datasets."""
        rel = self.files[module].relative_to(self.root).parts
        return "/".join(rel[:2]) if rel[0] == "plugins" and len(rel) > 2 else rel[0]

    def units(self):
        return sorted({self.unit(m) for m in self.files})

    def entry_points(self, group: str):
        """``name -> target`` of one entry-point group of setup.cfg."""
        cfg = configparser.ConfigParser()
        cfg.read(self.root / "setup.cfg")
        lines = cfg["options.entry_points"].get(group, "") if cfg.has_section("options.entry_points") else ""
        pairs = (line.split("#")[0].partition("=") for line in lines.splitlines())
        return {name.strip(): target.strip() for name, _, target in pairs if target.strip()}

    def plugins(self):
        return sorted(p.name for p in (self.root / "plugins").iterdir() if (p / "__init__.py").exists())

    def papers(self):
        """The paper plugins: those registering measures (``pyterrier_sci.measures`` entry points)."""
        out = set()
        for target in self.entry_points(MEASURES_GROUP).values():
            parts = target.partition(":")[0].split(".")
            if parts[:2] == ["pyterrier_sci", "plugins"] and len(parts) > 2:
                out.add(parts[2])
        return sorted(out)

    def techniques(self):
        return sorted(set(self.plugins()) - set(self.papers()))

    def benchmarks(self):
        """``paper -> {dataset module}``: the benchmarks each paper plugin reads (imports)."""
        papers = self.papers()
        out = {paper: set() for paper in papers}
        for module, statements in self.imports.items():
            own = _layer(module, papers)
            if own and own[0] == "paper":
                layers = (_layer(target, papers) for st in statements for target in st.targets)
                out[own[1]].update(layer[1] for layer in layers if layer and layer[0] == "dataset")
        return out


@lru_cache(maxsize=None)
def _project(root: Path = ROOT) -> Project:
    return Project(root)


# ---------------------------------------------------------------------------------------------------
# layers


def _layer(module: str, papers):
    """("core",), ("technique", name), ("paper", name), ("dataset", name), ("package", ...) or None (third party)."""
    parts = module.split(".")
    if parts[0] != "pyterrier_sci":
        return None
    if len(parts) >= 3 and parts[1] == "plugins":
        return ("paper" if parts[2] in papers else "technique", parts[2])
    if len(parts) >= 3 and parts[1] == "datasets":
        return ("dataset", parts[2])
    if len(parts) == 2 and parts[1] in ("plugins", "datasets", "pipelines"):
        return ("package", parts[1])
    return ("core",)


def _layer_violations(project: Project):
    """Every import across the layers, as "file:line imports module (why)"."""
    papers = set(project.papers())
    readers = collections.defaultdict(set)  # benchmark -> the paper plugins importing it
    for paper, benchmarks in project.benchmarks().items():
        for benchmark in benchmarks:
            readers[benchmark].add(paper)
    found = []
    for module, statements in project.imports.items():
        own = _layer(module, papers)
        for st in statements:
            for target in st.targets:
                layer = _layer(target, papers)
                if layer is None or layer == ("core",) or layer[0] == "package":
                    continue  # third party, the core, or the (empty) pyterrier_sci.plugins / .datasets packages
                found.append((own, layer, st, target))
    out = []
    for own, layer, st, target in found:
        where = f"{st.path.relative_to(project.root)}:{st.line} imports {target}"
        if own == ("core",) or own[0] in ("package", "dataset"):
            if own[0] == "dataset" and layer[0] == "dataset":
                continue  # benchmark modules may share (none do today)
            out.append(where)
        elif own[0] == "technique":
            if layer != own:
                why = (" (a plugin reading a benchmark is a paper plugin: register its measures in "
                       f"{MEASURES_GROUP})") if layer[0] == "dataset" else ""
                out.append(where + why)
        elif own[0] == "paper":
            if layer[0] == "paper" and layer != own:
                out.append(where)
            elif layer[0] == "dataset" and readers[layer[1]] - {own[1]}:
                others = ", ".join(sorted(readers[layer[1]] - {own[1]}))
                out.append(f"{where} (the benchmark of another paper: also read by {others})")
    return out


@pytest.mark.parametrize("folder", SOURCE_FOLDERS)
def test_imports_follow_the_layers(folder):
    project = _project()
    bad = [v for v in _layer_violations(project) if v.startswith(folder + "/")]
    assert not bad, "imports across the layers of docs/architecture.md:\n" + "\n".join(bad)


def _write(root: Path, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


#: a setup.cfg naming the paper plugins of the checker tests through their measures entry points
_TEST_SETUP_CFG = """[options.entry_points]
pyterrier_sci.measures =
    mir = pyterrier_sci.plugins.mir.measures:register_measures
    doris_mae = pyterrier_sci.plugins.doris_mae.measures:register_measures
    sciface = pyterrier_sci.plugins.sciface.measures:register_measures
    prism = pyterrier_sci.plugins.prism.measures:register_measures
"""


def test_the_checker_sees_violations(tmp_path):
    """The rules catch what they must: a core module importing a plugin, a paper importing another
    paper, a technique plugin importing a paper, a paper reading another paper's dataset, a technique
    plugin reading a dataset; and the papers are those that register measures."""
    plugins = {f"plugins/{p}/__init__.py": "" for p in ("mir", "doris_mae", "sciface", "prism", "dense", "bm25")}
    _write(tmp_path, {"setup.cfg": _TEST_SETUP_CFG, **plugins,
                      "plugins/sciface/measures.py": "from pyterrier_sci.datasets import csfcube\n"})
    cases = {
        "pyterrier_sci/bad.py": "from pyterrier_sci.plugins.mir import training\n",
        "plugins/mir/bad.py": "from pyterrier_sci.plugins.doris_mae import maxsim\n",
        "plugins/dense/bad.py": "from ...plugins.sciface import rerank\n",
        "plugins/prism/bad.py": "import pyterrier_sci.datasets.csfcube\n",
        "plugins/bm25/bad.py": "from pyterrier_sci.datasets import csfcube\n",
        "datasets/bad.py": "from pyterrier_sci.plugins import bm25\n",
    }
    for rel, text in cases.items():
        _write(tmp_path, {rel: text})
        project = Project(tmp_path)
        assert project.papers() == ["doris_mae", "mir", "prism", "sciface"]
        assert project.techniques() == ["bm25", "dense"]
        assert [v for v in _layer_violations(project) if v.startswith(rel)], rel
        (tmp_path / rel).unlink()
    _write(tmp_path, {"plugins/mir/good.py": "from pyterrier_sci.plugins.dense import models\n"
                      "from pyterrier_sci.datasets import mir_multicite\nfrom . import mag\n"
                      "from pyterrier_sci import corpus\n"})
    assert _layer_violations(Project(tmp_path)) == []


def test_papers_and_benchmarks_are_derived_from_the_plugins():
    """The paper plugins are those registering measures, each reads at least one benchmark, and
    every benchmark module is registered in the ``pyterrier_sci.datasets`` group (a new paper's
    benchmark is found by ``import pyterrier_sci``)."""
    project = _project()
    papers, plugins = project.papers(), project.plugins()
    assert papers and set(papers) <= set(plugins), f"{MEASURES_GROUP} names plugins {papers}, there are {plugins}"
    for paper, benchmarks in project.benchmarks().items():
        assert benchmarks, f"paper plugin {paper} imports no dataset module: where is its benchmark?"
    modules = {p.stem for p in (project.root / "datasets").glob("*.py") if p.stem != "__init__"}
    registered = {t.partition(":")[0].rpartition(".")[2] for t in project.entry_points(DATASETS_GROUP).values()}
    assert modules == registered, f"datasets/ has {sorted(modules)}, {DATASETS_GROUP} registers {sorted(registered)}"


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
    project = _project()
    for group in ("pyterrier_sci.components", DATASETS_GROUP, MEASURES_GROUP, "pyterrier_sci.cli",
                  "pyterrier.artifact"):
        points = project.entry_points(group)
        assert points, group
        for name, target in points.items():
            module, _, attr = target.partition(":")
            obj = importlib.import_module(module)
            if attr:
                assert hasattr(obj, attr), f"{group} {name}: {target}"


# ---------------------------------------------------------------------------------------------------
# import structure: cycles, function-level imports, private names


def _cycles(edges):
    """The strongly connected components (Tarjan) of more than one module."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _import_structure(project: Project):
    """``{kind: Counter("importer -> imported")}`` for the kinds of IMPORT_ALLOWLIST, the whole checkout."""
    edges = collections.defaultdict(set)
    found = {"cycle": collections.Counter(), "function-level": collections.Counter(), "private": collections.Counter()}
    for module, statements in project.imports.items():
        for st in statements:
            targets = {project.module_of(t) for t in st.targets if _is_project(t)} - {None, module}
            edges[module].update(targets)
            if st.in_function:
                found["function-level"].update(f"{_short(module)} -> {_short(t)}" for t in targets)
            for base, name in st.names:
                defined_in = project.module_of(base)
                if (name.startswith("_") and not name.startswith("__") and _is_project(base)
                        and defined_in and defined_in != module):
                    found["private"][f"{_short(module)} -> {_short(base)}.{name}"] += 1
    for component in _cycles(edges):
        found["cycle"].update(f"{_short(a)} -> {_short(b)}" for a in component for b in edges[a] if b in component)
    return found


def _render_allowlist(found) -> str:
    """The IMPORT_ALLOWLIST literal of ``found``, as this file writes it."""
    lines = ["IMPORT_ALLOWLIST = {"]
    for kind in ("cycle", "function-level", "private"):
        entries = sorted(found.get(kind, collections.Counter()).elements())
        if entries:
            lines.append(f'    "{kind}": [')
            lines.extend(f'        "{entry}",' for entry in entries)
            lines.append("    ],")
    lines.append("}")
    return "\n".join(lines)


def _unit_of_entry(project: Project, entry: str):
    importer = entry.partition(" -> ")[0]
    module = importer if importer == "pyterrier_sci" else "pyterrier_sci." + importer
    return project.unit(module) if module in project.files else None


def _compare(project: Project, found, allowed, unit=None):
    """(new violations, listed ones that are gone), for one unit or all."""
    new, gone = [], []
    for kind in ("cycle", "function-level", "private"):
        have = collections.Counter(e for e in found.get(kind, ()).elements()
                                   if unit is None or _unit_of_entry(project, e) == unit)
        listed = collections.Counter(e for e in allowed.get(kind, ())
                                     if unit is None or _unit_of_entry(project, e) == unit)
        new.extend(f"{kind}: {e}" for e in sorted((have - listed).elements()))
        gone.extend(f"{kind}: {e}" for e in sorted((listed - have).elements()))
    return new, gone


@pytest.mark.parametrize("unit", _project().units())
def test_import_structure(unit):
    """No import cycle, no function-level import of a project module, no private name imported
    across modules, in the core, each plugin and the datasets, beyond IMPORT_ALLOWLIST; and nothing
    listed there that the code no longer does."""
    project = _project()
    found = _import_structure(project)
    new, gone = _compare(project, found, IMPORT_ALLOWLIST, unit)
    message = []
    if new:
        message += [f"import rules broken in {unit} (cycle, function-level import of a project module, or "
                    "private name from another module):", *new]
    if gone:
        message += [f"IMPORT_ALLOWLIST lists violations of {unit} that are gone (remove them):", *gone]
    assert not message, "\n".join(message + ["", "the current violations, to paste over IMPORT_ALLOWLIST "
                                                 "(tests/test_architecture.py) once none is new:",
                                             _render_allowlist(found)])


def test_import_allowlist_names_existing_modules():
    """An entry of IMPORT_ALLOWLIST whose importer no longer exists is gone too."""
    project = _project()
    stale = [e for kind in IMPORT_ALLOWLIST for e in IMPORT_ALLOWLIST[kind] if _unit_of_entry(project, e) is None]
    assert not stale, "IMPORT_ALLOWLIST names modules that do not exist:\n" + "\n".join(stale)


def test_the_import_checker_sees_violations(tmp_path):
    """Cycles (in the core and in a plugin), function-level imports of project modules (in a function,
    a method, a nested function) and private names imported across modules are each seen; lazy
    third-party imports, dunder names and imports within one module are not; the allow-list's
    comparison and rendering round-trip."""
    _write(tmp_path, {
        "pyterrier_sci/__init__.py": "",
        "pyterrier_sci/a.py": "from pyterrier_sci import b\n",
        "pyterrier_sci/b.py": "from . import c\n",
        "pyterrier_sci/c.py": "import pyterrier_sci.a\n",                         # a -> b -> c -> a
        "pyterrier_sci/d.py": "from pyterrier_sci import a\n"                    # in no cycle
                              "def f():\n    import numpy\n    from .e import g\n"
                              "class K:\n    def m(self):\n        from pyterrier_sci import b\n"
                              "async def h():\n    def inner():\n        from . import c\n",
        "pyterrier_sci/e.py": "from pyterrier_sci.a import _hidden, __version__, public\n",
        "plugins/__init__.py": "",
        "plugins/dense/__init__.py": "",
        "plugins/dense/x.py": "from .y import f\nfrom . import _private_module\n",
        "plugins/dense/y.py": "from pyterrier_sci.plugins.dense.x import _merge\n",
        "plugins/dense/_private_module.py": "def _self(): pass\nx = _self\n",
        "datasets/__init__.py": "",
        "datasets/z.py": "def load():\n    import pyterrier_sci.a\n    import ir_datasets\n",
    })
    project = Project(tmp_path)
    found = _import_structure(project)
    assert sorted(found["cycle"]) == ["a -> b", "b -> c", "c -> a", "plugins.dense.x -> plugins.dense.y",
                                      "plugins.dense.y -> plugins.dense.x"]
    assert sorted(found["function-level"].elements()) == ["d -> b", "d -> c", "d -> e", "datasets.z -> a"]
    assert sorted(found["private"].elements()) == ["e -> a._hidden", "plugins.dense.x -> plugins.dense._private_module",
                                                   "plugins.dense.y -> plugins.dense.x._merge"]
    assert project.units() == ["datasets", "plugins", "plugins/dense", "pyterrier_sci"]
    assert ast.literal_eval(_render_allowlist(found).partition(" = ")[2]) == {
        kind: sorted(counter.elements()) for kind, counter in found.items() if counter}
    allowed = {"cycle": ["a -> b", "b -> c", "c -> a", "plugins.dense.x -> plugins.dense.y",
                         "plugins.dense.y -> plugins.dense.x"],
               "function-level": ["d -> b", "d -> c"], "private": ["e -> a._hidden", "e -> a._gone"]}
    assert _compare(project, found, allowed, "pyterrier_sci") == (["function-level: d -> e"], ["private: e -> a._gone"])
    assert _compare(project, found, allowed, "plugins/dense") == (
        ["private: plugins.dense.x -> plugins.dense._private_module",
         "private: plugins.dense.y -> plugins.dense.x._merge"], [])
    assert _compare(project, found, allowed, "datasets") == (["function-level: datasets.z -> a"], [])
    assert _compare(project, found, found) == ([], [])



def _function_level_third_party_imports(root: Path):
    """``(file, line, top-level module)`` of each import of a third-party module inside a function."""
    found = []
    for folder in SOURCE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        names = [node.module or ""]
                    else:
                        continue
                    for name in names:
                        top = name.split(".")[0]
                        if top != "pyterrier_sci":
                            found.append((str(path.relative_to(root)), node.lineno, top))
    return sorted(set(found))


def test_only_heavy_optional_libraries_load_inside_functions():
    """An import inside a function is of a library in ``pyterrier_sci.lazy.LAZY_LIBRARIES`` (heavy or
    optional); the standard library, numpy, pandas, yaml and the rest are imported at the top."""
    from pyterrier_sci.lazy import LAZY_LIBRARIES
    bad = [f"{f}:{line}: import of {top} inside a function: move it to the top of the module"
           for f, line, top in _function_level_third_party_imports(ROOT) if top not in LAZY_LIBRARIES]
    assert not bad, "\n".join(bad)


def test_the_lazy_import_checker_sees_function_level_imports(tmp_path):
    _write(tmp_path, {
        "pyterrier_sci/__init__.py": "import json\n",
        "pyterrier_sci/a.py": "def f():\n    import torch\n    from os import path\n"
                              "class K:\n    def m(self):\n        import numpy.linalg\n"
                              "        from pyterrier_sci import b\n",
        "plugins/__init__.py": "", "datasets/__init__.py": "",
    })
    assert _function_level_third_party_imports(tmp_path) == [
        ("pyterrier_sci/a.py", 2, "torch"), ("pyterrier_sci/a.py", 3, "os"), ("pyterrier_sci/a.py", 6, "numpy")]

# ---------------------------------------------------------------------------------------------------
# packaging


def _package_data_report(root: Path):
    """(package folders missing from setup.cfg's ``packages``, data files the wheel would not ship,
    setuptools' warnings), computed by setuptools' own ``build_py`` from setup.cfg and pyproject.toml
    without building anything."""
    from setuptools.dist import Distribution  # the test extra installs it
    here = os.getcwd()
    os.chdir(root)  # setuptools reads setup.cfg and resolves package_dir from the working directory
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dist = Distribution({"script_name": "setup.py"})
            dist.parse_config_files()
            build_py = dist.get_command_obj("build_py")
            build_py.ensure_finalized()
            shipped = {(root / src / name).resolve() for _, src, _, names in build_py.data_files for name in names}
            folders = {Path(build_py.get_package_dir(p)).resolve() for p in dist.packages or ()}
    finally:
        os.chdir(here)
    folders_here, data = set(), set()
    for top in (*SOURCE_FOLDERS, "pipelines"):
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root).parts
            if any(part.startswith(".") or part == "__pycache__" for part in rel):
                continue
            if path.name == "__init__.py":
                folders_here.add(path.parent.resolve())
            elif path.is_file() and path.suffix not in (".py", ".pyc", ".pyo"):
                data.add(path.resolve())
    missing_packages = sorted(str(p.relative_to(root.resolve())) for p in folders_here - folders)
    missing_data = sorted(str(p.relative_to(root.resolve())) for p in data - shipped)
    noise = [f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught
             if w.category.__module__.startswith(("setuptools", "distutils", "_distutils"))]
    return missing_packages, missing_data, noise


def test_package_data_declares_every_data_file():
    """Every package folder is in setup.cfg's ``packages`` and every data file in them (each plugin's
    ``templates/``, ``pipelines/*.yaml``) is package data, so the wheel and the editable install
    ship it; and setuptools warns of nothing (``make install`` runs pip with -qq, trusting this)."""
    missing_packages, missing_data, noise = _package_data_report(ROOT)
    assert not missing_packages, f"folders missing from setup.cfg [options] packages: {missing_packages}"
    assert not missing_data, f"files no package_data pattern of setup.cfg ships: {missing_data}"
    assert not noise, "setuptools warns about the project's configuration:\n" + "\n".join(noise)


def test_the_package_data_check_sees_omissions(tmp_path):
    """A plugin missing from ``packages``, a template folder no pattern covers, and setuptools'
    "Package would be ignored" warning (include_package_data with templates/ folders) are each seen."""
    cfg = """[metadata]
name = demo
version = 0
[options]
package_dir =
    pyterrier_sci = pyterrier_sci
    pyterrier_sci.plugins = plugins
packages =
    pyterrier_sci
    pyterrier_sci.plugins
    pyterrier_sci.plugins.a
include_package_data = {include}
[options.package_data]
pyterrier_sci.plugins.a = templates/*
"""
    _write(tmp_path, {"setup.cfg": cfg.format(include=False), "pyterrier_sci/__init__.py": "",
                      "plugins/__init__.py": "", "plugins/a/__init__.py": "", "plugins/a/templates/t.txt": "x",
                      "plugins/b/__init__.py": "", "plugins/b/templates/u.txt": "y",
                      "plugins/a/templates/deeper/v.txt": "z", "pipelines/p.yaml": "{}"})
    missing_packages, missing_data, noise = _package_data_report(tmp_path)
    assert missing_packages == ["plugins/b"]
    assert missing_data == ["pipelines/p.yaml", "plugins/a/templates/deeper/v.txt", "plugins/b/templates/u.txt"]
    assert noise == []
    _write(tmp_path, {"setup.cfg": cfg.format(include=True), "MANIFEST.in": "graft plugins\n"})
    assert any("absent from the `packages`" in n for n in _package_data_report(tmp_path)[2])


def test_make_install_is_quiet():
    """``make install`` / ``install-locked`` echo no command and run pip with -qq: only real errors print."""
    installs = [line for line in (ROOT / "Makefile").read_text().splitlines()
                if line.startswith("\t") and re.search(r"\bpip\b|\$\(PIP\)", line) and " install " in line]
    assert installs
    for line in installs:
        assert line.startswith("\t@") and " -qq " in line, f"make install prints more than errors: {line.strip()}"
