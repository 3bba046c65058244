"""The process that builds a ColBERT (PLAID) index or colbert-ai's extensions (``python -m
pyterrier_sci.plugins.colbert._worker index|extensions ARGS.json``; not an interface of its own).
It reports progress as one JSON event per line on the file descriptor named in ``ARGS.json``
(``advance``, ``kmeans``, ``error``, ``done``) and runs colbert-ai with ``nranks=1`` and
``avoid_fork_if_possible=True``, so that no rank process is spawned.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import threading
import time
import traceback
from typing import Optional

import numpy as np

from pyterrier_sci.artifacts import atomic_write_text
from pyterrier_sci.plugins.colbert._compat import build_extensions_here, import_colbert


def sample_size(n: int) -> int:
    """How many passages colbert-ai's ``CollectionIndexer._sample_pids`` encodes for k-means before
    encoding the whole collection (``16 * sqrt(120 * n)``, at most ``n``)."""
    return min(1 + int(16 * math.sqrt(120 * n)), n)


#: the k-means sample's encoding is kept for the index pass only up to this size (float16 bytes); a larger
#: sample (collections of about 250K passages of 256 word pieces and more) is encoded twice, as colbert-ai does
REUSE_MAX_BYTES = 4 << 30


class SampleReuse:
    """What :func:`reuse_sample_encoding` installed: the kept sample (its passages, float16 embeddings and
    lengths) and how far the index pass has walked it.  :meth:`seed` hands it a sample encoded by an
    earlier, interrupted build (:func:`install_resume`); :meth:`skip` walks a chunk of the collection that an
    earlier build already wrote, without encoding it."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.calls = 0
        self.sample_doclens: Optional[list] = None  # the k-means sample's lengths, kept or not
        self.state: dict = {}

    def seed(self, passages, embs, doclens) -> None:
        """As if ``passages`` had just been encoded as the k-means sample into ``embs`` / ``doclens``."""
        self.calls = max(self.calls, 1)
        self.sample_doclens = list(doclens)
        if embs is not None and 2 * embs.numel() <= self.max_bytes:
            self.state = dict(passages=list(passages), embs=embs.half(), doclens=list(doclens),
                              starts=np.concatenate([[0], np.cumsum(doclens)]).astype(np.int64), next=0)

    def _walk(self, passages) -> list:
        """The sample position of each passage of the next chunk (-1: not a sampled passage)."""
        sample, i, source = self.state["passages"], self.state["next"], []
        for p in passages:
            if i < len(sample) and p == sample[i]:
                source.append(i)
                i += 1
            else:
                source.append(-1)
        return source

    def _advance(self, to: int) -> None:
        self.state["next"] = to
        if to == len(self.state["passages"]):  # every sampled passage handed out: free the kept encoding
            self.state = {}

    def skip(self, passages) -> None:
        """A chunk written by an earlier build: its sampled passages are passed over, not served."""
        if self.state and passages:
            taken = [s for s in self._walk(passages) if s >= 0]
            if taken:
                self._advance(taken[-1] + 1)


