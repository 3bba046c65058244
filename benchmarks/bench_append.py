"""Appending 1 % new documents to an index vs rebuilding it on the final collection (issue 35, item 3), for
BM25 (Lucene, PISA) and dense (flat, sharded), as ratios measured in one run, plus the memory an append takes
as the index grows.

The documents are a stream of hep-th papers (``sci/hepth-core-citations/train``, title + abstract): the base
index holds the first N, the appended ones are the next N x ``--fraction`` papers of the stream (new ids).  For
each index type: the base index is built once and copied once per round (neither timed); then, ``--rounds``
times, interleaved (append, rebuild, rebuild, append, ...) so both see the same machine load: *append* = the new
documents appended to a copy of the base index (a new generation: :mod:`pyterrier_sci.plugins.bm25.growth`,
:mod:`pyterrier_sci.plugins.dense.growth`), *rebuild* = an index of the final collection built from scratch
(for dense: every document encoded).  The ratio is append / rebuild per round (median, min-max).  A PISA
index has no append: its change *is* a rebuild (docs/indexes.md), reported as it is.

Memory: the peak of Python's traced heap (``tracemalloc``, numpy's buffers included) while 1 % is appended to
flat dense indexes of two sizes 10x apart (vectors given, nothing encoded): it stays at the copy chunk, it does
not grow with the index.

ColBERT/PLAID (``--skip colbert`` to leave it out): recall@100 of an index grown by a partition against the
top-100 of the index rebuilt on the final collection, and the append's time against the rebuild's.

    python benchmarks/bench_append.py [--bm25-docs 27000] [--dense-docs 3000] [--fraction 0.01] [--rounds 2]
        [--out benchmarks/results/bench_append.md]
"""
from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from pyterrier_sci.bench import interleaved, load_note, markdown, write_results

DATASET = "irds:sci/hepth-core-citations/train"


def stream(n_base: int, n_new: int, dataset: str = DATASET):
    """(base documents, appended documents): the first ``n_base`` papers, then the next ``n_new`` under new ids."""
    from pyterrier_sci.corpus import corpus_texts
    docs = list(itertools.islice(corpus_texts(dataset), n_base + n_new))
    if len(docs) < n_base + n_new:
        raise SystemExit(f"{dataset} has {len(docs):,} documents: fewer than the {n_base:,} + {n_new:,} asked for")
    return docs[:n_base], [{"docno": f"new~{d['docno']}", "text": d["text"]} for d in docs[n_base:]]


def _copies(src: Path, rounds: int) -> list:
    """``rounds`` copies of the base index, made before the timing (each append changes one)."""
    out = []
    for r in range(rounds):
        dst = src.with_name(f"{src.name}-copy{r}")
        shutil.copytree(src, dst)
        out.append(dst)
    return out


def bench_bm25(work: Path, n: int, fraction: float, rounds: int, dataset: str = DATASET, pisa: bool = True) -> list:
    from pyterrier_sci.plugins.bm25 import corpus_index, index_corpus
    from pyterrier_sci.plugins.bm25.growth import append_documents
    rows = []
    base, new = stream(n, max(1, int(n * fraction)), dataset)
    final = base + new
    index_corpus(base, work / "lucene-base", "lucene")
    n_rebuilt = itertools.count()
    copies = _copies(work / "lucene-base", rounds)

    def lucene_append():
        append_documents(copies.pop(0), new)

    def lucene_rebuild():
        index_corpus(final, work / f"lucene-rebuilt-{next(n_rebuilt)}", "lucene")
    t = interleaved({"append": lucene_append, "rebuild": lucene_rebuild}, rounds, alternate=True)
    name = "BM25 Lucene (new segment)" if dataset == DATASET else f"BM25 Lucene (new segment), {dataset[5:]}"
    rows.append(_row(name, len(base), len(new), t))
    if not pisa:
        return rows
    # PISA: the base is the dataset's corpus index (it records its source); an append rebuilds the final collection
    from pyterrier_sci.corpus import corpus_texts
    pisa_base = Path(corpus_index(DATASET, "pisa", work_dir=work / "pisa-work").path)
    corpus = list(corpus_texts(DATASET))
    pnew = [{"docno": f"new~{d['docno']}", "text": d["text"]} for d in corpus[:max(1, int(len(corpus) * fraction))]]

    pisa_copies = _copies(pisa_base, rounds)

    def pisa_append():
        append_documents(pisa_copies.pop(0), pnew)

    def pisa_rebuild():
        index_corpus(corpus + pnew, work / f"pisa-rebuilt-{next(n_rebuilt)}", "pisa")
    t = interleaved({"append": pisa_append, "rebuild": pisa_rebuild}, rounds, alternate=True)
    rows.append(_row("BM25 PISA (rebuild path)", len(corpus), len(pnew), t))
    return rows


