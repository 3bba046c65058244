"""Registering a local corpus (:func:`pyterrier_sci.register_corpus`): seconds and peak memory per 100,000 records,
against reading the same file alone (:func:`pyterrier_sci.records.read_records`), in the same run.

The papers are CSFCube's 4,205 repeated with new docnos up to each size (``--records``, default 100,000 and
1,000,000), written as JSONL.  Each measurement runs in a fresh process (its peak resident memory is the
process's ``ru_maxrss``, the interpreter and the toolkit's imports included, given beside the same process's peak
after the imports alone): registering hashes the file, streams its records into ``docs.jsonl.gz`` and writes the
manifest; reading streams the records and drops them.  Registration holds one record at a time and the docnos
seen (the duplicate check), so its memory grows with the number of papers, not with their text.

    python benchmarks/bench_register.py [--records 100000 1000000] [--out benchmarks/results/bench_register.md]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from pyterrier_sci.bench import load_note, markdown, write_results
from pyterrier_sci.data import data_dir

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, resource, sys, time
import pyterrier_sci as ps
from pyterrier_sci.records import read_records
mode, path, home = sys.argv[1:4]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
if mode == "register":
    ps.register_corpus("bench", path)
else:
    for _ in read_records(path):
        pass
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "imports_kib": base}))
"""


def _write(path: Path, n: int) -> int:
    with open(data_dir() / "csfcube" / "abstracts-csfcube-reconstructed.jsonl", encoding="utf-8") as f:
        papers = [json.loads(line) for line in f]
    stream = ((copy, p) for copy in itertools.count() for p in papers)
    with open(path, "w", encoding="utf-8") as f:
        for copy, p in itertools.islice(stream, n):
            year = p["year"] if len(str(p["year"])) == 4 else "None"
            f.write(json.dumps({**p, "paper_id": f"{copy}-{p['paper_id']}", "year": year}) + "\n")
    return path.stat().st_size


def _measure(mode: str, path: Path, home: Path) -> dict:
    env = {"PYTERRIER_SCI_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), str(home)], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--out", default=str(HERE / "results" / "bench_register.md"))
    args = ap.parse_args()
    before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.records:
            path = Path(tmp) / f"papers-{n}.jsonl"
            size = _write(path, n)
            read = _measure("read", path, Path(tmp) / f"home-read-{n}")
            reg = _measure("register", path, Path(tmp) / f"home-{n}")
            per = 100_000 / n
            rows.append({"records": f"{n:,}", "file MiB": f"{size / 2**20:.0f}",
                         "register s per 100K": f"{reg['seconds'] * per:.1f}",
                         "read alone s per 100K": f"{read['seconds'] * per:.1f}",
                         "register / read": f"{reg['seconds'] / read['seconds']:.2f}x",
                         "register peak MiB": f"{reg['peak_kib'] / 1024:.0f}",
                         "after imports MiB": f"{reg['imports_kib'] / 1024:.0f}",
                         "read peak MiB": f"{read['peak_kib'] / 1024:.0f}"})
            path.unlink()
    details = ["CSFCube's 4,205 papers repeated with new docnos, as JSONL; each measurement a fresh process "
               "(peak = ru_maxrss, imports included); seconds per 100,000 records"]
    print(write_results(Path(args.out), "bench_register: registering a local corpus", "benchmarks/bench_register.py",
                        None, details, [("time and memory", markdown(pd.DataFrame(rows)))], load_note(before)))


if __name__ == "__main__":
    main()
