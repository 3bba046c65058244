"""Atomic writing of everything the toolkit builds: directory artifacts (:func:`build_atomically`,
locked so that a second builder waits and reuses the first one's result), files (:func:`atomic_file`)
and ``pt_meta.json`` (:func:`write_pt_meta`), plus checksum records beside saved files.

Like ``pt.io.finalized_directory`` / ``finalized_open``, a build is written beside its target and
moved into place with one rename.  Those name their temporaries randomly, so a temporary left by a
killed process cannot be told from a live one's; the names here carry the writer's process id and
host, and only a dead writer's leftovers are removed.  Locks are ``fcntl.flock`` locks (released by
the operating system when their holder dies) on ``.<name>.lock`` beside the artifact.
"""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Union

from pyterrier_sci.environment import artifact_manifest
from pyterrier_sci.errors import (  # noqa: F401 - defined there, re-exported
    BuildRefused,
    DamagedFileWarning,
    LinkReplacedWarning,
    PathError,
)

__all__ = ["PathError", "DamagedFileWarning", "LinkReplacedWarning", "create_new_file",
           "lock", "no_builds", "BuildRefused", "build_atomically", "atomic_file", "atomic_write_text",
           "write_pt_meta", "check_file_target",
           "check_directory", "remove_stale_partials", "remove_stale_temporaries", "record_checksum",
           "verify_checksum", "discard_if_damaged", "process_alive"]

log = logging.getLogger(__name__)

CHECKSUM_SUFFIX = ".sha256"
#: a partial directory or temporary file of another host is removed once it is this old (seconds);
#: its builder's liveness cannot be checked from here
OTHER_HOST_STALE_AFTER = 24 * 3600

PathLike = Union[str, os.PathLike]


# --------------------------------------------------------------------------------------- identity