def reuse_sample_encoding(emit, max_bytes: int = REUSE_MAX_BYTES) -> SampleReuse:
    """colbert-ai encodes its k-means sample of passages, then every passage again to index it.  The
    sample (:func:`sample_size` passages: the whole collection below about 30K passages, a random subset
    above) is a subsequence of the collection, and the index pass encodes the collection in order: this
    keeps the sample's embeddings (as float16, as colbert-ai stores them; at most ``max_bytes``) and
    hands them out for the sample's passages in the index pass, encoding only the others.  Below 30K
    passages that halves the encoding time of a build; at 38,956 passages (PRISM's 256-word chunks) the
    sample is 34,583 passages and the build encodes 38,956 passages instead of 73,539.  The sample's
    passages are found by walking the sample alongside each chunk (equal strings: equal embeddings, up
    to float rounding in other batches).  Any other call encodes as before.  Emits ``reused`` with the
    passages served so (the build's metadata records it) and ``advance`` for the progress bar.  Returns
    the :class:`SampleReuse` it installed."""
    import torch
    from colbert.indexing.collection_encoder import CollectionEncoder
    original = CollectionEncoder.encode_passages
    reuse = SampleReuse(max_bytes)

    def encode_passages(self, passages):
        reuse.calls += 1
        if reuse.calls == 1:  # CollectionIndexer.setup: the k-means sample
            embs, doclens = original(self, passages)
            reuse.seed(passages, None if self.use_gpu else embs, doclens if doclens is not None else [])
            return embs, doclens
        if not reuse.state or not passages:
            return original(self, passages)
        # CollectionIndexer.index: the next chunk of the collection; its sampled passages come in the sample's order
        memo, source = reuse.state, reuse._walk(passages)
        taken = [s for s in source if s >= 0]
        if not taken:
            return original(self, passages)
        fresh = [p for p, s in zip(passages, source) if s < 0]
        fresh_embs, fresh_doclens = original(self, fresh) if fresh else (None, [])
        parts, doclens, f, f_row = [], [], 0, 0
        for s in source:
            if s >= 0:
                a, b = int(memo["starts"][s]), int(memo["starts"][s + 1])
                parts.append(memo["embs"][a:b].float())
                doclens.append(memo["doclens"][s])
            else:
                n = int(fresh_doclens[f])
                parts.append(fresh_embs[f_row:f_row + n])
                doclens.append(n)
                f, f_row = f + 1, f_row + n
        reuse._advance(taken[-1] + 1)
        emit(event="reused", n=len(taken))
        emit(event="advance", n=len(taken))
        return torch.cat(parts), doclens

    CollectionEncoder.encode_passages = encode_passages
    return reuse


def assign_codes_with_faiss(threads=None) -> dict:
    """colbert-ai's ``ResidualCodec.compress_into_codes`` on the CPU: each embedding's code is the index
    of its nearest centroid (largest inner product), found by multiplying the whole centroid matrix with
    16K embeddings at a time (``centroids @ batch.T``, a 2 GiB float32 matrix at 32K centroids) and
    reducing it over the centroids: 4,100 token vectors/s (35 GFLOP/s) here, 40 of the 93 minutes of
    PRISM's 256-word-chunk build (9.98M token vectors, 32,768 centroids).  FAISS's exact inner-product
    search (``IndexFlatIP``, k=1: blocked matrix products that keep the running maximum) finds the same
    centroids 5.1 times faster (``benchmarks/bench_colbert_codes.py``); they differ only where two
    centroids' scores tie to float rounding (1 of 253,643 real token vectors, by 2.4e-7), and equal
    centroids go to the lower id, as in torch.  The GPU path is left as colbert-ai wrote it.
    ``threads`` bounds FAISS's OpenMP threads as torch's are.  Returns the running totals of the
    replacement (``vectors``, ``seconds``), which the build records."""

    import faiss
    import torch
    from colbert.indexing.codecs.residual import ResidualCodec
    original = ResidualCodec.compress_into_codes
    if getattr(original, "pyterrier_sci", None):
        return original.pyterrier_sci
    stats = {"vectors": 0, "seconds": 0.0}
    if threads:
        faiss.omp_set_num_threads(int(threads))

    def compress_into_codes(self, embs, out_device):
        if self.use_gpu:
            return original(self, embs, out_device)
        started = time.perf_counter()
        flat = getattr(self, "_pyterrier_sci_flat", None)
        if flat is None or flat[0] is not self.centroids:
            centroids = self.centroids.float()
            index = faiss.IndexFlatIP(centroids.size(1))
            index.add(np.ascontiguousarray(centroids.numpy()))
            # equal centroids tie exactly: torch's reduction keeps the first, FAISS may not
            _, inverse = torch.unique(centroids, dim=0, return_inverse=True)
            first = torch.full((int(inverse.max()) + 1,), len(inverse), dtype=torch.int64)
            first = first.scatter_reduce(0, inverse, torch.arange(len(inverse)), reduce="amin")
            canon = first[inverse]
            flat = (self.centroids, index, None if torch.equal(canon, torch.arange(len(canon))) else canon)
            self._pyterrier_sci_flat = flat
        _, index, canon = flat
        codes = []
        for batch in embs.split(1 << 16):
            _, ids = index.search(np.ascontiguousarray(batch.cpu().float().numpy()), 1)
            codes.append(torch.from_numpy(ids[:, 0]))
        codes = torch.cat(codes) if codes else torch.empty(0, dtype=torch.int64)
        stats["vectors"] += len(codes)
        stats["seconds"] += time.perf_counter() - started
        return (codes if canon is None else canon[codes]).to(device=out_device)

    compress_into_codes.pyterrier_sci = stats
    ResidualCodec.compress_into_codes = compress_into_codes
    return stats


