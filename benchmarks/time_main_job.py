"""The main job's time: ``make run`` (``pyterrier-sci experiment pipelines/csfcube.yaml``) from an empty work
directory, ``--runs`` times, each phase of its first use timed from its own progress bar (exporting,
calibrating, checking, compiling, encoding), then once more with the indexes kept (a later run).

Each run gets a new empty work directory (``PYTERRIER_SCI_HOME``) and a new current directory holding a copy
of ``pipelines/csfcube.yaml`` (its saved runs go there), so nothing of an earlier run is reused; the printed
table must be the same in every run.  ``--amx-hidden`` hides AMX from OpenVINO's oneDNN
(``ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI``): the Intel Xeon of issue 31, item 17, emulated.
``--max-seq-length N`` times the same job with every ``dense`` component of the copied file cutting its texts
at N word pieces (``dense(max_seq_length=N)``; MiniLM's own is 256): what a shorter input would save, and what
it does to the table.  Usage::

    python benchmarks/time_main_job.py --runs 3 --out benchmarks/results/main_job.md
    python benchmarks/time_main_job.py --runs 1 --amx-hidden --out benchmarks/results/main_job_amx_hidden.md
    python benchmarks/time_main_job.py --runs 2 --max-seq-length 128 --out benchmarks/results/main_job_zen4_len128.md

The README quotes the ``runs`` table and the ``table`` the job printed (``<!-- recorded: ... -->``).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "pipelines" / "csfcube.yaml"
#: a finished progress bar: "<phase>: 100%|...| n/n [mm:ss<00:00, rate unit/s]" (or "s/unit")
BAR = re.compile(r"^(?P<phase>[^:\r\n]+): 100%\|[^|]*\| (?P<n>\d+)/(?P=n) \[[^,\]]*, *(?P<rate>[\d.]+)"
                 r"(?P<per>s/[a-z]+|[a-z]+/s)\]")
PHASES = (("export", "exporting "), ("calibration", "calibrating "), ("check", "checking "),
          ("compilation", "compiling "), ("encoding", "encoding "))


def phase_seconds(stderr: str) -> dict:
    """Seconds of each phase, from the last state of its progress bar (n / rate, or n x seconds per unit),
    and the encoding's documents per second."""
    out = {}
    for line in re.split(r"[\r\n]", stderr):
        m = BAR.match(line.strip())
        if not m:
            continue
        n, rate = int(m["n"]), float(m["rate"])
        seconds = n * rate if m["per"].startswith("s/") else n / rate
        for key, prefix in PHASES:
            if m["phase"].startswith(prefix):
                out[key] = seconds
                if key == "encoding":
                    out["docs/s"] = n / seconds
    return out


