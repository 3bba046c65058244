"""Running ``colbert-ai`` (0.2.x) here: its import (undoing its process-wide side effects), the
transformers 5 shim (``HF_ColBERT`` runs ``post_init``), building its C++ extensions once under a
timeout, and quiet calls.  Why each is needed: ``docs/colbert.md``.
"""
from __future__ import annotations

import contextlib
import functools
import io
import multiprocessing
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Optional

from pyterrier_sci.quiet import quiet_native

EXTENSIONS = ("segmented_maxsim_cpp", "segmented_lookup_cpp", "filter_pids_cpp", "decompress_residuals_cpp")
#: seconds allowed for building the C++ extensions the first time
EXTENSION_BUILD_TIMEOUT = 900.0
INSTALL_HINT = "pip install 'pyterrier-sci[colbert]'"


class ColBERTError(RuntimeError):
    """colbert-ai failed (the message says where, and includes the tail of its log)."""


class ColBERTTimeoutError(ColBERTError, TimeoutError):
    """A colbert-ai step (index build, extension build) ran past its timeout and was stopped."""


class ColBERTWorkerError(ColBERTError):
    """The process that builds a ColBERT index died or failed."""


_imported = False


def import_colbert():
    """Imports ``colbert`` with the transformers 5 shim applied and its import side effects undone."""
    global _imported
    if _imported:
        import colbert
        return colbert
    method = multiprocessing.get_start_method(allow_none=True)
    tok_par = os.environ.get("TOKENIZERS_PARALLELISM")
    try:
        import colbert  # noqa: F401
        import colbert.infra.launcher  # noqa: F401  (the import that forces 'spawn')
        import colbert.modeling.checkpoint  # noqa: F401
    except ImportError as e:
        raise ImportError(f"ColBERT needs colbert-ai and faiss-cpu ({e}): {INSTALL_HINT}") from e
    finally:
        if tok_par is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = tok_par
        try:
            multiprocessing.set_start_method(method, force=True)
        except (RuntimeError, ValueError):
            pass
    _patch_transformers5()
    _ensure_ninja_on_path()
    _imported = True
    return colbert


def _transformers_major() -> int:
    import transformers
    return int(transformers.__version__.split(".")[0])


def _patch_transformers5() -> None:
    if _transformers_major() < 5:
        return
    import colbert.modeling.base_colbert as base_colbert
    import colbert.modeling.hf_colbert as hf_colbert
    import colbert.modeling.tokenization.doc_tokenization as doc_tokenization
    import colbert.modeling.tokenization.query_tokenization as query_tokenization
    original = hf_colbert.class_factory
    if getattr(original, "_pyterrier_sci_shim", False):
        return

    @functools.wraps(original)
    def class_factory(name_or_path):
        cls = original(name_or_path)

        def init_weights(self):
            # transformers 5: post_init() sets all_tied_weights_keys (read by from_pretrained) and then
            # calls init_weights() again, which goes to the PreTrainedModel implementation
            if "all_tied_weights_keys" not in self.__dict__:
                self.post_init()
                return
            super(cls, self).init_weights()

        cls.init_weights = init_weights
        return cls

    class_factory._pyterrier_sci_shim = True
    for module in (hf_colbert, base_colbert, doc_tokenization, query_tokenization):
        module.class_factory = class_factory


