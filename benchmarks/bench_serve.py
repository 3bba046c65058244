"""Benchmark of ``pyterrier-sci serve`` on loopback against the same pipelines called in-process, in one run.

For each pipeline: the in-process baseline (one query per call, as a script calls it; and all queries in
one frame, the best batch), then the server at 1, 8 and 32 concurrent clients (each client a thread with
its own keep-alive HTTP connection sending ``GET /v1/search``); then the in-process baseline again, so a
change of machine load shows.  Reports throughput (requests/s), p50 and p99 latency, whether every
served result equals the in-process one (docnos in order; largest score difference), the server's
batches, the time from starting the server process to ``/ready``, and memory (the server's resident set
when ready and its peak; the in-process service's growth of this process).  Writes JSON (default
``benchmarks/results/serve.json``) and prints a markdown table; ``--table FILE`` prints the table of a
recorded file (docs/serve.md quotes it).

    PYTERRIER_SCI_DATA=/work/shared/data python benchmarks/bench_serve.py [--pipelines bm25 minilm]
        [--requests 400] [--clients 1 8 32] [--out benchmarks/results/serve.json]

The in-process calls run on one worker thread, as the server runs its pipelines; one row repeats the
one-query calls on the main thread (as a script makes them): on a loaded machine, torch's encoders ran
there many times slower than on a worker thread of the same process (a property of torch's thread pool
on the main thread, not of the pipeline), so that row is recorded, not used as the baseline.

The queries are the titles of the first ``--requests`` CSFCube papers (short, realistic queries; each
distinct).  Indexes and encoder exports are built first (in-process), so the server's start-to-ready
time is a warm start: imports, opening the indexes, loading and compiling the encoders, a warm-up query.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote_plus

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> dict:
    """Resident set now and its peak (VmHWM) of a process, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                out["rss_mb" if key == "VmRSS" else "peak_mb"] = round(int(value.split()[0]) / 1024, 1)
    return out


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[i]


def queries_of(n: int):
    import ir_datasets
    out = []
    for doc in ir_datasets.load("sci/csfcube").docs_iter():
        t = " ".join(str(doc.title or "").split())
        if t and t not in out:
            out.append(t)
        if len(out) == n:
            return out
    return out


def start_server(args):
    cmd = [sys.executable, "-m", "pyterrier_sci.cli", "serve", args.config, "--pipelines", *args.pipelines,
           "--port", "0", "--log-level", "warning", "--max-queue", "100000", "--max-k", str(max(args.k, 10)),
           "--no-page"]
    env = dict(os.environ, PYTHONSAFEPATH="1")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    url = None
    while url is None:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise SystemExit("the server did not start:\n" + "".join(lines)[-3000:])
        lines.append(line)
        m = re.search(r"serving on (http://\S+?)/ ", line)
        if m:
            url = m.group(1)
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    host, port = url.split("//")[1].split(":")
    while True:
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=5)
            c.request("GET", "/ready")
            r = c.getresponse()
            body = json.loads(r.read())
            c.close()
            if r.status == 200:
                break
        except OSError:
            pass
        time.sleep(0.02)
    ready = time.perf_counter() - start
    return proc, host, int(port), ready, body