def host_tag() -> str:
    """This machine's name as used in partial and temporary names (letters, digits, ``_``)."""
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "localhost"


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine is running (a zombie counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _owner_dead(pid: int, host: Optional[str], path: Path) -> bool:
    """Whether what process ``pid`` on ``host`` (None: this one) left at ``path`` is stale."""
    if host is None or host == host_tag():
        return pid != os.getpid() and not process_alive(pid)
    try:
        return time.time() - path.lstat().st_mtime > OTHER_HOST_STALE_AFTER
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------------------------- path checks

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _first_existing(path: Path) -> Path:
    p = path
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def _check_creatable(p: Path, directory: Path, what: str) -> None:
    """Raises a :class:`PathError` when ``directory`` (``p`` or its parent) cannot be created or used
    because it, or one of its ancestors, is not a directory."""
    anc = _first_existing(directory)
    try:
        is_dir = anc.is_dir()
    except OSError as e:
        raise PathError(f"{p} cannot be used: {e.strerror}", where=what) from None
    if not is_dir:
        if anc == p:
            raise PathError(f"{p} is a file, not a directory: point {what} at a directory "
                            "(it is created when missing)", where=what)
        raise PathError(f"{p} cannot be created: {anc} is a file, not a directory", where=what)


def check_directory(path: PathLike, what: str) -> Path:
    """``path`` (expanded) when it is a directory or can be created as one; otherwise a
    :class:`PathError` naming the setting ``what``.  Creates nothing."""
    p = Path(path).expanduser()
    _check_creatable(p, p, what)
    return p


def check_file_target(path: PathLike, what: str = "output") -> Path:
    """The path a file should be written to, refusing what must not be replaced: a directory, a
    device, a FIFO or a socket, or a path under a regular file.

    A symbolic link is never followed: the file is renamed over the link's own directory entry, so
    the link is replaced and the file it named is left untouched (a :class:`LinkReplacedWarning` says
    so).  Raises :class:`PathError` naming ``what`` (e.g. ``--output``, ``save_dir``)."""
    p = Path(path).expanduser()
    if str(path) == "" or p.name in ("", ".", ".."):
        raise PathError(f"{str(path)!r} is not a file name", where=what)
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        st = None  # a parent that is a file is reported below
    except OSError as e:
        raise PathError(f"cannot write {p}: {e.strerror}", where=what) from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            _check_creatable(p, p.parent, what)
            return p
        if stat.S_ISDIR(st.st_mode):
            raise PathError(f"{p} is a directory; give the path of a file to write", where=what)
        if not stat.S_ISREG(st.st_mode):
            raise PathError(f"{p} is {_kind(st.st_mode)}; runs are written to a temporary file and renamed "
                            "into place, which would replace it: give the path of a regular file", where=what)
        return p
    _check_creatable(p, p.parent, what)
    return p


def _warn_if_link(path: Path, what: str) -> None:
    """A :class:`LinkReplacedWarning` when ``path`` is a symbolic link (about to be replaced)."""
    if os.path.islink(path):
        warnings.warn(f"{path} ({what}) was a symbolic link to {os.readlink(path)}; the link itself is replaced "
                      "by the new file and the file it named is left untouched (writers never follow links)",
                      LinkReplacedWarning, stacklevel=4)


def create_new_file(path: PathLike, mode: int = 0o666) -> Path:
    """Creates ``path`` as a new, empty regular file without following a link: whatever entry has
    that name (a stale temporary, a planted symbolic link) is removed first, then the file is
    created with ``O_CREAT | O_EXCL | O_NOFOLLOW``.  Returns ``path``."""
    path = Path(path)
    while True:
        try:
            os.unlink(path)  # a link itself, never what it names
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise PathError(f"{path} is a directory", where=str(path)) from None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except FileExistsError:  # recreated meanwhile: remove it again
            continue
        os.close(fd)
        return path


# ---------------------------------------------------------------------------------------- locking

_held = threading.local()  # the lock files this thread holds (taking one twice would deadlock on flock)


def _lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def _try_flock(fd: int, once: bool) -> bool:
    """Takes the lock without waiting; while the holder has not written its name yet (just after it
    took the lock) tries again for a moment, so that the message can say who holds it."""
    for _ in range(1 if once else 20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if os.fstat(fd).st_size:
                return False
            time.sleep(0.025)
    return False


_NO_BUILDS: "contextvars.ContextVar[Optional[str]]" = contextvars.ContextVar("pyterrier_sci_no_builds", default=None)


@contextlib.contextmanager
def no_builds(why: str = "building is not allowed here") -> Iterator[None]:
    """Within it (this thread, or this task), building an artifact raises :class:`BuildRefused` (saying
    ``why``) before anything is written: every build, growth or derivation of an artifact takes its :func:`lock`
    first (:func:`build_atomically` too), and that is where it stops.  An artifact already built is used as it
    is.  ``pyterrier-sci serve`` runs the pipelines of requests inside it (docs/serve.md, "Confinement")."""
    token = _NO_BUILDS.set(why)
    try:
        yield
    finally:
        _NO_BUILDS.reset(token)


def _refuse_builds(path: PathLike, what: Optional[str]) -> None:
    why = _NO_BUILDS.get()
    if why is not None:
        raise BuildRefused(path, what, why)


@contextlib.contextmanager
def lock(path: PathLike, what: Optional[str] = None) -> Iterator[None]:
    """An exclusive inter-process lock of the artifact ``path`` (``fcntl.flock`` on ``.<name>.lock``
    beside it, created when missing and removed on release).  Waits while another process holds it,
    saying once which process that is; a killed holder's lock is released by the operating system.
    Inside :func:`no_builds`: :class:`BuildRefused`, with nothing created."""
    _refuse_builds(path, what)
    path = Path(path)
    lock_file = _lock_path(path)
    key = str(lock_file.absolute())
    held = _held.__dict__.setdefault("paths", set())
    if key in held:
        raise RuntimeError(f"{path} is already locked by this process (a build of it started another build of it)")
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    said = False
    while True:
        try:
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as e:
            if e.errno != errno.ELOOP:  # ELOOP: a symbolic link planted at the lock's name
                raise
            log.warning("%s was a symbolic link (to %s); it is removed, never followed", lock_file,
                        os.readlink(lock_file))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock_file)
            continue
        try:
            if not _try_flock(fd, said):
                if not said:  # the holder writes who it is right after taking the lock
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
                    log.warning("waiting for %s, which is building %s", holder, what or path)
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            # the previous holder removes the lock file when it is done: a lock on a removed file
            # locks nothing, so start again on the current one
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(lock_file))
            except FileNotFoundError:
                current = False
        except BaseException:
            os.close(fd)
            raise
        if current:
            break
        os.close(fd)
    held.add(key)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        held.discard(key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_file)
        os.close(fd)


