"""Sharded dense indexing on Ray: :func:`build_sharded_index` and ``pyterrier-sci index`` encode a
corpus into N ``pyterrier_dr.FlexIndex`` shards plus a manifest (``pt_meta.json``, type ``dense_index``,
format ``sharded_flex``; the layout is in ``docs/scale.md``).  Encoder actors each load the model once
and build whole shards: each streams its contiguous slice of the corpus, encodes it batch by batch and
writes the shard atomically, so no process holds the corpus text or all vectors.  A rerun after an
interruption redoes only the shards without a complete directory; ``fanout.py`` searches the result.

The encoder runs on any backend and precision (:func:`.backends.load_encoder`); an OpenVINO / ONNX
export is built once by the driver before the workers start, and they load it from the cache.  The
manifest and every ``shard.json`` record which vectors the shards hold (``vectors``: ``fp32`` for
every fp32 backend, whose exports reproduce torch, else ``<backend>-int8-<export hash>``), so int8
shards are never mixed with fp32 ones or with those of another int8 export.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import itertools
import json
import os
import resource
import shutil
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import pyterrier as pt

from pyterrier_sci.artifacts import DamagedFileWarning, build_atomically, write_pt_meta
from pyterrier_sci.cli import command_error
from pyterrier_sci.corpus import corpus_id, index_path, irds_id
from pyterrier_sci.data import work_dir
from pyterrier_sci.filesums import damaged_file, record_files
from pyterrier_sci.generations import UPDATES_GROUP, IndexUpdateError, jsonl_record
from pyterrier_sci.models import (
    BACKENDS,
    PRECISIONS,
    BackendError,
    ModelNotFoundError,
    load_sentence_transformer,
    model_slug,
    resolve_model,
)
from pyterrier_sci.quiet import quiet_native
from pyterrier_sci.registry import PipelineError, check_dataset, check_fields, load_group
from pyterrier_sci.resident import serve_resident
from pyterrier_sci.scale import ScaleError, init_ray
from pyterrier_sci.upstream import fix_npids_single_docno_blocks
from pyterrier_sci_launcher import process_seconds

from .calibration import CALIBRATION_SIZE, Calibration, calibration_from_corpus, calibration_from_texts
from .encoders import load_encoder, settings_hash
from .encoding import encode_stream
from .engines import engine_for
from .index_meta import encoder_record, read_pt_meta, vectors_label, write_calibration_texts
from .shards import (
    ARTIFACT_FORMAT,
    ARTIFACT_TYPE,
    FORMAT_VERSION,
    LEGACY_VECTORS,
    SHARD_FILE,
    ShardedIndexError,
    shard_bounds,
    shard_name,
)

__all__ = ["ShardedIndexError", "MANIFEST_FORMAT", "FORMAT_VERSION", "SHARD_FILE", "shard_name", "shard_bounds",
           "default_index_path", "build_sharded_index", "add_index_commands", "index_main", "update_main",
           "UPDATES_GROUP"]

MANIFEST_TYPE = ARTIFACT_TYPE
MANIFEST_FORMAT = ARTIFACT_FORMAT
#: the corpus fields of a JSONL corpus file when none are given
JSONL_TEXT = ("text",)
_OFFSET_EVERY = 4096  # a JSONL corpus's byte offset is kept every this many lines (to seek near a shard's start)


# ------------------------------------------------------------------------------------------- corpora

def _is_file_corpus(corpus: str) -> bool:
    return not corpus.startswith("irds:") and corpus.endswith((".jsonl", ".jsonl.gz")) and Path(corpus).is_file()


def _corpus_key(corpus: str) -> str:
    """How the manifest names the corpus: the ir_datasets id, or a JSONL file's absolute path."""
    return str(Path(corpus).resolve()) if _is_file_corpus(corpus) else irds_id(corpus)


def _open_text(path: str):
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, "rt", encoding="utf-8")


def _jsonl_doc(line: str, lineno: int, path: str, fields: Sequence[str]) -> dict:
    rec, docno = jsonl_record(line, lineno, path, fields, ShardedIndexError,
                              hint=" (give the text fields with fields=...)")
    return {"docno": docno, "text": " ".join(str(rec[f] or "") for f in fields)}


def _scan_jsonl(path: str) -> Tuple[int, List[int]]:
    """The number of documents (non-empty lines) of a JSONL corpus, and the byte offset of every
    ``_OFFSET_EVERY``-th one (plain files only: a gzip file is read from its start)."""
    n, offsets = 0, []
    if path.endswith(".gz"):
        with _open_text(path) as f:
            n = sum(1 for line in f if line.strip())
        return n, offsets
    with open(path, "rb") as f:
        pos = 0
        for line in f:
            if line.strip():
                if n % _OFFSET_EVERY == 0:
                    offsets.append(pos)
                n += 1
            pos += len(line)
    return n, offsets


