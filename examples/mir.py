"""MIR's declared reproductions (pipelines/reproduce/mir.yaml: Table 2, the ablations of Tables 5 and 10,
the LLM re-ranking of Table 3, and beyond the paper the rolling-origin test and the validation search that
chose the fine-tuning settings), run by ``pyterrier-sci reproduce``, with what the paper reads off its
tables: the margin of every fine-tuned model over its base (on the rolling-origin test also paired t-tests
over the proposals; on the validation slice the mean over the three seeds, the rule that chose the settings).

    PYTHONSAFEPATH=1 PYTERRIER_SCI_DATA=../shared/data .venv/bin/python examples/mir.py [--tier full]
    ... examples/mir.py --tier full --llm http://127.0.0.1:8080/v1        # + Table 3's LLM rows
    ... examples/mir.py --tier full --tables rolling,validation           # the protocol's own evidence

The figures are those of ``pyterrier-sci reproduce mir --tier TIER`` (the same models and saved runs, kept
in the work directory); the protocol (the dev split's chronological parts), the fine-tuning settings and
how each table differs from the paper are in the YAML file and docs/mir.md.
"""
import argparse
import sys

import pandas as pd

from pyterrier_sci import reproduce as R  # noqa: N812

#: per table, the system every other row is compared with (Table 5: the ablation against the full method,
#: as the paper's parentheses give it)
BASES = {"table2": "MiniLM", "table5": "MiniLM_FT", "table10": "Base", "rolling": "MiniLM", "validation": "MiniLM"}
#: tables whose rows are compared with the base by paired t-tests over the proposals
PAIRED = {"rolling"}
#: tables whose systems are settings x seeds (``<setting>_s<seed>``): the rule is the mean over the seeds
SEEDED = {"validation"}


def seed_means(diff: pd.DataFrame) -> pd.DataFrame:
    """Per setting (the system name without its ``_s<seed>``), each seed's mean margin and their mean."""
    seeds = diff["mean"].rename_axis("system").reset_index()
    parts = seeds["system"].str.extract(r"^(?P<setting>.+)_s(?P<seed>\d+)$")
    seeds = pd.concat([seeds, parts], axis=1).dropna(subset=["setting"])
    wide = seeds.pivot_table(index="setting", columns="seed", values="mean", sort=False)
    wide.columns = [f"seed {c}" for c in wide.columns]
    wide["mean"] = wide.mean(axis=1)
    return wide


def paired(result: R.TableResult, base: str) -> pd.DataFrame:
    """Each system against ``base``, paired over the queries with relevant documents, per dataset and measure
    and for the per-query mean over them: the mean difference (the paper's units), queries better / worse,
    and the paired t-test's p-value.  From the table's saved runs (the runs the figures come from)."""
    import numpy as np
    import pyterrier as pt
    from scipy import stats

    from pyterrier_sci.evaluation import Experiment
    from pyterrier_sci.experiment import topics_and_qrels
    frames = []
    for label, runs in result.runs.items():
        if base not in runs:
            continue
        dsid = R.dataset_id(result.table.datasets[label], result.tier)
        topics, qrels = topics_and_qrels(dsid)
        names = list(runs)
        per = Experiment([pt.io.read_results(runs[n]) for n in names], topics, qrels, result.table.measures,
                         names=names, dataset=dsid, perquery=True, verbose=False)
        per = per.assign(dataset=label, value=pd.to_numeric(per["value"], errors="coerce") * result.table.scale)
        frames.append(per)
    if not frames:
        return pd.DataFrame()
    per = pd.concat(frames, ignore_index=True)
    wide = per.pivot_table(index=["dataset", "measure", "qid"], columns="name", values="value")
    mean = wide.groupby(level="qid").mean()
    mean.index = pd.MultiIndex.from_product([["mean"], [""], mean.index], names=wide.index.names)
    rows = []
    for system in [n for n in wide.columns if n != base]:
        for key, g in pd.concat([wide, mean]).groupby(level=[0, 1], sort=False):
            d = (g[system] - g[base]).to_numpy()
            p = float(stats.ttest_rel(g[system], g[base]).pvalue) if np.any(d != 0) else 1.0
            rows.append({"system": system, "figure": " ".join(k for k in key if k), "margin": float(d.mean()),
                         "better": int((d > 0).sum()), "worse": int((d < 0).sum()), "p": p, "queries": len(d)})
    return pd.DataFrame(rows).set_index(["system", "figure"])


def margins(result: R.TableResult, base: str) -> pd.DataFrame:
    """Each fine-tuned system's figures minus ``base``'s, per dataset and measure (the paper's units), with
    the mean over them; systems that did not run are left out."""
    cells = pd.DataFrame([(c.system, c.dataset, c.measure, c.reproduced) for c in result.cells
                          if c.reproduced is not None], columns=["system", "dataset", "measure", "value"])
    wide = cells.pivot_table(index="system", columns=["dataset", "measure"], values="value", sort=False)
    if base not in wide.index:
        return wide.iloc[0:0]
    out = wide.drop(index=base) - wide.loc[base]
    out["mean"] = out.mean(axis=1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", choices=R.TIERS, default="quick")
    ap.add_argument("--tables", default="table2,table5,table10",
                    help="the declared tables to run (comma-separated: table2, table3 (needs --llm for its LLM "
                         "rows), table5, table10, rolling, validation)")
    ap.add_argument("--llm", default=None, help="base URL of an OpenAI-compatible endpoint: adds Table 3")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.tables.split(",") if k.strip()]
    if args.llm and "table3" not in keys:
        keys.append("table3")
    results = [r for key in keys for r in R.reproduce(f"mir/{key}", tier=args.tier, llm=args.llm)]
    R.print_results(results)
    for res in results:
        base = BASES.get(res.table.key)
        if base is None:
            continue
        diff = margins(res, base)
        if diff.empty:
            continue
        print(f"\nmir/{res.table.key} (Table {res.table.number}), tier {res.tier}: each row minus {base} "
              "(x100; 'mean' over the figures)")
        with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_rows", 500):
            print(diff.round(2).to_string())
            if res.table.key in SEEDED:
                print(f"\nmir/{res.table.key}: the mean margin per setting and seed, and over the seeds (the rule)")
                print(seed_means(diff).round(2).to_string())
            if res.table.key in PAIRED:
                print(f"\nmir/{res.table.key}: each row against {base}, paired over the proposals (margin x100, "
                      "better / worse, t-test p)")
                print(paired(res, base).round({"margin": 2, "p": 3}).to_string())
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
