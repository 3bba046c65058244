"""A resident appender: a process that keeps an index's update path loaded (the toolkit's imports, Lucene's JVM,
the update function of the index's kind) and applies ``pyterrier-sci index --output PATH --append DOCS
--retract IDS`` sent to it over a Unix socket, so that a change from the command line costs the change, not the
start of the toolkit (docs/indexes.md, "Cost").

Started by ``pyterrier-sci index --output PATH --resident`` (in the foreground; SIGINT or SIGTERM stops it).  The
command line's entry point (:mod:`pyterrier_sci_launcher`) finds it by the index's real path and sends it the
change; without one, the command makes the change itself.  The socket lies in this user's private folder
(:func:`pyterrier_sci_launcher.socket_directory`, mode 0700, never a link, owned by the user) with mode 0600, so
only the user who could run the command can send a change.  Changes are made one at a time, each through the
same update function the command would call (it takes the index's update lock, so a change made by another
process meanwhile is seen, never overwritten).  A request is one JSON line of at most
:data:`~pyterrier_sci_launcher.MAX_MESSAGE` bytes; anything else gets one error line and changes nothing.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from pyterrier_sci.errors import IndexUpdateError, one_line
from pyterrier_sci.generations import UPDATES_GROUP
from pyterrier_sci.registry import load_group
from pyterrier_sci_launcher import PROTOCOL, read_line, socket_directory, socket_path

__all__ = ["ResidentAppender", "serve_resident"]

#: seconds a client has to send its request once connected
REQUEST_TIMEOUT = 30.0


def _private_directory(directory: Path) -> Path:
    """Creates (or checks) the sockets' folder: a directory owned by this user, mode 0700, not a link."""
    try:
        directory.mkdir(mode=0o700, parents=False, exist_ok=True)
    except FileNotFoundError:
        directory.parent.mkdir(parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise IndexUpdateError(f"{directory} (the folder of resident appenders' sockets) is not a private folder of "
                               "this user (a link, another user's, or open to others): remove it, or set "
                               "$XDG_RUNTIME_DIR")
    return directory


class ResidentAppender:
    """Applies the updates sent to ``socket_path(index)`` to ``index`` with ``update`` (the function its kind
    registers in :data:`~pyterrier_sci.generations.UPDATES_GROUP`), one at a time, until :meth:`stop`."""

    def __init__(self, index: os.PathLike, update: Callable[..., Dict[str, Any]],
                 describe: Callable[[BaseException], str] = lambda e: f"error: {one_line(e)}"):
        self.index = Path(os.path.realpath(index))
        self.update = update
        self.describe = describe
        self.path = socket_path(self.index)
        self.changes = 0
        self._stopped = threading.Event()
        self._sock: Optional[socket.socket] = None

    def bind(self) -> "ResidentAppender":
        """Listens at :attr:`path`; another appender answering there is an error, a stale socket is replaced."""
        _private_directory(socket_directory())
        if os.path.lexists(self.path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(2.0)
            try:
                probe.connect(str(self.path))
            except OSError:    # nothing answers: a socket left by a killed appender
                os.unlink(self.path)
            else:
                raise IndexUpdateError(f"a resident appender of {self.index} is already running (its socket: "
                                       f"{self.path})")
            finally:
                probe.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)   # the socket is created 0600
        try:
            s.bind(str(self.path))
        finally:
            os.umask(old)
        s.listen(16)
        s.settimeout(0.5)     # the loop looks at the stop flag between connections
        self._sock = s
        self._inode = os.lstat(self.path).st_ino
        return self

    def serve_forever(self) -> None:
        if self._sock is None:
            self.bind()
        try:
            while not self._stopped.is_set():
                try:
                    conn, _ = self._sock.accept()
                except socket.timeout:
                    continue
                except OSError:
                    if self._stopped.is_set():
                        break
                    raise
                with conn:
                    self._handle(conn)
        finally:
            self.close()

    def stop(self) -> None:
        self._stopped.set()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            try:   # only our own socket: another appender may have replaced a socket it found stale
                if os.lstat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
            except OSError:
                pass

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(REQUEST_TIMEOUT)
            answer = self.answer(read_line(conn))
        except (OSError, ValueError) as e:
            answer = {"ok": False, "error": f"error: the request could not be read: {one_line(e)}"}
        try:
            conn.sendall(json.dumps(answer).encode("utf-8") + b"\n")
        except OSError:   # the client went away: the change (if any) is made and recorded in the index
            pass

    def answer(self, raw: bytes) -> Dict[str, Any]:
        """The response to one request line."""
        try:
            req = json.loads(raw)
        except (UnicodeDecodeError, ValueError):
            return {"ok": False, "error": "error: the request is not one JSON line"}
        if not isinstance(req, dict) or req.get("protocol") != PROTOCOL:
            return {"ok": False, "error": f"error: the request is not of protocol {PROTOCOL} (a pyterrier-sci of "
                                          "another version?): restart the resident appender"}
        if req.get("op") == "ping":
            return {"ok": True, "pid": os.getpid(), "index": str(self.index), "changes": self.changes}
        if req.get("op") != "update":
            return {"ok": False, "error": f"error: unknown operation {req.get('op')!r}"}
        if req.get("index") != str(self.index):
            return {"ok": False, "error": f"error: this resident appender changes {self.index}, not "
                                          f"{req.get('index')!r}"}
        append, retract, fields = req.get("append"), req.get("retract"), req.get("fields")
        for name, value in (("append", append), ("retract", retract)):
            if value is not None and (not isinstance(value, str) or not os.path.isabs(value)):
                return {"ok": False, "error": f"error: --{name} must be an absolute path, not {value!r}"}
        if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
            return {"ok": False, "error": "error: --fields must be a list of field names"}
        if append is None and retract is None:
            return {"ok": False, "error": "error: nothing to change: give --append or --retract"}
        started = time.perf_counter()
        try:
            meta = self.update(self.index, append=append, retract=retract, fields=fields, verbose=False)
        except Exception as e:  # noqa: BLE001 - one answer per failure, as the command would print it
            return {"ok": False, "error": self.describe(e)}
        self.changes += 1
        return {"ok": True, "index": str(self.index), "pid": os.getpid(),
                "seconds": round(time.perf_counter() - started, 4),
                "meta": {"generation": meta.get("generation", 0), "docs": meta.get("docs")}}


def serve_resident(index: os.PathLike, kind: str, describe: Callable[[BaseException], str],
                   ready: Optional[Callable[[ResidentAppender], None]] = None) -> int:
    """``pyterrier-sci index --output PATH --resident``: loads the update path of ``index`` (of ``kind``,
    ``<type>.<format>``), warms it (the update module's ``warm_up(path)``, e.g. Lucene's JVM) and answers
    changes until SIGINT / SIGTERM."""
    updates = load_group(UPDATES_GROUP)
    if kind not in updates:
        raise IndexUpdateError(f"{index} is a {kind} index, which cannot be updated (updatable: "
                               f"{', '.join(sorted(updates))})")
    update = updates[kind]
    warm_up = getattr(sys.modules.get(update.__module__), "warm_up", None)
    if callable(warm_up):
        warm_up(index)
    appender = ResidentAppender(index, update, describe).bind()

    def stop(signum, frame):
        appender.stop()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        print(f"{appender.index}: resident appender (pid {os.getpid()}) listening at {appender.path}; "
              f"'pyterrier-sci index --output {appender.index} --append DOCS' now goes through it "
              "(Ctrl-C stops it)", file=sys.stderr, flush=True)
        if ready is not None:
            ready(appender)
        appender.serve_forever()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"{appender.index}: resident appender stopped after {appender.changes} change(s)", file=sys.stderr)
    return 0
