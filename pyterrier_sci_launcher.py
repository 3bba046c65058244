"""The ``pyterrier-sci`` command's entry point, kept free of the toolkit's imports.

``pyterrier-sci index --output PATH --append DOCS [--retract IDS] [--fields ...]`` is answered by the resident
appender of the index at ``PATH`` when one runs (``pyterrier-sci index --output PATH --resident``,
:mod:`pyterrier_sci.resident`): this module sends it the change over its Unix socket and prints what the command
would have printed, so the change costs the interpreter's start (tens of milliseconds) and the change itself, not
the toolkit's imports and a JVM's start (seconds).  Every other command, and an update whose index has no resident
appender (no socket, or a stale one), runs :func:`pyterrier_sci.cli.main` as before.  Only the standard library
is imported here.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

__all__ = ["main", "socket_path", "socket_directory", "resident_update", "read_line", "process_seconds",
           "command_started",
           "MAX_MESSAGE", "PROTOCOL"]

#: the request / response protocol's version (a resident appender refuses another)
PROTOCOL = 1
#: the largest request or response line, in bytes
MAX_MESSAGE = 1 << 20


def socket_directory() -> Path:
    """The folder of this user's resident appenders' sockets: ``$XDG_RUNTIME_DIR/pyterrier-sci`` when set, else
    ``<tmp>/pyterrier-sci-<uid>`` (a socket's path is short: Unix limits it to about 100 bytes)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "pyterrier-sci"
    return Path(tempfile.gettempdir()) / f"pyterrier-sci-{os.getuid()}"


def socket_path(index: str | os.PathLike) -> Path:
    """Where the resident appender of the index at ``index`` listens: named by a hash of its real path."""
    real = os.path.realpath(os.path.expanduser(os.fspath(index)))
    return socket_directory() / (hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:24] + ".sock")


def _private_directory(directory: Path) -> bool:
    """Whether ``directory`` is this user's own folder that no one else can write (not a link): only then is a
    socket in it this user's."""
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def read_line(conn: socket.socket) -> bytes:
    """One message (a line, its end included) from ``conn``; less when the other side closes first.  Raises
    ``ValueError`` past :data:`MAX_MESSAGE` bytes."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_MESSAGE:
            raise ValueError(f"a message of more than {MAX_MESSAGE} bytes")
    return data


def _exchange(path: Path, request: dict, timeout: Optional[float]) -> Optional[dict]:
    """Sends one request line and reads one response line; None when nothing answers at ``path`` (no socket, a
    stale one, another user's folder)."""
    if not _private_directory(path.parent):
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2.0)
        try:
            s.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, socket.timeout, OSError):
            return None
        s.settimeout(timeout)
        s.sendall(json.dumps(request).encode("utf-8") + b"\n")
        data = read_line(s)
    finally:
        s.close()
    if not data:
        return None
    return json.loads(data)


def resident_update(index: str | os.PathLike, append: Optional[str] = None, retract: Optional[str] = None,
                    fields: Optional[List[str]] = None, timeout: Optional[float] = None) -> Optional[dict]:
    """The resident appender's answer to an update of ``index`` (``{"ok": true, "meta": ..., "seconds": ...}`` or
    ``{"ok": false, "error": ...}``), or None when no resident appender answers for it."""
    real = os.path.realpath(os.path.expanduser(os.fspath(index)))
    request = {"protocol": PROTOCOL, "op": "update", "index": real,
               "append": None if append is None else os.path.abspath(os.path.expanduser(append)),
               "retract": None if retract is None else os.path.abspath(os.path.expanduser(retract)),
               "fields": fields}
    return _exchange(socket_path(real), request, timeout)


def _update_args(argv: List[str]) -> Optional[argparse.Namespace]:
    """``index --output PATH --append DOCS --retract IDS [--fields F...] [--quiet]``, or None for anything else."""
    if not argv or argv[0] != "index" or not any(a.split("=")[0] in ("--append", "--retract") for a in argv):
        return None
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--output")
    p.add_argument("--append")
    p.add_argument("--retract")
    p.add_argument("--fields", nargs="+")
    p.add_argument("--quiet", action="store_true")
    try:
        args, rest = p.parse_known_args(argv[1:])
    except SystemExit:   # malformed: the full command line parser says what is wrong
        return None
    if rest or not args.output:
        return None
    return args


#: whether this process is a ``pyterrier-sci`` command (its arguments from ``sys.argv``), not a program that calls
#: :func:`main` with arguments of its own (whose age is no command's start)
_AS_COMMAND = [False]


def command_started(argv: Optional[List[str]]) -> None:
    """Records whether :func:`main` (or :func:`pyterrier_sci.cli.main`) was called as the command (``argv`` None)
    or by a program with arguments of its own."""
    _AS_COMMAND[0] = argv is None


def process_seconds() -> Optional[float]:
    """Seconds since this process, a ``pyterrier-sci`` command, started (Linux: from ``/proc``): what starting the
    command cost so far.  None where it cannot tell, or when the process is not the command (a program calling
    :func:`main` with arguments of its own)."""
    if not _AS_COMMAND[0]:
        return None
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/self/stat", encoding="ascii") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19]) / ticks
        with open("/proc/uptime", encoding="ascii") as f:
            return max(0.0, float(f.read().split()[0]) - start)
    except (OSError, ValueError, IndexError):
        return None


def _try_resident(argv: List[str]) -> Optional[int]:
    args = _update_args(argv)
    if args is None:
        return None
    before = process_seconds()
    t0 = time.perf_counter()
    try:
        answer = resident_update(args.output, args.append, args.retract, args.fields)
    except (OSError, ValueError) as e:   # the appender went away mid-answer: the change may or may not be made
        print(f"pyterrier-sci index: error: the resident appender of {args.output} failed to answer ({e}); run "
              "the command again (a change already made is recognised and not made twice)", file=sys.stderr)
        return 2
    if answer is None:
        return None
    took = time.perf_counter() - t0
    if not answer.get("ok"):
        print(f"pyterrier-sci index: {answer.get('error') or 'error: the resident appender refused the change'}",
              file=sys.stderr)
        return 2
    meta = answer.get("meta") or {}
    path = answer.get("index") or args.output
    docs = meta.get("docs") or {}
    print(f"{path}: generation {meta.get('generation', 0)}, {docs.get('count')} documents ({docs.get('hash')})",
          file=sys.stderr)
    start = f"; starting the command {before:.2f} s before it" if before is not None else ""
    print(f"{path}: the change took {took:.2f} s (by the resident appender, pid {answer.get('pid')}: "
          f"{answer.get('seconds', 0):.2f} s){start}", file=sys.stderr)
    print(path)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the ``pyterrier-sci`` command: an index update through a resident appender when one answers, else
    the toolkit's command line (:func:`pyterrier_sci.cli.main`)."""
    command_started(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    rc = _try_resident(argv)
    if rc is not None:
        return rc
    from pyterrier_sci.cli import main as cli_main
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
