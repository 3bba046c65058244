"""MIR fine-tuned vs its base under a rolling-origin chronological protocol (more test proposals).

    python examples/mir_rolling.py --seeds 0,1,2 --threads 1           # the defaults of examples/mir.py
    python examples/mir_rolling.py --seeds 0,1,2 --triplets all        # the paper's joint loss
    python examples/mir_rolling.py --origins 0.4,0.6,0.8 --json out.json

examples/mir.py tests on one chronological split of the dev proposals: 34 test proposals, of which
19 have ground truth, so one proposal moves R@k by 5.26 points.  This example measures the same
comparison on more proposals without ever training on a later proposal than it tests: the dev
proposals are ordered by date (``mir_multicite.chronological_order``) and cut at the ``--origins``
(default 40%, 60%, 80%).  Fold k trains ``train_mir`` on every proposal before origin k and tests on
the proposals from origin k to the next one (``mir_multicite.rolling_parts``): 34 -> 18, 52 -> 17 and
69 -> 17 proposals, 37 of the tested 52 with ground truth.  No proposal is in the training and test
side of a fold, and every proposal is tested once.  Corpora per fold as in §4.2: restricted = the
papers the fold's test proposals cite; extended = the fold's training papers plus each test
proposal's own ground truth.  The figures pool the per-proposal values of all folds (x100, §6.2),
and the fine-tuned model is compared with its base by paired t-tests over the proposals.  Trained
models are kept in the work directory keyed by fold and settings, so two processes with different
``--seeds`` can train in parallel and a later run with all seeds only evaluates.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pyterrier_sci.plugins.mir.experiments import add_training_arguments, parse_training_arguments, training_config  # noqa: E402


def paired(per_query, base_name, name):
    """Per (corpus, measure) and for the per-proposal mean of the six figures: the mean difference
    ``name`` - ``base_name``, proposals better / worse, and the paired t-test's p-value."""
    import numpy as np
    import pandas as pd
    from scipy import stats
    wide = per_query.pivot_table(index=["corpus", "measure", "qid"], columns="system", values="value")
    six = wide.groupby("qid").mean()
    six.index = pd.MultiIndex.from_product([["mean of six"], [""], six.index], names=wide.index.names)
    rows = []
    for key, g in pd.concat([wide, six]).groupby(level=[0, 1], sort=False):
        d = (g[name] - g[base_name]).to_numpy()
        p = float(stats.ttest_rel(g[name], g[base_name]).pvalue) if np.any(d != 0) else 1.0
        rows.append({"figure": " ".join(k for k in key if k), "margin": float(d.mean()), "better": int((d > 0).sum()),
                     "worse": int((d < 0).sum()), "p": p, "n": len(d)})
    return pd.DataFrame(rows).set_index("figure")


def _origins(value: str) -> str:
    try:
        [float(o) for o in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fractions like 0.4,0.6,0.8, got {value!r}")
    return value


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_arguments(ap)
    ap.add_argument("--origins", default="0.4,0.6,0.8", type=_origins,
                    help="where the folds start testing: increasing fractions of the proposals by date")
    ap.add_argument("--json", default=None, help="write the per-proposal values and the tables to this JSON file")
    args = parse_training_arguments(ap, argv)
    import pandas as pd

    from pyterrier_sci.data import atomic_write_text, work_dir
    from pyterrier_sci.datasets import mir_multicite as M  # noqa: N812
    from pyterrier_sci.plugins.dense import DEFAULT_MODEL, load_sentence_transformer
    from pyterrier_sci.plugins.mir.mag import MethodologyAdjacencyGraph
    from pyterrier_sci.plugins.mir.training import evaluate_part, table2_figures, train_mir

    split = M.load_split("dev")
    try:
        folds = M.rolling_parts(split, [float(o) for o in args.origins.split(",")])
    except ValueError as e:
        ap.error(str(e))
    graph = MethodologyAdjacencyGraph.from_dataset("irds:sci/mir-multicite/dev")
    graphs = [graph.subgraph(train_q) for train_q, _ in folds]     # each fold's training MAG
    print("Protocol (offline, rolling origin): MIR-MultiCite dev proposals by date; fold k trains on the proposals "
          "before origin k and tests on those up to the next origin (no proposal on both sides of a fold)")
    for k, ((train_q, test_q), g) in enumerate(zip(folds, graphs), 1):
        n_gt = sum(1 for docs in split.cited(test_q).values() if any(docs.values()))
        print(f"  fold {k}: train {len(train_q)} proposals ({g}), test {len(test_q)} ({n_gt} with ground truth)")
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = {k: v for k, v in asdict(training_config(args, 0)).items() if k != 'seed'}
    print(f"  fine-tuning: all-MiniLM-L6-v2, {json.dumps(settings, default=str)}")
    sys.stdout.flush()

    def run(system, model, fold):
        train_q, test_q = folds[fold]
        out = evaluate_part(model, split, train_q, test_q)
        out.insert(0, "system", system)
        out.insert(1, "fold", fold + 1)
        return out

    base = load_sentence_transformer(DEFAULT_MODEL, "cpu")
    frames = [run("MiniLM", base, f) for f in range(len(folds))]
    for seed in seeds:
        cfg = training_config(args, seed)
        for f, (train_q, test_q) in enumerate(folds):
            path = work_dir() / "models" / "mir-rolling" / f"fold{f + 1}-of-{args.origins}-{cfg.key()}"
            t0 = time.time()
            if not (path / "pt_meta.json").exists():
                assert not set(train_q) & set(test_q)
                train_mir(graphs[f], path, cfg, overwrite=True)
            print(f"  seed {seed}, fold {f + 1}: {path} ({time.time() - t0:.0f} s incl. training when not cached)",
                  flush=True)
            frames.append(run(f"MiniLM (FT) seed {seed}", load_sentence_transformer(str(path), "cpu"), f))
    per_query = pd.concat(frames, ignore_index=True)
    systems = list(dict.fromkeys(per_query["system"]))
    tuned = systems[1:]
    if len(tuned) > 1:     # the seeds' mean per proposal: a model-averaged estimate of the fine-tuned system
        mean = per_query[per_query.system.isin(tuned)].groupby(["fold", "corpus", "measure", "qid"], sort=False,
                                                                 as_index=False)["value"].mean()
        mean.insert(0, "system", f"MiniLM (FT) mean of seeds {args.seeds}")
        per_query = pd.concat([per_query, mean], ignore_index=True)
        systems.append(mean["system"].iloc[0])
    table = pd.DataFrame({s: table2_figures(per_query[per_query.system == s]) for s in systems}).T.round(2)
    n = per_query[(per_query.system == "MiniLM")].groupby(["corpus", "measure"])["qid"].nunique().max()
    pd.set_option("display.width", 200)
    print(f"\nTable 2 (structure), rolling origin: {n} test proposals with ground truth over {len(folds)} folds, x100")
    print(table.to_string())
    tests = {}
    for s in systems[1:]:
        tests[s] = paired(per_query, "MiniLM", s)
        print(f"\n{s} - MiniLM, paired over the proposals (margin x100, better / worse, t-test p):")
        print(tests[s].round({"margin": 2, "p": 3}).to_string())
    if args.json:
        atomic_write_text(Path(args.json), json.dumps({
            "folds": [{"train": tr, "test": te} for tr, te in folds],
            "config": {k: v for k, v in vars(args).items() if k != "json"},
            "table": table.to_dict(orient="index"), "tests": {s: t.to_dict(orient="index") for s, t in tests.items()},
            "per_query": per_query.to_dict(orient="records")}, indent=2))
    return table, tests


if __name__ == "__main__":
    main()
