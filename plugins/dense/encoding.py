"""Encoding a stream of documents with progress per batch: what the corpus index builder
(``dense``) and the sharded builder's Ray workers share."""
from __future__ import annotations

import itertools
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

#: documents read from the stream and sorted by length at a time (bounds memory; sentence-transformers
#: sorts each ``encode`` call's input by length, so a window this long pads about as little as one call)
WINDOW = 2048


def encode_stream(encoder, docs: Iterable[dict], batch_size: int = 32,
                  on_batch: Optional[Callable[[int], None]] = None, window: int = WINDOW) -> Iterator[dict]:
    """``{'docno', 'doc_vec'}`` for each ``{'docno', 'text'}`` of ``docs``, in their order.

    ``window`` documents at a time are sorted by text length (longest first, as
    ``SentenceTransformer.encode`` sorts) and encoded ``batch_size`` at a time, one ``encode`` call per
    batch, so that ``on_batch(n)`` is called after every batch with the ``n`` documents it encoded
    (a progress bar moves per batch, not per window).  The vectors are the ones one ``encode`` call
    over the window gives: the batches are the same."""
    it = iter(docs)
    while chunk := list(itertools.islice(it, window)):
        texts = [d["text"] for d in chunk]
        order = np.argsort([-len(t) for t in texts], kind="stable")
        vecs = [None] * len(chunk)
        for b in range(0, len(order), batch_size):
            ids = order[b:b + batch_size]
            out = encoder.encode([texts[j] for j in ids], batch_size=batch_size, show_progress_bar=False,
                                 convert_to_numpy=True)
            for j, v in zip(ids, out):
                vecs[j] = np.asarray(v, dtype=np.float32)
            if on_batch is not None:
                on_batch(len(ids))
        for d, v in zip(chunk, vecs):
            yield {"docno": d["docno"], "doc_vec": v}
