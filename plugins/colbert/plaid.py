"""ColBERT late-interaction retrieval over a PLAID index (``colbert-ai``), on CPU: the
:class:`ColBERTIndex` artifact (``multi_vector_index`` / ``plaid``) with its indexer (one supervised
worker process, atomic) and retriever (PLAID search, or exact MaxSim re-scoring of a result frame),
and the ``colbert`` pipeline component.  Details: ``docs/colbert.md``.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.artifacts import build_atomically, write_pt_meta
from pyterrier_sci.corpus import dataset_of, sorted_results
from pyterrier_sci.registry import DATASET, MAX_RESULTS, PATH, Param, check_artifact, check_fields, params  # noqa: E402

from ._compat import (
    ColBERTError,
    ColBERTTimeoutError,
    ColBERTWorkerError,
    _tail,
    ensure_extensions,
    import_colbert,
    quiet,
    worker_env,
)
from .checkpoint import (
    COLBERTV2,
    DEFAULT_CHECKPOINT,
    CheckpointNotFoundError,
    build_checkpoint,
    checkpoint_slug,
    resolve_checkpoint,
)

__all__ = ["ColBERTIndex", "ColBERTIndexer", "ColBERTRetriever", "colbert_component", "build_checkpoint",
           "resolve_checkpoint", "ColBERTError", "ColBERTTimeoutError", "ColBERTWorkerError",
           "CheckpointNotFoundError", "COLBERTV2", "DEFAULT_CHECKPOINT"]

PLAID_DIR = "plaid"
# loaded searchers, shared by every ColBERTIndex object of the same index and checkpoint (a pipeline that
# names `colbert` several times loads the index and the query encoder once); the lock serialises
# searches, which set the shared searcher's settings per call
_SEARCHERS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_LOCK = threading.RLock()


class ColBERTIndex(pta.Artifact, pt.Indexer):
    """A ColBERT PLAID index directory: ``pt_meta.json``, ``docnos.npids`` (docno of each passage id)
    and colbert-ai's own files under ``plaid/``.  Passage texts are not stored.

    Args:
        path: the index directory.
        checkpoint: the ColBERT checkpoint that encodes documents and queries (``"default"``, a hub id
            such as ``"colbert-ir/colbertv2.0"``, or a local checkpoint directory).  For a built index
            the one recorded at indexing time is used unless another is given.
        verbose: progress bars (indexing).
    """
    ARTIFACT_TYPE = "multi_vector_index"
    ARTIFACT_FORMAT = "plaid"
    ARTIFACT_PACKAGE_HINT = "pyterrier-sci[colbert]"

    def __init__(self, path: Union[str, Path], checkpoint: Optional[str] = None, verbose: bool = True):
        super().__init__(path)
        self._checkpoint = None if checkpoint is None else str(checkpoint)
        self.verbose = verbose
        self._searcher = None
        self._docnos = None

    # --- state
    def built(self) -> bool:
        """Whether a complete index exists at :attr:`path`."""
        return (Path(self.path) / "pt_meta.json").exists()

    def metadata(self) -> Dict[str, Any]:
        if not self.built():
            raise FileNotFoundError(f"no ColBERT index at {self.path}")
        with open(Path(self.path) / "pt_meta.json", "rt") as f:
            return json.load(f)

    @property
    def checkpoint(self) -> str:
        if self._checkpoint is not None:
            return self._checkpoint
        if self.built():
            return self.metadata()["checkpoint"]
        return DEFAULT_CHECKPOINT

    def __len__(self) -> int:
        return int(self.metadata()["doc_count"])

    def __repr__(self) -> str:
        return f"ColBERTIndex({str(self.path)!r}, checkpoint={self.checkpoint!r})"

    def docnos(self):
        """The ``npids.Lookup`` of passage id <-> docno."""
        if self._docnos is None:
            from npids import Lookup
            self.metadata()
            self._docnos = Lookup(Path(self.path) / "docnos.npids")
        return self._docnos

    # --- indexing
    def indexer(self, text_field: Union[str, Sequence[str]] = "text", doc_maxlen: int = 300, nbits: int = 2,
                kmeans_niters: int = 4, index_bsize: int = 64, threads: Optional[int] = None,
                timeout: Optional[float] = None, overwrite: bool = False,
                verbose: Optional[bool] = None) -> "ColBERTIndexer":
        """An indexer writing this index; see :class:`ColBERTIndexer`."""
        return ColBERTIndexer(self, text_field=text_field, doc_maxlen=doc_maxlen, nbits=nbits,
                              kmeans_niters=kmeans_niters, index_bsize=index_bsize, threads=threads,
                              timeout=timeout, overwrite=overwrite,
                              verbose=self.verbose if verbose is None else verbose)

    def index(self, it: Iterable[Dict[str, Any]]) -> "ColBERTIndex":
        return self.indexer().index(it)

    # --- retrieval
    def retriever(self, num_results: int = 1000, query_maxlen: int = 32, ncells: Optional[int] = None,
                  centroid_score_threshold: Optional[float] = None, ndocs: Optional[int] = None,
                  verbose: bool = False) -> "ColBERTRetriever":
        """A retriever over this index; see :class:`ColBERTRetriever`."""
        return ColBERTRetriever(self, num_results=num_results, query_maxlen=query_maxlen, ncells=ncells,
                                centroid_score_threshold=centroid_score_threshold, ndocs=ndocs, verbose=verbose)

    def searcher(self):
        """colbert-ai's ``Searcher`` over this index (loaded once; the C++ extensions are built first
        when missing)."""
        with _LOCK:
            if self._searcher is None:
                meta = self.metadata()
                key = (str(Path(self.path).resolve()), self.checkpoint,
                       os.stat(Path(self.path) / "pt_meta.json").st_mtime_ns)
                if key in _SEARCHERS:
                    self._searcher = _SEARCHERS[key]
                    return self._searcher
                import_colbert()
                ensure_extensions()
                from colbert import Searcher
                from colbert.data import Collection
                ckpt = resolve_checkpoint(self.checkpoint)
                with quiet():
                    # the searcher never reads passage texts (they are not stored): a placeholder collection
                    searcher = Searcher(index=str(Path(self.path).resolve() / PLAID_DIR), checkpoint=ckpt,
                                        collection=Collection(data=[""]), verbose=0)
                if not (meta["doc_count"] == len(self.docnos()) == len(searcher.ranker.doclens)):
                    raise ColBERTError(f"the ColBERT index at {self.path} is inconsistent: {meta['doc_count']} "
                                       f"documents, {len(self.docnos())} docnos, "
                                       f"{len(searcher.ranker.doclens)} passages")
                self._searcher = _SEARCHERS[key] = searcher
            return self._searcher

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_searcher"] = None  # reloaded where unpickled
        state["_docnos"] = None
        return state


class ColBERTIndexer(pt.Indexer):
    """Builds a :class:`ColBERTIndex` from dicts with ``docno`` and the text field(s).

    Args:
        index: the target :class:`ColBERTIndex` (or its path).
        text_field: field, or fields joined with a space, that is encoded.
        doc_maxlen: passage length in word pieces; longer passages are truncated (chunk long texts
            first, e.g. with ``pt.text.sliding``).
        nbits: bits per dimension of PLAID's residual compression (2 is ColBERTv2's setting).
        kmeans_niters: k-means iterations for the centroids.
        index_bsize: encoding batch size.
        threads: torch threads in the worker (default: torch's default).
        timeout: seconds after which the build is stopped with :class:`ColBERTTimeoutError` (default:
            no limit; a dead worker is reported at once either way).
        overwrite: replace an existing index (otherwise an existing index is an error).
        verbose: progress bar.

    The index is built in a partial directory beside the target and renamed into place at the end,
    so an interrupted or failed build leaves nothing at the target path; builders of the same index
    in several processes take a lock, the second waits and keeps the first one's index
    (:func:`pyterrier_sci.artifacts.build_atomically`).
    """

    def __init__(self, index: Union[ColBERTIndex, str, Path], text_field: Union[str, Sequence[str]] = "text",
                 doc_maxlen: int = 300, nbits: int = 2, kmeans_niters: int = 4, index_bsize: int = 64,
                 threads: Optional[int] = None, timeout: Optional[float] = None, overwrite: bool = False,
                 verbose: bool = True):
        self.index_ref = index if isinstance(index, ColBERTIndex) else ColBERTIndex(index)
        self.text_field = text_field
        self.doc_maxlen = doc_maxlen
        self.nbits = nbits
        self.kmeans_niters = kmeans_niters
        self.index_bsize = index_bsize
        self.threads = threads
        self.timeout = timeout
        self.overwrite = overwrite
        self.verbose = verbose
        if nbits not in (1, 2, 4, 8):
            raise ValueError(f"nbits must be 1, 2, 4 or 8, not {nbits!r}")
        if doc_maxlen < 8:
            raise ValueError(f"doc_maxlen must be at least 8 word pieces, not {doc_maxlen!r}")

    def index_inputs(self):
        fields = [self.text_field] if isinstance(self.text_field, str) else list(self.text_field)
        return [["docno"] + fields]

    def index(self, it: Iterable[Dict[str, Any]]) -> ColBERTIndex:
        from ._worker import sample_size
        target = Path(self.index_ref.path)
        if target.exists() and (not target.is_dir() or any(target.iterdir())) and not self.overwrite:
            raise FileExistsError(f"{target} already exists; pass overwrite=True to replace it")
        checkpoint = self.index_ref.checkpoint
        checkpoint_dir = resolve_checkpoint(checkpoint)
        ensure_extensions()

        def build(tmp: Path) -> None:
            tmp.mkdir()
            n = self._write_inputs(it, tmp)
            if n == 0:
                raise ValueError("no documents to index")
            args = {"checkpoint": checkpoint_dir, "collection": str(tmp / "collection.txt"),
                    "index_path": str(tmp / PLAID_DIR), "root": str(tmp / "colbert-run"),
                    "doc_maxlen": self.doc_maxlen, "nbits": self.nbits, "kmeans_niters": self.kmeans_niters,
                    "index_bsize": self.index_bsize, "threads": self.threads}
            started = time.perf_counter()
            timings = _run_worker(args, tmp, n, sample_size(n), desc=f"ColBERT indexing {target.name}",
                                  timeout=self.timeout, verbose=self.verbose)
            plaid_meta = json.loads((tmp / PLAID_DIR / "metadata.json").read_text())
            for scratch in ("collection.txt", "colbert-run", "worker-args.json", "colbert.log"):
                p = tmp / scratch
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            write_pt_meta(
                tmp, ColBERTIndex,
                checkpoint=checkpoint, doc_count=n, text_field=self.text_field,
                doc_maxlen=self.doc_maxlen, nbits=self.nbits, dim=plaid_meta["config"]["dim"],
                num_embeddings=plaid_meta["num_embeddings"], num_partitions=plaid_meta["num_partitions"],
                build_seconds=round(time.perf_counter() - started, 3), build_timings=timings,
                colbert_ai=_colbert_version())

        # locked: a second process building the same index waits and keeps the first one's index
        build_atomically(target, build, overwrite=self.overwrite, what=f"the ColBERT index {target}")
        return ColBERTIndex(target, checkpoint=self.index_ref._checkpoint, verbose=self.index_ref.verbose)

    def _write_inputs(self, it: Iterable[Dict[str, Any]], tmp: Path) -> int:
        """Writes the passages (one a line) for the worker and the docno lookup; returns their count."""
        import itertools

        from npids import Lookup
        fields = [self.text_field] if isinstance(self.text_field, str) else list(self.text_field)
        it = iter(it)
        first = next(it, None)
        if first is None:
            return 0
        it = itertools.chain([first], it)
        n = 0
        with open(tmp / "collection.txt", "w", encoding="utf-8") as out, \
                Lookup.builder(tmp / "docnos.npids") as docnos:
            for doc in it:
                try:
                    docno = doc["docno"]
                    text = " ".join(str(doc[f]) for f in fields)
                except KeyError as e:
                    raise ValueError(f"ColBERT indexing needs 'docno' and {fields} in every document; "
                                     f"document {doc.get('docno', n)!r} has no {e.args[0]!r}") from None
                out.write(" ".join(text.split()) + "\n")
                docnos.add(str(docno))
                n += 1
        return n


def _colbert_version() -> str:
    from importlib.metadata import version
    return version("colbert-ai")


def _run_worker(args: Dict[str, Any], tmp: Path, n: int, sample: int, desc: str, timeout: Optional[float],
                verbose: bool) -> Dict[str, float]:
    """Runs the indexing worker and supervises it: progress events to a bar, a dead worker or an
    error event to :class:`ColBERTWorkerError`, the timeout to :class:`ColBERTTimeoutError`.
    Returns the worker's wall-clock time, split into k-means and the rest (encoding, writing)."""
    rfd, wfd = os.pipe()
    args = dict(args, progress_fd=wfd)
    (tmp / "worker-args.json").write_text(json.dumps(args))
    log_path = tmp / "colbert.log"
    cmd = [sys.executable, "-m", "pyterrier_sci.plugins.colbert._worker", "index", str(tmp / "worker-args.json")]
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    pass_fds=(wfd,), cwd=str(tmp), env=worker_env(), start_new_session=True)
    finally:
        os.close(wfd)
    bar = pt.tqdm(total=sample + n, desc=desc, unit="passage", disable=not verbose)
    bar.set_postfix_str("sample for k-means")
    deadline = None if timeout is None else time.monotonic() + timeout
    buf, events, eof, done = b"", [], False, 0
    timings = {"start": time.monotonic()}
    try:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise ColBERTTimeoutError(f"building the ColBERT index took longer than timeout={timeout} s and was "
                                          f"stopped ({done:,} of {sample + n:,} passage encodings done)")
            if not eof:
                ready, _, _ = select.select([rfd], [], [], 0.25)
                if ready:
                    chunk = os.read(rfd, 1 << 16)
                    eof = not chunk
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        event = json.loads(line)
                        if event["event"] == "advance":
                            done += event["n"]
                            bar.update(event["n"])
                        elif event["event"] == "kmeans":
                            timings[f"kmeans_{event['state']}"] = time.monotonic()
                            bar.set_postfix_str("k-means" if event["state"] == "start" else "whole collection")
                        else:
                            events.append(event)
            elif proc.poll() is not None:
                break
            else:
                time.sleep(0.1)
            if proc.poll() is not None and not eof and not select.select([rfd], [], [], 0)[0]:
                eof = True  # the worker is gone and nothing is left to read
    except BaseException:
        _kill(proc)
        raise
    finally:
        os.close(rfd)
        bar.close()
    errors = [e for e in events if e["event"] == "error"]
    if errors:
        e = errors[0]
        raise ColBERTWorkerError(f"building the ColBERT index failed: {e['type']}: {e['message']}\n"
                                 f"{_tail(e.get('traceback'), 1500)}")
    if proc.returncode != 0 or not any(e["event"] == "done" for e in events):
        code = proc.returncode
        oom = " (often the out-of-memory killer)" if code == -9 else ""
        how = (f"was killed by {signal.Signals(-code).name}{oom}" if code is not None and code < 0
               else f"exited with status {code}")
        raise ColBERTWorkerError(f"the ColBERT indexing worker {how} before finishing; the end of its log:\n"
                                 f"{_tail(log_path.read_bytes() if log_path.exists() else None)}")
    total = time.monotonic() - timings["start"]
    kmeans = timings.get("kmeans_end", 0.0) - timings.get("kmeans_start", 0.0)
    return {"worker_s": round(total, 3), "kmeans_s": round(kmeans, 3), "encode_and_write_s": round(total - kmeans, 3)}


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it started
        except ProcessLookupError:
            pass
    proc.wait()


