"""Reading a researcher's own papers (:func:`pyterrier_sci.records.read_records`): records per second and peak
memory for 100,000 JSONL records and 100,000 CSV rows.

The papers are CSFCube's 4,205 (title, year, abstract as a list of sentences), repeated with new docnos
(``<copy>-<paper_id>``; the one year ``801``, not a date, written as ``None``: undated) up to ``--records``,
written as JSONL (as released: the abstract a list of sentences),
gzipped JSONL, and a Zotero-like CSV (``Key``, ``Title``, ``Abstract Note``, ``Publication Year``, ``Date`` as
``March YYYY``, read with the default columns).  Each file is read whole ``--rounds`` times (the fastest counts:
the files sit in the page cache); a baseline reads the same JSONL with ``json.loads`` per line and nothing else.
Memory: the peak of Python's traced heap (``tracemalloc``) during one more whole read, and during reading the
first record only, against the file's size: the stream holds one line at a time plus the docnos seen (for the
duplicate check), so the peak grows with the number of records, not with their text.

    python benchmarks/bench_records.py [--records 100000] [--rounds 3] [--out benchmarks/results/bench_records.md]
"""
from __future__ import annotations

import argparse
import csv
import gzip
import itertools
import json
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

import pandas as pd

from pyterrier_sci.bench import load_note, markdown, write_results
from pyterrier_sci.data import data_dir
from pyterrier_sci.records import read_records

HERE = Path(__file__).resolve().parent


def _papers():
    with open(data_dir() / "csfcube" / "abstracts-csfcube-reconstructed.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _write(folder: Path, n: int):
    papers = _papers()
    stream = ((copy, p) for copy in itertools.count() for p in papers)
    # CSFCube's data has two years "None" (read as undated) and one "801" (an error: not a date): that one undated
    rows = [({**p, "paper_id": f"{copy}-{p['paper_id']}", "year": p["year"] if len(p["year"]) == 4 else "None"})
            for copy, p in itertools.islice(stream, n)]
    jsonl = folder / "papers.jsonl"
    with open(jsonl, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    gz = folder / "papers.jsonl.gz"
    with open(jsonl, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        dst.write(src.read())
    table = folder / "zotero.csv"
    with open(table, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Key", "Item Type", "Publication Year", "Author", "Title", "Abstract Note", "Date"])
        for r in rows:
            w.writerow([r["paper_id"], "journalArticle", r["year"], "", r["title"], " ".join(r["abstract"]),
                        f"March {r['year']}" if r["year"].isdigit() else ""])
    return {"JSONL": jsonl, "JSONL.gz": gz, "CSV (Zotero columns)": table}


def _read_all(path: Path) -> int:
    n = 0
    for _ in read_records(path):
        n += 1
    return n


def _baseline(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        for line in f:
            json.loads(line)
            n += 1
    return n


def _best(fn, rounds: int):
    times, out = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(HERE / "results" / "bench_records.md"))
    args = p.parse_args(argv)
    before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-records-") as tmp:
        files = _write(Path(tmp), args.records)
        mib = lambda b: b / 2 ** 20  # noqa: E731
        for name, path in files.items():
            seconds, n = _best(lambda: _read_all(path), args.rounds)
            assert n == args.records, (name, n)
            peak_all, _ = _peak(lambda: _read_all(path))
            peak_first, _ = _peak(lambda: next(read_records(path)))
            rows.append({"source": name, "records": n, "file MiB": round(mib(path.stat().st_size), 1),
                         "seconds": round(seconds, 2), "records/s": f"{n / seconds:,.0f}",
                         "peak MiB (all)": round(mib(peak_all), 1),
                         "peak MiB (first record)": round(mib(peak_first), 2)})
        seconds, n = _best(lambda: _baseline(files["JSONL"]), args.rounds)
        rows.append({"source": "JSONL, json.loads per line only (baseline)", "records": n,
                     "file MiB": round(mib(files["JSONL"].stat().st_size), 1), "seconds": round(seconds, 2),
                     "records/s": f"{n / seconds:,.0f}", "peak MiB (all)": "", "peak MiB (first record)": ""})
    table = markdown(pd.DataFrame(rows))
    details = [f"{args.records:,} records: CSFCube's 4,205 papers repeated with new docnos; the fastest of "
               f"{args.rounds} whole reads; peak = tracemalloc's peak of Python's heap in a separate read"]
    print(write_results(Path(args.out), "bench_records: reading your own papers", "benchmarks/bench_records.py",
                        argv, details, [("throughput and memory", table)], load_note(before)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
