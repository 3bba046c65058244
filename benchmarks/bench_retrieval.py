"""Toolkit overhead of BM25 (PISA, Lucene) and dense retrieval against the raw libraries.

On the hep-th abstracts of ``$PYTERRIER_SCI_DATA/hepth-citations/papers.jsonl`` (the 27,769 papers
of the citation graph; title + abstract), in one process, the same work is done by both sides:

* PISA:   toolkit ``build_index(..., backend="pisa")`` + ``BM25`` transformer, against
          ``pyterrier_pisa.PisaIndex.index`` + ``PisaIndex.bm25()`` called directly;
* Lucene: ``LuceneIndex`` + ``LuceneBM25`` against Pyserini's ``LuceneIndexer`` / ``LuceneSearcher``
          (``benchmark_lucene`` below);
* dense:  toolkit ``DenseRetriever`` (encode + FlexIndex build; query encoding + exhaustive search)
          against ``SentenceTransformer.encode`` + a numpy matrix product and ``argpartition``
          on the same documents (a sample, ``--dense-docs``, since encoding 27K abstracts on two
          CPU cores takes tens of minutes per side).

Queries: the first ``--queries`` titles, k=1000.  Every step runs the two sides interleaved (raw,
toolkit, raw, toolkit, ... for ``--rounds`` rounds, after an untimed warm-up where noted), so a
loaded machine slows both alike; the table gives each side's median time and the median of the
per-round toolkit/raw ratios with their min and max (target: median <= 1.15), and the load average
before and after the run.  ``--json`` also writes every timing.

    python benchmarks/bench_retrieval.py [--queries 1000] [--dense-docs 3000] [--rounds 5]
        [--dense-rounds 3] [--no-alternate] [--skip lucene] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pandas as pd

from pyterrier_sci.bench import interleaved, load_note, write_results

ALTERNATE = True  # odd rounds run toolkit before raw (--no-alternate: always raw first)


def _interleaved(sides, rounds, **kw):
    return interleaved(sides, rounds, alternate=ALTERNATE, **kw)


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


def bench_pisa(docs, topics, rounds, root):
    from pyterrier_pisa import PisaIndex

    from pyterrier_sci.plugins.bm25 import BM25, build_index
    from pyterrier_sci.quiet import quiet_native
    rows = []
    built: Dict[str, list] = {"raw": [], "toolkit": []}

    def raw_build():
        p = root / f"pisa-raw-{len(built['raw'])}"
        with quiet_native():
            PisaIndex(str(p), text_field="text").index(({"docno": d["docno"], "text": d["text"]} for d in docs))
        built["raw"].append(p)

    def tk_build():
        p = root / f"pisa-tk-{len(built['toolkit'])}"
        build_index(({"docno": d["docno"], "text": d["text"]} for d in docs), p, backend="pisa")
        built["toolkit"].append(p)

    rows.append(("PISA index build", _interleaved({"raw": raw_build, "toolkit": tk_build}, rounds),
                 f"{len(docs)} docs"))

    with quiet_native():
        raw_retr = PisaIndex(str(built["raw"][0])).bm25(num_results=1000)
    tk_retr = BM25(str(built["toolkit"][0]), num_results=1000)
    # one untimed round first: retrieval contexts, page cache
    t = _interleaved({"raw": lambda: raw_retr(topics), "toolkit": lambda: tk_retr(topics)}, rounds, warmup=1)
    a, b = t.results["raw"], t.results["toolkit"]
    same = (a.groupby("qid")["docno"].first() == b.groupby("qid")["docno"].first()).mean()
    rows.append(("PISA BM25 queries (k=1000)", t, f"{len(topics)} queries, top-1 agreement {same:.3f}"))
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


def benchmark_lucene(papers_path, n_queries: int = 1000, k: int = 1000, threads: int = 1, rounds: int = 5,
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
    first (JVM start, JIT); then indexing, and then searching (the last index of each side, after one
    untimed round), run ``rounds`` times interleaved (raw, toolkit, raw, toolkit, ...).  Returns a dict with the
    :class:`~pyterrier_sci.bench.Timings` of both steps (``"index"``, ``"search"``), the median times
    and rates, and the per-round ratio summaries (toolkit / raw).
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

    built: Dict[str, List[Path]] = {"raw": [], "toolkit": []}

    def build(side):
        def run():
            p = root / f"{side}_{len(built[side])}"
            (raw_index if side == "raw" else toolkit_index)(p, docs)
            built[side].append(p)
        return run

    try:
        # warm-up: JVM, JIT, class loading on both paths
        raw_index(root / "warm_raw", docs[:2000])
        widx = toolkit_index(root / "warm_tk", docs[:2000])
        raw_search(root / "warm_raw", queries[:100], qids[:100])
        toolkit_search(widx, qframe.iloc[:100])

        t_index = _interleaved({"raw": build("raw"), "toolkit": build("toolkit")}, rounds)
        t_search = _interleaved({"raw": lambda: raw_search(built["raw"][-1], queries, qids),
                                "toolkit": lambda: toolkit_search(LuceneIndex(str(built["toolkit"][-1])), qframe)},
                               rounds, warmup=1)
        raw_out, tk_out = t_search.results["raw"], t_search.results["toolkit"]

        # same answers: top docno of every query, and the number of hits
        raw_top = {qid: (dn[0] if dn else None, len(dn)) for qid, dn, _ in raw_out}
        g = tk_out.groupby("qid", sort=False)
        tk_top = {qid: (grp["docno"].iloc[0], len(grp)) for qid, grp in g}
        agree = sum(raw_top[q] == tk_top.get(q, (None, 0)) for q in qids) / len(qids)

        med = {f"{side}_{step}_s": t.median(side) for step, t in (("index", t_index), ("search", t_search))
               for side in ("raw", "toolkit")}
        n_docs, n_rows = len(docs), len(tk_out)
        return {
            "n_docs": n_docs, "n_queries": len(qids), "k": k, "threads": threads, "rounds": rounds,
            "result_rows": n_rows, "top1_agreement": agree,
            **med,
            "timings": {"index": t_index, "search": t_search},
            "raw_index_docs_per_s": n_docs / med["raw_index_s"],
            "toolkit_index_docs_per_s": n_docs / med["toolkit_index_s"],
            "raw_queries_per_s": len(qids) / med["raw_search_s"],
            "toolkit_queries_per_s": len(qids) / med["toolkit_search_s"],
            "index_ratio": t_index.ratio("toolkit", "raw").as_dict(),
            "search_ratio": t_search.ratio("toolkit", "raw").as_dict(),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_lucene(path, n_queries, rounds):
    r = benchmark_lucene(path, n_queries=n_queries, rounds=rounds)
    out = [("Lucene index build", r["timings"]["index"], f"{r['n_docs']} docs"),
           ("Lucene BM25 queries (k=1000)", r["timings"]["search"],
            f"{r['n_queries']} queries, top-1 and hit-count agreement {r['top1_agreement']:.3f}")]
    return out, r


def bench_dense(docs, topics, rounds, root, encode_rounds=None):
    from pyterrier_dr import FlexIndex
    from sentence_transformers import SentenceTransformer

    from pyterrier_sci.plugins.dense import DenseRetriever, resolve_model
    model_path = resolve_model("default")
    raw_model = SentenceTransformer(model_path, device="cpu")
    texts = [d["text"] for d in docs]
    queries = topics["query"].tolist()
    rows = []

    def raw_encode(sample=None):
        return raw_model.encode(texts[:sample] if sample else texts, batch_size=32, convert_to_numpy=True,
                                show_progress_bar=False)

    built = []

    def tk_encode(sample=None):
        p = root / f"dense-tk-{len(built)}"
        r = DenseRetriever("default", index=str(p), verbose=False)
        FlexIndex(str(p), verbose=False).indexer().index(r._encode_docs(iter(docs[:sample] if sample else docs)))
        built.append(p)

    # untimed warm-up of both sides on a few batches (model load, first forward passes)
    raw_encode(128), tk_encode(128)
    shutil.rmtree(built.pop(), ignore_errors=True)
    t = _interleaved({"raw": raw_encode, "toolkit": tk_encode}, encode_rounds or rounds)
    raw_vecs = t.results["raw"]
    rows.append(("dense encode + index", t, f"{len(docs)} docs, all-MiniLM-L6-v2, batch 32"))

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
    t = _interleaved({"raw": raw_search, "toolkit": lambda: tk(topics)}, rounds, warmup=1)
    a, b = t.results["raw"], t.results["toolkit"]
    first = lambda df: df.sort_values(["qid", "rank"]).groupby("qid")["docno"].first()  # noqa: E731
    same = (first(a) == first(b)).mean()
    rows.append(("dense queries (k=1000)", t, f"{len(topics)} queries, top-1 agreement {same:.3f}"))
    return rows


def table(rows) -> str:
    """The markdown table: median time of each side, the per-round toolkit/raw ratios (median, min-max)."""
    lines = ["| step | raw library, median (s) | toolkit, median (s) | toolkit / raw, median (min-max of rounds) "
             "| work |", "|---|---|---|---|---|"]
    for label, t, note in rows:
        r = t.ratio("toolkit", "raw")
        lines.append(f"| {label} | {t.median('raw'):.2f} | {t.median('toolkit'):.2f} | "
                     f"{r.median:.2f} ({r.min:.2f}-{r.max:.2f}, n={r.n}) | {note} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get("PYTERRIER_SCI_DATA",
                                                     str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dense-docs", type=int, default=3000)
    ap.add_argument("--dense-queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each BM25 step and dense queries")
    ap.add_argument("--dense-rounds", type=int, default=3,
                    help="interleaved rounds of dense encoding (about 2 x dense-docs / 48 s each on two cores)")
    ap.add_argument("--skip", action="append", default=[], choices=["pisa", "lucene", "dense"])
    ap.add_argument("--alternate", action=argparse.BooleanOptionalAction, default=True,
                    help="reverse the order in odd rounds (raw, toolkit, toolkit, raw, ...; the default): cancels an "
                         "advantage of running first or second")
    ap.add_argument("--json", help="also write every timing here")
    ap.add_argument("--out", help="also write the table, with the CPU, date, command and load, as a Markdown results "
                                  "file (benchmarks/results/bench_retrieval.md, which the README quotes)")
    args = ap.parse_args(argv)
    global ALTERNATE
    ALTERNATE = args.alternate
    path = Path(args.data) / "hepth-citations" / "papers.jsonl"
    if not path.exists():
        sys.exit(f"missing {path}: set PYTERRIER_SCI_DATA to the shared data directory")
    load_before = os.getloadavg()
    docs = load_papers(path)
    topics = pd.DataFrame({"qid": [d["docno"] for d in docs[:args.queries]],
                           "query": [d["title"] for d in docs[:args.queries]]})
    root = Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    rows = []
    try:
        if "pisa" not in args.skip:
            rows += bench_pisa(docs, topics, args.rounds, root)
        if "lucene" not in args.skip:
            lrows, _ = bench_lucene(path, args.queries, args.rounds)
            rows += lrows
        if "dense" not in args.skip:
            rows += bench_dense(docs[:args.dense_docs], topics.head(args.dense_queries), args.rounds, root,
                                encode_rounds=args.dense_rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    note = load_note(load_before)
    print(f"hep-th: {len(docs)} papers; {os.cpu_count()} CPU cores; {note}\n")
    print(table(rows))
    if args.out:
        write_results(Path(args.out), "bench_retrieval: the toolkit against the raw libraries, the same work in "
                      "one process", "benchmarks/bench_retrieval.py", argv,
                      [f"data: hep-th, {len(docs)} papers (title + abstract); queries: the first {args.queries} "
                       "titles"], [("toolkit against the raw libraries", table(rows))], note)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"papers": len(docs), "cpus": os.cpu_count(), "load": note,
             "steps": [{"step": label, "note": n, "raw_s": t.times["raw"], "toolkit_s": t.times["toolkit"],
                        "order": t.order, "ratio": t.ratio("toolkit", "raw").as_dict()} for label, t, n in rows]},
            indent=2))


if __name__ == "__main__":
    main()
