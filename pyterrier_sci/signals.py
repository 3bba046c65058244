"""Native signal handlers that other libraries must not take from a JVM in the same process.

Lucene runs in a JVM inside the Python process (Pyserini, through pyjnius).  HotSpot faults on purpose
(its safepoint polls read a page it protects, its implicit null checks dereference null) and its own
``SIGSEGV`` / ``SIGBUS`` / ``SIGFPE`` / ``SIGILL`` handler resumes the thread.  ``ray.init`` in the driver
replaces that handler with Ray's failure handler (absl's), and ``ray.shutdown`` then resets it to the
default action, so the JVM's next armed safepoint killed the whole process with a bare segmentation fault
(no ``hs_err`` file, no Python traceback), e.g. a Lucene search run after any Ray test in the suite.

:func:`keep_native_handlers` saves the process's native handlers of those signals and puts them back
when its block ends (it copies the ``struct sigaction`` bytes as they are, so it does not depend on the
struct's layout); :func:`native_handler` names the library a signal's handler lives in.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import signal
from typing import Dict, Iterator, Optional, Sequence

__all__ = ["JVM_SIGNALS", "keep_native_handlers", "native_handler"]

#: the signals HotSpot handles itself (it raises them on purpose)
JVM_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)
_ACTION_BYTES = 256          # larger than struct sigaction on every Linux and macOS ABI


def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.sigaction     # noqa: B018 - the symbol must exist
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class _DlInfo(ctypes.Structure):    # dladdr's answer
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _get(sig: int) -> Optional[ctypes.Array]:
    buf = ctypes.create_string_buffer(_ACTION_BYTES)
    if _LIBC is None or _LIBC.sigaction(int(sig), None, buf) != 0:
        return None
    return buf


@contextlib.contextmanager
def keep_native_handlers(signals: Sequence[int] = JVM_SIGNALS) -> Iterator[None]:
    """Runs the block, then restores the native handlers ``signals`` had before it (a no-op where libc's
    ``sigaction`` cannot be reached)."""
    saved: Dict[int, ctypes.Array] = {}
    for s in signals:
        buf = _get(s)
        if buf is not None:
            saved[int(s)] = buf
    try:
        yield
    finally:
        for s, buf in saved.items():
            _LIBC.sigaction(s, buf, None)


def native_handler(sig: int) -> Optional[str]:
    """The file of the shared object whose code handles ``sig`` (None: the default action or no handler
    found)."""
    buf = _get(sig)
    if buf is None:
        return None
    address = ctypes.c_void_p.from_buffer(buf).value
    if address in (None, 0, 1):          # SIG_DFL, SIG_IGN
        return None
    info = _DlInfo()
    try:
        found = ctypes.CDLL(None).dladdr(ctypes.c_void_p(address), ctypes.byref(info))
    except (OSError, AttributeError):
        return None
    return info.dli_fname.decode(errors="replace") if found and info.dli_fname else None
