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
import traceback


def sample_size(n: int) -> int:
    """How many passages colbert-ai's ``CollectionIndexer._sample_pids`` encodes for k-means before
    encoding the whole collection (``16 * sqrt(120 * n)``, at most ``n``)."""
    return min(1 + int(16 * math.sqrt(120 * n)), n)


def reuse_sample_encoding(collection_size: int, emit) -> None:
    """colbert-ai encodes its k-means sample of passages, then every passage again to index it.
    Below about 30K passages (:func:`sample_size`) the sample is the whole collection, in order, and
    the second pass computes the same embeddings again: this keeps the first pass's (as float16, as
    colbert-ai stores them) and hands out the index pass's chunks from it, which halves the encoding
    time of such a build.  Any other call encodes as before.  Emits ``reused`` with the passages
    served so (the build's metadata records it) and ``advance`` for the progress bar."""
    import numpy as np
    from colbert.indexing.collection_encoder import CollectionEncoder
    original = CollectionEncoder.encode_passages
    memo = {"calls": 0}

    def encode_passages(self, passages):
        memo["calls"] += 1
        if memo["calls"] == 1:  # CollectionIndexer.setup: the k-means sample
            embs, doclens = original(self, passages)
            if embs is not None and len(passages) == collection_size and not self.use_gpu:
                memo.update(passages=passages, embs=embs.half(), doclens=list(doclens),
                            starts=np.concatenate([[0], np.cumsum(doclens)]), next=0)
            return embs, doclens
        i, n = memo.get("next"), len(passages)
        if i is not None and memo["passages"][i:i + n] == passages:  # CollectionIndexer.index: the next chunk
            a, b = int(memo["starts"][i]), int(memo["starts"][i + n])
            embs, doclens = memo["embs"][a:b].float(), memo["doclens"][i:i + n]
            memo["next"] = i + n
            if memo["next"] == collection_size:
                memo.clear()
                memo["calls"] = 2
            emit(event="reused", n=n)
            emit(event="advance", n=n)
            return embs, doclens
        return original(self, passages)

    CollectionEncoder.encode_passages = encode_passages


def index_main(args_path: str) -> int:
    with open(args_path) as f:
        args = json.load(f)
    events = os.fdopen(int(args["progress_fd"]), "w", buffering=1)

    def emit(**event):
        events.write(json.dumps(event) + "\n")
        events.flush()

    try:
        import torch
        if args.get("threads"):
            torch.set_num_threads(int(args["threads"]))
        from pyterrier_sci.plugins.colbert._compat import import_colbert
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
        reuse_sample_encoding(len(passages), emit)
        with Run().context(RunConfig(nranks=1, avoid_fork_if_possible=True, root=args["root"])):
            config = ColBERTConfig(doc_maxlen=args["doc_maxlen"], nbits=args["nbits"],
                                   kmeans_niters=args["kmeans_niters"], index_bsize=args["index_bsize"],
                                   index_path=args["index_path"])
            Indexer(checkpoint=args["checkpoint"], config=config, verbose=0).index(
                name=os.path.basename(args["index_path"]), collection=Collection(data=passages))
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
        from pyterrier_sci.plugins.colbert._compat import build_extensions_here
        build_extensions_here()
        return 0
    if len(argv) == 2 and argv[0] == "index":
        return index_main(argv[1])
    print("usage: python -m pyterrier_sci.plugins.colbert._worker (extensions | index ARGS.json)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
