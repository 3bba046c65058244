"""Facet cross-encoder re-ranking throughput on CPU at CSFCube's pool sizes.

CSFCube pools hold 90-253 candidates per query (median ~103).  For each pool size the benchmark
re-ranks one query's pool (real CSFCube abstracts when the data is there, else synthetic text of
abstract length) with a MiniLM-L6 facet cross-encoder (paper input format) and reports pairs per
second, for max_length 256 and 512.

    python benchmarks/bench_facet.py [--sizes 90 103 128 253] [--threads 2] [--repeat 2]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch


def make_artifact(root: Path, max_length: int) -> "object":
    from pyterrier_sci.plugins import sciface as F  # noqa: N812
    from pyterrier_sci.plugins.dense import resolve_model
    from pyterrier_sci.plugins.sciface.cross_encoder import _load_cross_encoder
    d = root / f"minilm-{max_length}"
    model = _load_cross_encoder(resolve_model("default"), max_length)
    model.save(str(d / "model"))
    (d / "pt_meta.json").write_text(json.dumps({"type": F.ARTIFACT_TYPE, "format": F.ARTIFACT_FORMAT,
                                                "facet": "method", "max_length": max_length}))
    return F.FacetCrossEncoder(d)


def frame(n: int) -> pd.DataFrame:
    try:
        from pyterrier_sci.datasets import csfcube
        docs = list(csfcube.docs().values())
    except Exception:
        docs = []
    rng = np.random.default_rng(0)
    if len(docs) > n:
        sel = [docs[i] for i in rng.choice(len(docs), n + 1, replace=False)]
        seed, cands = sel[0], sel[1:]
        return pd.DataFrame({"qid": "q", "query": seed.title, "query_title": seed.title,
                             "query_abstract": seed.abstract,
                             "docno": [c.doc_id for c in cands], "title": [c.title for c in cands],
                             "abstract": [c.abstract for c in cands]})
    words = "graph neural network model method data learning task results propose show".split()
    text = lambda: " ".join(rng.choice(words, 200))  # noqa: E731
    return pd.DataFrame({"qid": "q", "query": "seed", "query_title": "seed paper", "query_abstract": text(),
                         "docno": [f"d{i}" for i in range(n)], "title": "a title",
                         "abstract": [text() for _ in range(n)]})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[90, 103, 128, 253])
    ap.add_argument("--max-lengths", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for L in args.max_lengths:  # noqa: N806
            rr = make_artifact(Path(tmp), L).scorer(batch_size=args.batch_size)
            rr(frame(8))  # warm-up
            for n in args.sizes:
                inp = frame(n)
                best = min(_timed(rr, inp) for _ in range(args.repeat))
                rows.append({"max_length": L, "pool size": n, "seconds/query": round(best, 2),
                             "pairs/s": round(n / best, 1)})
    print(f"facet cross-encoder (MiniLM-L6, CPU, {args.threads} threads, batch {args.batch_size})")
    print(pd.DataFrame(rows).to_string(index=False))


def _timed(rr, inp) -> float:
    t = time.perf_counter()
    rr(inp)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