# ----------------------------------------------------------------------------- directory artifacts

def _partial_re(path: Path, kind: str) -> "re.Pattern":
    return re.compile(re.escape(path.name) + r"\." + kind + r"-(\d+)(?:\.([A-Za-z0-9_]+))?$")


def _tagged(path: Path, kind: str) -> Path:
    return path.with_name(f"{path.name}.{kind}-{os.getpid()}.{host_tag()}")


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def remove_stale_partials(path: PathLike) -> list:
    """Removes the partial directories of ``path`` whose builder is dead (``<name>.partial-<pid>[.<host>]``,
    or ``.<name>.building-<pid>-…`` of earlier versions), and puts back an artifact that a killed
    overwrite had moved aside (``<name>.replaced-…``) when nothing took its place.  Returns what was
    removed.  Call it holding :func:`lock` of ``path``."""
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    partial, replaced = _partial_re(path, "partial"), _partial_re(path, "replaced")
    building = re.compile(r"\." + re.escape(path.name) + r"\.building-(\d+)-.*$")  # earlier versions' name
    for entry in sorted(path.parent.iterdir()):
        m = partial.match(entry.name) or replaced.match(entry.name) or building.match(entry.name)
        if not m or not _owner_dead(int(m.group(1)), m.group(2) if m.re.groups > 1 else None, entry):
            continue
        if m.re is replaced and not os.path.lexists(path):
            os.rename(entry, path)
            log.warning("restored %s, which an interrupted rebuild had moved aside", path)
            continue
        _remove(entry)
        removed.append(entry)
    return removed


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_RENAMEAT2: Any = None