def _iter_jsonl(path: str, fields: Sequence[str], start: int, end: int, offsets: Sequence[int]) -> Iterator[dict]:
    k = start // _OFFSET_EVERY if offsets else 0
    pos = k * _OFFSET_EVERY
    with _open_text(path) as f:
        if offsets:
            f.seek(offsets[k])
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if pos >= end:
                return
            if pos >= start:
                yield _jsonl_doc(line, lineno if not offsets else f"~{pos + 1}", path, fields)
            pos += 1
    if pos < end:
        raise ShardedIndexError(f"{path} has {pos} documents, fewer than the {end} counted when the build started "
                                "(was it changed?)")


def _irds(corpus: str):
    import ir_datasets
    try:
        check_dataset(corpus, where="index")
        ds = ir_datasets.load(irds_id(corpus))
    except (KeyError, PipelineError):
        raise ShardedIndexError(f"unknown dataset {corpus!r}: give a registered ir_datasets id (see 'pyterrier-sci "
                                "datasets') or a .jsonl / .jsonl.gz corpus file", where="index") from None
    if not ds.has_docs():
        raise ShardedIndexError(f"dataset {corpus} has no documents", where="index")
    return ds


def _count(corpus: str, fields: Optional[Sequence[str]]) -> Tuple[int, List[int]]:
    """``(n, offsets)`` of a corpus (streamed; nothing is kept but the count)."""
    if _is_file_corpus(corpus):
        return _scan_jsonl(corpus)
    ds = _irds(corpus)
    check_fields(corpus, fields, "index")
    try:
        n = ds.docs_count()
    except Exception:  # noqa: BLE001 - some corpora cannot tell without reading
        n = None
    if n is None:
        n = sum(1 for _ in ds.docs_iter())
    return int(n), []


def _iter_slice(corpus: str, fields: Optional[Sequence[str]], start: int, end: int,
                offsets: Sequence[int]) -> Iterator[dict]:
    """``{'docno', 'text'}`` of the documents at corpus positions ``[start, end)``, streamed."""
    if _is_file_corpus(corpus):
        yield from _iter_jsonl(corpus, list(fields or JSONL_TEXT), start, end, offsets)
        return
    it = _irds(corpus).docs_iter()
    it = it[start:end] if hasattr(it, "__getitem__") else itertools.islice(it, start, end)
    for doc in it:
        text = " ".join(str(getattr(doc, f) or "") for f in fields) if fields else doc.default_text()
        yield {"docno": doc.doc_id, "text": text}


# -------------------------------------------------------------------------------------------- workers

class _Progress:
    """Documents encoded per shard (a Ray actor: workers report, the driver reads the sum)."""

    def __init__(self):
        self.done = {}

    def update(self, shard: int, count: int) -> None:
        self.done[shard] = count  # absolute, so a retried shard does not count twice

    def total(self) -> int:
        return sum(self.done.values())


