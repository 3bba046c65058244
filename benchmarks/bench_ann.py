"""Approximate (ANN) dense retrieval (``dense(ann=...)``, plugins/dense/ann.py) against exact search,
measured in one run on this machine: recall@k of each ANN setting against the exact top-k, ms/query,
and the per-round ratio ANN / exact time (runs interleaved exact, ANN, exact, ANN ...; median, min and
max of the per-pair ratios), plus the time to build each ANN structure; load average before and after.

  hepth   the hep-th corpus size (every document of irds:sci/hepth-core-citations, title + abstract),
          encoded cheaply: sublinear TF-IDF randomly projected to 384 dimensions and L2-normalised
          (MiniLM would take ~10 minutes on two cores); queries: the test topics encoded alike.
          Searched through the ``dense`` transformer (``DenseRetriever(ann=...) % k``).
  scale   >= 1M synthetic vectors (384 dims): a mixture of --clusters Gaussian clusters around random
          unit centres, L2-normalised; queries drawn from the same mixture.  Searched at the index
          level (the same functions the transformer calls).

    PYTERRIER_SCI_DATA=/work/shared/data python benchmarks/bench_ann.py            # both
    python benchmarks/bench_ann.py hepth [--k 100] [--rounds 5]
    python benchmarks/bench_ann.py scale [--docs 1000000] [--queries 200] [--no-hnsw]
    python benchmarks/bench_ann.py all --rounds 3 --out benchmarks/results/bench_ann.md

``--out`` records the run (``pyterrier_sci.bench.write_results``): one section per point (``hep-th``,
``scale``), which docs/dense.md quotes.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pyterrier_sci.bench import interleaved, load_note, markdown, write_results

HEPTH = "sci/hepth-core-citations/test"
HEPTH_SETTINGS = [("hnsw", {}), ("hnsw", {"ef_search": 32}), ("hnsw", {"ef_search": 256}),
                  ("ivf", {}), ("ivf", {"n_probe": 8}), ("ivf", {"n_probe": 128})]
SCALE_SETTINGS = [("ivf", {}), ("ivf", {"n_probe": 8}), ("ivf", {"n_probe": 128}),
                  ("hnsw", {}), ("hnsw", {"ef_search": 256})]


def _recall(ann_ids, exact_ids) -> float:
    return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(ann_ids, exact_ids)]))


def _write_flex(path: Path, docnos, vecs):
    from pyterrier_dr import FlexIndex
    FlexIndex(str(path), verbose=False).indexer().index(
        {"docno": d, "doc_vec": v} for d, v in zip(docnos, vecs))
    return FlexIndex(str(path), verbose=False)


def _label(ann, p):
    from pyterrier_sci.plugins.dense.ann import ANN_DEFAULTS
    s = {**ANN_DEFAULTS[ann], **p}
    if ann == "hnsw":
        knobs = f"M={s['neighbours']}, efC={s['ef_construction']}, ef_search={s['ef_search']}"
    else:
        knobs = f"n_list={s['n_list'] or 'auto'}, n_probe={s['n_probe']}"
    return f"{ann} ({knobs})" + ("" if p else " default")


class _Lookup:
    """An encoder returning precomputed query vectors (timing measures search, not encoding)."""

    def __init__(self, texts, vecs):
        self.vec = dict(zip(texts, vecs))
        self.dim = vecs.shape[1]

    def encode(self, texts, **kw):
        return np.stack([self.vec[t] for t in texts])

    def get_sentence_embedding_dimension(self):
        return self.dim


def bench_hepth(k: int, rounds: int, tmp: Path) -> pd.DataFrame:
    import pyterrier as pt
    from sklearn.feature_extraction.text import TfidfVectorizer

    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.dense import DenseRetriever
    docs = list(corpus_texts(HEPTH, ["title", "abstract"]))
    texts = [d["text"] for d in docs]
    topics = pt.get_dataset("irds:" + HEPTH).get_topics().drop_duplicates("qid").reset_index(drop=True)
    vec = TfidfVectorizer(sublinear_tf=True, min_df=2, dtype=np.float32).fit(texts)
    proj = np.random.default_rng(0).standard_normal((len(vec.vocabulary_), 384)).astype(np.float32)

    def enc(t):
        v = np.asarray(vec.transform(t) @ proj, dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    flex = _write_flex(tmp / "hepth", [d["docno"] for d in docs], enc(texts))
    lookup = _Lookup(topics["query"].tolist(), enc(topics["query"].tolist()))
    print(f"hep-th: {len(docs)} documents, {len(topics)} queries, TF-IDF projected to 384 dims, k={k}")

    def retriever(**kw):
        r = DenseRetriever("tfidf-384", index=flex, verbose=False, **kw)
        r._encoder = lookup   # the retriever itself, before % k wraps it
        return (r % k).compile()
    exact = retriever()
    ref = exact(topics)
    ref_ids = [g.docno.tolist() for _, g in ref.groupby("qid", sort=True)]
    rows = []
    for ann, p in HEPTH_SETTINGS:
        r = retriever(ann=ann, ann_params=p)
        t0 = time.perf_counter()
        r(topics.head(1))  # builds (or loads) the structure
        build = time.perf_counter() - t0
        t = interleaved({"exact": lambda: exact(topics), "ann": lambda: r(topics)}, rounds, warmup=1)
        res = t.results["ann"]
        ids = [g.docno.tolist() for _, g in res.groupby("qid", sort=True)]
        ratio = t.ratio("ann", "exact")
        rows.append({"setting": _label(ann, p), f"recall@{k}": _recall(ids, ref_ids),
                     "build s": build, "exact ms/q": 1000 * t.median("exact") / len(topics),
                     "ANN ms/q": 1000 * t.median("ann") / len(topics), "ANN/exact": str(ratio)})
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def bench_scale(docs: int, queries: int, clusters: int, k: int, rounds: int, hnsw: bool, tmp: Path) -> pd.DataFrame:
    from pyterrier_sci.plugins.dense.ann import ann_index, ann_topk, check_ann
    from pyterrier_sci.plugins.dense.retriever import _topk
    dim = 384
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def sample(n):
        x = centres[rng.integers(0, clusters, n)] + rng.standard_normal((n, dim)).astype(np.float32) / np.sqrt(dim)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    t0 = time.perf_counter()
    path = tmp / "scale"
    path.mkdir()
    with open(path / "vecs.f4", "wb") as f:  # the FlexIndex format, written in blocks (1M dicts cost minutes)
        for start in range(0, docs, 100_000):
            f.write(sample(min(100_000, docs - start)).tobytes())
    from npids import Lookup
    Lookup.build((f"d{i}" for i in range(docs)), path / "docnos.npids")
    import json
    (path / "pt_meta.json").write_text(json.dumps({"type": "dense_index", "format": "flex", "vec_size": dim,
                                                   "doc_count": docs}))
    from pyterrier_dr import FlexIndex
    flex = FlexIndex(str(path), verbose=False)
    q = sample(queries)
    print(f"scale: {docs} synthetic vectors (dim {dim}, {clusters} clusters) written in "
          f"{time.perf_counter() - t0:.0f} s; {queries} queries, k={k}", flush=True)
    dvecs, _ = flex.payload(return_docnos=False)
    ref = _topk(dvecs, q, k)[1]
    rows = []
    for ann, p in SCALE_SETTINGS:
        if ann == "hnsw" and not hnsw:
            continue
        a, s = check_ann(ann, p)
        t0 = time.perf_counter()
        native = ann_index(flex, a, s)
        build = time.perf_counter() - t0
        print(f"{_label(ann, p)}: built in {build:.0f} s", flush=True)
        t = interleaved({"exact": lambda: _topk(dvecs, q, k), "ann": lambda: ann_topk(native, a, s, q, k, docs)},
                        rounds, warmup=1)
        ratio = t.ratio("ann", "exact")
        rows.append({"setting": _label(ann, p), f"recall@{k}": _recall(t.results["ann"][1], ref),
                     "build s": build, "exact ms/q": 1000 * t.median("exact") / queries,
                     "ANN ms/q": 1000 * t.median("ann") / queries, "ANN/exact": str(ratio)})
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", nargs="?", choices=("hepth", "scale", "all"), default="all")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--clusters", type=int, default=4096)
    ap.add_argument("--no-hnsw", action="store_true", help="skip HNSW at the scale point (its build is long)")
    ap.add_argument("--out", help="record the run in this results file (docs/dense.md quotes it)")
    args = ap.parse_args(argv)
    if min(args.k, args.rounds, args.docs, args.queries, args.clusters) < 1:
        ap.error("--k, --rounds, --docs, --queries and --clusters must be at least 1")
    before = os.getloadavg()
    print(load_note())
    tmp = Path(tempfile.mkdtemp(prefix="bench-ann-"))
    sections, details = [], []
    try:
        if args.which in ("hepth", "all"):
            sections.append(("hep-th", markdown(bench_hepth(args.k, args.rounds, tmp))))
            details.append(f"hep-th: every document of {HEPTH.rsplit('/', 1)[0]} (title + abstract), sublinear TF-IDF "
                           f"randomly projected to 384 dimensions, the test topics as queries, k={args.k}, "
                           f"{args.rounds} interleaved rounds, through the dense transformer")
            print(sections[-1][1], flush=True)
        if args.which in ("scale", "all"):
            rounds = max(1, args.rounds // 2 + 1)
            sections.append(("scale", markdown(bench_scale(args.docs, args.queries, args.clusters, args.k, rounds,
                                                           not args.no_hnsw, tmp))))
            details.append(f"scale: {args.docs} synthetic 384-d unit vectors ({args.clusters} Gaussian clusters), "
                           f"{args.queries} queries of the same mixture, k={args.k}, {rounds} interleaved rounds, "
                           "at the index level")
            print(sections[-1][1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        print(load_note(before))
    if args.out:
        write_results(args.out, "bench_ann: approximate dense retrieval against exact search",
                      "benchmarks/bench_ann.py", argv,
                      details + ["recall against the exact top k; ANN/exact: median of the per-pair time ratios "
                                 "(min-max)"], sections, load_note(before))


if __name__ == "__main__":
    main()
