"""Command-line settings of the MIR fine-tuning experiments: the arguments that
``examples/mir_validation.py`` and ``examples/mir_rolling.py`` share (defaults: the validated
configuration of docs/mir.md), parsing them, and turning them into a :class:`MIRTrainingConfig`."""
from __future__ import annotations

import argparse
from typing import List, Optional

from .training import MIRTrainingConfig


def add_training_arguments(ap: argparse.ArgumentParser) -> None:
    """Adds the fine-tuning settings (defaults: the example's, i.e. the validated pick) and --seeds/--threads."""
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


def parse_training_arguments(ap: argparse.ArgumentParser, argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses ``argv`` and applies ``--threads`` (torch's CPU threads) before anything trains."""
    args = ap.parse_args(argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    return args


def training_config(args: argparse.Namespace, seed: int):
    """The :class:`~pyterrier_sci.plugins.mir.training.MIRTrainingConfig` of the parsed settings for one seed."""
    return MIRTrainingConfig(epochs=args.epochs, samples=args.samples, triplets=args.triplets,
                             sampling=args.sampling == "on", batch_size=args.batch_size, learning_rate=args.lr,
                             margin=args.margin, alpha=args.alpha, max_seq_length=args.max_seq_length,
                             max_steps=args.max_steps, frozen_layers=args.frozen_layers, seed=seed)