class _ShardEncoder:
    """A Ray actor holding one encoder (:func:`.backends.load_encoder`: torch, or the export the driver
    built); :meth:`build` builds whole shards."""

    def __init__(self, model: str, device: Optional[str], threads: Optional[int], backend: str = "torch",
                 precision: str = "fp32", calibration=None, work: Optional[str] = None):
        if threads:
            import torch
            torch.set_num_threads(int(threads))
        # threads bound the exported engines too (OpenVINO / ONNX Runtime would take every core of the node)
        self.model = load_encoder(model, device, backend, precision, calibration, work=work,
                                  threads=int(threads) if threads else None)

    def _encode(self, docs: Iterator[dict], batch_size: int, report: Callable[[int], None]) -> Iterator[dict]:
        """``docs`` with ``doc_vec`` (:func:`.encoding.encode_stream`); ``report(n)`` after every batch
        with the documents encoded so far."""
        done = [0]

        def on_batch(n: int) -> None:
            done[0] += n
            report(done[0])
        yield from encode_stream(self.model, docs, batch_size, on_batch)

    def build(self, spec: dict, progress) -> dict:
        """Builds shard ``spec['shard']`` unless its directory is complete; returns what it did."""
        from pyterrier_dr import FlexIndex
        i, start, end = spec["shard"], spec["start"], spec["end"]
        path = Path(spec["index"]) / shard_name(i)
        t0, built = time.perf_counter(), []
        last = [0.0]

        def report(count: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 0.2 or count == end - start:
                last[0] = now
                progress.update.remote(i, count)

        def build(tmp: Path) -> None:
            docs = _iter_slice(spec["corpus"], spec["fields"], start, end, spec["offsets"])
            fix_npids_single_docno_blocks()  # pyterrier_sci.upstream: one-docno blocks
            FlexIndex(str(tmp), verbose=False).indexer().index(self._encode(docs, spec["batch_size"], report))
            meta = json.loads((tmp / "pt_meta.json").read_text())
            if meta["doc_count"] != end - start:
                raise ShardedIndexError(f"shard {i}: the corpus gave {meta['doc_count']} documents at positions "
                                        f"[{start}, {end}), expected {end - start} (was it changed?)")
            info = {k: spec[k] for k in ("model", "model_id")}
            info = {"shard": i, "num_shards": spec["num_shards"], **info, "dim": meta["vec_size"],
                    "corpus": spec["corpus_key"], "fields": spec["fields"], "start": start, "end": end,
                    "num_docs": end - start, "vectors": spec["vectors"], "backend": spec["backend"],
                    "precision": spec["precision"], "max_seq_length": getattr(self.model, "max_seq_length", None),
                    "files": record_files(tmp)}
            (tmp / SHARD_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
            built.append(True)

        build_atomically(path, build, what=f"{shard_name(i)} of {spec['index']}")
        progress.update.remote(i, end - start)
        return {"shard": i, "num_docs": end - start, "built": bool(built), "seconds": time.perf_counter() - t0,
                "pid": os.getpid(), "host": socket.gethostname(), "threads": self._threads(),
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}

    def _threads(self) -> int:
        """The threads the encoder computes with: the exported engine's own setting, or torch's."""
        import torch
        engine = getattr(self.model, "engine_threads", None)
        return engine if engine is not None else torch.get_num_threads()


# --------------------------------------------------------------------------------------------- driver

def default_index_path(corpus: str, model: str, num_shards: int, fields: Optional[Sequence[str]] = None,
                       limit: Optional[int] = None, backend: str = "torch", precision: str = "fp32") -> Path:
    """``<work>/indexes/<corpus>/dense-<model slug>-<N>shards[-<backend>-int8][-first<limit>][-<fields>]``
    (a JSONL corpus file is named by its stem and a hash of its path); fp32 backends share a path, as
    their vectors are the same, while int8 gets its own (as the ``dense`` component's corpus index)."""
    kind = f"dense-{model_slug(model)}-{num_shards}shards" + (f"-{backend}-int8" if precision == "int8" else "") \
        + (f"-first{limit}" if limit else "")
    if _is_file_corpus(corpus):
        key = _corpus_key(corpus)
        name = Path(key).name.split(".")[0] + "-" + hashlib.sha1(key.encode()).hexdigest()[:8]
        suffix = "" if not fields else "-" + "+".join(fields)
        return Path(work_dir()) / "indexes" / ("file__" + name) / f"{kind}{suffix}"
    return index_path(work_dir(), corpus, kind, fields)


def _check_int(value, name: str, minimum: int = 1) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ShardedIndexError(f"{name} must be an integer >= {minimum}, not {value!r}", where="index")
    return value


def _expected_shard(spec: dict, i: int, start: int, end: int) -> dict:
    return {"shard": i, "num_shards": spec["num_shards"], "model_id": spec["model_id"], "corpus": spec["corpus_key"],
            "fields": spec["fields"], "start": start, "end": end, "vectors": spec["vectors"]}


def _mismatch(found: dict, want: dict) -> List[str]:
    """What ``found`` (a manifest or ``shard.json``) says otherwise than ``want``; one written before
    backends were recorded holds fp32 vectors."""
    def value(k):
        return found.get(k, LEGACY_VECTORS) if k == "vectors" else found.get(k)
    return [f"{k} {value(k)!r} (this build: {v!r})" for k, v in want.items() if value(k) != v]


def _calibration(corpus: str, fields: Optional[Sequence[str]], calibration):
    """The int8 calibration: ``calibration`` (a :class:`.backends.Calibration`, a list of texts, an
    ir_datasets id or a JSONL corpus file), by default the corpus itself: its first
    :data:`.backends.CALIBRATION_SIZE` non-empty documents (whatever ``limit`` is, so a trial run
    calibrates as the full build and as the ``dense`` component over the same corpus do)."""
    if isinstance(calibration, Calibration):
        return calibration
    if calibration is not None and not isinstance(calibration, str):
        return calibration_from_texts(calibration)
    source = calibration or corpus
    if not _is_file_corpus(source):
        return calibration_from_corpus(source, fields)
    cols = list(fields or JSONL_TEXT)
    n, offsets = _scan_jsonl(source)
    docs = list(itertools.islice((d for d in _iter_jsonl(source, cols, 0, n, offsets) if d["text"].strip()),
                                 CALIBRATION_SIZE))
    return Calibration([d["text"] for d in docs], _corpus_key(source), [d["docno"] for d in docs], cols)


def _vectors(model: str, backend: str, precision: str, calibration) -> str:
    """What the shards of these settings hold: ``fp32`` for every fp32 backend (their exports reproduce
    torch), else ``<backend>-int8-<the export's settings hash>``; known without loading the model (the
    export's cache entry is checked against the same hash when it is loaded)."""
    return vectors_label(backend, precision,
                         settings_hash(model, backend, precision, calibration) if precision == "int8" else None)


def _encoder_spec(model: str, device: Optional[str], backend: str, precision: str, calibration, work: str) -> dict:
    """Builds the export of ``model`` once, here (its cache entry is locked: concurrent builds wait),
    and returns what the workers need to load it and what the manifest records of it."""
    if not engine_for(backend, precision).exported:
        return {"backend": backend, "precision": precision, "calibration": None, "encoder": None}
    meta = load_encoder(model, device, backend, precision, calibration, work=work).meta
    return {"backend": backend, "precision": precision, "calibration": calibration,
            "encoder": {k: meta.get(k) for k in ("backend", "precision", "settings_hash", "weights_sha256",
                                                 "calibration", "check")}}


def _check_target(index: Path, spec: dict, bounds: List[Tuple[int, int]]) -> List[int]:
    """The shards still to build; one error when ``index`` holds something of another build."""
    if index.exists() and not index.is_dir():
        raise ShardedIndexError(f"{index} is a file, not a directory", where="index")
    meta_path = index / "pt_meta.json"
    meta = None
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            meta = e
        if not isinstance(meta, dict):  # damaged: the build rewrites it once every shard checks out
            why = f"cannot be read ({meta})" if isinstance(meta, Exception) else "is not a JSON object"
            warnings.warn(f"{meta_path} {why}; it is written again when the shards check out", DamagedFileWarning,
                          stacklevel=3)
            meta_path.unlink()
            meta = None
    if meta is not None:
        if (meta.get("type"), meta.get("format")) != (MANIFEST_TYPE, MANIFEST_FORMAT):
            raise ShardedIndexError(f"{index} holds a {meta.get('type')}/{meta.get('format')} artifact, not a "
                                    "sharded dense index: choose another output path", where="index")
        want = {"model_id": spec["model_id"], "corpus": spec["corpus_key"], "fields": spec["fields"],
                "num_shards": spec["num_shards"], "num_docs": bounds[-1][1], "vectors": spec["vectors"]}
        bad = _mismatch(meta, want)
        if bad:
            raise ShardedIndexError(f"{index} is a sharded index of another build: {'; '.join(bad)}. "
                                    "Choose another output path or remove it", where="index")
    extra = sorted(p.name for p in index.glob("shard-[0-9][0-9][0-9][0-9][0-9]")
                   if p.is_dir() and int(p.name[6:]) >= spec["num_shards"])
    if extra:
        raise ShardedIndexError(f"{index} holds {extra[0]}, beyond the {spec['num_shards']} shards asked for: it is "
                                "a build with another shard count; choose another output path or remove it",
                                where="index")
    todo = []
    for i, (start, end) in enumerate(bounds):
        path = index / shard_name(i)
        if not (path.is_dir() and any(path.iterdir())):
            todo.append(i)
            continue
        try:
            found = json.loads((path / SHARD_FILE).read_text())
        except (OSError, ValueError):
            raise ShardedIndexError(f"{path} is not a shard of a sharded index (no readable {SHARD_FILE}): "
                                    "choose another output path or remove it", where="index") from None
        bad = _mismatch(found, _expected_shard(spec, i, start, end))
        if bad:
            raise ShardedIndexError(f"{path} was built by another build: {'; '.join(bad)}. Choose another output "
                                    "path, or remove the index directory to rebuild it", where="index")
        problem = damaged_file(path, found.get("files"), str(path / SHARD_FILE))
        if problem:
            _discard_shard(index, path, problem)
            todo.append(i)
    return todo


def _discard_shard(index: Path, path: Path, problem: str) -> None:
    """Removes a damaged shard (and the index's manifest, so that the index reads as unfinished until
    the shard is built again), with a :class:`~pyterrier_sci.artifacts.DamagedFileWarning`."""
    warnings.warn(f"{path.name} of {index} is damaged: {problem}; it is built again", DamagedFileWarning,
                  stacklevel=3)
    with contextlib.suppress(FileNotFoundError):
        (index / "pt_meta.json").unlink()
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path)


def _write_manifest(index: Path, spec: dict, bounds: List[Tuple[int, int]], calibration=None) -> dict:
    """The manifest, last (it marks the index complete): the shards and what encoded them (the model, its
    weights, backend, precision, maximum sequence length, the export and its calibration: ``encoder``,
    :mod:`.index_meta`), beside ``calibration.json`` for int8."""
    from pyterrier_dr import FlexIndex
    shards, dims, lengths = [], set(), set()
    for i, (start, end) in enumerate(bounds):
        path = index / shard_name(i)
        info = json.loads((path / SHARD_FILE).read_text())
        bad = _mismatch(info, _expected_shard(spec, i, start, end))
        if bad:
            raise ShardedIndexError(f"{path} does not belong to this build: {'; '.join(bad)}", where="index")
        dims.add(info["dim"])
        lengths.add(info.get("max_seq_length"))
        shards.append({"name": shard_name(i), "start": start, "end": end, "num_docs": end - start})
    if len(dims) != 1:
        raise ShardedIndexError(f"the shards of {index} have different dimensions {sorted(dims)}", where="index")
    sim_fn = FlexIndex(str(index / shard_name(0)), verbose=False).sim_fn.value
    encoder = encoder_record(spec["model"], spec["backend"], spec["precision"], spec["encoder"],
                             lengths.pop() if len(lengths) == 1 else None)
    if calibration is not None:
        write_calibration_texts(index, calibration)
    return write_pt_meta(index, type=MANIFEST_TYPE, format=MANIFEST_FORMAT, version=FORMAT_VERSION,
                         model=spec["model"], model_id=spec["model_id"], dim=dims.pop(), sim_fn=sim_fn,
                         corpus=spec["corpus_key"], fields=spec["fields"], num_docs=bounds[-1][1],
                         num_shards=len(bounds), shards=shards, vectors=spec["vectors"], backend=spec["backend"],
                         precision=spec["precision"], encoder=encoder)


def _cause(e: BaseException) -> BaseException:
    """The exception a Ray task raised (``RayTaskError`` wraps it)."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


def build_sharded_index(corpus: str, model: str = "default", index_path=None, num_shards: int = 2,
                        workers: Optional[int] = None, ray_address: Optional[str] = None,
                        fields: Optional[Sequence[str]] = None, batch_size: int = 32, verbose: bool = True, *,
                        limit: Optional[int] = None, device: Optional[str] = None,
                        cpus_per_worker: Optional[int] = None, num_gpus_per_worker: float = 0,
                        on_shard: Optional[Callable[[dict], None]] = None, backend: str = "torch",
                        precision: str = "fp32", calibration: Union[None, str, Sequence[str], Calibration] = None
                        ) -> Path:
    """Builds (or finishes) a sharded dense index of ``corpus`` with ``model`` on Ray; returns its path.

    Args:
        corpus: an ir_datasets id (``irds:`` prefix optional) or a ``.jsonl`` / ``.jsonl.gz`` file with one
            document per line (``docno`` and the ``fields``, default ``text``).
        model: a sentence-transformers hub id, a local path, or ``"default"`` (the offline MiniLM).
        index_path: the index directory (default :func:`default_index_path`); on a cluster, a path that
            every worker node sees (a shared filesystem).
        num_shards: N; shard i holds corpus positions ``[i*n//N, (i+1)*n//N)``.
        workers: encoder actors, each loading the model once (default: one per shard, at most one per CPU
            of the Ray cluster).
        ray_address: an existing Ray cluster (else ``$RAY_ADDRESS``; else a local instance with this
            machine's cores and no dashboard).  When Ray is already initialised it is used as it is.
        fields: document fields joined by a space for encoding (default: the dataset's ``default_text()``).
        batch_size: encoding batch size.
        verbose: a progress bar of the documents encoded over all shards.
        limit: index only the corpus's first ``limit`` documents (a trial run).
        device: torch device of the workers (default ``cpu``; ``cuda`` with ``num_gpus_per_worker=1``).
        cpus_per_worker: CPUs (and torch threads) per worker (default: the cluster's CPUs shared out,
            at most one node's).
        num_gpus_per_worker: GPUs Ray reserves per worker.
        on_shard: called in this process with each shard's report (``shard``, ``num_docs``, ``built``,
            ``seconds``, ``pid``, ``host``, ``threads`` (the threads its encoder computes with: torch's or
            the exported engine's), ``peak_rss_bytes`` of its worker).
        backend, precision: the encoder's engine (``torch``, ``openvino``, ``onnx``; the exported ones run
            on the CPU) and precision (``fp32``, ``int8``); docs/dense.md.  The export is built here,
            once, under the work directory (on a cluster a path every node sees, like ``index_path``),
            before the workers start; they load it.  A bad value is one :class:`~.backends.BackendError`.
        calibration: what int8 calibrates on: an ir_datasets id or JSONL corpus file (its first
            :data:`~.backends.CALIBRATION_SIZE` non-empty documents, joined ``fields``), a list of texts or a
            :class:`~.backends.Calibration`; default the corpus (not limited by ``limit``).

    A rerun after an interruption (driver or worker killed) rebuilds only the shards without a complete
    directory; the manifest ``pt_meta.json`` is written last.  Shards of another model, corpus, fields,
    shard count or vectors (int8 against fp32, another int8 export) in ``index_path`` are one
    :class:`ShardedIndexError`.
    """
    engine_for(backend, precision).check_device(device)
    num_shards = _check_int(num_shards, "num_shards (--shards)")
    workers = _check_int(workers, "workers (--workers)")
    batch_size = _check_int(batch_size, "batch_size (--batch-size)")
    limit = _check_int(limit, "limit (--limit)")
    cpus_per_worker = _check_int(cpus_per_worker, "cpus_per_worker")
    if not isinstance(corpus, str) or not corpus:
        raise ShardedIndexError(f"corpus must be an ir_datasets id or a JSONL file, not {corpus!r}", where="index")
    fields = [f for part in fields for f in str(part).split(",") if f] if fields else None
    if corpus.endswith((".jsonl", ".jsonl.gz")) and not corpus.startswith("irds:") and not Path(corpus).is_file():
        raise ShardedIndexError(f"corpus file not found: {corpus}", where="index")
    model_id = resolve_model(model)
    if not Path(model_id).exists():  # a hub id: one clear error now rather than one per worker
        try:
            load_sentence_transformer(model)
        except ModelNotFoundError as e:
            raise ShardedIndexError(str(e), where="index --model") from None
    n, offsets = _count(corpus, fields)
    if limit:
        n = min(n, limit)
    if n == 0:
        raise ShardedIndexError(f"corpus {corpus} has no documents", where="index")
    if num_shards > n:
        raise ShardedIndexError(f"{num_shards} shards for {n} documents: give at most {n} shards", where="index")
    index = index_path if index_path is not None else \
        default_index_path(corpus, model, num_shards, fields, limit, backend, precision)
    index = Path(index).expanduser().resolve()
    work = str(work_dir())
    cal = _calibration(corpus, fields, calibration) if precision == "int8" else None
    # what the shards must hold, known without loading the model: a rerun of a complete index returns at once
    spec = {"index": str(index), "corpus": str(Path(corpus).resolve()) if _is_file_corpus(corpus) else corpus,
            "corpus_key": _corpus_key(corpus), "fields": fields, "model": model, "model_id": model_id,
            "num_shards": num_shards, "batch_size": batch_size, "offsets": offsets, "backend": backend,
            "precision": precision, "vectors": _vectors(model, backend, precision, cal), "encoder": None}
    bounds = shard_bounds(n, num_shards)
    todo = _check_target(index, spec, bounds)
    kept = [shard_name(i) for i in range(num_shards) if i not in todo]
    if not todo and (index / "pt_meta.json").exists():
        if verbose:
            print(f"{index}: all {num_shards} shards are built and intact; nothing to do", file=sys.stderr)
        return index
    encoder = _encoder_spec(model, device, backend, precision, cal, work)
    spec["encoder"] = encoder["encoder"]
    if not todo:
        _write_manifest(index, spec, bounds, cal)
        if verbose:
            print(f"{index}: all {num_shards} shards are built; manifest written", file=sys.stderr)
        return index
    if kept and verbose:
        print(f"{index}: keeping {len(kept)} complete, intact shard{'s' if len(kept) != 1 else ''} "
              f"({', '.join(kept)}); building {len(todo)}", file=sys.stderr)
    index.mkdir(parents=True, exist_ok=True)

    import ray
    started = init_ray(ray_address)
    actors, progress = [], None
    try:
        cluster = ray.cluster_resources()
        total_cpus = max(1, int(cluster.get("CPU", 1)))
        node_cpus = max([int(nd.get("Resources", {}).get("CPU", 0)) for nd in ray.nodes() if nd.get("Alive")] or [1])
        workers = min(workers or min(num_shards, total_cpus), len(todo))
        cpus = cpus_per_worker or max(1, min(node_cpus, total_cpus // workers))
        if cpus > node_cpus:
            raise ScaleError(f"cpus_per_worker={cpus}, but the largest Ray node has {node_cpus} CPUs")
        progress = ray.remote(num_cpus=0)(_Progress).remote()
        actor_cls = ray.remote(_ShardEncoder).options(num_cpus=cpus, num_gpus=num_gpus_per_worker,
                                                      max_restarts=1, max_task_retries=1)
        with quiet_native():  # Ray logs an E-level line for restartable actors with object-store arguments
            actors = [actor_cls.remote(model, device, cpus, backend, precision, encoder["calibration"], work)
                      for _ in range(workers)]
        already = n - sum(bounds[i][1] - bounds[i][0] for i in todo)
        name = Path(spec["corpus_key"]).name if _is_file_corpus(corpus) else corpus_id(corpus)
        bar = pt.tqdm(total=n, initial=already, unit="doc", disable=not verbose,
                      desc=f"encoding {name} into {num_shards} shards ({workers} worker{'s' if workers != 1 else ''})")
        queue, inflight = list(todo), {}

        def submit(actor):
            i = queue.pop(0)
            ref = actor.build.remote(dict(spec, shard=i, start=bounds[i][0], end=bounds[i][1]), progress)
            inflight[ref] = (actor, i)

        for actor in actors:
            if queue:
                submit(actor)
        while inflight:
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in done:
                actor, i = inflight.pop(ref)
                try:
                    report = ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    cause = _cause(e)
                    if isinstance(cause, (ShardedIndexError, ModelNotFoundError, BackendError)):
                        raise cause from None
                    raise ShardedIndexError(f"building {shard_name(i)} failed: {type(cause).__name__}: {cause}",
                                            where="index") from None
                except ray.exceptions.RayActorError as e:
                    why = " ".join(str(e).split())[:300]
                    raise ShardedIndexError(f"the worker building {shard_name(i)} died ({type(e).__name__}: {why}); "
                                            "rerun to resume: finished shards are kept", where="index") from None
                if on_shard is not None:
                    on_shard(report)
                if queue:
                    submit(actor)
            count = already + ray.get(progress.total.remote())
            if count != bar.n:
                bar.update(count - bar.n)
        bar.update(n - bar.n)
        bar.close()
        _write_manifest(index, spec, bounds, cal)
        return index
    finally:
        for a in actors + ([progress] if progress is not None else []):
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if started:
            ray.shutdown()


# ------------------------------------------------------------------------------------------------ CLI

def add_index_commands(subparsers) -> argparse.ArgumentParser:
    """Adds ``index`` (a sharded dense index built on Ray) to an argparse sub-parsers object; sets
    ``func=index_main``."""
    p = subparsers.add_parser("index", help="build a sharded dense index of a corpus on Ray (resumable)",
                              description="Encodes a corpus into N FlexIndex shards plus a manifest (pt_meta.json); "
                                          "point the dense component at it with index: PATH. A rerun resumes.")
    p.add_argument("dataset", nargs="?", help="ir_datasets id (e.g. irds:sci/csfcube) or a .jsonl/.jsonl.gz corpus "
                                             "file (not needed to update the index at --output)")
    p.add_argument("--model", default="default", help="sentence-transformers model: hub id, path or 'default'")
    p.add_argument("--shards", type=int, help="number of shards N (required to build)")
    p.add_argument("--workers", type=int, help="encoder workers (default: one per shard, at most one per CPU)")
    p.add_argument("--ray-address", help="an existing Ray cluster (default: $RAY_ADDRESS, else a local instance)")
    p.add_argument("--output", help="index directory (default: under the work directory; on a cluster, a shared path)")
    p.add_argument("--fields", nargs="+", help="document fields to encode (default: the dataset's default text)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--limit", type=int, help="index only the first LIMIT documents")
    p.add_argument("--device", help="torch device of the workers (default cpu)")
    p.add_argument("--gpus-per-worker", type=float, default=0, help="GPUs Ray reserves per worker")
    p.add_argument("--backend", default="torch", choices=BACKENDS,
                   help="encoder engine (default torch; openvino/onnx run on the CPU, exported once)")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help="encoder precision (int8: openvino/onnx)")
    p.add_argument("--calibration", help="what int8 calibrates on: an ir_datasets id or a .jsonl corpus file "
                                         "(its first documents; default: the corpus)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    grow = p.add_argument_group("growing an index (docs/indexes.md): each change is a new generation")
    grow.add_argument("--append", metavar="DOCS",
                      help="append the documents of DOCS (.jsonl/.jsonl.gz: docno and text, or --fields) to the "
                           "index at --output (any BM25 or dense index) or the sharded index of these settings")
    grow.add_argument("--retract", metavar="IDS",
                      help="retract the docnos of IDS (one a line, or .jsonl with docno) from that index (before "
                           "an --append in the same command)")
    grow.add_argument("--resident", action="store_true",
                      help="keep running as the resident appender of the index at --output: later 'index --output "
                           "PATH --append/--retract' commands are made by it, without the toolkit's start")
    p.set_defaults(func=index_main)
    return p


def update_main(args) -> int:
    """``index --append DOCS --retract IDS``: the index at ``--output`` (else the sharded index of the build
    settings), updated by the function its type and format register in :data:`UPDATES_GROUP`."""
    if args.output:
        path = Path(args.output).expanduser()
    elif args.shards is not None and args.dataset:
        _check_int(args.shards, "--shards")
        path = default_index_path(args.dataset, args.model, args.shards, args.fields, args.limit, args.backend,
                                  args.precision)
    else:
        raise IndexUpdateError("index --append/--retract: give the index with --output PATH (a BM25, dense or "
                               "ColBERT index), or the DATASET and --shards (and --model) of the sharded index to "
                               "update")
    kind = _index_kind(path, "index --append/--retract")
    updates = load_group(UPDATES_GROUP)
    if kind not in updates:
        raise IndexUpdateError(f"index --append/--retract: {path} is a {kind} index, which cannot be updated "
                               f"(updatable: {', '.join(sorted(updates))})")
    started = time.perf_counter()
    before = process_seconds()
    meta = updates[kind](path, append=args.append, retract=args.retract, fields=args.fields,
                         verbose=not args.quiet)
    docs = meta.get("docs") or {}
    print(f"{path}: generation {meta.get('generation', 0)}, {docs.get('count')} documents ({docs.get('hash')})",
          file=sys.stderr)
    took = time.perf_counter() - started
    if before is not None:   # what the change cost, and what starting the command did before it
        print(f"{path}: the change took {took:.1f} s; starting the command (Python, imports) {before:.1f} s before "
              "it (in a process that keeps running, such as open_growing(...) in Python, only the change is paid)",
              file=sys.stderr)
    else:
        print(f"{path}: the change took {took:.1f} s", file=sys.stderr)
    print(path)
    return 0


def _index_kind(path: Path, what: str) -> str:
    """``<type>.<format>`` of the index at ``path`` (its ``pt_meta.json``)."""
    meta = read_pt_meta(path, _kind_by_files(path)) if path.is_dir() else None
    if meta is None:
        raise IndexUpdateError(f"{what}: no index at {path} (no pt_meta.json); build it first")
    return f"{meta.get('type')}.{meta.get('format')}"


def resident_main(args) -> int:
    """``index --output PATH --resident``: the resident appender of the index (:mod:`pyterrier_sci.resident`)."""
    if not args.output or args.append or args.retract or args.shards is not None:
        raise IndexUpdateError("index --resident: give the index with --output PATH alone (the changes are sent "
                               "by later 'index --output PATH --append DOCS' commands)")
    path = Path(args.output).expanduser()
    return serve_resident(path, _index_kind(path, "index --resident"), command_error)


def _kind_by_files(path: Path) -> str:
    """What the index at ``path`` is, told by its files (its pt_meta.json may be what is damaged)."""
    names = {p.name for p in path.iterdir()}
    if any(n.startswith("segments_") for n in names):
        return "Lucene index"
    if "inv.docs" in names:
        return "PISA index"
    if "vecs.f4" in names or any(n.startswith("shard-") for n in names):
        return "dense index"
    if any(n.endswith(".codes.pt") or n == "plan.json" for n in names):
        return "ColBERT index"
    return "index"


def index_main(args) -> int:
    if args.resident:
        return resident_main(args)
    if args.append or args.retract:
        return update_main(args)
    if not args.dataset:
        raise ShardedIndexError("give the DATASET to build an index of (or --output PATH with --append/--retract "
                                "to update one)", where="index")
    if args.shards is None:
        raise ShardedIndexError("--shards N is required to build an index (or give --append/--retract to "
                                "update one)", where="index")
    _check_int(args.shards, "--shards")
    path = build_sharded_index(args.dataset, args.model, args.output, args.shards, workers=args.workers,
                               ray_address=args.ray_address, fields=args.fields, batch_size=args.batch_size,
                               verbose=not args.quiet, limit=args.limit, device=args.device,
                               num_gpus_per_worker=args.gpus_per_worker, backend=args.backend,
                               precision=args.precision, calibration=args.calibration)
    meta = json.loads((path / "pt_meta.json").read_text())
    print(f"{path}: {meta['num_docs']} documents in {meta['num_shards']} shards (dim {meta['dim']})", file=sys.stderr)
    print(path)
    return 0
