"""Facet cross-encoder re-ranking throughput on CPU at CSFCube's pool sizes.

CSFCube pools hold 90-253 candidates per query (median ~103).  For each pool size the benchmark
re-ranks a pool of that size (a random CSFCube paper as the seed and random CSFCube abstracts as its
candidates when the data is there, else synthetic text of abstract length) with a MiniLM-L6 facet
cross-encoder (paper input format) and reports pairs per second, for max_length 256 and 512.
``--engines`` adds the exported engines (``onnx``, ``openvino``, ``openvino-int8``: the model's export, int8
calibrated on CSFCube pairs as the component does) beside torch; the model is then trained briefly first (a
fresh head's logits span too narrow a range for the int8 export's check).  Per pool size every (max_length,
engine) runs interleaved (256, 512, 256, 512, ... for ``--repeat`` rounds, after a warm-up), so a loaded
machine slows all alike; the table gives the median time per query and the median (min-max) of the per-round
ratios to the first max_length (same engine) and of the first engine's time to each engine's (same
max_length), and the run prints the load average before and after.

    python benchmarks/bench_facet.py [--sizes 90 103 128 253] [--threads 2] [--repeat 3]
        [--engines torch,openvino-int8] [--out benchmarks/results/bench_facet.md]

``--agreement`` (with ``--engines``, torch first) also scores 200 CSFCube pool pairs (the first 20 pool candidates
of every fifth Method query in id order, 10 queries) with every engine and compares each engine's logits with
torch's: max |difference|, Pearson, Spearman, the mean per-query Spearman, and the export's own check on its
calibration pairs (from its ``pt_meta.json``); an int8 export the check refuses is a row saying so, with the
Pearson it reached (``onnx-int8``: ONNX Runtime's dynamic quantisation).

``--out`` records the run (``pyterrier_sci.bench.write_results``); docs/sciface.md quotes its tables.
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

# engine name -> (backend, precision) of FacetCrossEncoder.on_backend
ENGINES = {"torch": ("torch", "fp32"), "onnx": ("onnx", "fp32"), "openvino": ("openvino", "fp32"),
           "openvino-int8": ("openvino", "int8"), "onnx-int8": ("onnx", "int8")}


def make_artifact(root: Path, max_length: int, trained: bool = False) -> "object":
    """The facet cross-encoder at ``max_length``: the offline MiniLM body with a fresh head, or (``trained``) the
    head trained briefly on CSFCube's Method judgements of fold1-test (9 seeds, 2 epochs of 20 triplets each, lr
    5e-5: a fresh head's logits span too narrow a range for the int8 export's check), trained once and shared by
    every length."""
    import shutil

    from pyterrier_sci.plugins import sciface as F  # noqa: N812
    from pyterrier_sci.plugins.dense import resolve_model
    from pyterrier_sci.plugins.sciface.cross_encoder import _load_cross_encoder
    d = root / f"minilm-{max_length}"
    if trained:
        source = root / "trained"
        if not source.exists():
            pairs = F.csfcube_pairs(["method"], split="fold1-test")
            pairs = pairs[pairs.seed_id.isin(sorted(pairs.seed_id.unique())[:9])]
            F.train_facet_cross_encoder(pairs, source, "method", epochs=2, triplets_per_seed=20, batch_size=16,
                                        learning_rate=5e-5, max_length=max_length, seed=0)
        shutil.copytree(source, d)
        meta = json.loads((d / "pt_meta.json").read_text())
        (d / "pt_meta.json").write_text(json.dumps({**meta, "max_length": max_length}))
        return F.FacetCrossEncoder(d)
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


def pool_pairs(n_queries: int = 10, depth: int = 20, every: int = 5) -> pd.DataFrame:
    """The first ``depth`` pool candidates of every ``every``-th CSFCube Method query in id order (``n_queries``
    queries), in the facet scorer's input frame."""
    import pyterrier as pt

    from pyterrier_sci.datasets import csfcube
    docs = csfcube.docs()
    ds = pt.get_dataset("irds:sci/csfcube/method")
    qids = sorted(ds.get_topics()["qid"])[::every][:n_queries]
    pool = ds.get_results()
    pool = pool[pool["qid"].isin(qids)].groupby("qid", sort=True).head(depth)
    seeds = {q: docs[q.split("_")[0]] for q in qids}
    return pd.DataFrame({"qid": pool["qid"].to_numpy(), "query": [seeds[q].title for q in pool["qid"]],
                         "query_title": [seeds[q].title for q in pool["qid"]],
                         "query_abstract": [seeds[q].abstract for q in pool["qid"]],
                         "docno": pool["docno"].to_numpy(), "title": [docs[d].title for d in pool["docno"]],
                         "abstract": [docs[d].abstract for d in pool["docno"]]})