def bench_dense(work: Path, n: int, fraction: float, rounds: int) -> list:
    from pyterrier_sci.plugins.dense import DenseRetriever
    from pyterrier_sci.plugins.dense.fanout import write_sharded_flex
    from pyterrier_sci.plugins.dense.flat import write_flat_index
    from pyterrier_sci.plugins.dense.growth import append_documents
    from pyterrier_sci.plugins.dense.index_meta import encoder_record
    base, new = stream(n, max(1, int(n * fraction)))
    final = base + new
    def encoder():  # loaded afresh by every build, as by every append (which loads the index's encoder)
        return DenseRetriever("default", index=None, verbose=False, batch_size=32)
    record = {"encoder": encoder_record("default", "torch", "fp32", None, encoder().encoder.max_seq_length),
              "fields": None, "corpus": None, "vectors": "fp32"}

    def build_flat(path: Path, docs):
        vecs = encoder().encode([d["text"] for d in docs])
        write_flat_index(path, ({"docno": d["docno"], "doc_vec": v} for d, v in zip(docs, vecs)),
                         lambda: (record, None))
        return vecs

    base_vecs = build_flat(work / "flat-base", base)
    write_sharded_flex(work / "sharded-base", [d["docno"] for d in base], base_vecs, 4, model="default",
                       encoder=record["encoder"])
    n_rebuilt = itertools.count()
    flat_copies, sharded_copies = _copies(work / "flat-base", rounds), _copies(work / "sharded-base", rounds)

    def flat_append():
        append_documents(flat_copies.pop(0), new)

    def sharded_append():
        append_documents(sharded_copies.pop(0), new)

    def rebuild():  # every document encoded, then written (flat; a sharded index of them costs the same encoding)
        build_flat(work / f"flat-rebuilt-{next(n_rebuilt)}", final)
    t = interleaved({"append": flat_append, "sharded": sharded_append, "rebuild": rebuild}, rounds, alternate=True)
    rows = [_row("dense flat (rewrite, 1 % encoded)", len(base), len(new), t)]
    t.times["append"] = t.times["sharded"]
    rows.append(_row("dense sharded (new shard)", len(base), len(new), t))
    return rows


def _row(name, n_base, n_new, t) -> dict:
    r = t.ratio("append", "rebuild")
    return {"index": name, "base docs": n_base, "appended": n_new, "append s": t.median("append"),
            "rebuild s": t.median("rebuild"), "append / rebuild": f"{100 * r.median:.2f} % "
            f"({100 * r.min:.2f}-{100 * r.max:.2f}, n={r.n})"}