def exchange(a: PathLike, b: PathLike) -> bool:
    """Swaps the two existing paths ``a`` and ``b`` in one atomic step (Linux's ``renameat2`` with
    ``RENAME_EXCHANGE``): at every instant each name holds one of the two, so a reader of ``b`` never finds it
    missing and a kill leaves the old or the new one there.  False (nothing done) where the system or the
    file system cannot (another platform, an old kernel, a file system without it)."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _RENAMEAT2 = fn
        except (OSError, AttributeError):
            _RENAMEAT2 = False
    if _RENAMEAT2 is False:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _built(path: Path) -> bool:
    return path.exists() and (not path.is_dir() or any(path.iterdir()))


def build_atomically(path: PathLike, build: Callable[[Path], object], overwrite: bool = False,
                     what: Optional[str] = None,
                     manifest: Union[None, Mapping, Callable[[Path], Optional[Mapping]]] = None) -> Path:
    """Builds the artifact ``path`` once, atomically, and returns ``path``.

    ``build(tmp)`` writes the artifact at ``tmp`` (a path that does not exist yet, beside ``path``:
    ``<name>.partial-<pid>.<host>``); when it returns, ``tmp`` is renamed to ``path``.  Builders of the
    same ``path`` in several processes take its :func:`lock`: the second waits and then returns the
    first one's result instead of building again (unless ``overwrite``).  An interrupted build leaves
    only its partial directory, which a later build removes once its process is dead; live builds of
    other processes are never touched.  An existing artifact is returned at once (an existing empty
    directory counts as absent); with ``overwrite`` it is replaced.

    A directory artifact gets a ``manifest.json`` (:data:`MANIFEST_NAME`, written before the rename,
    unless the builder wrote one): the environment that built it (:mod:`pyterrier_sci.manifest`)
    and ``manifest`` - a mapping, or a function of ``tmp`` returning one, called after ``build``.  Inside
    :func:`no_builds`, an artifact not built yet is :class:`BuildRefused`."""
    path = Path(path)
    if not overwrite and _built(path):
        return path
    _refuse_builds(path, what)   # inside no_builds(): nothing is created, not even the parent directory
    check_directory(path.parent, what or str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with lock(path, what):
        if not overwrite and _built(path):  # another process finished it while this one waited
            return path
        remove_stale_partials(path)
        if not overwrite and _built(path):  # put back from where a killed overwrite had moved it
            return path
        tmp = _tagged(path, "partial")
        _remove(tmp)  # left by this same process (a build that failed without cleaning up)
        try:
            build(tmp)
            if not os.path.lexists(tmp):
                raise RuntimeError(f"building {path} produced nothing at {tmp}")
            _write_artifact_manifest(tmp, manifest, path)
            if os.path.lexists(path):
                if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
                    path.rmdir()
                elif exchange(tmp, path):   # overwrite: one atomic swap; tmp now holds the old artifact
                    _remove(tmp)
                    return path
                else:  # no atomic swap here: move the old one aside first, so the swap is two renames
                    old = _tagged(path, "replaced")
                    os.rename(path, old)
                    os.rename(tmp, path)
                    _remove(old)
                    return path
            os.rename(tmp, path)
        finally:
            if os.path.lexists(tmp):
                _remove(tmp)
    return path


#: the file :func:`build_atomically` writes into every directory artifact
MANIFEST_NAME = "manifest.json"


def _write_artifact_manifest(tmp: Path, extra, path: Path) -> None:
    """``tmp/manifest.json`` for a non-empty directory artifact whose builder wrote none (an empty
    one stays empty: it counts as not built)."""
    if tmp.is_symlink() or not tmp.is_dir() or not any(tmp.iterdir()) or os.path.lexists(tmp / MANIFEST_NAME):
        return
    if callable(extra):
        extra = extra(tmp)
    text = json.dumps(artifact_manifest({"artifact": str(Path(path).absolute()), **dict(extra or {})}), indent=2,
                      allow_nan=False) + "\n"
    (tmp / MANIFEST_NAME).write_text(text, encoding="utf-8")


# ------------------------------------------------------------------------------------------ files

_TMP_RE = re.compile(r"\.tmp(\d+)(?:\.([A-Za-z0-9_]+))?-.+$")


def remove_stale_temporaries(directory: PathLike) -> list:
    """Removes the temporary files (``.tmp<pid>[.<host>]-<name>``) that processes of this toolkit
    killed while writing left in ``directory``; those of live processes stay.  Returns what was
    removed."""
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(directory):
            m = _TMP_RE.match(entry.name)
            if not m or not entry.is_file(follow_symlinks=False):
                continue
            if _owner_dead(int(m.group(1)), m.group(2), Path(entry.path)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _temporary(path: Path) -> Path:
    return path.with_name(f".tmp{os.getpid()}.{host_tag()}-{path.name}")


@contextlib.contextmanager
def atomic_file(path: PathLike, what: str = "output") -> Iterator[Path]:
    """Yields a temporary path beside ``path`` to write to, renamed to ``path`` when the block ends
    without an error (and removed when it raises).  The temporary keeps ``path``'s suffixes
    (``.gz`` still compresses).  ``path`` is checked first with :func:`check_file_target`; stale
    temporaries of killed processes in the directory are removed."""
    path = check_file_target(path, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    tmp = create_new_file(_temporary(path))  # a link planted at the temporary's name is removed, not followed
    try:
        try:
            yield tmp
        except OSError as e:  # a full disk while writing says which file (numpy, gzip and pandas name none)
            if e.filename in (None, str(tmp)) and e.errno is not None:
                raise OSError(e.errno, f"{e.strerror or e} (writing {what} {path})", str(path)) from e
            raise
        check_file_target(path, what)  # nothing non-regular appeared meanwhile
        _warn_if_link(path, what)
        os.replace(tmp, path)  # replaces the directory entry: a link there is replaced, never written through
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_text(path: PathLike, text: str, what: str = "output") -> Path:
    """Writes the UTF-8 text file ``path`` through :func:`atomic_file`; returns its path."""
    with atomic_file(path, what) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_pt_meta(directory: PathLike, artifact=None, **fields) -> dict:
    """Writes ``directory/pt_meta.json`` (what ``pt.Artifact.load`` reads) and returns it: ``type``,
    ``format`` and ``package_hint`` from the artifact class ``artifact`` (its ``ARTIFACT_TYPE``,
    ``ARTIFACT_FORMAT``, ``ARTIFACT_PACKAGE_HINT``) unless given in ``fields``, then ``fields``.
    Values JSON cannot hold (paths, ...) are written as strings.  The file itself is written
    atomically (:func:`atomic_write_text`), so it can also mark a directory built piece by piece as
    complete (a sharded index's manifest); inside a :func:`build_atomically` build, call it last."""
    meta = {}
    if artifact is not None:
        meta = {"type": artifact.ARTIFACT_TYPE, "format": artifact.ARTIFACT_FORMAT}
        hint = getattr(artifact, "ARTIFACT_PACKAGE_HINT", None)
        if hint:
            meta["package_hint"] = hint
    meta.update(fields)
    if "type" not in meta or "format" not in meta:
        raise ValueError("pt_meta.json needs a type and a format (give an artifact class or type=, format=)")
    target = Path(directory) / "pt_meta.json"
    atomic_write_text(target, json.dumps(meta, indent=2, default=str), what=str(target))
    return meta


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def sha256_file(path: PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_verified: dict = {}  # path -> the stat it had when its checksum matched (hash each file once per process)


def _stat_key(path: Path):
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev


def record_checksum(path: PathLike) -> Path:
    """Writes ``<path>.sha256`` (``sha256sum`` format) beside ``path`` and returns its path."""
    path = Path(path)
    key = _stat_key(path)
    digest = sha256_file(path)
    side = _checksum_path(path)
    tmp = create_new_file(_temporary(side))
    try:
        tmp.write_text(f"{digest}  {path.name}\n", encoding="utf-8")
        _warn_if_link(side, "a checksum record")
        os.replace(tmp, side)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _verified[str(path.absolute())] = key
    return side


def verify_checksum(path: PathLike) -> Optional[bool]:
    """Whether ``path`` matches its ``<path>.sha256``: True, False (damaged or unreadable), or None
    when there is no record of it."""
    path = Path(path)
    side = _checksum_path(path)
    try:
        expected = side.read_text(encoding="utf-8").split()[0]
    except (FileNotFoundError, IndexError, UnicodeDecodeError):
        return None if not side.exists() else False
    try:
        key = _stat_key(path)
        if _verified.get(str(path.absolute())) == key:
            return True
        ok = sha256_file(path) == expected
    except OSError:
        return False
    if ok:
        _verified[str(path.absolute())] = key
    return ok


def discard_if_damaged(path: PathLike, what: str, missing_record_is_damage: bool = True) -> bool:
    """Deletes ``path`` and its checksum with a :class:`DamagedFileWarning` when it does not match its
    checksum (or has none and ``missing_record_is_damage``); returns whether it was discarded."""
    path = Path(path)
    if not os.path.lexists(path):
        return False
    ok = verify_checksum(path)
    if ok or (ok is None and not missing_record_is_damage):
        return False
    reason = ("does not match its checksum" if ok is False
              else "has no checksum record (its writing may have been interrupted)")
    warnings.warn(f"{what} {path} {reason}; it is removed and rebuilt", DamagedFileWarning, stacklevel=3)
    discard(path)
    return True


def discard(path: PathLike) -> None:
    """Removes a file and its checksum record."""
    path = Path(path)
    for p in (path, _checksum_path(path)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    _verified.pop(str(path.absolute()), None)


# ------------------------------------------------------------------------------------ the work directory

def work_dir() -> Path:
    """Where components keep what they build (indexes, encoded corpora): ``$PYTERRIER_SCI_HOME``,
    else ``<ir_datasets home>/sci-work``.  A setting that names a regular file (or a path under one)
    is a :class:`~pyterrier_sci.artifacts.PathError` naming it."""
    value = os.environ.get("PYTERRIER_SCI_HOME")
    if value:
        return check_directory(value, "$PYTERRIER_SCI_HOME")
    import ir_datasets
    return check_directory(Path(ir_datasets.util.home_path()) / "sci-work",
                           "the work directory (set $PYTERRIER_SCI_HOME to use another)")