class ColBERTRetriever(pt.Transformer):
    """ColBERT retrieval (PLAID) over a :class:`ColBERTIndex`.

    Given a query frame it retrieves the top ``num_results`` passages of each query; given a result
    frame (``docno`` present) it re-scores exactly those documents with exact MaxSim over their stored
    (decompressed) embeddings and re-ranks them.  Input columns are kept; ranks are 0-based.

    Args:
        index: a :class:`ColBERTIndex` (or its path).
        num_results: results per query when retrieving.
        query_maxlen: query length in word pieces (ColBERTv2: 32; longer queries are truncated,
            shorter ones padded with [MASK] query augmentation).
        ncells, centroid_score_threshold, ndocs: PLAID's search settings (default: colbert-ai's, chosen
            from ``num_results``).
        corpus, fields, index_options: when the index is not built yet, build it on first use from the
            documents of this ir_datasets id (``fields`` joined, default the dataset's
            ``default_text()``), with these :meth:`ColBERTIndex.indexer` options.
        verbose: progress bar over queries.
    """

    def __init__(self, index: Union[ColBERTIndex, str, Path], num_results: int = 1000, query_maxlen: int = 32,
                 ncells: Optional[int] = None, centroid_score_threshold: Optional[float] = None,
                 ndocs: Optional[int] = None, corpus: Optional[str] = None, fields: Optional[Sequence[str]] = None,
                 index_options: Optional[Dict[str, Any]] = None, verbose: bool = False):
        self.index = index if isinstance(index, ColBERTIndex) else ColBERTIndex(index)
        self.num_results = num_results
        self.query_maxlen = query_maxlen
        self.ncells = ncells
        self.centroid_score_threshold = centroid_score_threshold
        self.ndocs = ndocs
        self.corpus = corpus
        self.fields = tuple(fields) if fields else None
        self.index_options = dict(index_options or {})
        self.verbose = verbose

    def built_index(self) -> ColBERTIndex:
        """The index, built from ``corpus`` first when it does not exist yet."""
        if not self.index.built():
            if not self.corpus:
                raise FileNotFoundError(f"no ColBERT index at {self.index.path} (and no corpus to build it from)")
            from pyterrier_sci.corpus import corpus_texts
            opts = dict(self.index_options)
            self.index.indexer(text_field="text", **opts).index(corpus_texts(self.corpus, self.fields))
        return self.index

    def _search_settings(self, k: int) -> Dict[str, Any]:
        # colbert-ai's defaults by k (Searcher.dense_search), set explicitly on every call since
        # dense_search would otherwise keep the first call's values for all later ones
        ncells, thr, ndocs = (1, 0.5, 256) if k <= 10 else (2, 0.45, 1024) if k <= 100 else (4, 0.4, max(k * 4, 4096))
        if self.centroid_score_threshold is not None:
            thr = self.centroid_score_threshold
        return {"ncells": self.ncells or ncells, "centroid_score_threshold": thr,
                "ndocs": self.ndocs or ndocs, "query_maxlen": self.query_maxlen}

    def _encode(self, searcher, queries: List[str]):
        return searcher.checkpoint.queryFromText(queries, bsize=128, to_cpu=True)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.query_frame(extra_columns=["query"], mode="retrieve")
            v.result_frame(extra_columns=["query"], mode="rerank")
        if v.mode == "retrieve":
            return self._retrieve(inp)
        return self._rescore(inp)

    def _retrieve(self, inp: pd.DataFrame) -> pd.DataFrame:
        cols = list(inp.columns) + [c for c in ("docno", "score", "rank") if c not in inp.columns]
        if len(inp) == 0:
            return pd.DataFrame(columns=cols)
        index = self.built_index()
        searcher = index.searcher()
        inp = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns]).reset_index(drop=True)
        all_pids, all_scores, counts = [], [], []
        with _LOCK:
            searcher.configure(**self._search_settings(self.num_results))
            searcher.checkpoint.query_tokenizer.query_maxlen = self.query_maxlen
            with quiet():
                qvecs = self._encode(searcher, inp["query"].astype(str).tolist())
            for i in pt.tqdm(range(len(inp)), desc="ColBERT", unit="q", disable=not self.verbose):
                with quiet():
                    pids, _, scores = searcher.dense_search(qvecs[i:i + 1], k=self.num_results)
                all_pids.extend(pids)
                all_scores.extend(scores)
                counts.append(len(pids))
        counts = np.asarray(counts)
        out = inp.iloc[np.repeat(np.arange(len(inp)), counts)].reset_index(drop=True)
        out["docno"] = np.asarray(index.docnos().fwd.lookup(np.asarray(all_pids, dtype=np.int64)), dtype=object) \
            if all_pids else np.array([], dtype=object)
        out["score"] = np.asarray(all_scores, dtype=np.float64)
        out["rank"] = np.concatenate([np.arange(c) for c in counts]) if len(counts) else np.array([], dtype=int)
        return out[cols]

    def _rescore(self, inp: pd.DataFrame) -> pd.DataFrame:
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        index = self.built_index()
        searcher = index.searcher()
        lookup = index.docnos()
        out = inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns]).reset_index(drop=True)
        docnos = out["docno"].astype(str).to_numpy()
        missing = sorted(d for d in set(docnos) if d not in lookup.inv)
        if missing:
            raise ValueError(f"ColBERT re-scoring needs documents of the index; {len(missing)} docno(s) are not in "
                             f"{index.path}: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        pids = np.asarray(lookup.inv.lookup(list(docnos)), dtype=np.int64)
        scores = np.empty(len(out), dtype=np.float64)
        groups = out.groupby("qid", sort=False).indices
        firsts = [idx[0] for idx in groups.values()]
        with _LOCK, quiet():
            searcher.configure(**self._search_settings(self.num_results))
            searcher.checkpoint.query_tokenizer.query_maxlen = self.query_maxlen
            qvecs = self._encode(searcher, out["query"].astype(str).to_numpy()[firsts].tolist())
            for qi, idx in enumerate(groups.values()):
                unique = np.unique(pids[idx])
                ranked, ranked_scores = searcher.ranker.rank(searcher.config, qvecs[qi:qi + 1], pids=unique.tolist())
                by_pid = dict(zip(ranked, ranked_scores))
                scores[idx] = [by_pid[p] for p in pids[idx]]
        out["score"] = scores
        out = sorted_results(out).reset_index(drop=True)
        out["rank"] = out.groupby("qid").cumcount()
        return out

    def fuse_rank_cutoff(self, k: int) -> Optional["ColBERTRetriever"]:
        # re-scoring must score every input document, so a cutoff cannot be pushed into num_results
        return None

    def __repr__(self) -> str:
        return f"ColBERTRetriever({str(self.index.path)!r}, num_results={self.num_results})"

    def _key(self):
        return (str(self.index.path), self.index.checkpoint, self.num_results, self.query_maxlen, self.ncells,
                self.centroid_score_threshold, self.ndocs)

    def __eq__(self, other) -> bool:
        return isinstance(other, ColBERTRetriever) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("ColBERTRetriever",) + self._key())


