"""DORIS-MAE's declared reproductions (pipelines/reproduce/doris_mae.yaml: Table 2 and Table 8, the
supervised contrastive fine-tuning), run by ``pyterrier-sci reproduce``, with what the paper adds to
its tables: the bootstrap standard error of every figure (the paper's ``±``).  The random row (the mean over
100 shufflings of every pool) is declared in the YAML file (``random:``) and shown as the reproduction gives it.

    PYTHONSAFEPATH=1 PYTERRIER_SCI_DATA=../shared/data .venv/bin/python examples/doris_mae.py [--tier full]

The figures are those of ``pyterrier-sci reproduce doris_mae --tier TIER`` (the same saved runs, read
back from each table's manifest); the protocol and how it differs from the paper are in the YAML file
and docs/doris-mae.md.
"""
import argparse
import json
import sys

import pandas as pd
import pyterrier as pt

from pyterrier_sci import reproduce as R  # noqa: N812
from pyterrier_sci.plugins.doris_mae import measures as dmm


def with_errors(result: R.TableResult, bootstrap: int, seed: int) -> pd.DataFrame:
    """One row per system of the table: each measure x100 with its bootstrap SE (none for the random row)."""
    runs_of = json.loads(result.manifest_path.read_text())["reproduction"]["runs"]
    measures = list(result.table.measures)
    frames = []
    for label, ds in result.table.datasets.items():
        dsid = R.dataset_id(ds, result.tier)
        runs = {name: pt.io.read_results(path) for name, path in runs_of.get(label, {}).items()}
        qids = sorted(set().union(*(set(r["qid"]) for r in runs.values()))) if runs else None
        # the declared random row (the mean over shufflings of each pool) comes with the reproduction: no SE
        randoms = [pd.DataFrame([{"name": s.name, **{c.measure: c.reproduced for c in result.cells
                                                      if c.system == s.name and c.dataset == label}}])
                   for s in result.table.systems.values() if s.random is not None and
                   any(c.system == s.name and c.reproduced is not None for c in result.cells)]
        rows = [*randoms, dmm.evaluate(runs, dsid, bootstrap=bootstrap, seed=seed, qids=qids)]
        table = pd.concat(rows, ignore_index=True)
        table.insert(0, "dataset", label)
        frames.append(table)
    out = pd.concat(frames, ignore_index=True)
    keep = ["dataset", "name"] + [c for m in measures for c in (m, m + " SE") if c in out.columns]
    return out[keep]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", choices=R.TIERS, default="quick")
    ap.add_argument("--tables", default="table2,table8", help="the declared tables to run (comma-separated)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the standard errors")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    results = [r for key in args.tables.split(",") for r in R.reproduce(f"doris_mae/{key.strip()}", tier=args.tier)]
    R.print_results(results)
    for res in results:
        print(f"\nTable {res.table.number} ({res.table.title}), tier {res.tier}: x100, ± = bootstrap standard error "
              f"over queries ({args.bootstrap} resamples); Random = the declared mean over shufflings of each pool")
        with pd.option_context("display.width", 250, "display.max_columns", 30):
            print(with_errors(res, args.bootstrap, args.seed).round(2).to_string(index=False))
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
