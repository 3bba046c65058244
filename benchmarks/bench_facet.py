"""Facet cross-encoder re-ranking throughput on CPU at CSFCube's pool sizes.

CSFCube pools hold 90-253 candidates per query (median ~103).  For each pool size the benchmark
re-ranks one query's pool (real CSFCube abstracts when the data is there, else synthetic text of
abstract length) with a MiniLM-L6 facet cross-encoder (paper input format) and reports pairs per
second, for max_length 256 and 512.  Per pool size the max_lengths run interleaved (256, 512, 256,
512, ... for ``--repeat`` rounds, after a warm-up), so a loaded machine slows both alike; the table
gives the median time per query and the median (min-max) of the per-round ratios to the first
max_length, and the run prints the load average before and after.

    python benchmarks/bench_facet.py [--sizes 90 103 128 253] [--threads 2] [--repeat 3]
        [--out benchmarks/results/bench_facet.md]

``--out`` records the run (``pyterrier_sci.bench.write_results``); docs/sciface.md quotes its table.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pyterrier_sci.bench import interleaved, load_note, markdown, write_results


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
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds per pool size")
    ap.add_argument("--out", help="record the run in this results file (docs/sciface.md quotes it)")
    args = ap.parse_args(argv)
    if min(args.sizes + args.max_lengths + [args.batch_size, args.threads, args.repeat]) < 1:
        ap.error("sizes, max lengths, --batch-size, --threads and --repeat must be at least 1")
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        scorers = {L: make_artifact(Path(tmp), L).scorer(batch_size=args.batch_size) for L in args.max_lengths}
        for rr in scorers.values():
            rr(frame(8))  # warm-up
        base = args.max_lengths[0]
        for n in args.sizes:
            inp = frame(n)
            t = interleaved({L: (lambda rr=rr: rr(inp)) for L, rr in scorers.items()}, args.repeat)
            for L in args.max_lengths:  # noqa: N806
                sec = t.median(L)
                rows.append({"max_length": L, "pool size": n, "seconds/query (median)": round(sec, 2),
                             "pairs/s": round(n / sec, 1),
                             f"time / max_length {base} (median, min-max)":
                                 "-" if L == base else str(t.ratio(L, base))})
    header = (f"facet cross-encoder (MiniLM-L6, torch on the CPU, {args.threads} threads, batch {args.batch_size}), "
              f"one CSFCube query's pool per size; {args.repeat} interleaved rounds")
    note = load_note(load_before)
    table = markdown(pd.DataFrame(rows))
    print(f"{header}; {note}\n")
    print(table)
    if args.out:
        write_results(args.out, "bench_facet: facet cross-encoder re-ranking throughput at CSFCube's pool sizes",
                      "benchmarks/bench_facet.py", argv, [header], [("throughput", table)], note)


if __name__ == "__main__":
    main()
