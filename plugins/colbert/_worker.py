"""The process that builds a ColBERT (PLAID) index or colbert-ai's extensions (``python -m
pyterrier_sci.plugins.colbert._worker index|extensions ARGS.json``; not an interface of its own).
It reports progress as one JSON event per line on the file descriptor named in ``ARGS.json``
(``advance``, ``kmeans``, ``error``, ``done``) and runs colbert-ai with ``nranks=1`` and
``avoid_fork_if_possible=True``, so that no rank process is spawned.
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import traceback
from typing import Optional

import numpy as np

from pyterrier_sci.plugins.colbert._compat import build_extensions_here, import_colbert


def sample_size(n: int) -> int:
    """How many passages colbert-ai's ``CollectionIndexer._sample_pids`` encodes for k-means before
    encoding the whole collection (``16 * sqrt(120 * n)``, at most ``n``)."""
    return min(1 + int(16 * math.sqrt(120 * n)), n)


#: the k-means sample's encoding is kept for the index pass only up to this size (float16 bytes); a larger
#: sample (collections of about 250K passages of 256 word pieces and more) is encoded twice, as colbert-ai does
REUSE_MAX_BYTES = 4 << 30


def reuse_sample_encoding(emit, max_bytes: int = REUSE_MAX_BYTES) -> None:
    """colbert-ai encodes its k-means sample of passages, then every passage again to index it.  The
    sample (:func:`sample_size` passages: the whole collection below about 30K passages, a random subset
    above) is a subsequence of the collection, and the index pass encodes the collection in order: this
    keeps the sample's embeddings (as float16, as colbert-ai stores them; at most ``max_bytes``) and
    hands them out for the sample's passages in the index pass, encoding only the others.  Below 30K
    passages that halves the encoding time of a build; at 38,956 passages (PRISM's 256-word chunks) the
    sample is 34,583 passages and the build encodes 38,956 passages instead of 73,539.  The sample's
    passages are found by walking the sample alongside each chunk (equal strings: equal embeddings, up
    to float rounding in other batches).  Any other call encodes as before.  Emits ``reused`` with the
    passages served so (the build's metadata records it) and ``advance`` for the progress bar."""
    import torch
    from colbert.indexing.collection_encoder import CollectionEncoder
    original = CollectionEncoder.encode_passages
    memo = {"calls": 0}

    def encode_passages(self, passages):
        memo["calls"] += 1
        if memo["calls"] == 1:  # CollectionIndexer.setup: the k-means sample
            embs, doclens = original(self, passages)
            if embs is not None and not self.use_gpu and 2 * embs.numel() <= max_bytes:
                memo.update(passages=passages, embs=embs.half(), doclens=list(doclens),
                            starts=np.concatenate([[0], np.cumsum(doclens)]).astype(np.int64), next=0)
            return embs, doclens
        sample = memo.get("passages")
        if sample is None or not passages:
            return original(self, passages)
        # CollectionIndexer.index: the next chunk of the collection; its sampled passages come in the sample's order
        i, source = memo["next"], []
        for p in passages:
            if i < len(sample) and p == sample[i]:
                source.append(i)
                i += 1
            else:
                source.append(-1)
        if i == memo["next"]:
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
        reused = i - memo["next"]
        memo["next"] = i
        if i == len(sample):  # every sampled passage handed out: free the kept encoding
            memo.clear()
            memo["calls"] = 2
        emit(event="reused", n=reused)
        emit(event="advance", n=reused)
        return torch.cat(parts), doclens

    CollectionEncoder.encode_passages = encode_passages


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
        reuse_sample_encoding(emit)
        codes = assign_codes_with_faiss(args.get("threads"))
        with Run().context(RunConfig(nranks=1, avoid_fork_if_possible=True, root=args["root"])):
            config = ColBERTConfig(doc_maxlen=args["doc_maxlen"], nbits=args["nbits"],
                                   kmeans_niters=args["kmeans_niters"], index_bsize=args["index_bsize"],
                                   index_path=args["index_path"])
            Indexer(checkpoint=args["checkpoint"], config=config, verbose=0).index(
                name=os.path.basename(args["index_path"]), collection=Collection(data=passages))
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
