"""A persistent cache of LLM responses: one SQLite file in WAL mode, keyed by the SHA-256 of the
request (never the key or the URL), each response committed as it arrives, safe under concurrent
threads and processes of one machine, picklable.  See ``docs/llm.md``, "Cache".

Many processes on many nodes (``pyterrier_sci.scale.on_ray``): SQLite must not be shared across
nodes or over NFS, so there one :class:`CacheService` (a Ray actor on the driver's node) owns the
file and every worker process routes its caches through it (:func:`use_service`): each response
is committed by the service before the worker goes on.  See ``docs/scale.md``.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from .budget import LedgerBook
from .errors import LLMCacheError, LLMRunStopped

T = TypeVar("T")

FILENAME = "responses.sqlite3"

#: in a worker process of a distributed run: the cache service every ResponseCache goes through
#: (an object with ``get(directory, key)``, ``put(directory, key, value, model)``,
#: ``count(directory)``, ``clear(directory)``); ``None``: the SQLite file is opened here
_SERVICE: Optional[Any] = None


def use_service(service: Optional[Any]) -> None:
    """Routes every :class:`ResponseCache` of this process through ``service`` (``None``: back to
    the local file).  Called in the worker processes of a distributed run."""
    global _SERVICE
    _SERVICE = service


def service_in_use() -> Optional[Any]:
    return _SERVICE


def cache_key(payload: Any) -> str:
    """The cache key of a request payload (anything JSON-serialisable)."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf8")).hexdigest()


class ResponseCache:
    def __init__(self, directory):
        self.directory = Path(directory)
        self.path = self.directory / FILENAME
        self._local = threading.local()
        self._init_lock = threading.Lock()
        self._initialised = False

    def __getstate__(self):
        return {"directory": self.directory}

    def __setstate__(self, state):
        self.__init__(state["directory"])

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            # SQLite opens (and writes) through a symbolic link: one planted at the file's name, or at its
            # WAL / shared-memory / journal files, would send the writes to the file it names
            for p in (self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm", "-journal"))):
                if p.is_symlink():
                    raise LLMCacheError(f"the LLM response cache {p} is a symbolic link (to {os.readlink(p)}); the "
                                        "cache is never written through a link: remove the link, or give another "
                                        "cache_dir")
            conn = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None,
                                   check_same_thread=False)
            try:
                conn.execute("PRAGMA busy_timeout=60000")
                with self._init_lock:
                    if not self._initialised:
                        conn.execute("PRAGMA journal_mode=WAL")
                        conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, "
                                     "model TEXT, value TEXT NOT NULL, created REAL)")
                        self._initialised = True
                conn.execute("PRAGMA synchronous=NORMAL")
            except BaseException:
                conn.close()
                raise
            self._local.conn = conn
        return conn

    def _sql(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)``; a file SQLite cannot use (damaged, not a database, a full disk) is one
        :class:`~pyterrier_sci.llm.errors.LLMCacheError` naming it ("database is locked" passes
        through: :meth:`_put` retries it)."""
        try:
            return fn(self._conn())
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise
            raise self._error(e) from None

    def _error(self, e: BaseException) -> LLMCacheError:
        why = " ".join(str(e).split()) or type(e).__name__
        if "full" in why:
            todo = ("free space there, or set the LLM setting cache_dir (or $PYTERRIER_SCI_LLM_CACHE) to another "
                    "directory")
        else:
            todo = ("it is damaged: delete it (its cached responses are lost; they are asked again), or set the LLM "
                    "setting cache_dir (or $PYTERRIER_SCI_LLM_CACHE) to another directory")
        return LLMCacheError(f"the LLM response cache {self.path} cannot be used ({why}): {todo}")

    def get(self, key: str) -> Optional[dict]:
        if _SERVICE is not None:
            return _SERVICE.get(str(self.directory), key)
        return self._get(key)

    def _get(self, key: str) -> Optional[dict]:
        row = self._sql(lambda c: c.execute("SELECT value FROM responses WHERE key=?", (key,)).fetchone())
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except (ValueError, TypeError):  # a damaged entry is a miss, never an answer
            return None

    def put(self, key: str, value: dict, model: str = "") -> None:
        """Stores a response; it is committed (on disk) when this returns."""
        if _SERVICE is not None:
            return _SERVICE.put(str(self.directory), key, value, model)
        return self._put(key, value, model)

    def _put(self, key: str, value: dict, model: str = "") -> None:
        blob = json.dumps(value, ensure_ascii=False)
        for attempt in range(5):
            try:
                self._sql(lambda c: c.execute("INSERT OR REPLACE INTO responses(key, model, value, created) "
                                              "VALUES (?, ?, ?, ?)", (key, model, blob, time.time())))
                return
            except sqlite3.OperationalError:  # "database is locked" beyond busy_timeout
                if attempt == 4:
                    raise
                time.sleep(0.1 * (attempt + 1))

    def count(self) -> int:
        return self._sql(lambda c: c.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def __len__(self) -> int:
        if _SERVICE is not None:
            return _SERVICE.count(str(self.directory))
        return self.count()

    def clear(self) -> None:
        if _SERVICE is not None:
            return _SERVICE.clear(str(self.directory))
        self._sql(lambda c: c.execute("DELETE FROM responses"))

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r})"


class CacheService:
    """The one owner of the cache files of a distributed run (run as a Ray actor on the driver's
    node): opens each directory's SQLite file locally and answers the workers' gets and puts;
    a put returns once the response is committed.  Thread-safe (a threaded actor)."""

    def __init__(self):
        self._caches = {}
        self._lock = threading.Lock()
        self.ledgers = LedgerBook()   # the run's LLM budgets, one for all workers
        self._stopping = ""

    def stop(self, why: str) -> None:
        """The run is stopping: a get (which every call makes before it sends) raises :class:`LLMRunStopped`, so
        no new call is sent; puts still commit, so the answers of the calls in flight are kept."""
        self._stopping = why or "the run stopped"

    def resume(self) -> None:
        """A new run: gets answer again."""
        self._stopping = ""

    def _cache(self, directory: str) -> ResponseCache:
        with self._lock:
            c = self._caches.get(directory)
            if c is None:
                c = self._caches[directory] = ResponseCache(directory)
            return c

    def get(self, directory: str, key: str) -> Optional[dict]:
        if self._stopping:
            raise LLMRunStopped(f"no new LLM call: {self._stopping}")
        return self._cache(directory)._get(key)

    def put(self, directory: str, key: str, value: dict, model: str = "") -> None:
        self._cache(directory)._put(key, value, model)

    def count(self, directory: str) -> int:
        return self._cache(directory).count()

    def clear(self, directory: str) -> None:
        self._cache(directory).clear()

    # -- the run's LLM budgets (pyterrier_sci.llm.budget.LedgerBook) ---------------------------
    def ledger_load(self, key, limits, state) -> None:
        self.ledgers.load(key, limits, state)

    def ledger_reserve(self, key, prompt_tokens, max_tokens, price):
        return self.ledgers.reserve(key, prompt_tokens, max_tokens, price)

    def ledger_settle(self, key, reservation, prompt_tokens, completion_tokens, price) -> None:
        self.ledgers.settle(key, reservation, prompt_tokens, completion_tokens, price)

    def ledger_release(self, key, reservation) -> None:
        self.ledgers.release(key, reservation)

    def ledger_state(self, key):
        return self.ledgers.state(key)
