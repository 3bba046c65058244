"""The component registry: names usable in the pipeline language, mapped to factories.

A *component* is a factory returning a ``pt.Transformer``::

    def factory(*inputs: pt.Transformer, context: Context = None, **params) -> pt.Transformer

``inputs`` are sub-pipelines written as positional arguments (``rrf(bm25, dense)``); ``params``
are the literal keyword arguments of the expression merged over those of the YAML config.
Factories that do not name ``context`` (or ``**kwargs``) are called without it.

The built-in plugins and third-party packages fill the registry through one entry-point group,
``pyterrier_sci.components``::

    [options.entry_points]
    pyterrier_sci.components =
        my_reranker = my_package.module:my_factory

or at run time with :func:`register` / the :func:`component` decorator.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ENTRY_POINT_GROUP = "pyterrier_sci.components"


@dataclass
class Context:
    """What a component may need beyond its parameters; picklable.

    Attributes:
        dataset: the ir_datasets id the pipeline runs on (``irds:`` prefix allowed), if any.
        work_dir: where components keep what they build (indexes); default
            :func:`pyterrier_sci.data.work_dir`.
        settings: free-form sections of the pipeline config (e.g. ``llm:``), by section name.
    """
    dataset: Optional[str] = None
    work_dir: Optional[Path] = None
    settings: Dict[str, Any] = field(default_factory=dict)

    def workdir(self) -> Path:
        from pyterrier_sci.data import work_dir
        return Path(self.work_dir) if self.work_dir else work_dir()


class UnknownComponentError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


@dataclass
class ComponentSpec:
    name: str
    factory: Callable[..., Any]
    source: str = "runtime"      # "runtime" or the entry point's "module:attr"

    @property
    def description(self) -> str:
        doc = inspect.getdoc(self.factory) or ""
        return doc.strip().splitlines()[0] if doc else ""

    def build(self, *inputs, context: Optional[Context] = None, **params):
        accepts_context = _accepts_kwarg(self.factory, "context")
        if accepts_context:
            return self.factory(*inputs, context=context, **params)
        return self.factory(*inputs, **params)


def _accepts_kwarg(fn: Callable, name: str) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return name in sig.parameters or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


class Registry:
    def __init__(self):
        self._specs: Dict[str, ComponentSpec] = {}
        self._entry_points_loaded = False

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name not in self._specs:
                self._specs[ep.name] = _LazySpec(ep.name, ep)

    def register(self, name: str, factory: Callable[..., Any], *, replace: bool = False) -> None:
        if not name.isidentifier():
            raise ValueError(f"component name {name!r} must be a Python identifier")
        self._load_entry_points()
        if name in self._specs and not replace:
            raise ValueError(f"component {name!r} is already registered ({self._specs[name].source}); pass replace=True")
        self._specs[name] = ComponentSpec(name, factory)

    def get(self, name: str) -> ComponentSpec:
        self._load_entry_points()
        if name not in self._specs:
            import difflib
            close = difflib.get_close_matches(name, self._specs, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownComponentError(f"unknown component {name!r}{hint} (known: {', '.join(sorted(self._specs))})")
        spec = self._specs[name]
        if isinstance(spec, _LazySpec):
            spec = self._specs[name] = spec.resolve()
        return spec

    def names(self) -> List[str]:
        self._load_entry_points()
        return sorted(self._specs)

    def __contains__(self, name: str) -> bool:
        self._load_entry_points()
        return name in self._specs


class _LazySpec(ComponentSpec):
    def __init__(self, name, ep):
        super().__init__(name, factory=None, source=ep.value)
        self._ep = ep

    def resolve(self) -> ComponentSpec:
        try:
            factory = self._ep.load()
        except Exception as e:
            raise ImportError(f"component {self.name!r} ({self._ep.value}) could not be loaded: {e}") from e
        return ComponentSpec(self.name, factory, self._ep.value)

    @property
    def description(self) -> str:
        return f"(from {self._ep.value})"


REGISTRY = Registry()


def register(name: str, factory: Callable[..., Any], *, replace: bool = False) -> None:
    """Registers a component factory under ``name`` for the pipeline language."""
    REGISTRY.register(name, factory, replace=replace)


def component(name: Optional[str] = None, *, replace: bool = False):
    """Decorator form of :func:`register`."""
    def deco(fn):
        register(name or fn.__name__, fn, replace=replace)
        return fn
    return deco


def get(name: str) -> ComponentSpec:
    return REGISTRY.get(name)


def names() -> List[str]:
    return REGISTRY.names()
