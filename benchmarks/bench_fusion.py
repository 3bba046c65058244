"""The fusion family on CSFCube: RRF (k=60) against fusions whose weights are tuned on the other official fold.

On CSFCube's ``method`` and ``background`` facets (official test folds, the official measures NDCG%20 and MAP as
means of the two folds' means), BM25 and MiniLM (``bm25`` and ``minilm`` of ``pipelines/csfcube.yaml``: PISA
BM25 k1 0.9 b 0.4; all-MiniLM-L6-v2 on OpenVINO int8), both re-ranking the query's pool, fused by the ``fuse``
component (docs/fusion.md):

* ``RRF k=60``: ``fuse(..., method="rrf", k=60)`` (the ``rrf`` component's fusion), the baseline of the t-tests;
* ``CombSUM min-max``: equal weights, no tuning;
* ``RRF, tuned``, ``wsum min-max, tuned``, ``wsum z-score, tuned``: ``tune_on="other-fold"``: each fold's queries
  are fused with the weights (and RRF's k) that maximise NDCG%20 on the other fold's queries (grid step 0.1; k
  10..100), never on their own.

The second table lists the weights chosen for each fold and what they scored on the fold they were tuned on.

    python benchmarks/bench_fusion.py [--facets method background] [--out benchmarks/results/bench_fusion.md]

``--out`` records the run (``pyterrier_sci.bench.write_results``); docs/fusion.md quotes its tables.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

import pyterrier_sci as ps
from pyterrier_sci.bench import load_note, markdown, write_results
from pyterrier_sci.experiment import topics_and_qrels

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pipelines" / "csfcube.yaml"
PAIR = "pool >> bm25, pool >> minilm"
#: system name -> pipeline expression (components of pipelines/csfcube.yaml)
SYSTEMS = {
    "BM25": "pool >> bm25",
    "MiniLM": "pool >> minilm",
    "RRF k=60": f'fuse({PAIR}, method="rrf", k=60)',
    "CombSUM min-max": f'fuse({PAIR}, method="combsum", norm="minmax")',
    "RRF, tuned": f'fuse({PAIR}, method="rrf", tune_on="other-fold")',
    "wsum min-max, tuned": f'fuse({PAIR}, method="wsum", norm="minmax", tune_on="other-fold")',
    "wsum z-score, tuned": f'fuse({PAIR}, method="wsum", norm="zscore", tune_on="other-fold")',
}
BASELINE = "RRF k=60"
MEASURES = ["NDCG%20", "MAP"]


def run_facet(facet: str):
    dataset = f"irds:sci/csfcube/{facet}"
    topics, qrels = topics_and_qrels(dataset)
    built = {}
    for name, expr in SYSTEMS.items():
        t = time.time()
        built[name] = ps.pipeline(expr, config=str(CONFIG), dataset=dataset)
        print(f"{facet}: built {name} in {time.time() - t:.1f} s", flush=True)
    names = list(built)
    table = ps.Experiment(list(built.values()), topics, qrels, MEASURES, names=names, dataset=dataset,
                          baseline=names.index(BASELINE))
    rows = []
    for _, r in table.iterrows():
        rows.append({"facet": facet, "system": r["name"], "NDCG%20": 100 * r["NDCG%20"], "MAP": 100 * r["MAP"],
                     "NDCG%20 p (t-test vs RRF k=60)": "-" if r["name"] == BASELINE else
                     f"{r['NDCG%20 p-value']:.4f}",
                     "NDCG%20 +/- (queries)": "-" if r["name"] == BASELINE else
                     f"+{int(r['NDCG%20 +'])}/-{int(r['NDCG%20 -'])}"})
    chosen = []
    for name, system in built.items():
        if not hasattr(system, "chosen"):
            continue
        for fold, c in system.chosen().items():
            chosen.append({"facet": facet, "system": name, "queries of": fold,
                           "tuned on": c["tuned_on"].rsplit("/", 1)[-1] + f" ({c['queries']} queries)",
                           "weights (BM25, MiniLM)": ", ".join(f"{w:.1f}" for w in c["weights"]),
                           "k": "-" if c["k"] is None else f"{c['k']:g}",
                           "NDCG%20 on the tuning fold": 100 * c["value"]})
    return rows, chosen


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facets", nargs="+", default=["method", "background"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    before = os.getloadavg()
    t0, cpu0 = time.time(), time.process_time()
    rows, chosen = [], []
    for facet in args.facets:
        r, c = run_facet(facet)
        rows += r
        chosen += c
    comparison, weights = markdown(pd.DataFrame(rows)), markdown(pd.DataFrame(chosen))
    print(comparison, "\n", weights, sep="\n")
    details = [f"BM25 and MiniLM of {CONFIG.relative_to(ROOT)} re-ranking each query's pool, fused by the fuse "
               f"component; CSFCube's official NDCG%20 and MAP (x 100, means of the two test folds' means); paired "
               f"t-tests against {BASELINE} over the facet's queries; tuned weights maximise NDCG%20 on the other "
               f"fold (grid step 0.1; RRF's k from 10, 20, ..., 100); wall {time.time() - t0:.0f} s, CPU "
               f"{time.process_time() - cpu0:.0f} s (the MiniLM index built first where missing)"]
    if args.out:
        argv = list(sys.argv[1:] if argv is None else argv)
        write_results(args.out, "bench_fusion: RRF against fusions tuned on the other fold, CSFCube",
                      "benchmarks/bench_fusion.py", argv, details,
                      [("comparison", comparison), ("chosen weights", weights)], load_note(before))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
