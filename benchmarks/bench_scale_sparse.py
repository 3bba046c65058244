"""BM25 indexing at 1M+ documents in bounded memory: peak memory and time of ``index_corpus`` (PISA,
Lucene) on a synthetic corpus at two sizes 10x apart, and PISA/Lucene query throughput with 1 vs 2
threads.

The synthetic corpus repeats the hep-th abstracts (``sci/hepth-core-citations``, 27,769 papers with
text, title + abstract) under new docnos (``<id>~<copy>``), streamed from the ir_datasets iterator
copy after copy: nothing holds the corpus.  Each (backend, size) runs in a fresh child process; the
parent samples the child's process tree every 0.1 s from ``/proc`` (any children included; the JVM
of the Lucene backend runs inside the child, through pyjnius) and reports, per phase:

* peak RSS (all resident pages, including the file pages of memory-mapped index files, which the
  kernel can drop) and peak anonymous RSS (``RssAnon``: heap memory, which must fit in RAM);
* the child's ``ru_maxrss`` from ``wait4`` (the kernel's own peak);
* wall time; the index size on disk and bytes per document; the load average before and after.

Phases: ``import`` (libraries loaded, nothing indexed), ``index``, ``first query`` (PISA derives its
compressed index and block-max data on first use), ``queries t=1`` and ``queries t=2`` (the first
``--queries`` titles, ``--lucene-queries`` for Lucene, k=1000, batch retrieval).

    python benchmarks/bench_scale_sparse.py [--sizes 100000 1000000] [--backends pisa lucene]
        [--queries 500] [--lucene-queries 100] [--threads 1] [--java-heap 1g] [--json out.json]
        [--out benchmarks/results/bench_scale_sparse.md]

``--out`` records the run (``pyterrier_sci.bench.write_results``) with the capacity plan for 100M abstracts
computed from it (:func:`capacity_plan`); docs/scale.md quotes both tables.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Iterator

from pyterrier_sci.bench import load_note, write_results

DATASET = "irds:sci/hepth-core-citations/train"
#: files an index needs only to be built (and, for PISA, derived again for other k1/b): PISA's forward index and
#: uncompressed inverted index; everything else (lexicons, the derived compressed index and block-max data) serves
BUILD_ONLY = {"pisa": ("fwd", "inv.docs", "inv.freqs"), "lucene": ()}
#: the corpus size the capacity plan is for
PLAN_DOCS = 100_000_000


def synthetic_corpus(n: int, dataset: str = DATASET) -> Iterator[dict]:
    """``n`` documents: the dataset's corpus repeated under new docnos ``<docno>~<copy>``, streamed."""
    from pyterrier_sci.corpus import corpus_texts
    copy = 0
    produced = 0
    while produced < n:
        before = produced
        for doc in corpus_texts(dataset):
            yield {"docno": f"{doc['docno']}~{copy}", "text": doc["text"]}
            produced += 1
            if produced >= n:
                return
        if produced == before:
            raise ValueError(f"{dataset} has no documents")
        copy += 1


def titles(k: int, dataset: str = DATASET):
    """The first ``k`` documents' first 12 words, as queries."""
    import pyterrier as pt

    from pyterrier_sci.corpus import corpus_texts
    qs = []
    for doc in corpus_texts(dataset):
        words = [w for w in doc["text"].split()[:12] if w.isalnum()]
        if words:
            qs.append(" ".join(words))
        if len(qs) >= k:
            break
    return pt.new.queries(qs, qid=[str(i) for i in range(len(qs))])


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# ------------------------------------------------------------------------------------------- child