#: what an interrupted build keeps for the next one, in its resume directory (``install_resume``)
SAMPLE_KEPT = "sample.kept.pt"      # the k-means sample's float16 embeddings (colbert-ai's sample.0.pt)
SAMPLE_STATE = "sample.json"        # its passage ids and lengths, written last: the sample is complete
CODEC_DONE = "codec.done"           # written after colbert-ai saved the centroids and buckets


def _read_json(path: str):
    """The JSON in ``path``, or None when it is missing, unreadable or malformed.  Lenient on purpose
    (unlike ``pyterrier_sci.data.read_json``, which raises): here a damaged file only means that the
    stage it records is not complete, and that stage is redone."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def chunk_complete(index_path: str, chunk_idx: int, offset: int, num_passages: int) -> bool:
    """Whether colbert-ai's files of chunk ``chunk_idx`` (``passages offset .. offset + num_passages``) are
    whole: its ``IndexSaver`` writes codes and residuals, then the lengths, then the chunk's metadata, so a
    metadata file that parses and agrees with the lengths means the chunk was written to the end."""
    meta = _read_json(os.path.join(index_path, f"{chunk_idx}.metadata.json"))
    doclens = _read_json(os.path.join(index_path, f"doclens.{chunk_idx}.json"))
    if not isinstance(meta, dict) or not isinstance(doclens, list):
        return False
    prefix = os.path.join(index_path, str(chunk_idx))
    return (meta.get("passage_offset") == offset and meta.get("num_passages") == num_passages == len(doclens)
            and meta.get("num_embeddings") == sum(doclens)
            and all(os.path.isfile(f"{prefix}.{k}.pt") and os.path.getsize(f"{prefix}.{k}.pt") > 0
                    for k in ("codes", "residuals")))


def _remove_chunks(index_path: str, chunk_idx: Optional[int] = None) -> None:
    """colbert-ai's files of one chunk (or of every chunk), so that a rewrite starts from nothing."""
    own = re.compile(r"^(\d+)\.(codes\.pt|residuals\.pt|metadata\.json)$|^doclens\.(\d+)\.json$")
    for name in os.listdir(index_path):
        m = own.match(name)
        if m and (chunk_idx is None or int(m.group(1) or m.group(3)) == chunk_idx):
            os.remove(os.path.join(index_path, name))


def unwritten_chunks(batches, index_path: str, reuse: Optional[SampleReuse] = None, skipped=None):
    """colbert-ai's chunks of the collection (``(chunk_idx, offset, passages)``) less those an earlier build
    wrote to the end (:func:`chunk_complete`): their sampled passages are walked past in ``reuse`` and
    ``skipped(passages)`` is called; a chunk written in part loses its files before it is handed on."""
    for chunk_idx, offset, chunk in batches:
        if chunk_complete(index_path, chunk_idx, offset, len(chunk)):
            if reuse is not None:
                reuse.skip(chunk)
            if skipped is not None:
                skipped(chunk)
            continue
        _remove_chunks(index_path, chunk_idx)
        yield chunk_idx, offset, chunk


