"""Toolkit overhead of BM25 (PISA, Lucene) and dense retrieval against the raw libraries.

On the hep-th abstracts of ``$PYTERRIER_SCI_DATA/hepth-citations/papers.jsonl`` (the 27,769 papers
of the citation graph; title + abstract), in one process, the same work is done twice:

* PISA:   toolkit ``build_index(..., backend="pisa")`` + ``BM25`` transformer, against
          ``pyterrier_pisa.PisaIndex.index`` + ``PisaIndex.bm25()`` called directly;
* Lucene: ``LuceneIndex`` + ``LuceneBM25`` against Pyserini's ``LuceneIndexer`` / ``LuceneSearcher``
          (``benchmark_lucene`` below);
* dense:  toolkit ``DenseRetriever`` (encode + FlexIndex build; query encoding + exhaustive search)
          against ``SentenceTransformer.encode`` + a numpy matrix product and ``argpartition``
          on the same documents (a sample, ``--dense-docs``, since encoding 27K abstracts on two
          CPU cores takes tens of minutes per side).

Queries: the first ``--queries`` titles, k=1000.  Each step runs ``--repeats`` times alternating
sides; the fastest run counts.  Prints a markdown table (time and toolkit/raw ratio; target <= 1.15).

    python benchmarks/bench_retrieval.py [--queries 1000] [--dense-docs 3000] [--repeats 2] [--skip lucene]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pandas as pd

from pyterrier_sci.bench import best


def load_papers(path):
    docs = []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if not (d.get("references") or d.get("cited_by")):
                continue
            docs.append({"docno": str(d["id"]), "text": f"{d['title'] or ''} {d['abstract'] or ''}",
                         "title": d["title"] or ""})
    return docs


def bench_pisa(docs, topics, repeats, root):
    from pyterrier_pisa import PisaIndex

    from pyterrier_sci.plugins.bm25 import BM25, build_index
    from pyterrier_sci.quiet import quiet_native
    rows = []
    idx_raw, idx_tk = [], []

    def raw_build():
        p = root / f"pisa-raw-{len(idx_raw)}"
        with quiet_native():
            PisaIndex(str(p), text_field="text").index(({"docno": d["docno"], "text": d["text"]} for d in docs))
        idx_raw.append(p)

    def tk_build():
        p = root / f"pisa-tk-{len(idx_tk)}"
        build_index(({"docno": d["docno"], "text": d["text"]} for d in docs), p, backend="pisa")
        idx_tk.append(p)

    t_raw = t_tk = float("inf")
    for _ in range(repeats):
        t_raw = min(t_raw, best(raw_build, 1)[0])
        t_tk = min(t_tk, best(tk_build, 1)[0])
    rows.append(("PISA index build", t_raw, t_tk, f"{len(docs)} docs"))

    with quiet_native():
        raw_retr = PisaIndex(str(idx_raw[0])).bm25(num_results=1000)
    tk_retr = BM25(str(idx_tk[0]), num_results=1000)
    raw_retr(topics.head(5)), tk_retr(topics.head(5))  # warm-up (retrieval contexts, page cache)
    q_raw = q_tk = float("inf")
    for _ in range(repeats):
        q_raw = min(q_raw, best(lambda: raw_retr(topics), 1)[0])
        q_tk = min(q_tk, best(lambda: tk_retr(topics), 1)[0])
    a, b = raw_retr(topics), tk_retr(topics)
    same = (a.groupby("qid")["docno"].first() == b.groupby("qid")["docno"].first()).mean()
    rows.append(("PISA BM25 queries (k=1000)", q_raw, q_tk, f"{len(topics)} queries, top-1 agreement {same:.3f}"))
    return rows


def _load_lucene_papers(papers_path, graph_only: bool = True, limit: Optional[int] = None) -> List[dict]:
    docs = []
    with open(papers_path) as f:
        for line in f:
            d = json.loads(line)
            if graph_only and not (d.get("references") or d.get("cited_by")):
                continue
            docs.append({"docno": str(d["id"]), "title": d["title"] or "", "abstract": d["abstract"] or ""})
            if limit and len(docs) >= limit:
                break
    return docs


def benchmark_lucene(papers_path, n_queries: int = 1000, k: int = 1000, threads: int = 1, repeats: int = 1,
                     batch_size: int = 1000, graph_only: bool = True, workdir: Optional[str] = None) -> Dict:
    """Throughput of the Lucene BM25 backend against raw Pyserini on the same work, in one process.

    Indexes the hep-th papers of the citation graph (title + abstract, papers with at least one
    reference or citation: 27,769 in ``hepth-citations/papers.jsonl``) and runs the first
    ``n_queries`` titles as queries (k=1000) through

    * the toolkit: ``LuceneIndex.indexer(...).index(docs)`` and ``LuceneBM25`` (query frame in, result
      frame out), and
    * raw Pyserini: ``pyserini.index.lucene.LuceneIndexer.add_batch_dict`` + ``close`` and
      ``pyserini.search.lucene.LuceneSearcher.batch_search`` with the hits read into Python lists
      (qid, docid, score) - the least a caller does with them,

    with the same documents (already in memory), queries, k and threads.  A small warm-up of both runs
    first (JVM start, JIT); each timed step runs ``repeats`` times, alternating the two sides, and the
    fastest run counts.  Returns a dict of seconds, rates and ratios (toolkit / raw).
    """
    from pyterrier_sci.plugins.bm25.lucene import LuceneBM25, LuceneIndex, _pyserini

    py = _pyserini()  # starts the JVM (toolkit settings) and imports Pyserini's Python classes
    docs = _load_lucene_papers(papers_path, graph_only=graph_only)
    queries = [d["title"] for d in docs[:n_queries]]
    qids = [d["docno"] for d in docs[:n_queries]]
    qframe = pd.DataFrame({"qid": qids, "query": queries})
    root = Path(tempfile.mkdtemp(prefix="lucene-bench-", dir=workdir))

    def raw_index(path, tdocs):
        # the same input dicts; Pyserini wants {'id', 'contents'}
        ix = py.LuceneIndexer(str(path), threads=threads)
        for i in range(0, len(tdocs), batch_size):
            ix.add_batch_dict([{"id": d["docno"], "contents": d["title"] + " " + d["abstract"]}
                               for d in tdocs[i:i + batch_size]])
        ix.close()

    def toolkit_index(path, tdocs):
        return LuceneIndex(str(path)).indexer(text_field=["title", "abstract"], threads=threads,
                                              batch_size=batch_size).index(iter(tdocs))

    def raw_search(path, qs, ids):
        s = py.LuceneSearcher(str(path))
        s.set_bm25(0.9, 0.4)
        res = s.batch_search(qs, ids, k=k, threads=threads)
        out = []
        for qid in ids:
            hits = res.get(qid, [])
            out.append((qid, [h.docid for h in hits], [h.score for h in hits]))
        s.close()
        return out

    def toolkit_search(index, frame):
        return LuceneBM25(index, k1=0.9, b=0.4, num_results=k, threads=threads)(frame)

    try:
        # warm-up: JVM, JIT, class loading on both paths
        raw_index(root / "warm_raw", docs[:2000])
        widx = toolkit_index(root / "warm_tk", docs[:2000])
        raw_search(root / "warm_raw", queries[:100], qids[:100])
        toolkit_search(widx, qframe.iloc[:100])

        t = {"raw_index_s": [], "toolkit_index_s": [], "raw_search_s": [], "toolkit_search_s": []}
        for r in range(repeats):
            for side in (("raw", "toolkit") if r % 2 == 0 else ("toolkit", "raw")):
                p = root / f"{side}_{r}"
                t0 = time.perf_counter()
                if side == "raw":
                    raw_index(p, docs)
                else:
                    toolkit_index(p, docs)
                t[f"{side}_index_s"].append(time.perf_counter() - t0)
            for side in (("raw", "toolkit") if r % 2 == 0 else ("toolkit", "raw")):
                t0 = time.perf_counter()
                if side == "raw":
                    raw_out = raw_search(root / f"raw_{r}", queries, qids)
                else:
                    tk_out = toolkit_search(LuceneIndex(str(root / f"toolkit_{r}")), qframe)
                t[f"{side}_search_s"].append(time.perf_counter() - t0)
            if r < repeats - 1:
                for side in ("raw", "toolkit"):
                    shutil.rmtree(root / f"{side}_{r}", ignore_errors=True)

        # same answers: top docno of every query, and the number of hits
        raw_top = {qid: (dn[0] if dn else None, len(dn)) for qid, dn, _ in raw_out}
        g = tk_out.groupby("qid", sort=False)
        tk_top = {qid: (grp["docno"].iloc[0], len(grp)) for qid, grp in g}
        agree = sum(raw_top[q] == tk_top.get(q, (None, 0)) for q in qids) / len(qids)

        fastest = {key: min(v) for key, v in t.items()}
        n_docs, n_rows = len(docs), len(tk_out)
        return {
            "n_docs": n_docs, "n_queries": len(qids), "k": k, "threads": threads, "repeats": repeats,
            "result_rows": n_rows, "top1_agreement": agree,
            **fastest,
            "runs": t,
            "raw_index_docs_per_s": n_docs / fastest["raw_index_s"],
            "toolkit_index_docs_per_s": n_docs / fastest["toolkit_index_s"],
            "raw_queries_per_s": len(qids) / fastest["raw_search_s"],
            "toolkit_queries_per_s": len(qids) / fastest["toolkit_search_s"],
            "index_ratio": fastest["toolkit_index_s"] / fastest["raw_index_s"],
            "search_ratio": fastest["toolkit_search_s"] / fastest["raw_search_s"],
            "total_ratio": (fastest["toolkit_index_s"] + fastest["toolkit_search_s"])
            / (fastest["raw_index_s"] + fastest["raw_search_s"]),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_lucene(path, n_queries, repeats):
    r = benchmark_lucene(path, n_queries=n_queries, repeats=repeats)
    out = []
    for key, label in (("index", "Lucene index build"), ("search", "Lucene BM25 queries (k=1000)")):
        raw = r.get(f"raw_{key}_s") or r.get("raw", {}).get(key)
        tk = r.get(f"toolkit_{key}_s") or r.get("toolkit", {}).get(key)
        out.append((label, raw, tk, ""))
    return out, r


def bench_dense(docs, topics, repeats, root):
    from pyterrier_dr import FlexIndex
    from sentence_transformers import SentenceTransformer

    from pyterrier_sci.plugins.dense import DenseRetriever, resolve_model
    model_path = resolve_model("default")
    raw_model = SentenceTransformer(model_path, device="cpu")
    texts = [d["text"] for d in docs]
    queries = topics["query"].tolist()
    rows = []

    def raw_encode():
        return raw_model.encode(texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False)

    built = []

    def tk_encode():
        p = root / f"dense-tk-{len(built)}"
        r = DenseRetriever("default", index=str(p), verbose=False)
        FlexIndex(str(p), verbose=False).indexer().index(r._encode_docs(iter(docs)))
        built.append(p)

    t_raw = t_tk = float("inf")
    raw_vecs = None
    for _ in range(repeats):
        t, raw_vecs = best(raw_encode, 1)
        t_raw = min(t_raw, t)
        t_tk = min(t_tk, best(tk_encode, 1)[0])
    rows.append(("dense encode + index", t_raw, t_tk, f"{len(docs)} docs, all-MiniLM-L6-v2, batch 32"))

    docnos = np.array([d["docno"] for d in docs], dtype=object)
    qids = topics["qid"].to_numpy()

    def raw_search():
        # the same work as the toolkit: encode, exhaustive dot product, top k, a result frame
        q = raw_model.encode(queries, batch_size=32, convert_to_numpy=True, show_progress_bar=False)
        scores = q @ raw_vecs.T
        k = min(1000, scores.shape[1])
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(scores, top, 1).argsort(axis=1)[:, ::-1]
        top = np.take_along_axis(top, order, 1)
        return pd.DataFrame({"qid": np.repeat(qids, k), "query": np.repeat(np.array(queries, dtype=object), k),
                             "docno": docnos[top.ravel()], "score": np.take_along_axis(scores, top, 1).ravel(),
                             "rank": np.tile(np.arange(k), len(qids))})

    tk = DenseRetriever("default", index=str(built[0]), num_results=1000, verbose=False)
    tk(topics.head(2))
    q_raw = q_tk = float("inf")
    for _ in range(repeats):
        q_raw = min(q_raw, best(raw_search, 1)[0])
        q_tk = min(q_tk, best(lambda: tk(topics), 1)[0])
    rows.append(("dense queries (k=1000)", q_raw, q_tk, f"{len(topics)} queries"))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get("PYTERRIER_SCI_DATA",
                                                     str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dense-docs", type=int, default=3000)
    ap.add_argument("--dense-queries", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip", action="append", default=[], choices=["pisa", "lucene", "dense"])
    args = ap.parse_args(argv)
    path = Path(args.data) / "hepth-citations" / "papers.jsonl"
    if not path.exists():
        sys.exit(f"missing {path}: set PYTERRIER_SCI_DATA to the shared data directory")
    docs = load_papers(path)
    topics = pd.DataFrame({"qid": [d["docno"] for d in docs[:args.queries]],
                           "query": [d["title"] for d in docs[:args.queries]]})
    root = Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    rows = []
    try:
        if "pisa" not in args.skip:
            rows += bench_pisa(docs, topics, args.repeats, root)
        if "lucene" not in args.skip:
            lrows, _ = bench_lucene(path, args.queries, args.repeats)
            rows += lrows
        if "dense" not in args.skip:
            rows += bench_dense(docs[:args.dense_docs], topics.head(args.dense_queries), args.repeats, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"hep-th: {len(docs)} papers; {os.cpu_count()} CPU cores\n")
    print("| step | raw library (s) | toolkit (s) | toolkit / raw | work |")
    print("|---|---|---|---|---|")
    for label, raw, tk, note in rows:
        print(f"| {label} | {raw:.2f} | {tk:.2f} | {tk / raw:.2f} | {note} |")


if __name__ == "__main__":
    main()