def child(backend: str, n: int, workdir: Path, queries: int, threads: int, java_heap: str = "") -> None:
    def phase(name):
        print(f"PHASE {name}", flush=True)

    import pyterrier_sci  # noqa: F401  (registers the datasets)
    from pyterrier_sci.plugins.bm25 import BM25, index_corpus
    if backend == "lucene":
        if java_heap:  # the JVM's heap limit (Java's default: a quarter of the RAM), set before it starts
            import jnius_config
            jnius_config.add_options(f"-Xmx{java_heap}")
        from pyterrier_sci.plugins.bm25 import start_jvm
        start_jvm()
    topics = titles(queries)
    out: Dict[str, float] = {}
    phase("index")
    t0 = time.perf_counter()
    path = workdir / f"{backend}-{n}"
    idx = index_corpus(synthetic_corpus(n), path, backend, threads=threads)
    out["index_s"] = time.perf_counter() - t0
    out["num_docs"] = len(idx)
    out["index_bytes"] = du(path)
    phase("first query")
    t0 = time.perf_counter()
    BM25(idx, num_results=1000)(topics.head(1))
    out["first_query_s"] = time.perf_counter() - t0
    out["index_bytes_after_first_query"] = du(path)
    out["serve_bytes"] = out["index_bytes_after_first_query"] - sum(
        (path / f).stat().st_size for f in BUILD_ONLY.get(backend, ()) if (path / f).is_file())
    for t in (1, 2):
        phase(f"queries t={t}")
        retr = BM25(idx, num_results=1000, threads=t)
        retr(topics.head(50))  # warm
        t0 = time.perf_counter()
        res = retr(topics)
        out[f"qps_t{t}"] = len(topics) / (time.perf_counter() - t0)
        out[f"results_t{t}"] = len(res)
    phase("done")
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------------------------------ parent

def _tree(pid: int):
    """``pid`` and its descendants, from /proc."""
    children: Dict[int, list] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _memory(pids):
    rss = anon = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("RssAnon:"):
                        anon += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, anon


def measure(backend: str, n: int, workdir: Path, queries: int, threads: int, java_heap: str = "") -> dict:
    load_before = os.getloadavg()
    cmd = [sys.executable, __file__, "--child", backend, str(n), str(workdir), str(queries), str(threads),
           java_heap]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
    state = {"phase": "import", "result": None}
    peaks: Dict[str, list] = {}
    times: Dict[str, float] = {"import": time.perf_counter()}

    def read():
        for line in proc.stdout:
            if line.startswith("PHASE "):
                state["phase"] = line.split(" ", 1)[1].strip()
                times[state["phase"]] = time.perf_counter()
            elif line.startswith("RESULT "):
                state["result"] = json.loads(line[7:])
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while True:
        rss, anon = _memory(_tree(proc.pid))
        p = peaks.setdefault(state["phase"], [0, 0])
        p[0], p[1] = max(p[0], rss), max(p[1], anon)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # reaped here: its rusage is its own
        if pid:
            break
        time.sleep(0.1)
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(10)
    if proc.returncode != 0 or state["result"] is None:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode})")
    maxrss = usage.ru_maxrss * 1024
    phases = list(times)
    durations = {ph: times[phases[i + 1]] - times[ph] for i, ph in enumerate(phases[:-1])}
    return dict(backend=backend, n=n, peaks=peaks, durations=durations, result=state["result"], maxrss=maxrss,
                load_before=load_before, load_after=os.getloadavg())


def report(rows) -> str:
    mb = 2 ** 20
    lines = ["| backend | docs | index s | docs/s | peak RSS index MB | peak anon index MB | peak anon first query MB "
             "| ru_maxrss MB | RSS after import MB | index MB | bytes/doc | after first query MB | qps t=1 | qps t=2 "
             "| load before | load after |",
             "|---" * 16 + "|"]
    for r in rows:
        res, pk = r["result"], r["peaks"]
        idx = pk.get("index", [0, 0])
        fq = pk.get("first query", [0, 0])
        lines.append(
            f"| {r['backend']} | {r['n']:,} | {res['index_s']:.1f} | {res['num_docs'] / res['index_s']:,.0f} "
            f"| {idx[0] / mb:,.0f} | {idx[1] / mb:,.0f} | {fq[1] / mb:,.0f} | {r['maxrss'] / mb:,.0f} "
            f"| {pk.get('import', [0, 0])[0] / mb:,.0f} | {res['index_bytes'] / mb:,.0f} "
            f"| {res['index_bytes'] / res['num_docs']:,.0f} | {res['index_bytes_after_first_query'] / mb:,.0f} "
            f"| {res['qps_t1']:,.0f} | {res['qps_t2']:,.0f} "
            f"| {' '.join(f'{x:.2f}' for x in r['load_before'])} | {' '.join(f'{x:.2f}' for x in r['load_after'])} |")
    return "\n".join(lines)


