"""The identity of the code a pipeline runs: what keys its saved runs besides its expression and settings, so that
a change to a component's code is run again rather than read back from a run the old code saved.

:func:`code_identity` takes the objects a pipeline is made from (the factories of the components its expression
names, as :func:`pyterrier_sci.experiment.pipeline_key` gives them, or built transformers), the module of each
(of every class of an instance, its bases included), and then every module those import, transitively, within
the same top-level package (imports inside functions too: the lazily imported parts of a component count).  This
toolkit's modules, and any module no installed distribution owns (a user's own component, a test's), count by the
SHA-256 of their source, since an editable install or a checkout changes without a new version; a module of an
installed distribution (PyTerrier, pyterrier-pisa, sentence-transformers, ...) that one of those imports, or that an
object comes from, counts by the distribution's name and version.  The identity is a short hash of all of it with
this toolkit's version: one changed line in a module the pipeline reaches changes it; a module it does not reach
does not.  Nothing is built to compute it, so a dry run finds the saved runs a run would read.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.metadata
import os
import sys
from functools import lru_cache
from typing import Any, Dict, FrozenSet, Iterable, Mapping, Optional, Set, Tuple

__all__ = ["code_identity", "modules_of", "OWN_PACKAGE"]

#: the top-level package whose modules always count by their source
OWN_PACKAGE = "pyterrier_sci"
_SKIP = frozenset({"builtins", "abc", "typing", "collections", "enum", "functools", "dataclasses"})


@lru_cache(maxsize=1)
def _distributions() -> Mapping[str, Tuple[str, ...]]:
    """``{top-level module: distributions providing it}`` of the environment."""
    return {k: tuple(v) for k, v in importlib.metadata.packages_distributions().items()}


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _file_of(module: str) -> Optional[str]:
    """The source file of a module, found as the import system would find it but without importing it (so the
    identity does not depend on what a run has imported so far); None when it is not a Python source file."""
    parts = module.split(".")
    if module in sys.modules:
        path = getattr(sys.modules[module], "__file__", None)
    else:
        parent = sys.modules.get(".".join(parts[:-1])) if len(parts) > 1 else None
        search = getattr(parent, "__path__", None)
        if search is None and len(parts) > 1:
            prefix = _file_of(".".join(parts[:-1]))
            search = [os.path.dirname(prefix)] if prefix and prefix.endswith("__init__.py") else None
        if search is None:
            return None
        try:
            spec = importlib.machinery.PathFinder.find_spec(parts[-1], list(search))
        except (ImportError, ValueError):
            spec = None
        path = spec.origin if spec is not None else None
    return path if isinstance(path, str) and path.endswith(".py") and os.path.isfile(path) else None


@lru_cache(maxsize=4096)
def _parsed(digest: str, data: bytes) -> Tuple[FrozenSet[Tuple[int, str, Tuple[str, ...]]], Mapping[str, str]]:
    """The imports ``(level, module, names)`` of a source and, for a package that re-exports lazily
    (:func:`pyterrier_sci.lazy.lazy_exports`), which of its modules defines each name (cached by the source's
    SHA-256: a file is read each time, parsed once per content)."""
    imports: Set[Tuple[int, str, Tuple[str, ...]]] = set()
    lazy: Dict[str, str] = {}
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Import):
            imports.update((0, a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imports.add((node.level, node.module or "", tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and \
                any(isinstance(t, ast.Name) and t.id == "_MODULES" for t in node.targets):
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(value, (ast.Tuple, ast.List)):
                    lazy.update({e.value: str(key.value) for e in value.elts if isinstance(e, ast.Constant)})
    return frozenset(imports), lazy


def _read(module: str) -> Optional[Tuple[str, FrozenSet[Tuple[int, str, Tuple[str, ...]]], Mapping[str, str]]]:
    """A module's source SHA-256, its imports and its lazy re-exports; None without a source file."""
    path = _file_of(module)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    digest = hashlib.sha256(data).hexdigest()
    return (digest, *_parsed(digest, data))


def _imported(module: str, imports: Iterable[Tuple[int, str, Tuple[str, ...]]]) -> Set[str]:
    """The modules an import list names (relative imports resolved against ``module``): a module of the same
    top-level package when it has a source file, else the top-level name (what counts by its distribution)."""
    is_package = (_file_of(module) or "").endswith("__init__.py")
    top = module.split(".")[0]
    out: Set[str] = set()
    for level, name, names in imports:
        if level:
            parts = module.split(".")
            base = parts[:len(parts) - level + (1 if is_package else 0)]
            name = ".".join(base + ([name] if name else []))
        if not name:
            continue
        if name.split(".")[0] != top:
            out.add(name.split(".")[0])
            continue
        lazy = (_read(name) or ("", (), {}))[2] if names else {}
        for candidate in ([name] if name != top else []) + [f"{name}.{lazy.get(n, n)}" for n in names]:
            if _file_of(candidate) is not None:
                out.add(candidate)
    return out


def modules_of(objects: Iterable[Any]) -> Set[str]:
    """The modules ``objects`` come from: a function's or a class's own, an instance's classes' (bases included)."""
    found: Set[str] = set()
    for obj in objects:
        owners = [obj] if isinstance(obj, type) or callable(obj) and hasattr(obj, "__code__") else type(obj).__mro__
        for owner in owners:
            mod = getattr(owner, "__module__", None)
            if isinstance(mod, str) and mod and mod not in _SKIP and not mod.startswith("_"):
                found.add(mod)
    return found


def code_identity(objects: Iterable[Any]) -> Dict[str, Any]:
    """``{"code": a 16-hex-digit hash, "modules": the source files it covers, "libraries": the distributions}`` of
    the code ``objects`` (component factories, transformers) run, with this toolkit's version and its pipeline
    language; see the module's docstring."""
    todo = sorted(modules_of(objects) | {f"{OWN_PACKAGE}.pipeline"})
    seen: Set[str] = set()
    sources: Dict[str, str] = {}
    libraries: Dict[str, str] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        top = module.split(".")[0]
        if top in sys.stdlib_module_names:
            continue
        owners = () if top == OWN_PACKAGE else _distributions().get(top, ())
        if owners:
            for dist in owners:
                libraries[dist] = _version(dist)
            continue
        read = _read(module)
        if read is None:
            continue
        sources[module], imports, _ = read
        for m in _imported(module, imports):
            if m.split(".")[0] == top or m not in sys.stdlib_module_names and m != OWN_PACKAGE and \
                    not _distributions().get(m) and _file_of(m) is not None:   # own code, or code no one packaged
                if m not in seen:
                    todo.append(m)
            elif m != OWN_PACKAGE:
                for dist in _distributions().get(m, ()):
                    libraries[dist] = _version(dist)
    blob = "\n".join([_version("pyterrier-sci")] + [f"{m} {h}" for m, h in sorted(sources.items())]
                     + [f"{d}=={v}" for d, v in sorted(libraries.items())])
    return {"code": hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16], "modules": len(sources),
            "libraries": len(libraries)}