def install_resume(resume_dir: str, passages, reuse: SampleReuse, emit) -> dict:
    """Makes colbert-ai's ``CollectionIndexer`` resume an interrupted build of the same collection with the
    same settings (the parent checks that: ``ColBERTIndexer``).  colbert-ai can only skip chunks once its
    codec is saved, and loses the k-means sample (encoded first, deleted when k-means reads it); here each
    stage is kept as it ends and taken up again:

    1. the k-means sample: its embeddings (a hard link to colbert-ai's ``sample.0.pt``, so no copy),
       passage ids and lengths go to ``resume_dir``; a later build loads them instead of encoding the
       sample, and the index pass still reuses them for the sampled passages;
    2. the codec (k-means centroids, residual buckets): marked done once colbert-ai has saved it; a later
       build loads it instead of running k-means;
    3. each chunk of the index pass that colbert-ai wrote to the end (:func:`chunk_complete`) is skipped.

    Colbert-ai's random sample of passage ids, its shuffle of the sample and FAISS's k-means are seeded, so
    a resumed build writes the index an uninterrupted one writes.  Emits ``resumed`` per stage taken up
    (``sample`` with the passages, ``codec``, ``chunks`` with their count) and ``advance`` for the
    passages not encoded again.  Returns the running counts."""
    import torch
    from colbert.indexing.collection_indexer import CollectionIndexer
    done = {"sample": 0, "codec": False, "chunks": 0, "chunk_passages": 0}
    kept, state_path = os.path.join(resume_dir, SAMPLE_KEPT), os.path.join(resume_dir, SAMPLE_STATE)
    codec_done = os.path.join(resume_dir, CODEC_DONE)
    state = _read_json(state_path)
    if not (isinstance(state, dict) and os.path.isfile(kept)):
        state = None
    original_sample_pids, original_sample_embeddings = CollectionIndexer._sample_pids, \
        CollectionIndexer._sample_embeddings
    original_train, original_index = CollectionIndexer.train, CollectionIndexer.index

    def codec_ready(saver) -> bool:
        return os.path.isfile(codec_done) and saver.try_load_codec()

    def _sample_pids(self):
        return set(state["pids"]) if state else original_sample_pids(self)

    def _sample_embeddings(self, sampled_pids):
        nonlocal state
        sample_file = os.path.join(self.config.index_path_, f"sample.{self.rank}.pt")
        ready = codec_ready(self.saver)
        # colbert-ai's run() trains unless its saver's try_load_codec says the codec is there: ours decides
        self.saver.try_load_codec = lambda: ready
        if ready:
            done["codec"] = True
            emit(event="resumed", stage="codec")
        else:
            _remove_chunks(self.config.index_path_)  # chunks are only ever written with the codec they follow
            with contextlib.suppress(FileNotFoundError):
                os.remove(codec_done)
        if state is None:
            avg = original_sample_embeddings(self, sampled_pids)
            link = f"{kept}.tmp-{os.getpid()}"
            os.link(sample_file, link)
            os.replace(link, kept)
            state = {"pids": sorted(int(p) for p in sampled_pids), "doclens": list(reuse.sample_doclens or []),
                     "avg_doclen_est": float(avg), "num_sample_embs": int(self.num_sample_embs.item())}
            atomic_write_text(state_path, json.dumps(state), "the kept k-means sample's state")
            if ready:  # no k-means to read it
                os.remove(sample_file)
            return avg
        pids = state["pids"]
        # loaded only for the index pass to serve (within the reuse budget); k-means reads its hard link itself
        keep = 2 * int(state["num_sample_embs"]) * int(self.config.dim) <= reuse.max_bytes
        reuse.seed([passages[p] for p in pids], torch.load(kept) if keep else None, state["doclens"])
        self.num_sample_embs = torch.tensor([int(state["num_sample_embs"])])
        self.avg_doclen_est = float(state["avg_doclen_est"])
        if os.path.lexists(sample_file):
            os.remove(sample_file)
        if not ready:  # k-means reads (and deletes) sample.0.pt: a hard link to the kept one
            os.link(kept, sample_file)
        done["sample"] = len(pids)
        emit(event="resumed", stage="sample", n=len(pids))
        emit(event="advance", n=len(pids))
        return self.avg_doclen_est

    def train(self, shared_lists):
        if self.saver.try_load_codec():  # (run() asks the same before calling train)
            return None
        out = original_train(self, shared_lists)
        with open(codec_done, "w", encoding="utf-8") as f:
            f.write("colbert-ai saved the codec\n")
        return out

    def index(self):
        enumerate_batches = self.collection.enumerate_batches

        def skipped(chunk):
            done["chunks"] += 1
            done["chunk_passages"] += len(chunk)
            emit(event="advance", n=len(chunk))

        self.collection.enumerate_batches = lambda rank: unwritten_chunks(
            enumerate_batches(rank=rank), self.config.index_path_, reuse, skipped)
        try:
            return original_index(self)
        finally:
            del self.collection.enumerate_batches
            if done["chunks"]:
                emit(event="resumed", stage="chunks", n=done["chunks"], passages=done["chunk_passages"])

    # a plan left by the interrupted build would make setup() skip the sample (colbert-ai's own resume):
    # the sample is always taken up here, and the plan it gives is the same
    CollectionIndexer._try_load_plan = lambda self: False
    CollectionIndexer._sample_pids = _sample_pids
    CollectionIndexer._sample_embeddings = _sample_embeddings
    CollectionIndexer.train = train
    CollectionIndexer.index = index
    return done


