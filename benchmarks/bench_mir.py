"""MIR fine-tuning throughput on CPU: triplets per second of Algorithm 1's joint triplet training
(all three triplet types of a sample in one batch) and the process's peak memory (RSS).

    python benchmarks/bench_mir.py [--steps 6] [--batch-size 4] [--max-seq-length 256] [--triplets all] [--threads 1]
    python benchmarks/bench_mir.py --threads 1,2 --out benchmarks/results/bench_mir.md

With several ``--threads`` settings, each runs in a process of its own (torch's thread count and the peak RSS are
per process), one after the other; ``--out`` records them as one table (``pyterrier_sci.bench.write_results``),
which docs/mir.md quotes.

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
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _threads(value: str) -> list:
    try:
        threads = [int(t) for t in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threads takes thread counts separated by commas, not {value!r}") from None
    if not threads or min(threads) < 1:
        raise argparse.ArgumentTypeError(f"--threads: each count must be at least 1, not {value!r}")
    return threads


ROWS = (("training throughput, triplets/s", lambda r: f"{r['triplets_per_second']:.2f} ({r['triplets']} in "
         f"{r['train_seconds']:.1f} s)"),
        ("whole run, s (loading, sampling, domain index, saving included)", lambda r: f"{r['total_seconds']:.1f}"),
        ("peak memory (RSS), MB", lambda r: f"{r['peak_rss_mb']:,.0f}"),
        ("load average (1 min) at the end", lambda r: f"{r['load_average_1min']:.2f}"))


def table(rows: list) -> str:
    lines = ["| measure | " + " | ".join(f"`--threads {r['torch_threads']}`" for r in rows) + " |",
             "|---|" + "---|" * len(rows)]
    lines += [f"| {name} | " + " | ".join(cell(r) for r in rows) + " |" for name, cell in ROWS]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--triplets", default="all")
    ap.add_argument("--threads", type=_threads, default=None,
                    help="torch threads, or several counts separated by commas (each run in a process of its own)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", help="record the run in this results file (docs/mir.md quotes it)")
    args = ap.parse_args(argv)
    if min(args.steps, args.batch_size, args.max_seq_length) < 1:
        ap.error("--steps, --batch-size and --max-seq-length must be at least 1")
    if (args.threads and len(args.threads) > 1) or args.out:
        from pyterrier_sci.bench import load_note, write_results
        load_before = os.getloadavg()
        common = ["--steps", str(args.steps), "--batch-size", str(args.batch_size), "--max-seq-length",
                  str(args.max_seq_length), "--triplets", args.triplets, "--json"]
        rows = []
        for n in args.threads or [0]:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), *common,
                                  *(["--threads", str(n)] if n else [])], capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        text = table(rows)
        print(text)
        if args.out:
            write_results(args.out, "bench_mir: MIR's joint triplet training on CPU", "benchmarks/bench_mir.py", argv,
                          [f"all-MiniLM-L6-v2, batch {args.batch_size} samples, triplets {args.triplets} "
                           f"({rows[0]['triplet_types']} types), {args.steps} steps, max_seq_length "
                           f"{args.max_seq_length}, sci/mir-multicite/dev/chrono-train; each thread count in a "
                           "process of its own, one after the other; throughput = triplets / the trainer's "
                           "train_runtime"], [("training", text)], load_note(load_before))
        return 0
    import torch
    if args.threads:
        torch.set_num_threads(args.threads[0])
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
