"""A persistent cache of LLM responses: one SQLite file in WAL mode, keyed by the SHA-256 of the
request (never the key or the URL), each response committed as it arrives, safe under concurrent
threads and processes, picklable.  See ``docs/llm.md``, "Cache".
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Optional

FILENAME = "responses.sqlite3"


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
            conn = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=60000")
            with self._init_lock:
                if not self._initialised:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, "
                                 "model TEXT, value TEXT NOT NULL, created REAL)")
                    self._initialised = True
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> Optional[dict]:
        row = self._conn().execute("SELECT value FROM responses WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError:  # a damaged entry is a miss, never an answer
            return None

    def put(self, key: str, value: dict, model: str = "") -> None:
        blob = json.dumps(value, ensure_ascii=False)
        for attempt in range(5):
            try:
                self._conn().execute("INSERT OR REPLACE INTO responses(key, model, value, created) "
                                     "VALUES (?, ?, ?, ?)", (key, model, blob, time.time()))
                return
            except sqlite3.OperationalError:  # "database is locked" beyond busy_timeout
                if attempt == 4:
                    raise
                time.sleep(0.1 * (attempt + 1))

    def __len__(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def clear(self) -> None:
        self._conn().execute("DELETE FROM responses")

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r})"
