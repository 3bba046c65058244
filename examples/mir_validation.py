"""MIR fine-tuning settings on a validation slice of the training proposals (never the test ones).

    python examples/mir_validation.py --seeds 0,1,2                    # the defaults of examples/mir.py
    python examples/mir_validation.py --triplets all --lr 5e-6         # another configuration
    python examples/mir_validation.py --seeds 0,1,2 --wise-ft 0.25,0.5,0.75   # + weight interpolation with the base

The offline protocol of examples/mir.py trains on the chronologically first 60% of the dev
proposals (``chrono-train``, 52 proposals).  Those are split again by date with the same 60% rule:
the first 31 train (a subgraph of the training MAG) and the last 21 validate.  The validation
corpora mirror the test ones: restricted = the papers the validation proposals cite; extended =
the sub-training proposals' cited papers plus each validation proposal's own ground truth.  Every
run is ``train_mir`` itself (the shipped implementation), one model per seed, kept in the work
directory keyed by its settings.  Figures are x100 differences from the base model (absolute for
the base), averaged over the validation proposals with ground truth (§6.2).

``--wise-ft`` also scores the weight interpolation of each fine-tuned model with its base
(WiSE-FT, Wortsman et al. 2022: (1 - w) * base + w * fine-tuned; w = 1 is the fine-tuned model),
an addition to the paper for small training sets.  It is evaluated here only; ``train_mir`` saves
the plain fine-tuned weights.
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# the fine-tuning settings examples/mir_validation.py and examples/mir_rolling.py share
from pyterrier_sci.plugins.mir.experiments import add_training_arguments, parse_training_arguments, training_config  # noqa: E402

SETTINGS = ["extended R@3", "extended R@5", "extended mAP", "restricted R@3", "restricted R@5", "restricted mAP"]


def validation_parts(train_q, fraction=None):
    """``(sub-train qids, validation qids)``: the chronological training proposals split again by date."""
    from pyterrier_sci.datasets import mir_multicite as M  # noqa: N812
    n = int(round(len(train_q) * (fraction or M.CHRONO_TRAIN_FRACTION)))
    return list(train_q[:n]), list(train_q[n:])


def evaluate(model, split, sub_train, val_q, batch_size=32):
    """The six figures of Table 2 (x100) for ``model`` on the validation proposals."""
    from pyterrier_sci.plugins.mir.training import evaluate_part, table2_figures
    return table2_figures(evaluate_part(model, split, sub_train, val_q, batch_size=batch_size))


def interpolate(base_state, tuned_state, w):
    """WiSE-FT weights: (1 - w) * base + w * fine-tuned (integer buffers from the fine-tuned model)."""
    return {k: (base_state[k] * (1 - w) + v * w) if v.is_floating_point() else v for k, v in tuned_state.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_arguments(ap)
    ap.add_argument("--wise-ft", default="", help="comma-separated interpolation weights w in (0, 1) to score too")
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = parse_training_arguments(ap, argv)
    import pandas as pd

    from pyterrier_sci.data import atomic_write_text, work_dir
    from pyterrier_sci.datasets import mir_multicite as M  # noqa: N812
    from pyterrier_sci.plugins.dense import DEFAULT_MODEL, load_sentence_transformer
    from pyterrier_sci.plugins.mir.mag import MethodologyAdjacencyGraph
    from pyterrier_sci.plugins.mir.training import train_mir

    split = M.load_split("dev")
    train_q, test_q = M.chrono_parts(split)
    sub_train, val_q = validation_parts(train_q)
    assert not (set(sub_train) | set(val_q)) & set(test_q), "a test proposal in the validation protocol"
    graph = MethodologyAdjacencyGraph.from_dataset("irds:sci/mir-multicite/dev/chrono-train").subgraph(sub_train)
    print(f"validation protocol: train on {len(sub_train)} proposals ({graph}), validate on {len(val_q)}; "
          f"the {len(test_q)} test proposals are not used")
    weights = sorted({float(w) for w in args.wise_ft.split(",") if w.strip()} | {1.0})
    base = load_sentence_transformer(DEFAULT_MODEL, "cpu")
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    rows = {"base (MiniLM)": evaluate(base, split, sub_train, val_q)}
    for seed in [int(s) for s in args.seeds.split(",")]:
        cfg = training_config(args, seed)
        path = work_dir() / "models" / "mir-validation" / f"sub-train-{cfg.key()}"
        t0 = time.time()
        if not (path / "pt_meta.json").exists():
            train_mir(graph, path, cfg, overwrite=True)
        print(f"seed {seed}: {path} ({time.time() - t0:.0f} s incl. training when not cached)", flush=True)
        model = load_sentence_transformer(str(path), "cpu")
        tuned_state = {k: v.clone() for k, v in model.state_dict().items()}
        for w in weights:
            model.load_state_dict(interpolate(base_state, tuned_state, w))
            rows[f"seed {seed}" + ("" if w == 1.0 else f", WiSE-FT w={w:g}")] = evaluate(model, split, sub_train, val_q)
    table = pd.DataFrame(rows).T[SETTINGS + ["mean"]]
    diff = table.iloc[1:] - table.iloc[0]
    shown = pd.concat([table.iloc[:1], diff]).round(2)
    print(f"\nvalidation ({len(val_q)} proposals), x100; base absolute, the others minus the base:")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(shown.to_string())
    if args.json:
        from pathlib import Path
        atomic_write_text(Path(args.json), json.dumps({"sub_train": sub_train, "validation": val_q,
                                                       "config": {k: v for k, v in vars(args).items() if k != "json"},
                                                       "figures": table.to_dict(orient="index")}, indent=2))
    return table


if __name__ == "__main__":
    main()