@params(dataset=Param(DATASET, optional=True), checkpoint=Param(str, min_len=1), index=Param(PATH, optional=True),
        num_results=Param(int, min=1, max=MAX_RESULTS), fields=Param(list, item=str, min_len=1, optional=True),
        doc_maxlen=Param(int, min=1, max=100_000), nbits=Param(int, choices=None, min=1, max=8),
        kmeans_niters=Param(int, min=1, max=1000), query_maxlen=Param(int, min=1, max=100_000),
        ncells=Param(int, min=1, max=1_000_000, optional=True),
        centroid_score_threshold=Param(float, min=-1, max=1, optional=True),
        ndocs=Param(int, min=1, max=10_000_000, optional=True), threads=Param(int, min=1, max=1024, optional=True),
        timeout=Param(float, min=0.001, max=1e7, optional=True))
def colbert_component(*, context=None, dataset: Optional[str] = None, checkpoint: str = DEFAULT_CHECKPOINT,
                      index: Optional[str] = None, num_results: int = 1000, fields: Optional[Sequence[str]] = None,
                      doc_maxlen: int = 300, nbits: int = 2, kmeans_niters: int = 4, query_maxlen: int = 32,
                      ncells: Optional[int] = None, centroid_score_threshold: Optional[float] = None,
                      ndocs: Optional[int] = None, threads: Optional[int] = None, timeout: Optional[float] = None,
                      verbose: bool = True) -> ColBERTRetriever:
    """``colbert``: ColBERT late interaction over a PLAID index (colbert-ai) of the dataset's corpus.

    The checkpoint is ``"default"`` (built from the offline all-MiniLM-L6-v2: untrained ColBERT, for
    tests), ``"colbert-ir/colbertv2.0"`` (the standard ColBERTv2, from the hub) or a local checkpoint
    directory.  The index of ``dataset`` (or the pipeline's dataset; ``fields`` joined, default the
    documents' ``default_text()``) lives under the work directory and is built on first use; the other
    parameters are those of :meth:`ColBERTIndex.indexer` and :class:`ColBERTRetriever`."""
    corpus = dataset_of(dataset, context, "colbert", required=False)
    if index is not None:  # built there on first use when missing
        check_artifact(index, {"multi_vector_index": ["plaid"]}, "colbert", must_exist=False)
    check_fields(corpus, fields, "colbert")
    if index is None:
        if not corpus:
            raise ValueError("colbert needs a corpus: dataset=... (an ir_datasets id), the pipeline's dataset, "
                             "or index=<path of a built ColBERT index>")
        from pyterrier_sci.corpus import index_path
        from pyterrier_sci.data import work_dir
        work = context.workdir() if context is not None else work_dir()
        index = str(index_path(work, corpus, f"colbert-{checkpoint_slug(checkpoint)}-l{doc_maxlen}-b{nbits}", fields))
    options = {"doc_maxlen": doc_maxlen, "nbits": nbits, "kmeans_niters": kmeans_niters, "threads": threads,
               "timeout": timeout, "verbose": verbose}
    return ColBERTRetriever(ColBERTIndex(index, checkpoint=checkpoint, verbose=verbose), num_results=num_results,
                            query_maxlen=query_maxlen, ncells=ncells, centroid_score_threshold=centroid_score_threshold,
                            ndocs=ndocs, corpus=corpus, fields=fields, index_options=options)