def export_check(exports: Path, backend: str, precision: str, max_length: int) -> dict:
    """The quality check the export recorded in its ``pt_meta.json``."""
    for meta in sorted(exports.rglob("pt_meta.json")):
        m = json.loads(meta.read_text())
        if (m.get("backend"), m.get("precision"), m.get("max_length")) == (backend, precision, max_length) \
                and "check" in m:
            return m["check"]
    raise FileNotFoundError(f"no {backend} {precision} export at max_length {max_length} under {exports}")


def aligned_scores(scorer, pairs: pd.DataFrame) -> np.ndarray:
    """The scorer's score of each row of ``pairs``, in ``pairs``' order (a re-ranker returns its rows ranked)."""
    out = scorer(pairs)
    scores = pairs[["qid", "docno"]].merge(out[["qid", "docno", "score"]], on=["qid", "docno"], how="left",
                                           validate="one_to_one")["score"].to_numpy(dtype=np.float64)
    if np.isnan(scores).any():
        raise ValueError("the scorer dropped rows of the pool pairs")
    return scores


def agreement(models: dict, scorers: dict, engines: list, exports: Path, batch_size: int) -> str:
    """Each engine's logits against torch's on :func:`pool_pairs`, one row per (engine, max_length); ``scorers``
    holds the timed engines' scorers by (max_length, engine), the others are built here (an int8 export the check
    refuses is a row saying so)."""
    import re

    from scipy.stats import pearsonr, spearmanr

    from pyterrier_sci.errors import BackendError
    pairs = pool_pairs()
    rows = []
    for L, model in models.items():  # noqa: N806
        ref = aligned_scores(scorers[(L, "torch")], pairs)
        for e in engines[1:]:
            backend, precision = ENGINES[e]
            row = {"engine": e, "max_length": L}
            try:
                scorer = scorers.get((L, e)) or model.on_backend(
                    backend, precision, "irds:sci/csfcube" if precision == "int8" else None, exports
                ).scorer(batch_size=batch_size)
                got = aligned_scores(scorer, pairs)
            except BackendError as err:
                reached = re.search(r"calibration pairs is (-?[0-9.]+)", str(err))
                row.update({"max abs. logit difference": "-", "Pearson": "-", "Spearman": "-",
                            "per-query Spearman": "-", "check on calibration pairs":
                            f"Pearson {reached.group(1) if reached else '?'}: refused"})
                rows.append(row)
                continue
            per_query = [spearmanr(got[idx], ref[idx])[0] for idx in pairs.groupby("qid").indices.values()]
            check = export_check(exports, backend, precision, L)
            row.update({"max abs. logit difference": f"{np.abs(got - ref).max():.1e}",
                        "Pearson": f"{pearsonr(got, ref)[0]:.4f}", "Spearman": f"{spearmanr(got, ref)[0]:.4f}",
                        "per-query Spearman": f"{np.mean(per_query):.4f}",
                        "check on calibration pairs": (f"Pearson {check['pearson']:.4f}: built" if precision == "int8"
                                                       else f"max diff {check['max_abs_diff']:.1e}")})
            rows.append(row)
    return markdown(pd.DataFrame(rows)) + f"\n\n(torch logits on the pool pairs: standard deviation {ref.std():.3f})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[90, 103, 128, 253])
    ap.add_argument("--max-lengths", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds per pool size")
    ap.add_argument("--engines", default="torch",
                    help=f"comma-separated, the first is the reference: {', '.join(ENGINES)} (default torch)")
    ap.add_argument("--agreement", action="store_true",
                    help="also compare each engine's logits with torch's on 200 CSFCube pool pairs (torch first)")
    ap.add_argument("--out", help="record the run in this results file (docs/sciface.md quotes it)")
    args = ap.parse_args(argv)
    if min(args.sizes + args.max_lengths + [args.batch_size, args.threads, args.repeat]) < 1:
        ap.error("sizes, max lengths, --batch-size, --threads and --repeat must be at least 1")
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines or len(set(engines)) < len(engines):
        ap.error(f"--engines {args.engines!r}: give distinct engines among {', '.join(ENGINES)}")
    if args.agreement and (engines[0] != "torch" or len(engines) < 2):
        ap.error("--agreement compares engines with torch: give --engines torch,ENGINE[,...]")
    timed = [e for e in engines if e != "onnx-int8"]  # ONNX Runtime's dynamic int8 is refused by the check
    if not args.agreement and len(timed) < len(engines):
        ap.error("onnx-int8 is refused by the export's check: it is only reported with --agreement")
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    rows, sections = [], []
    with tempfile.TemporaryDirectory() as tmp:
        scorers, models = {}, {}
        for L in args.max_lengths:  # noqa: N806
            model = models[L] = make_artifact(Path(tmp), L, trained=any(ENGINES[e][1] == "int8" for e in engines))
            for e in timed:
                backend, precision = ENGINES[e]
                on = model if backend == "torch" else model.on_backend(
                    backend, precision, "irds:sci/csfcube" if precision == "int8" else None, Path(tmp) / "exports")
                scorers[(L, e)] = on.scorer(batch_size=args.batch_size)
        for rr in scorers.values():
            rr(frame(8))  # warm-up (an export is built here, outside the timings)
        base, ref = args.max_lengths[0], timed[0]
        for n in args.sizes:
            inp = frame(n)
            t = interleaved({k: (lambda rr=rr: rr(inp)) for k, rr in scorers.items()}, args.repeat)
            for L, e in scorers:  # noqa: N806
                sec = t.median((L, e))
                row = {"max_length": L, "pool size": n}
                if len(timed) > 1:
                    row["engine"] = e
                row.update({"seconds/query (median)": round(sec, 2), "pairs/s": round(n / sec, 1)})
                if len(args.max_lengths) > 1:
                    row[f"time / max_length {base} (median, min-max)"] = \
                        "-" if L == base else str(t.ratio((L, e), (base, e)))
                if len(timed) > 1:
                    row[f"{ref} / this engine's time: speed-up (median, min-max)"] = \
                        "-" if e == ref else str(t.ratio((L, ref), (L, e)))
                rows.append(row)
        if args.agreement:
            sections.append(("agreement with torch", agreement(models, scorers, engines, Path(tmp) / "exports",
                                                                args.batch_size)))
    header = (f"facet cross-encoder (MiniLM-L6 on the CPU, {', '.join(timed)}; torch on {args.threads} threads, "
              f"batch {args.batch_size}), a random CSFCube seed paper with as many random abstracts as the pool size; "
              f"{args.repeat} interleaved rounds")
    note = load_note(load_before)
    table = markdown(pd.DataFrame(rows))
    print(f"{header}; {note}\n")
    print(table)
    details = [header]
    if args.agreement:
        print("\n" + sections[0][1])
        details.append("agreement: a Method facet cross-encoder (the offline MiniLM body trained on CSFCube's "
                       "fold1-test judgements: 9 seeds, 2 epochs x 20 triplets per seed, lr 5e-5) on 200 CSFCube pool "
                       "pairs, the first 20 pool candidates of every fifth Method query in id order; int8 calibrated "
                       "on the component's 128 corpus pairs; per-query Spearman: the mean over the 10 queries")
    if args.out:
        write_results(args.out, "bench_facet: facet cross-encoder re-ranking throughput at CSFCube's pool sizes",
                      "benchmarks/bench_facet.py", argv, details, [("throughput", table), *sections], note)


if __name__ == "__main__":
    main()
