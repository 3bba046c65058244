"""Encoding texts so that a text's vector does not depend on its batch: each text is padded to a fixed length of
its own (its word pieces rounded up to a multiple of :data:`BUCKET`, at most the model's ``max_seq_length``) and
batched only with texts of that length.  A batch padded to its longest text, as sentence-transformers pads, gives
a text a different shape in another batch, and the engines' kernels then round differently: the same abstract's
int8 vector moved by up to 0.008 between batches of 32 and 8, and a grown index differed from its rebuild.  With
a length of its own a text is computed in the same shape whatever else is in its batch (tested bit for bit on
shuffled batches of several sizes, torch fp32, OpenVINO fp32 and int8, ONNX Runtime).

Also what the corpus index builder (``dense``) and the sharded builder's Ray workers share: encoding a stream
of documents with progress per batch (:func:`encode_stream`)."""
from __future__ import annotations

import itertools
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from .engine import features

__all__ = ["BUCKET", "WINDOW", "encode_texts", "encode_stream", "padded_length"]

#: a text's word pieces are padded to a multiple of this (its own length: the same whatever its batch)
BUCKET = 16

#: the fewest rows a batch runs through PyTorch with (a smaller one is filled with copies; see encode_texts)
MIN_TORCH_ROWS = 8

#: documents read from the stream and encoded at a time (bounds memory; a window this long pads about as little
#: as one call over the whole corpus)
WINDOW = 2048


def padded_length(tokens: int, cap: int) -> int:
    """The length a text of ``tokens`` word pieces is padded to: the next multiple of :data:`BUCKET`, at most
    ``cap`` (the model's ``max_seq_length``, beyond which it is truncated)."""
    return min(max(BUCKET, -(-int(tokens) // BUCKET) * BUCKET), max(int(cap), 1))


def _source_model(encoder):
    """The sentence-transformers model whose tokenizer and modules ``encoder`` uses (itself for torch)."""
    return getattr(encoder, "_source", None) or encoder


def _bucketable(encoder) -> bool:
    st = _source_model(encoder)
    try:
        first = st[0]
    except (TypeError, IndexError, KeyError):
        return False
    return hasattr(first, "tokenize") or hasattr(first, "preprocess")


def _embed_torch(st, feats: Dict) -> np.ndarray:
    import torch
    device = getattr(st, "device", None)
    feats = {k: (v.to(device) if device is not None and hasattr(v, "to") else v) for k, v in feats.items()}
    with torch.inference_mode():
        out = st(feats)["sentence_embedding"]
    return out.float().cpu().numpy()


def encode_texts(encoder, texts: Sequence[str], batch_size: int = 32,
                 on_batch: Optional[Callable[[int], None]] = None) -> np.ndarray:
    """Float32 embeddings of ``texts`` (rows in their order) with ``encoder`` (a ``SentenceTransformer`` or an
    exported encoder of :mod:`.encoders`), each text padded to :func:`padded_length` of its own word pieces and
    batched only with texts of that length (longest first, ``batch_size`` at a time): a text's vector is the same
    whatever other texts are encoded with it.  ``on_batch(n)`` after each batch.  An encoder whose model has no
    tokenizer module of sentence-transformers' kind is left to its own ``encode``."""
    texts = [str(t) for t in texts]
    if not _bucketable(encoder):
        out = np.asarray(encoder.encode(texts, batch_size=batch_size, show_progress_bar=False,
                                        convert_to_numpy=True), dtype=np.float32)
        if on_batch is not None:
            on_batch(len(texts))
        return out
    st = _source_model(encoder)
    exported = hasattr(encoder, "embed_features")
    embed = encoder.embed_features if exported else (lambda f: _embed_torch(st, f))
    # PyTorch's CPU kernels also round differently for a batch of very few rows (1 or 3 texts moved vectors by
    # 1e-7 where 8 to 64 did not): a smaller batch is filled up to MIN_TORCH_ROWS rows, the extra thrown away
    rows_of = None if exported else MIN_TORCH_ROWS
    dim = (encoder.get_embedding_dimension() if hasattr(encoder, "get_embedding_dimension")
           else encoder.get_sentence_embedding_dimension())
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out
    feats = features(st, texts)   # one tokenisation, padded to the longest: each batch takes its rows and columns
    lengths = np.asarray(feats["attention_mask"].sum(dim=1)).astype(np.int64)
    cap = int(getattr(st, "max_seq_length", None) or feats["input_ids"].shape[1])
    padded = [padded_length(n, max(cap, int(n))) for n in lengths]
    groups: Dict[int, List[int]] = {}
    for i in np.argsort(-lengths, kind="stable"):
        groups.setdefault(int(padded[i]), []).append(int(i))
    width = int(feats["input_ids"].shape[1])
    for length in sorted(groups, reverse=True):
        ids = groups[length]
        for b in range(0, len(ids), batch_size):
            rows = ids[b:b + batch_size]
            batch = {}
            for k, v in feats.items():
                if hasattr(v, "shape") and len(v.shape) == 2 and v.shape[1] == width:
                    part = v[rows, :length] if length <= width else v[rows]
                    if length > width:   # every text is shorter than the bucket: pad to it (zeros: masked)
                        part = _pad_columns(part, length, _pad_value(st, k))
                    batch[k] = part
                else:
                    batch[k] = v[rows] if hasattr(v, "shape") and len(v.shape) >= 1 and v.shape[0] == len(texts) \
                        else v
            if rows_of is not None and len(rows) < rows_of:
                fill = [0] * (rows_of - len(rows))
                batch = {k: (_cat_rows(v, fill) if hasattr(v, "shape") and len(v.shape) >= 1 and
                             v.shape[0] == len(rows) else v) for k, v in batch.items()}
            out[rows] = embed(batch)[:len(rows)]
            if on_batch is not None:
                on_batch(len(rows))
    return out


def _cat_rows(t, fill: List[int]):
    """``t`` with copies of its rows ``fill`` appended (filler rows whose outputs are thrown away)."""
    import torch
    return torch.cat([t, t[fill]], dim=0)


def _pad_value(st, key: str) -> int:
    if key != "input_ids":
        return 0
    tok = getattr(st, "tokenizer", None)
    return int(getattr(tok, "pad_token_id", None) or 0)


def _pad_columns(t, length: int, value: int):
    import torch
    out = torch.full((t.shape[0], length), value, dtype=t.dtype)
    out[:, :t.shape[1]] = t
    return out


def encode_stream(encoder, docs: Iterable[dict], batch_size: int = 32,
                  on_batch: Optional[Callable[[int], None]] = None, window: int = WINDOW) -> Iterator[dict]:
    """``{'docno', 'doc_vec'}`` for each ``{'docno', 'text'}`` of ``docs``, in their order: ``window`` documents
    at a time encoded by :func:`encode_texts` (a document's vector does not depend on the others), so that
    ``on_batch(n)`` is called after every batch with the ``n`` documents it encoded (a progress bar moves per
    batch, not per window)."""
    it = iter(docs)
    while chunk := list(itertools.islice(it, window)):
        vecs = encode_texts(encoder, [d["text"] for d in chunk], batch_size, on_batch)
        for d, v in zip(chunk, vecs):
            yield {"docno": d["docno"], "doc_vec": v}