def bench_ann(work: Path, source: Path, fractions=(0.01, 0.1, 0.5), n_queries: int = 200) -> list:
    """recall@100 (against the exact top-100 of the final collection) of FAISS HNSW / IVF structures carried
    through an append (built on the base, the appended vectors added) and of structures built on the final
    collection, on the vectors of a real flat index (``source``); queries: ``n_queries`` of its documents,
    left out of the collection.  Also the time of the carried append and of building the structure again."""
    from pyterrier_dr import FlexIndex

    from pyterrier_sci.plugins.dense.ann import check_ann
    from pyterrier_sci.plugins.dense.flat import open_index
    from pyterrier_sci.plugins.dense.growth import append_documents
    src = FlexIndex(str(source), verbose=False)
    docnos, dvecs, _ = src.payload()
    vecs = np.asarray(dvecs, dtype=np.float32)
    names = [str(d) for d in docnos.fwd[np.arange(len(vecs))]]
    rng = np.random.default_rng(0)
    held = np.sort(rng.choice(len(vecs), n_queries, replace=False))
    queries = vecs[held]
    keep = np.setdiff1d(np.arange(len(vecs)), held)
    rows = []
    for frac in fractions:
        cut = int(len(keep) * (1 - frac))
        base = [{"docno": names[i], "doc_vec": vecs[i]} for i in keep[:cut]]
        new = [{"docno": names[i], "doc_vec": vecs[i]} for i in keep[cut:]]
        for ann, params in (("hnsw", None), ("ivf", None)):
            _, settings = check_ann(ann, params)
            grown = work / f"ann-{ann}-{frac}"
            rebuilt = work / f"ann-{ann}-{frac}-rebuilt"
            for path in (grown, rebuilt):
                if path.exists():
                    shutil.rmtree(path)
            FlexIndex(str(grown), verbose=False).indexer().index(base)
            open_index(grown).ann_search(ann, settings, queries[:1], 100)  # the base's structure
            t0 = time.perf_counter()
            append_documents(grown, new)
            t_append = time.perf_counter() - t0
            FlexIndex(str(rebuilt), verbose=False).indexer().index(base + new)
            t0 = time.perf_counter()
            open_index(rebuilt).ann_search(ann, settings, queries[:1], 100)
            t_build = time.perf_counter() - t0
            g, r = open_index(grown), open_index(rebuilt)
            _, exact = r.search(queries, 100)
            exact_names = r.docnos_of(exact)

            def recall(index):
                _, pos = index.ann_search(ann, settings, queries, 100)
                found = index.docnos_of(np.where(pos < 0, 0, pos))
                return float(np.mean([len(set(f[p >= 0]) & set(e)) / 100
                                      for f, p, e in zip(found, pos, exact_names)]))
            rows.append({"ANN": ann, "base docs": cut, "appended": len(new),
                         "recall@100 carried": f"{recall(g):.3f}", "recall@100 rebuilt": f"{recall(r):.3f}",
                         "append s (carried)": t_append,
                         "structure rebuild s": t_build})
            shutil.rmtree(grown)
            shutil.rmtree(rebuilt)
    return rows


def bench_colbert(work: Path, n: int = 1_000, fractions=(0.01, 0.1), n_queries: int = 100) -> list:
    """recall@100 of a ColBERT/PLAID index grown by a partition (:class:`ColBERTAppender`), against the top-100 of
    a PLAID index rebuilt on the final collection; the first ``n`` CSFCube abstracts (the offline MiniLM-built
    checkpoint), queries: the first 30 words of ``n_queries`` documents held out of the collection.  Also the
    append's time against the rebuild's."""
    from pyterrier_sci.datasets import csfcube
    from pyterrier_sci.plugins.colbert import ColBERTIndex
    docs = [{"docno": d.doc_id, "text": d.abstract}
            for d in sorted(csfcube.docs().values(), key=lambda d: d.doc_id) if d.abstract][:n + n_queries]
    rng = np.random.default_rng(0)
    held = set(rng.choice(len(docs), n_queries, replace=False).tolist())
    queries = pd.DataFrame({"qid": [f"q{i}" for i in sorted(held)],
                            "query": [" ".join(docs[i]["text"].split()[:30]) for i in sorted(held)]})
    coll = [d for i, d in enumerate(docs) if i not in held]
    rows = []
    for frac in fractions:
        cut = int(len(coll) * (1 - frac))
        base, new = coll[:cut], coll[cut:]
        grown = ColBERTIndex(work / f"plaid-{frac}", verbose=False)
        grown.indexer(timeout=3600).index(base)
        t0 = time.perf_counter()
        grown = grown.indexer(mode="append", timeout=3600).index(new)
        t_append = time.perf_counter() - t0
        rebuilt = ColBERTIndex(work / f"plaid-{frac}-rebuilt", verbose=False)
        t0 = time.perf_counter()
        rebuilt.indexer(timeout=3600).index(coll)
        t_rebuild = time.perf_counter() - t0
        got = grown.retriever(num_results=100, query_maxlen=64)(queries)
        ref = rebuilt.retriever(num_results=100, query_maxlen=64)(queries)
        recall = np.mean([len(set(got[got.qid == q].docno) & set(ref[ref.qid == q].docno))
                          / max(1, int((ref.qid == q).sum())) for q in queries.qid])
        rows.append({"index": "ColBERT / PLAID (new partition)", "base docs": cut, "appended": len(new),
                     "recall@100 vs rebuild": f"{recall:.3f}", "append s": t_append, "rebuild s": t_rebuild,
                     "append / rebuild": f"{100 * t_append / t_rebuild:.2f} %"})
        shutil.rmtree(grown.path)
        shutil.rmtree(rebuilt.path)
    return rows


