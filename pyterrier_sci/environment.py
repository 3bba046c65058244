"""What every manifest records of the machine and the installation (library versions, Python, OS, CPU, the
git state), the manifest header, and the manifest an artifact builder writes
(:func:`artifact_manifest`).  Low in the core: :mod:`pyterrier_sci.artifacts` writes artifact manifests
with it; :mod:`pyterrier_sci.manifest` builds run and experiment manifests on it."""
from __future__ import annotations

import datetime
import functools
import math
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = ["MANIFEST_VERSION", "LIBRARIES", "library_versions", "git_state", "environment", "jsonable",
           "manifest_header", "artifact_manifest"]

MANIFEST_VERSION = 1

#: the libraries that decide results: the name shown -> distribution names to try
LIBRARIES: Dict[str, Tuple[str, ...]] = {
    "torch": ("torch",),
    "transformers": ("transformers",),
    "sentence-transformers": ("sentence-transformers", "sentence_transformers"),
    "pyterrier": ("pyterrier", "python-terrier"),  # python-terrier 1.0 is a shim beside pyterrier 1.x
    "pyterrier-dr": ("pyterrier-dr", "pyterrier_dr"),
    "pyterrier-pisa": ("pyterrier-pisa", "pyterrier_pisa"),
    "pyserini": ("pyserini",),
    "colbert-ai": ("colbert-ai", "colbert_ai"),
    "llama-cpp-python": ("llama-cpp-python", "llama_cpp_python"),
    "openvino": ("openvino",),
    "nncf": ("nncf",),
    "onnxruntime": ("onnxruntime",),
    "faiss": ("faiss-cpu", "faiss"),
    "openai": ("openai",),
    "ir_datasets": ("ir_datasets", "ir-datasets"),
    "ir_measures": ("ir_measures", "ir-measures"),
    "numpy": ("numpy",),
}

_SECRET = re.compile(r"(api_?key|secret|password|token$|^key$)", re.I)


def library_versions() -> Dict[str, Optional[str]]:
    """The installed version of each of :data:`LIBRARIES` (``None`` when it is not installed): those the process
    found first (read once; every artifact and run manifest records them, an index append included)."""
    return dict(_library_versions())


@functools.lru_cache(maxsize=1)
def _library_versions() -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {}
    for shown, dists in LIBRARIES.items():
        out[shown] = None
        for d in dists:
            try:
                out[shown] = metadata.version(d)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def _cpu() -> Dict[str, Any]:
    return dict(_cpu_once())


@functools.lru_cache(maxsize=1)
def _cpu_once() -> Dict[str, Any]:
    model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {"model": model or platform.processor() or None, "cores": os.cpu_count(), "usable_cores": usable}


def _git(args: Sequence[str], cwd: Path) -> Optional[str]:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20,
                             env=dict(os.environ, GIT_OPTIONAL_LOCKS="0"))
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(package_dir: Optional[Path] = None) -> Dict[str, Any]:
    """``{"commit", "dirty"}`` of the git checkout the package is installed from (both ``None`` when
    it is not a tracked part of a checkout, e.g. installed from a wheel)."""
    pkg = Path(package_dir or Path(__file__).resolve().parent)
    none = {"commit": None, "dirty": None}
    found = (_git(["rev-parse", "--show-toplevel", "HEAD"], pkg) or "").splitlines()
    if len(found) != 2 or _git(["ls-files", "--error-unmatch", "--", str(pkg / "__init__.py")], pkg) is None:
        return none  # e.g. a virtual environment inside a checkout: its site-packages are not tracked
    top, commit = found
    status = _git(["status", "--porcelain", "--untracked-files=no"], Path(top))
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def environment() -> Dict[str, Any]:
    """The environment part of every manifest: library versions, Python, OS, CPU and git state."""
    return {"versions": library_versions(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "os": platform.platform(),
            "cpu": _cpu(),
            "git": git_state()}


def jsonable(x: Any) -> Any:
    """A JSON value for ``x``: NaN and infinities become None, paths and other objects strings."""
    if isinstance(x, Mapping):
        return {str(k): ("<redacted>" if _SECRET.search(str(k)) else jsonable(v)) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in (sorted(x, key=repr) if isinstance(x, (set, frozenset)) else x)]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    try:
        if isinstance(x, np.generic):
            x = x.item()
    except ImportError:
        pass
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return str(x)


def manifest_header(kind: str) -> Dict[str, Any]:
    """What every manifest starts with: its version, kind, creation time and :func:`environment`."""
    return {"manifest_version": MANIFEST_VERSION, "kind": kind,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "environment": environment()}


def artifact_manifest(extra: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The manifest :func:`pyterrier_sci.artifacts.build_atomically` writes into an artifact: the
    environment part and whatever the builder passes (``extra``)."""
    m = manifest_header("artifact")
    if extra:
        m.update(jsonable(dict(extra)))
    return m