#: exit status of a worker whose parent died (killed with SIGKILL, say): nobody would commit its index
ORPHANED = 3


def exit_when_orphaned(parent: Optional[int] = None, interval: float = 0.5) -> threading.Thread:
    """Ends this process soon after its parent dies.  The worker runs in a session of its own (the parent
    kills its whole process group on an error or a timeout), so a parent killed outright would leave it
    encoding into a partial directory that the next update removes: a watch thread notices that the parent
    (``parent``, the pid the parent wrote into the worker's arguments; else the parent at the start) is no
    longer ``os.getppid()`` and exits with status :data:`ORPHANED`.  The parent's pid comes from the
    arguments because the worker's imports take seconds, and a parent killed meanwhile is already gone when
    the watch begins."""
    parent = os.getppid() if parent is None else int(parent)

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(ORPHANED)
            time.sleep(interval)

    t = threading.Thread(target=watch, name="exit-when-orphaned", daemon=True)
    t.start()
    return t


def index_main(args_path: str) -> int:
    with open(args_path) as f:
        args = json.load(f)
    exit_when_orphaned(args.get("parent_pid"))
    events = os.fdopen(int(args["progress_fd"]), "w", buffering=1)

    def emit(**event):
        events.write(json.dumps(event) + "\n")
        events.flush()

    try:
        import torch
        if args.get("threads"):
            torch.set_num_threads(int(args["threads"]))
        import_colbert()
        import colbert.modeling.checkpoint as checkpoint_module
        from colbert import Indexer
        from colbert.data import Collection
        from colbert.infra import ColBERTConfig, Run, RunConfig

        def progress(batches, disable=False, **_):
            # Checkpoint.docFromText wraps its batches in tqdm: report each one instead
            for batch in batches:
                yield batch
                emit(event="advance", n=int(batch[0].shape[0]))

        checkpoint_module.tqdm = progress
        import colbert.indexing.collection_indexer as collection_indexer
        kmeans = collection_indexer.compute_faiss_kmeans

        def timed_kmeans(*a, **kw):  # the step between the two encoding passes, timed for the index metadata
            emit(event="kmeans", state="start")
            centroids = kmeans(*a, **kw)
            emit(event="kmeans", state="end")
            return centroids

        collection_indexer.compute_faiss_kmeans = timed_kmeans
        with open(args["collection"], encoding="utf-8") as f:
            passages = [line.rstrip("\n") for line in f]
        reuse = reuse_sample_encoding(emit)
        resuming = args.get("resume_dir") is not None and os.path.isdir(args["index_path"])
        if args.get("resume_dir") is not None:
            install_resume(args["resume_dir"], passages, reuse, emit)
        codes = assign_codes_with_faiss(args.get("threads"))
        with Run().context(RunConfig(nranks=1, avoid_fork_if_possible=True, root=args["root"])):
            config = ColBERTConfig(doc_maxlen=args["doc_maxlen"], nbits=args["nbits"],
                                   kmeans_niters=args["kmeans_niters"], index_bsize=args["index_bsize"],
                                   index_path=args["index_path"])
            # 'resume': colbert-ai refuses an index directory that exists otherwise (install_resume decides)
            Indexer(checkpoint=args["checkpoint"], config=config, verbose=0).index(
                name=os.path.basename(args["index_path"]), collection=Collection(data=passages),
                overwrite="resume" if resuming else False)
        emit(event="codes", method="faiss", vectors=codes["vectors"], seconds=round(codes["seconds"], 3))
        emit(event="done")
        return 0
    except BaseException as e:  # reported to the parent, which raises it as one clear error
        emit(event="error", type=type(e).__name__, message=str(e), traceback=traceback.format_exc())
        return 1
    finally:
        events.close()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["extensions"]:
        build_extensions_here()
        return 0
    if len(argv) == 2 and argv[0] == "index":
        return index_main(argv[1])
    print("usage: python -m pyterrier_sci.plugins.colbert._worker (extensions | index ARGS.json)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
