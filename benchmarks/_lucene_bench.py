"""Throughput of the Lucene BM25 backend against raw Pyserini on the same work, in one process.

``benchmark_lucene(papers_path)`` indexes the hep-th papers of the citation graph (title + abstract,
papers with at least one reference or citation: 27,769 in ``hepth-citations/papers.jsonl``) and runs
the first ``n_queries`` titles as queries (k=1000) through

* the toolkit: ``LuceneIndex.indexer(...).index(docs)`` and ``LuceneBM25`` (query frame in, result
  frame out), and
* raw Pyserini: ``pyserini.index.lucene.LuceneIndexer.add_batch_dict`` + ``close`` and
  ``pyserini.search.lucene.LuceneSearcher.batch_search`` with the hits read into Python lists
  (qid, docid, score) - the least a caller does with them,

with the same documents (already in memory), queries, k and threads.  A small warm-up of both runs
first (JVM start, JIT); each timed step runs ``repeats`` times, alternating the two sides, and the
fastest run counts.  Returns a dict of seconds, rates and ratios (toolkit / raw).
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional


def _load(papers_path, graph_only: bool = True, limit: Optional[int] = None) -> List[dict]:
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
    import pandas as pd
    from pyterrier_sci.plugins.bm25.lucene import LuceneBM25, LuceneIndex, _pyserini

    py = _pyserini()  # starts the JVM (toolkit settings) and imports Pyserini's Python classes
    docs = _load(papers_path, graph_only=graph_only)
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

        best = {key: min(v) for key, v in t.items()}
        n_docs, n_rows = len(docs), len(tk_out)
        return {
            "n_docs": n_docs, "n_queries": len(qids), "k": k, "threads": threads, "repeats": repeats,
            "result_rows": n_rows, "top1_agreement": agree,
            **best,
            "runs": t,
            "raw_index_docs_per_s": n_docs / best["raw_index_s"],
            "toolkit_index_docs_per_s": n_docs / best["toolkit_index_s"],
            "raw_queries_per_s": len(qids) / best["raw_search_s"],
            "toolkit_queries_per_s": len(qids) / best["toolkit_search_s"],
            "index_ratio": best["toolkit_index_s"] / best["raw_index_s"],
            "search_ratio": best["toolkit_search_s"] / best["raw_search_s"],
            "total_ratio": (best["toolkit_index_s"] + best["toolkit_search_s"])
            / (best["raw_index_s"] + best["raw_search_s"]),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # python benchmarks/_lucene_bench.py [papers.jsonl] [n_queries] [repeats]
    import os
    import sys
    default = Path(os.environ.get("PYTERRIER_SCI_DATA", "/work/shared/data")) / "hepth-citations" / "papers.jsonl"
    res = benchmark_lucene(sys.argv[1] if len(sys.argv) > 1 else default,
                           n_queries=int(sys.argv[2]) if len(sys.argv) > 2 else 1000,
                           repeats=int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    print(json.dumps(res, indent=1))
