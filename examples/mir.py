"""MIR's declared reproductions (pipelines/reproduce/mir.yaml: Table 2, the ablations of Tables 5 and 10,
and the LLM re-ranking of Table 3), run by ``pyterrier-sci reproduce``, with what the paper reads off its
tables: the margin of every fine-tuned model over its base.

    PYTHONSAFEPATH=1 PYTERRIER_SCI_DATA=../shared/data .venv/bin/python examples/mir.py [--tier full]
    ... examples/mir.py --tier full --llm http://127.0.0.1:8080/v1        # + Table 3's LLM rows

The figures are those of ``pyterrier-sci reproduce mir --tier TIER`` (the same models and saved runs, kept
in the work directory); the protocol (the dev split's chronological parts), the fine-tuning settings and
how each table differs from the paper are in the YAML file and docs/mir.md.  The settings were chosen by
``examples/mir_validation.py``; ``examples/mir_rolling.py`` tests them on a larger rolling-origin split.
"""
import argparse
import sys

import pandas as pd

from pyterrier_sci import reproduce as R  # noqa: N812

#: per table, the system every other row is compared with (Table 5: the ablation against the full method,
#: as the paper's parentheses give it)
BASES = {"table2": "MiniLM", "table5": "MiniLM_FT", "table10": "Base"}


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
                    help="the declared tables to run (comma-separated; table3 needs --llm for its LLM rows)")
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
        print(f"\nTable {res.table.number}, tier {res.tier}: each row minus {base} (x100; 'mean' over the figures)")
        with pd.option_context("display.width", 250, "display.max_columns", 30):
            print(diff.round(2).to_string())
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