def _ninja_dir() -> Optional[str]:
    """The folder of the PyPI ``ninja`` package's binary (a dependency of the ``colbert`` extra), or None."""
    try:
        import ninja
        d = str(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        return None
    return d if os.path.exists(os.path.join(d, "ninja")) else None


def _path_with_ninja(path: Optional[str]) -> str:
    """``path`` with the PyPI ninja's folder first (else the interpreter's folder last, so that some
    ninja is found)."""
    parts = [p for p in (path or "").split(os.pathsep) if p]
    pinned = _ninja_dir()
    if pinned is not None:
        return os.pathsep.join([pinned] + [p for p in parts if p != pinned])
    if shutil.which("ninja", path=os.pathsep.join(parts)):
        return os.pathsep.join(parts)
    return os.pathsep.join(parts + [os.path.dirname(sys.executable)])


def _ensure_ninja_on_path() -> None:
    """torch builds (and checks, once per process) the extensions with ``ninja``, found on ``PATH``.
    Always the same ninja: the PyPI package's when it is installed.  Two ninja versions on one
    extensions directory rebuild every extension whenever the other one built last (ninja >= 1.12
    keeps its build log in a format that 1.11 discards, and the other way round: minutes per
    process) - which happened here with the system's ninja 1.11 on ``PATH`` in some processes and the
    environment's ninja 1.13 (``.venv/bin``, on ``PATH`` when the environment is activated) in others."""
    os.environ["PATH"] = _path_with_ninja(os.environ.get("PATH"))


# ------------------------------------------------------------------------------- C++ extensions

def extensions_dir() -> Path:
    """Where torch keeps the compiled extensions (per Python and accelerator)."""
    from torch.utils.cpp_extension import _get_build_directory
    return Path(_get_build_directory(EXTENSIONS[0], verbose=False)).parent


def _extensions_ready() -> bool:
    root = extensions_dir()
    return all((root / n / f"{n}.so").exists() and not (root / n / "lock").exists() for n in EXTENSIONS)


def ensure_extensions(timeout: Optional[float] = EXTENSION_BUILD_TIMEOUT) -> None:
    """Builds colbert-ai's CPU extensions once (in a subprocess, under ``timeout`` seconds)."""
    if _extensions_ready():
        return
    _ensure_ninja_on_path()
    cmd = [sys.executable, "-m", "pyterrier_sci.plugins.colbert._worker", "extensions"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=worker_env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        locks = [str(p) for p in extensions_dir().glob("*/lock")]
        hint = (f"; an interrupted earlier build leaves a lock file that makes every later build wait: "
                f"remove {', '.join(locks)} and retry") if locks else ""
        raise ColBERTTimeoutError(f"building colbert-ai's C++ extensions did not finish in {timeout:.0f} s "
                                  f"(in {extensions_dir()}){hint}. Output: {output_tail(e.stderr)}") from None
    if proc.returncode != 0:
        raise ColBERTError(f"building colbert-ai's C++ extensions failed (exit {proc.returncode}; they need a "
                           f"C++ compiler and ninja): {output_tail(proc.stderr or proc.stdout)}")


def build_extensions_here() -> None:
    """Loads (building when needed) the extensions in this process: what the subprocess runs."""
    import_colbert()
    from colbert.modeling.colbert import ColBERT
    from colbert.search.index_storage import IndexScorer
    from colbert.search.strided_tensor import StridedTensor
    ColBERT.try_load_torch_extensions(False)
    StridedTensor.try_load_torch_extensions(False)
    IndexScorer.try_load_torch_extensions(False)


def worker_env() -> dict:
    """The environment of a worker process: this one's, never letting a checkout's top-level
    folders shadow installed packages, without tokenizers' fork warnings."""
    env = dict(os.environ)
    env["PYTHONSAFEPATH"] = "1"
    env["PATH"] = _path_with_ninja(env.get("PATH"))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def output_tail(text, n: int = 2000) -> str:
    """The last ``n`` characters of a process's output (bytes or text), or ``"(no output)"``."""
    if text is None:
        return "(no output)"
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text.strip()
    return text[-n:] if text else "(no output)"


# --------------------------------------------------------------------------------- quiet calls

@contextlib.contextmanager
def quiet(enabled: bool = True):
    """Swallows colbert-ai's output: its native output (:func:`~pyterrier_sci.quiet.quiet_native`), its
    Python prints and bars, transformers' weight-loading bar, and the deprecation and no-CUDA warnings
    its ``MixedPrecisionManager`` (``torch.cuda.amp``) raises on every call on CPU."""
    if not enabled:
        yield
        return
    from transformers.utils import logging as hf_logging
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*torch\.cuda\.amp\.(autocast|GradScaler).*")
            warnings.filterwarnings("ignore", message=r".*CUDA is not available.*")
            with quiet_native(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
