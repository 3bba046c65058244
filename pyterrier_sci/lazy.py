"""Lazy re-exports for the plugins' ``__init__.py`` files (PEP 562): a plugin package lists which of
its modules defines each public name, and importing the package imports none of them (nor torch or
sentence-transformers) until a name is used::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"retriever": ("BM25", "bm25_component")})
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable, Dict, List, Sequence, Tuple

__all__ = ["lazy_exports"]


def lazy_exports(package: str, modules: Dict[str, Sequence[str]]) -> Tuple[Callable, Callable, List[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: ``modules`` maps each submodule to the
    public names it defines; a name is imported from its submodule on first use and then cached."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str):  # noqa: N807  (the module hook of PEP 562)
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():  # noqa: N807
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__, list(where)