def run_clients(host, port, pipeline, queries, clients, k):
    """Each of ``clients`` threads sends its share of ``queries`` one after the other on its own
    keep-alive connection; returns (wall seconds, latencies, {query: results})."""
    lat, answers, errors = [], {}, []
    lock = threading.Lock()
    shares = [queries[i::clients] for i in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def client(share):
        conn = http.client.HTTPConnection(host, port, timeout=120)
        mine, got = [], {}
        barrier.wait()
        for q in share:
            t = time.perf_counter()
            conn.request("GET", f"/v1/search?q={quote_plus(q)}&k={k}&pipeline={pipeline}")
            r = conn.getresponse()
            body = r.read()
            mine.append(time.perf_counter() - t)
            if r.status != 200:
                errors.append((r.status, body[:200]))
                continue
            got[q] = json.loads(body)["results"]
        conn.close()
        with lock:
            lat.extend(mine)
            answers.update(got)
    threads = [threading.Thread(target=client, args=(s,)) for s in shares]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, e.g. {errors[0]}")
    return wall, lat, answers


def compare(served: dict, alone: dict) -> dict:
    same = sum(1 for q in alone if [h["docno"] for h in served[q]] == [h["docno"] for h in alone[q]])
    diff = max((abs(a["score"] - b["score"]) for q in alone for a, b in zip(served[q], alone[q])), default=0.0)
    return {"identical": same, "of": len(alone), "max_score_diff": diff}


def row(pipeline, mode, clients, n, wall, lat, extra=None):
    out = {"pipeline": pipeline, "mode": mode, "clients": clients, "requests": n, "seconds": round(wall, 3),
           "throughput": round(n / wall, 2),
           "p50_ms": round(statistics.median(lat) * 1000, 2) if lat else None,
           "p99_ms": round(percentile(lat, 99) * 1000, 2) if lat else None}
    out.update(extra or {})
    return out


def table(rec: dict) -> str:
    import pandas as pd

    from pyterrier_sci.bench import markdown
    rows = []
    for r in rec["results"]:
        same = f"{r['identical']}/{r['of']} (max score diff {r['max_score_diff']:.1e})" if "identical" in r else ""
        batch = f"{r['mean_batch']:.1f}" if "mean_batch" in r else ""
        rows.append({"pipeline": r["pipeline"], "mode": r["mode"], "clients": r["clients"],
                     "req/s": r["throughput"], "p50 ms": r["p50_ms"] or "-", "p99 ms": r["p99_ms"] or "-",
                     "mean batch": batch, "results equal in-process": same})
    head = (f"CPU: {rec['cpu']['model']} ({rec['cpu']['usable_cores']} usable cores); {rec['load']}; "
            f"{rec['requests']} requests per row, k={rec['k']}; server start to ready {rec['start_to_ready_s']:.1f} s "
            f"(pipelines loaded in {rec['server_load_s']:.1f} s); server memory {rec['memory']['server_ready_rss_mb']} "
            f"MiB when ready, peak {rec['memory']['server_peak_mb']} MiB; in-process service "
            f"+{rec['memory']['inprocess_growth_mb']} MiB")
    return head + "\n\n" + markdown(pd.DataFrame(rows))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "pipelines" / "csfcube.yaml"))
    ap.add_argument("--pipelines", nargs="+", default=["bm25", "minilm"])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "serve.json"))
    ap.add_argument("--table", help="print the table of a recorded JSON file and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return

    from pyterrier_sci.bench import load_note
    from pyterrier_sci.environment import environment
    from pyterrier_sci.serve import SearchService
    env = environment()
    before_load = os.getloadavg()
    queries = queries_of(args.requests)
    base = rss_mb(os.getpid())["rss_mb"]
    service = SearchService(args.config, args.pipelines).load()   # builds what is missing, then warms up
    grown = round(rss_mb(os.getpid())["rss_mb"] - base, 1)

    def alone(name):
        """In-process, one query per call: (wall, latencies, {query: hits})."""
        lat, got = [], {}
        start = time.perf_counter()
        for q in queries:
            t = time.perf_counter()
            got[q] = service.hits(service.run(name, [q]), q, args.k)
            lat.append(time.perf_counter() - t)
        return time.perf_counter() - start, lat, got

    def together(name):
        start = time.perf_counter()
        res = service.run(name, queries)
        groups = {qid: g for qid, g in res.groupby("qid", sort=False)}
        empty = res.iloc[0:0]  # a query BM25 finds nothing for has no rows
        got = {q: service.hits(groups.get(f"q{i}", empty), q, args.k) for i, q in enumerate(queries)}
        return time.perf_counter() - start, got

    worker = ThreadPoolExecutor(1)
    proc, host, port, ready_s, ready = start_server(args)
    mem_ready = rss_mb(proc.pid)
    results = []
    try:
        for name in service.transformers:  # the served names (NAME of NAME=EXPRESSION)
            # in-process on one worker thread, as the server runs its pipelines (and on the main thread,
            # as a script calls them: torch can be far slower there on a loaded machine, see the docstring)
            wall, lat, ref = worker.submit(alone, name).result()
            results.append(row(name, "in-process, 1 query per call", 1, len(queries), wall, lat))
            wall, lat, main_thread = alone(name)
            results.append(row(name, "in-process, 1 query per call, main thread", 1, len(queries), wall, lat,
                               compare(main_thread, ref)))
            wall, got = worker.submit(together, name).result()
            results.append(row(name, "in-process, all queries in 1 call", 1, len(queries), wall, [],
                               compare(got, ref)))
            for c in args.clients:
                c0 = json.loads(_get(host, port, "/v1/stats"))["batching"]
                wall, lat, got = run_clients(host, port, name, queries, c, args.k)
                c1 = json.loads(_get(host, port, "/v1/stats"))["batching"]
                batches = c1["batches"] - c0["batches"]
                results.append(row(name, "server", c, len(queries), wall, lat,
                                   {**compare(got, ref), "batches": batches,
                                    "mean_batch": (c1["queries"] - c0["queries"]) / max(batches, 1)}))
            wall, lat, _ = worker.submit(alone, name).result()
            results.append(row(name, "in-process, 1 query per call (again)", 1, len(queries), wall, lat))
        mem_end = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    rec = {"benchmark": "bench_serve", "cpu": env["cpu"], "python": env["python"],
           "versions": {k: env["versions"].get(k) for k in ("pyterrier", "fastapi", "uvicorn", "mcp", "torch",
                                                             "openvino") if k in env["versions"]},
           "load": load_note(before_load), "config": os.path.relpath(args.config, ROOT),
           "pipelines": service.describe(),
           "requests": len(queries), "k": args.k, "start_to_ready_s": round(ready_s, 3),
           "server_load_s": ready["load_seconds"],
           "memory": {"server_ready_rss_mb": mem_ready["rss_mb"], "server_peak_mb": mem_end["peak_mb"],
                      "inprocess_growth_mb": grown},
           "results": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    os.replace(tmp, out)
    print(table(rec))
    print(f"\nwritten: {out}")


def _get(host, port, path):
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", path)
    body = c.getresponse().read()
    c.close()
    return body


if __name__ == "__main__":
    main()