def _size(n: float) -> str:
    """100000 -> 100K, 2000000 -> 2M."""
    return f"{n / 1e6:,.0f}M" if n >= 1e6 and n % 1e6 == 0 else (f"{n / 1e3:,.0f}K" if n % 1e3 == 0 else f"{n:,}")


def capacity_plan(rows, n: int = PLAN_DOCS, java_heap: str = "") -> str:
    """The arithmetic for ``n`` documents from the measured rows: per backend, the bytes per document of its
    largest run (disk to build, the derived part, what serving needs), memory as measured at the largest size
    plus its growth per document between the two largest sizes (never below zero), and the indexing rates of
    the runs of at least 1M documents (all runs when none is).  Every figure for ``n`` is an estimate."""
    gb, mb = 1e9, 2 ** 20
    by = {}
    for r in rows:
        by.setdefault(r["backend"], []).append(r)
    cols, cells = [], {}
    for backend in ("pisa", "lucene"):
        runs = sorted(by.get(backend, []), key=lambda r: r["n"])
        if not runs:
            continue
        big = runs[-1]
        res, docs = big["result"], big["result"]["num_docs"]
        build = res["index_bytes"] / docs
        after = res["index_bytes_after_first_query"] / docs
        serve = res.get("serve_bytes", res["index_bytes_after_first_query"]) / docs
        base = big["peaks"].get("import", [0, 0])[1]

        def grown(phase: str) -> tuple:
            """(peak anonymous bytes at the largest size, its growth per document from the size before)"""
            peak = big["peaks"].get(phase, [0, 0])[1]
            if len(runs) < 2:
                return peak, 0.0
            prev = runs[-2]
            step = (peak - prev["peaks"].get(phase, [0, 0])[1]) / (big["n"] - prev["n"])
            return peak, max(step, 0.0)
        timed = [r for r in runs if r["n"] >= 1_000_000] or runs   # the runs the indexing rates come from
        rates = [r["result"]["num_docs"] / r["result"]["index_s"] for r in timed]
        hours = sorted(n / x / 3600 for x in rates)
        idx_peak, idx_step = grown("index")
        c = cells[backend] = {}
        cols.append(backend)
        measured = f"measured at {_size(big['n'])}"
        if backend == "pisa":
            derived = after - build
            c["disk while building"] = (f"{_size(n)} x ({build:,.0f} + {derived:,.0f} B) = "
                                        f"**{n * after / gb:,.0f} GB** (build files + derived; {measured})")
            c["disk to serve"] = (f"{_size(n)} x {serve:,.0f} B = **{n * serve / gb:,.1f} GB** (derived index, "
                                  "block-max data, lexicons; the build files are needed again only for other k1/b)")
            fq_peak = big["peaks"].get("first query", [0, 0])[1]
            c["RAM while deriving (first query per k1/b)"] = (
                f"(peak {fq_peak / mb:,.0f} MB - {base / mb:,.0f} MB after import) x {n / big['n']:,.0f} + the process "
                f"= **{(base + (fq_peak - base) * n / big['n']) / gb:,.1f} GB** (linear in the derived index)")
            c["RAM to serve at full speed"] = f"**{n * serve / gb:,.1f} GB** of page cache (mmap'd) + the process"
        else:
            c["disk while building"] = (f"{_size(n)} x {build:,.0f} B = **{n * build / gb:,.1f} GB** "
                                        f"({measured}), + free space for merges (up to twice the largest merged "
                                        "segment, <= 5 GB)")
            c["disk to serve"] = f"**{n * serve / gb:,.1f} GB**"
            c["RAM while deriving (first query per k1/b)"] = "none"
            c["RAM to serve at full speed"] = f"**{n * serve / gb:,.1f} GB** of page cache + a small heap"
        heap = backend == "lucene" and bool(java_heap)
        since = f"its growth per document from {_size(runs[-2]['n'])}" if len(runs) > 1 else "one size only"
        if heap:  # the JVM's heap is capped: it grows toward the cap, not with the corpus
            c["RAM while indexing (1 thread)"] = (f"**{idx_peak / mb:,.0f} MB** ({measured}): bounded by -Xmx"
                                                  f"{java_heap} whatever the corpus size")
        else:
            c["RAM while indexing (1 thread)"] = (
                f"{idx_peak / mb:,.0f} MB ({measured}) + {_size(n)} x {idx_step:,.0f} B ({since}) = "
                f"**{(idx_peak + idx_step * n) / gb:,.1f} GB**")
        span = f"{min(rates):,.0f}-{max(rates):,.0f}" if len(rates) > 1 else f"{rates[0]:,.0f}"
        took = f"{hours[0]:.1f}-{hours[-1]:.1f}" if f"{hours[0]:.1f}" != f"{hours[-1]:.1f}" else f"{hours[0]:.1f}"
        c["indexing time, 1 thread"] = (f"{_size(n)} / {span} docs/s (measured at "
                                        f"{', '.join(_size(r['n']) for r in timed)}) "
                                        f"= **{took} h**")
    order = ["disk while building", "disk to serve", "RAM while indexing (1 thread)",
             "RAM while deriving (first query per k1/b)", "RAM to serve at full speed", "indexing time, 1 thread"]
    names = {"pisa": "PISA", "lucene": "Lucene"}
    lines = ["| " + f"{_size(n)} abstracts (estimates) | " + " | ".join(names[b] for b in cols) + " |",
             "|---" * (len(cols) + 1) + "|"]
    lines += ["| " + q + " | " + " | ".join(cells[b][q] for b in cols) + " |" for q in order]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--backends", nargs="+", default=["pisa", "lucene"], choices=["pisa", "lucene"])
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--lucene-queries", type=int, default=100,
                    help="queries for Lucene (its 1000 hits per query cross pyjnius one call at a time)")
    ap.add_argument("--threads", type=int, default=1, help="indexing threads")
    ap.add_argument("--workdir", type=Path, default=None, help="where the indexes go (default: a temp dir, removed)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--out", help="record the run in this results file (docs/scale.md quotes it)")
    ap.add_argument("--java-heap", default="", help="the JVM's -Xmx for Lucene, e.g. 1g (default: Java's)")
    ap.add_argument("--child", nargs=6, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        backend, n, workdir, queries, threads, java_heap = args.child
        child(backend, int(n), Path(workdir), int(queries), int(threads), java_heap)
        return
    if min(args.sizes + [args.queries, args.lucene_queries, args.threads]) < 1:
        ap.error("sizes, --queries, --lucene-queries and --threads must be at least 1")
    load_before = os.getloadavg()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_scale_sparse-"))
    rows = []
    try:
        for backend in args.backends:
            for n in args.sizes:
                queries = args.lucene_queries if backend == "lucene" else args.queries
                r = measure(backend, n, workdir, queries, args.threads, args.java_heap)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
                shutil.rmtree(workdir / f"{backend}-{n}", ignore_errors=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    table = report(rows)
    plan = capacity_plan(rows, java_heap=args.java_heap)
    print(table + "\n\n" + plan)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.out:
        write_results(args.out, "bench_scale_sparse: BM25 indexing in bounded memory (PISA, Lucene)",
                      "benchmarks/bench_scale_sparse.py", argv,
                      [f"corpus: the hep-th abstracts of {DATASET} repeated under new docnos, streamed; each row in a "
                       f"fresh child process, {args.threads} indexing thread(s); JVM heap: "
                       f"{args.java_heap or 'Java default'}; queries: the first {args.queries} titles "
                       f"({args.lucene_queries} for Lucene), k=1000"],
                      [("indexing and queries", table), ("capacity plan", plan)], load_note(load_before))


if __name__ == "__main__":
    main()