def write_pipeline(dest: Path, max_seq_length=None) -> None:
    """``pipelines/csfcube.yaml`` copied to ``dest``; with ``max_seq_length``, every ``dense`` component of it
    given that length (a copy read and written as YAML: its comments are not kept)."""
    if max_seq_length is None:
        shutil.copyfile(PIPELINE, dest)
        return
    config = yaml.safe_load(PIPELINE.read_text(encoding="utf-8"))
    dense = [c for c in config["components"].values() if c.get("component") == "dense"]
    if not dense:
        sys.exit(f"--max-seq-length: {PIPELINE} has no dense component to cut")
    for c in dense:
        c["max_seq_length"] = max_seq_length
    dest.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def run_once(exe: Path, cwd: Path, home: Path, env: dict) -> tuple:
    t = time.perf_counter()
    done = subprocess.run([str(exe), "experiment", "pipelines/csfcube.yaml"], cwd=cwd, capture_output=True,
                          text=True, env={**env, "PYTERRIER_SCI_HOME": str(home)})
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        sys.exit(f"the main job failed (exit {done.returncode}) in {cwd}:\n{done.stderr[-3000:]}")
    return seconds, done.stdout, done.stderr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs from an empty work directory")
    ap.add_argument("--amx-hidden", action="store_true", help="hide AMX from oneDNN (ONEDNN_MAX_CPU_ISA)")
    ap.add_argument("--max-seq-length", type=int, metavar="N",
                    help="cut the texts of every dense component at N word pieces (MiniLM's own: 256)")
    ap.add_argument("--out", help="write the results file (Markdown) here")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1: the later run reuses the last cold run's work directory")
    if args.max_seq_length is not None and args.max_seq_length < 1:
        ap.error("--max-seq-length must be at least 1 word piece")

    from pyterrier_sci.bench import load_note, write_results

    exe = Path(sys.executable).with_name("pyterrier-sci")
    env = {k: v for k, v in os.environ.items() if k != "PYTERRIER_SCI_HOME"}
    if args.amx_hidden:
        env["ONEDNN_MAX_CPU_ISA"] = "AVX512_CORE_VNNI"
    before = os.getloadavg()
    rows, printed = [], None
    with tempfile.TemporaryDirectory(prefix="main-job-") as scratch:
        for i in range(args.runs):
            cwd = Path(scratch) / f"run-{i + 1}"
            (cwd / "pipelines").mkdir(parents=True)
            write_pipeline(cwd / "pipelines" / PIPELINE.name, args.max_seq_length)
            seconds, stdout, stderr = run_once(exe, cwd, cwd / "home", env)
            if printed is not None and stdout != printed:
                sys.exit(f"run {i + 1} printed another table than run 1:\n{stdout}\n---\n{printed}")
            printed = stdout
            phases = phase_seconds(stderr)
            rest = seconds - sum(phases.get(k, 0.0) for k, _ in PHASES)
            rows.append((f"{i + 1}, empty work directory", seconds, phases, rest))
            print(f"run {i + 1}: {seconds:.1f} s {phases}", file=sys.stderr)
        shutil.rmtree(cwd / "runs")  # the last run again, its indexes and export kept, its saved runs not
        seconds, stdout, stderr = run_once(exe, cwd, cwd / "home", env)
        if stdout != printed:
            sys.exit(f"the later run printed another table:\n{stdout}\n---\n{printed}")
        rows.append(("later run, indexes kept", seconds, phase_seconds(stderr), None))
    note = load_note(before)

    def cell(v, fmt="{:.1f}"):
        return "" if v is None else fmt.format(v)
    table = ["| run | seconds | export | calibration | check | compilation | encoding | documents/s | the rest |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, seconds, ph, rest in rows:
        table.append(f"| {name} | {seconds:.1f} | " + " | ".join(cell(ph.get(k)) for k, _ in PHASES) +
                     f" | {cell(ph.get('docs/s'), '{:.0f}')} | {cell(rest)} |")
    print("\n".join(table))
    print(note)
    if args.out:
        cold = [s for name, s, _, _ in rows[:-1]]
        details = [f"work: {args.runs} run(s) of `pyterrier-sci experiment pipelines/csfcube.yaml` (what `make run` "
                   f"runs), each from an empty work directory, then the last one again with its indexes kept"
                   + ("; AMX hidden from oneDNN (ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI)" if args.amx_hidden else "")
                   + (f"; every dense component cut at {args.max_seq_length} word pieces (max_seq_length)"
                      if args.max_seq_length is not None else ""),
                   f"from an empty work directory: {min(cold):.1f} to {max(cold):.1f} s; every run printed the same "
                   "table"]
        title = "time_main_job: the main job from an empty work directory" + \
            (", AMX hidden from oneDNN" if args.amx_hidden else "") + \
            (f", texts cut at {args.max_seq_length} word pieces" if args.max_seq_length is not None else "")
        write_results(Path(args.out), title, "benchmarks/time_main_job.py", argv, details,
                      [("runs", "\n".join(table)), ("table", "```\n" + printed.rstrip("\n") + "\n```")], note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
