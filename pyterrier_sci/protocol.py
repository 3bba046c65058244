"""The component protocol: what the core asks each transformer of a built pipeline.

Manifests (:mod:`pyterrier_sci.manifest`), LLM usage accounting (:mod:`pyterrier_sci.llm.accounting`),
dry runs, budgets and reports find a pipeline's models, LLM settings, templates, seeds and usage by
walking it with PyTerrier's own ``pt.inspect.subtransformers`` (:func:`walk`) and asking each
transformer it meets through the small methods below.  A transformer implements those that apply to
it; none is required, and a transformer with none of them simply records nothing.  Third-party
components take part by implementing the same methods (docs/architecture.md, "The component
protocol"); nothing reads attribute names.

``sci_models() -> Iterable[ModelRef]``
    the models it loads or calls: an encoder by its identifier, a trained model by its directory, a
    ColBERT checkpoint, the LLM it calls.  A :class:`ModelRef` with a local ``path`` has its weight
    files hashed into manifests.
``sci_templates() -> Mapping[str, str]``
    the prompt templates it may use, name -> text (hashed into manifests).
``sci_seeds() -> Mapping[str, int]``
    the seeds it was built with, name -> value.
``sci_usage() -> Usage``
    its LLM usage counters (:class:`pyterrier_sci.llm.accounting.Usage`): what accounting sums,
    dry runs count and budgets check.
``sci_llm_settings() -> LLMSettings``
    the settings of the LLM it calls (model, prices, budget), with :meth:`sci_usage`.
``sci_parts() -> Iterable[object]``
    objects it holds that are not transformers but take part in the protocol (an optimiser, an
    annotator): the walk visits them too.

:class:`pyterrier_sci.llm.client.UsesLLM` implements the LLM methods for the toolkit's LLM components.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any, Dict, Iterable, List, Mapping, Optional, Protocol, runtime_checkable

import pyterrier as pt

__all__ = ["ModelRef", "HasModels", "HasTemplates", "HasSeeds", "HasUsage", "HasParts", "walk", "models_of",
           "templates_of", "seeds_of", "usage_holders", "package_templates"]


@dataclass(frozen=True)
class ModelRef:
    """A model a component uses.

    Args:
        name: its identifier as the user gave it (a model name, a path, an LLM's model name).
        kind: what it is: ``encoder``, ``cross-encoder``, ``colbert``, ``llm`` or an artifact type.
        path: the local file or directory holding its weights (hashed into manifests); ``None`` when it
            is not local (a hub id, a served LLM).
        note: why there is no path, shown in manifests.
    """
    name: str
    kind: str
    path: Optional[str] = None
    note: Optional[str] = None


@runtime_checkable
class HasModels(Protocol):
    def sci_models(self) -> Iterable[ModelRef]: ...


@runtime_checkable
class HasTemplates(Protocol):
    def sci_templates(self) -> Mapping[str, str]: ...


@runtime_checkable
class HasSeeds(Protocol):
    def sci_seeds(self) -> Mapping[str, int]: ...


@runtime_checkable
class HasUsage(Protocol):
    def sci_usage(self) -> Any: ...

    def sci_llm_settings(self) -> Any: ...


@runtime_checkable
class HasParts(Protocol):
    def sci_parts(self) -> Iterable[Any]: ...


def _children(obj: Any) -> List[Any]:
    if isinstance(obj, (list, tuple)):
        return list(obj)
    out: List[Any] = []
    if isinstance(obj, pt.Transformer):
        try:
            subs = pt.inspect.subtransformers(obj)
        except pt.inspect.InspectError:
            subs = {}
        for value in subs.values():
            out += list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(obj, HasParts):
        out += list(obj.sci_parts())
    return out


def walk(systems: Any) -> List[Any]:
    """Every transformer inside ``systems`` (a pipeline or a list of pipelines), through
    ``pt.inspect.subtransformers`` and :meth:`sci_parts`, in pipeline order, each once."""
    found: List[Any] = []
    seen = set()
    stack = [systems]
    while stack:
        obj = stack.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        if not isinstance(obj, (list, tuple)):
            found.append(obj)
        stack += reversed(_children(obj))
    return found


def models_of(systems: Any) -> List[tuple]:
    """``(component, ModelRef)`` for every model the components of ``systems`` declare, in order."""
    return [(c, ref) for c in walk(systems) if isinstance(c, HasModels) for ref in c.sci_models()]


def templates_of(systems: Any) -> List[tuple]:
    """``(component, name, text)`` for every template the components of ``systems`` declare."""
    return [(c, name, text) for c in walk(systems) if isinstance(c, HasTemplates)
            for name, text in dict(c.sci_templates()).items()]


def seeds_of(systems: Any) -> Dict[str, int]:
    """``{"<Component>.<name>": seed}`` of the components of ``systems`` (the first of a name wins)."""
    out: Dict[str, int] = {}
    for c in walk(systems):
        if isinstance(c, HasSeeds):
            for name, value in dict(c.sci_seeds()).items():
                out.setdefault(f"{type(c).__name__}.{name}", value)
    return out


def usage_holders(systems: Any) -> List[Any]:
    """The components of ``systems`` that call an LLM (:class:`HasUsage`), in order, each once."""
    return [c for c in walk(systems) if isinstance(c, HasUsage)]


def package_templates(package: str) -> Dict[str, str]:
    """The templates shipped in ``package``'s ``templates/`` folder, as ``{"<package>/templates/<file>":
    text}`` (for a component's :meth:`sci_templates`); nothing when the package has none."""
    out: Dict[str, str] = {}
    try:
        folder = resources.files(package).joinpath("templates")
        if not folder.is_dir():
            return out
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_file() and not entry.name.startswith("."):
                out[f"{package}/templates/{entry.name}"] = entry.read_bytes().decode("utf-8")
    except (ModuleNotFoundError, OSError, TypeError, UnicodeDecodeError):
        pass
    return out
