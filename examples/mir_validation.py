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

SETTINGS = ["extended R@3", "extended R@5", "extended mAP", "restricted R@3", "restricted R@5", "restricted mAP"]


def validation_parts(train_q, fraction=None):
    """``(sub-train qids, validation qids)``: the chronological training proposals split again by date."""
    from pyterrier_sci.datasets import mir_multicite as M
    n = int(round(len(train_q) * (fraction or M.CHRONO_TRAIN_FRACTION)))
    return list(train_q[:n]), list(train_q[n:])


def evaluate(model, split, sub_train, val_q, batch_size=32):
    """The six figures of Table 2 (x100) for ``model`` on the validation proposals."""
    from pyterrier_sci.plugins.dense.mir import evaluate_part, table2_figures
    return table2_figures(evaluate_part(model, split, sub_train, val_q, batch_size=batch_size))


def interpolate(base_state, tuned_state, w):
    """WiSE-FT weights: (1 - w) * base + w * fine-tuned (integer buffers from the fine-tuned model)."""
    return {k: (base_state[k] * (1 - w) + v * w) if v.is_floating_point() else v for k, v in tuned_state.items()}


def add_training_arguments(ap):
    """The fine-tuning settings (defaults: the example's, i.e. the validated pick) and --seeds/--threads."""
    ap.add_argument("--seeds", default="0", help="comma-separated training seeds")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--samples", default="contexts", choices=["contexts", "proposals"])
    ap.add_argument("--triplets", default="T1+T2", choices=["T1", "T1+T2", "T1+T3", "all"])
    ap.add_argument("--sampling", default="on", choices=["on", "off"])
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--margin", type=float, default=0.2)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--frozen-layers", type=int, default=0,
                    help="keep the embeddings and the lowest n transformer layers at the base weights")
    ap.add_argument("--max-steps", type=int, default=None, help="stop training after this many steps (smoke runs)")
    ap.add_argument("--threads", type=int, default=None)


def parse_training_arguments(ap, argv=None):
    """Parses ``argv`` and applies ``--threads`` (torch's CPU threads) before anything trains."""
    args = ap.parse_args(argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    return args


def training_config(args, seed):
    """The ``MIRTrainingConfig`` of the parsed settings for one seed."""
    from pyterrier_sci.plugins.dense.mir import MIRTrainingConfig
    return MIRTrainingConfig(epochs=args.epochs, samples=args.samples, triplets=args.triplets,
                             sampling=args.sampling == "on", batch_size=args.batch_size, learning_rate=args.lr,
                             margin=args.margin, alpha=args.alpha, max_seq_length=args.max_seq_length,
                             max_steps=args.max_steps, frozen_layers=args.frozen_layers, seed=seed)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_arguments(ap)
    ap.add_argument("--wise-ft", default="", help="comma-separated interpolation weights w in (0, 1) to score too")
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = parse_training_arguments(ap, argv)
    import pandas as pd
    from pyterrier_sci.data import atomic_write_text, work_dir
    from pyterrier_sci.datasets import mir_multicite as M
    from pyterrier_sci.plugins.dense import DEFAULT_MODEL, load_sentence_transformer
    from pyterrier_sci.plugins.dense.mag import MethodologyAdjacencyGraph
    from pyterrier_sci.plugins.dense.mir import train_mir

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
