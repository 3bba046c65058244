"""What HLM-Cite's date cutoff changes (docs/dates.md).

The paper predicts which of "a set of previous papers (candidate set)" a new paper cites (§1, §2.2), so
``pipelines/hlm_cite.yaml`` cuts every candidate later than the query paper (``date_cutoff(...,
before='query')`` right after the pool).  :func:`date_effect` runs one of that file's uncut pipelines once
on a candidate-set id and evaluates its ranking as it is and with the later candidates cut
(:class:`~pyterrier_sci.dates.DateCutoff`), with paired t-tests and the share of candidates cut.  For a
pipeline that scores each candidate on its own (the dense retrieval module, BM25), the cut ranking is the
ranking of the cut pipeline: the candidates left keep their scores (``tests/test_date_cutoff.py``).

    PYTERRIER_SCI_DATA=../shared/data python -m pyterrier_sci.plugins.hlm_cite.date_effect \\
        --dataset irds:sci/hepth-core-citations/test/c10 --pipeline retrieval_uncut [--queries 200]
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Dict, Optional, Sequence

import pandas as pd
import pyterrier as pt

from pyterrier_sci.dates import DateCutoff
from pyterrier_sci.environment import environment
from pyterrier_sci.evaluation import Experiment
from pyterrier_sci.pipeline import pipeline

__all__ = ["date_effect", "MEASURES"]

MEASURES = ("PREC@3", "PREC@5", "NDCG@3", "NDCG@5")


def date_effect(name: str, dataset: str, queries: Optional[int] = None, config: str = "hlm_cite.yaml",
                measures: Sequence[str] = MEASURES) -> Dict[str, object]:
    """Runs pipeline ``name`` of ``config`` on ``dataset`` (its first ``queries`` test queries by id, or
    all), then evaluates it with and without the candidates later than each query paper.  Returns the
    table (``uncut``, ``cut``; x100 with p-values against uncut), the candidates and core citations cut,
    and the seconds the run took."""
    topics = pt.get_dataset(dataset).get_topics()
    if queries:
        topics = topics[topics["qid"].isin(sorted(topics["qid"])[:queries])].reset_index(drop=True)
    qrels = pt.get_dataset(dataset).get_qrels()
    start = time.perf_counter()
    run = pipeline(name, config=config, dataset=dataset)(topics)
    seconds = time.perf_counter() - start
    cut = DateCutoff("query", dataset)(run)
    table = Experiment([run, cut], topics, qrels, list(measures), names=["uncut", "cut"], baseline=0,
                       dataset=dataset)
    graded = run.merge(qrels.rename(columns={"label": "grade"})[["qid", "docno", "grade"]], on=["qid", "docno"],
                       how="left")
    kept = cut.assign(kept=True)[["qid", "docno", "kept"]]
    graded = graded.merge(kept, on=["qid", "docno"], how="left")
    removed = graded[graded["kept"].isna()]
    return {"pipeline": name, "dataset": dataset, "queries": int(topics["qid"].nunique()),
            "candidates": int(len(run)), "candidates_cut": int(len(removed)),
            "cut_by_grade": {str(int(g)): int(n) for g, n in removed["grade"].fillna(0).value_counts().items()},
            "queries_losing_a_core_citation": int(removed[removed["grade"] == 2]["qid"].nunique()),
            "seconds": round(seconds, 1), "table": table}


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="irds:sci/hepth-core-citations/test/c10")
    ap.add_argument("--pipeline", default="retrieval_uncut", help="an uncut pipeline of the config")
    ap.add_argument("--queries", type=int, default=None, help="the first N test queries by id (default: all)")
    ap.add_argument("--config", default="hlm_cite.yaml")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args(argv)
    out = date_effect(args.pipeline, args.dataset, args.queries, args.config)
    table: pd.DataFrame = out.pop("table")
    cpu = environment().get("cpu", {})
    print(json.dumps(out, indent=1))
    print("CPU:", cpu)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(out, cpu=cpu, table=json.loads(table.to_json(orient="records"))), f, indent=1)


if __name__ == "__main__":
    main()