def bench_memory(work: Path, sizes=(20_000, 200_000), dim: int = 384, fraction: float = 0.01) -> list:
    """Peak traced Python heap while appending ``fraction`` (vectors given) to flat indexes of ``sizes``."""
    from pyterrier_dr import FlexIndex

    from pyterrier_sci.plugins.dense.growth import append_documents
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        path = work / f"mem-{n}"
        FlexIndex(str(path), verbose=False).indexer().index(
            {"docno": f"d{i}", "doc_vec": rng.standard_normal(dim).astype(np.float32)} for i in range(n))
        new = ({"docno": f"n{i}", "doc_vec": rng.standard_normal(dim).astype(np.float32)}
               for i in range(int(n * fraction)))
        tracemalloc.start()
        t0 = time.perf_counter()
        append_documents(path, new)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append({"flat index": f"{n:,} x {dim}", "index MB": (path / "vecs.f4").stat().st_size / 2**20,
                     "appended": int(n * fraction), "append s": seconds, "peak traced heap MB": peak / 2**20})
        shutil.rmtree(path)
    return rows


def _csfcube_index():
    from pyterrier_sci.corpus import index_path
    from pyterrier_sci.data import work_dir
    from pyterrier_sci.models import model_slug
    return index_path(work_dir(), "irds:sci/csfcube", "dense-" + model_slug("default"), None)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bm25-docs", type=int, default=27_000)
    p.add_argument("--dense-docs", type=int, default=3_000)
    p.add_argument("--fraction", type=float, default=0.01)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="benchmarks/results/bench_append.md")
    p.add_argument("--skip", nargs="*", default=[], choices=["bm25", "pisa", "dense", "memory", "ann", "colbert"])
    p.add_argument("--bm25-dataset", default=DATASET,
                   help="the stream BM25 indexes (default hep-th; e.g. irds:sci/acl-fulltext/chunks-256 for ACL's "
                        "full texts; PISA's rebuild path runs on the default stream only)")
    p.add_argument("--ann-index", default=None,
                   help="a flat dense index whose vectors the ANN recall runs on (default: the CSFCube MiniLM corpus "
                        "index of the work directory, when built)")
    args = p.parse_args(argv)
    before = os.getloadavg()
    sections = []
    with tempfile.TemporaryDirectory(prefix="bench-append-") as tmp:
        work = Path(tmp)
        rows = []
        if "bm25" not in args.skip:
            rows += bench_bm25(work, args.bm25_docs, args.fraction, args.rounds, args.bm25_dataset,
                               pisa="pisa" not in args.skip and args.bm25_dataset == DATASET)
        if "dense" not in args.skip:
            rows += bench_dense(work, args.dense_docs, args.fraction, args.rounds)
        if rows:
            sections.append(("time (median of the rounds; ratio per round: median, min-max)",
                             markdown(pd.DataFrame(rows))))
        if "ann" not in args.skip:
            source = Path(args.ann_index) if args.ann_index else _csfcube_index()
            if source is not None and (source / "vecs.f4").exists():
                sections.append((f"ANN structures carried through an append: recall@100 vs the exact top-100 "
                                 f"({source})", markdown(pd.DataFrame(bench_ann(work, source)))))
            else:
                sections.append(("ANN: skipped", "no flat dense index to take vectors from; give --ann-index"))
        if "colbert" not in args.skip:
            sections.append(("ColBERT/PLAID grown by a partition: recall@100 vs the rebuilt index's top-100 (CSFCube "
                             "abstracts, the MiniLM-built checkpoint; queries: 30 words of held-out abstracts)",
                             markdown(pd.DataFrame(bench_colbert(work)))))
        if "memory" not in args.skip:
            sections.append(("memory of a flat dense append (vectors given: nothing encoded)",
                             markdown(pd.DataFrame(bench_memory(work)))))
    print(write_results(Path(args.out), f"bench_append: {100 * args.fraction:g} % appended vs rebuilt",
                        "benchmarks/bench_append.py", argv, [], sections, load_note(before)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
