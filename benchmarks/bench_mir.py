"""MIR fine-tuning throughput on CPU: triplets per second of Algorithm 1's joint triplet training
(all three triplet types of a sample in one batch) and the process's peak memory (RSS).

    python benchmarks/bench_mir.py [--steps 6] [--batch-size 4] [--max-seq-length 256] [--triplets all] [--threads 1]

The training graph is ``sci/mir-multicite/dev/chrono-train`` (52 proposals, 243 methodological
contexts); the model is the offline all-MiniLM-L6-v2.  Throughput counts the triplets of the steps
run (steps x batch size x triplet types) over the trainer's own ``train_runtime`` (model loading,
sampling and saving excluded; they are reported separately).  Peak RSS is ``ru_maxrss`` of the process.
There is one side (no raw-library comparison to interleave); the load average before and after the
run is reported with the figures, since a loaded machine slows training.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--triplets", default="all")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (on a machine whose cores are shared, 1 is several times faster than 2)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    import pyterrier_sci  # noqa: F401
    from pyterrier_sci.bench import load_note
    from pyterrier_sci.plugins.mir.mag import MethodologyAdjacencyGraph
    from pyterrier_sci.plugins.mir.training import train_mir
    load_before = os.getloadavg()
    graph = MethodologyAdjacencyGraph.from_dataset("sci/mir-multicite/dev/chrono-train")
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        model = train_mir(graph, os.path.join(tmp, "m"), epochs=1, max_steps=args.steps, batch_size=args.batch_size,
                          max_seq_length=args.max_seq_length, triplets=args.triplets, domain_model="default")
        meta = model.training
    total = time.time() - started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row = {"steps": meta["steps"], "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
           "triplet_types": len(meta["triplet_types"]), "triplets": meta["triplets_trained"],
           "train_seconds": meta["train_seconds"],
           "triplets_per_second": round(meta["triplets_trained"] / meta["train_seconds"], 3),
           "total_seconds": round(total, 1), "peak_rss_mb": round(rss_mb, 1), "torch_threads": torch.get_num_threads(),
           "cpus": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2), "load": load_note(load_before)}
    if args.json:
        print(json.dumps(row))
    else:
        for k, v in row.items():
            print(f"{k:>20}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
