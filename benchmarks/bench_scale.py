"""Scale-out on Ray (issue 20, docs/scale.md), measured in one run on this machine:

  encode   sharded dense indexing (hep-th abstracts of irds:sci/hepth-core-citations written to a JSONL
           corpus): local Ray with 1 worker vs the single-process flat build (target <= 1.10x), 2 workers
           vs 1, interleaved rounds (median, min, max of per-round ratios); peak RSS per worker at 30K and
           300K documents (the hep-th abstracts repeated under new ids; texts cut to --mem-chars
           characters to keep it affordable, stated in the output);
  fanout   fan-out retrieval over 2 shards vs the flat FlexIndex holding the same vectors (target <= 1.2x),
           A B A B, median of the per-pair ratios; results checked identical first;
  llm      an LLM stage (MIR's pointwise judge, CSFCube) against the loopback server at a fixed latency:
           calls/s in one process, on 1 and on 2 Ray workers, and the server requests of a rerun (target 0).

    PYTERRIER_SCI_DATA=/work/shared/data python benchmarks/bench_scale.py            # all three
    python benchmarks/bench_scale.py encode --docs 2000 --rounds 3 --memory-sizes 30000,300000 [--out FILE]
    python benchmarks/bench_scale.py fanout [--docs 29555] [--dim 384] [--shards 2] [--out FILE]
    python benchmarks/bench_scale.py llm [--llm-queries 16] [--llm-depth 20] [--latency 0.05] [--out FILE]

``--out`` records the run (``pyterrier_sci.bench.write_results``); docs/scale.md quotes the recorded tables
(benchmarks/results/bench_scale_encode.md, with the capacity plan's arithmetic on its rates, bench_scale_fanout.md,
bench_scale_llm.md).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from pyterrier_sci.bench import csfcube_rerank_sample, load_note, markdown, word_pieces, write_results
from pyterrier_sci.llm.loopback import ScriptedServer, prompt_of, yes_no

# ----------------------------------------------------------------- encode (sharded indexing)

HEPTH = "irds:sci/hepth-core-citations/train"


def write_corpus(path: Path, size: int, chars: int = 0) -> Path:
    """A JSONL corpus of ``size`` hep-th abstracts, repeated under new ids once they run out."""
    from pyterrier_sci.corpus import corpus_texts
    abstracts = [d["text"] for d in corpus_texts(HEPTH, ["abstract"]) if d["text"].strip()]
    with open(path, "w", encoding="utf-8") as f:
        for i, text in zip(range(size), itertools.cycle(abstracts)):
            f.write(json.dumps({"docno": f"d{i}", "text": text[:chars] if chars else text}) + "\n")
    return path


def read_jsonl(path: Path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def single_process(corpus: Path, out: Path, batch_size: int):
    """(seconds of the whole flat build in this process with the model load, seconds of encoding and
    writing alone)."""
    from pyterrier_dr import FlexIndex

    from pyterrier_sci.plugins.dense import DenseRetriever
    t = time.perf_counter()
    dense = DenseRetriever("default", batch_size=batch_size, verbose=False)
    dense.encoder  # noqa: B018 - loads the model
    t_enc = time.perf_counter()
    FlexIndex(str(out), verbose=False).indexer().index(dense._encode_docs(read_jsonl(corpus)))
    end = time.perf_counter()
    return end - t, end - t_enc


def sharded(corpus: Path, out: Path, shards: int, workers: int, batch_size: int):
    """(seconds, shard reports) of a sharded build on the running Ray instance (actor start-up and
    model loading included)."""
    from pyterrier_sci.plugins.dense import build_sharded_index
    reports = []
    t = time.perf_counter()
    build_sharded_index(str(corpus), "default", out, shards, workers=workers, batch_size=batch_size,
                        verbose=False, on_shard=reports.append)
    return time.perf_counter() - t, reports


def throughput(work: Path, docs: int, rounds: int, batch_size: int) -> dict:
    from pyterrier_sci.scale import init_ray
    corpus = write_corpus(work / f"hepth-{docs}.jsonl", docs)
    rows = {"single": [], "ray1": [], "ray2": []}  # whole builds (model loads and actor start-up included)
    enc = {"single": [], "ray1": [], "ray2": []}  # encoding and writing alone (the workers' shard times)
    load_before = os.getloadavg()
    import ray
    init_ray(num_cpus=os.cpu_count())  # started once, outside the timings (a cluster is up before a job)
    try:
        for r in range(rounds):
            total, alone = single_process(corpus, work / f"flat-{r}", batch_size)
            rows["single"].append(total)
            enc["single"].append(alone)
            for name, n in (("ray1", 1), ("ray2", 2)):
                total, reports = sharded(corpus, work / f"{name}-{r}", n, n, batch_size)
                rows[name].append(total)
                enc[name].append(max(rep["seconds"] for rep in reports))  # the shards run side by side
            for name in ("flat", "ray1", "ray2"):
                shutil.rmtree(work / f"{name}-{r}", ignore_errors=True)
    finally:
        ray.shutdown()
    load_after = os.getloadavg()

    def ratios(t, a, b):
        rs = [x / y for x, y in zip(t[a], t[b])]
        return {"median": statistics.median(rs), "min": min(rs), "max": max(rs)}
    return {"docs": docs, "rounds": rounds, "batch_size": batch_size,
            "docs_per_s": {k: docs / statistics.median(v) for k, v in rows.items()},
            "encode_docs_per_s": {k: docs / statistics.median(v) for k, v in enc.items()},
            "seconds": rows, "encode_seconds": enc,
            # time ratios: > 1 means slower than the reference
            "ray1_over_single": ratios(rows, "ray1", "single"), "ray2_over_ray1": ratios(rows, "ray2", "ray1"),
            "encode_ray1_over_single": ratios(enc, "ray1", "single"),
            "encode_ray2_over_ray1": ratios(enc, "ray2", "ray1"),
            "load_before": load_before, "load_after": load_after}


def memory(work: Path, sizes, shards: int, workers: int, chars: int, batch_size: int) -> list:
    """Each size in a process of its own, so that the driver's peak RSS is that build's."""
    import subprocess
    out = []
    for size in sizes:
        res = work / f"memory-{size}.json"
        write_corpus(work / f"synthetic-{size}.jsonl", size, chars)  # here: the child's memory is the build's
        subprocess.run([sys.executable, __file__, "encode", "--docs", "0", "--memory-sizes", str(size),
                        "--mem-shards", str(shards), "--mem-workers", str(workers), "--mem-chars", str(chars),
                        "--batch-size", str(batch_size),
                        "--workdir", str(work), "--memory-child", str(res)], check=True)
        out += json.loads(res.read_text())
    return out


def memory_child(work: Path, sizes, shards: int, workers: int, chars: int, batch_size: int) -> list:
    out = []
    for size in sizes:
        corpus = work / f"synthetic-{size}.jsonl"
        if not corpus.exists():
            write_corpus(corpus, size, chars)
        load_before = os.getloadavg()
        secs, reports = sharded_fresh(corpus, work / f"mem-{size}", shards, workers, batch_size)
        per_worker = {}
        for r in reports:
            per_worker[r["pid"]] = max(per_worker.get(r["pid"], 0), r["peak_rss_bytes"])
        out.append({"docs": size, "shards": shards, "workers": workers, "text_chars": chars, "seconds": secs,
                    "docs_per_s": size / secs,
                    "peak_rss_mib_per_worker": sorted(v / 2**20 for v in per_worker.values()),
                    "driver_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    "index_mib": sum(f.stat().st_size for f in (work / f"mem-{size}").rglob("*")
                                     if f.is_file()) / 2**20,
                    "load_before": load_before, "load_after": os.getloadavg()})
        shutil.rmtree(work / f"mem-{size}", ignore_errors=True)
        corpus.unlink()
    return out


def sharded_fresh(corpus, out, shards, workers, batch_size):
    """A sharded build in a Ray instance of its own (fresh worker processes, so their peak RSS is theirs)."""
    from pyterrier_sci.scale import ray_session
    with ray_session(num_cpus=os.cpu_count()):
        return sharded(corpus, out, shards, workers, batch_size)


def mean_word_pieces(corpus: Path) -> float:
    """Mean word pieces per text of ``corpus`` as the default encoder reads them (cut at its maximum length)."""
    from pyterrier_sci.plugins.dense import DenseRetriever
    return float(np.mean(word_pieces(DenseRetriever("default", verbose=False).encoder,
                                     [d["text"] for d in read_jsonl(corpus)])))


def throughput_table(t: dict) -> str:
    rows = ["| path | docs/s, whole build (median) | docs/s, encoding alone (median) |", "|---|---|---|"]
    for k, name in (("single", "single process (flat build)"), ("ray1", "Ray, 1 worker"), ("ray2", "Ray, 2 workers")):
        rows.append(f"| {name} | {t['docs_per_s'][k]:.1f} | {t['encode_docs_per_s'][k]:.1f} |")
    return "\n".join(rows)


RATIOS = (("ray1_over_single", "Ray 1 worker / single process, whole build", "<= 1.10"),
          ("encode_ray1_over_single", "Ray 1 worker / single process, encoding alone", "<= 1.10"),
          ("ray2_over_ray1", "Ray 2 workers / 1 worker, whole build", ""),
          ("encode_ray2_over_ray1", "Ray 2 workers / 1 worker, encoding alone", ""))


def ratios_table(t: dict) -> str:
    rows = ["| time ratio | median | min | max | target |", "|---|---|---|---|---|"]
    for k, name, target in RATIOS:
        r = t[k]
        rows.append(f"| {name} | {r['median']:.3f} | {r['min']:.3f} | {r['max']:.3f} | {target} |")
    return "\n".join(rows)


def memory_table(memory: list) -> str:
    rows = ["| documents | docs/s | peak RSS per worker (MiB) | driver peak RSS (MiB) | index (MiB) "
            "| load before -> after |", "|---|---|---|---|---|---|"]
    for m in memory:
        rss = ", ".join(f"{v:.0f}" for v in m["peak_rss_mib_per_worker"])
        rows.append(f"| {m['docs']:,} | {m['docs_per_s']:.1f} | {rss} | {m['driver_peak_rss_mib']:.0f} "
                    f"| {m['index_mib']:.1f} | {m['load_before'][0]:.2f} -> {m['load_after'][0]:.2f} |")
    return "\n".join(rows)


#: published throughput (sbert.net's pretrained-models table): sentences/s on one GPU and on a CPU, for
#: MiniLM-L6 models and for BERT-base-size models such as SPECTER2; short queries of about 10 word pieces
SBERT_QPS = {"minilm": {"gpu": 18_000, "cpu": 750}, "bert-base": {"gpu": 4_000, "cpu": 170}}
SBERT_QUERY_PIECES = 10
#: PRISM's ACL corpus: 38,956 chunks of 256 words for 1,672 papers (sci/acl-fulltext/chunks-256)
ACL_CHUNKS, ACL_PAPERS = 38_956, 1_672
MAX_PIECES = 256  # MiniLM's cut: a 256-word chunk (about 330 word pieces) is read as 256


def capacity_plan(rate: float, pieces: float, worker_mib: float) -> str:
    """The capacity plan's arithmetic on the measured rate (abstracts/s of one Ray worker on this machine,
    encoding alone), the corpus' mean word pieces and the measured peak memory per worker; every other input
    is named in the table. Figures for sizes not run are estimates."""
    hours = lambda n, per_s: n / per_s / 3600  # noqa: E731
    gpu_by_ratio = SBERT_QPS["minilm"]["gpu"] * rate / SBERT_QPS["minilm"]["cpu"]
    gpu_by_length = SBERT_QPS["minilm"]["gpu"] * SBERT_QUERY_PIECES / pieces
    gpu_lo, gpu_hi = sorted((gpu_by_ratio, gpu_by_length))
    specter_cpu = SBERT_QPS["bert-base"]["cpu"] / SBERT_QPS["minilm"]["cpu"] * rate
    specter_gpu = SBERT_QPS["bert-base"]["gpu"] * rate / SBERT_QPS["minilm"]["cpu"]
    chunk_cost = MAX_PIECES / pieces
    chunks = 10e6 * ACL_CHUNKS / ACL_PAPERS
    rows = [("MiniLM abstracts/s, one Ray worker on this machine (measured)", f"{rate:.1f}",
             f"encoding alone, {pieces:.0f} word pieces on average"),
            ("MiniLM abstracts/s per GPU (estimate)", f"{gpu_lo:,.0f}-{gpu_hi:,.0f}",
             f"sbert.net's {SBERT_QPS['minilm']['gpu']:,} queries/s on a GPU, scaled by the CPU ratio "
             f"({SBERT_QPS['minilm']['cpu']} queries/s : {rate:.1f} abstracts/s) or by length "
             f"({SBERT_QUERY_PIECES} : {pieces:.0f} word pieces)"),
            ("SPECTER2 (BERT-base) abstracts/s, CPU worker / GPU (estimate)", f"{specter_cpu:.1f} / {specter_gpu:,.0f}",
             f"sbert.net's BERT-base {SBERT_QPS['bert-base']['cpu']} / {SBERT_QPS['bert-base']['gpu']:,} queries/s, "
             "scaled by the CPU ratio"),
            ("peak memory per worker, MiB (measured)", f"{worker_mib:.0f}", "the largest worker of the memory runs"),
            ("100M abstracts: one 1M-abstract shard on one worker, hours", f"{hours(1e6, rate):.1f}", "1M / rate"),
            ("100M abstracts: CPU worker-hours", f"{hours(1e8, rate):,.0f}", "100M / rate"),
            ("100M abstracts: GPU-hours (estimate)", f"{hours(1e8, gpu_hi):.0f}-{hours(1e8, gpu_lo):.0f}",
             "100M / GPU rate"),
            ("100M abstracts, SPECTER2: CPU worker-hours / GPU-hours (estimate)",
             f"{hours(1e8, specter_cpu):,.0f} / {hours(1e8, specter_gpu):.0f}", "100M / SPECTER2 rates"),
            ("10M full papers: 256-word chunks (estimate)", f"{chunks / 1e6:.0f}M",
             f"{ACL_CHUNKS:,} chunks / {ACL_PAPERS:,} ACL papers x 10M"),
            ("10M full papers: chunks/s per CPU worker (estimate)", f"{rate / chunk_cost:.1f}",
             f"a chunk is read as {MAX_PIECES} word pieces: rate x {pieces:.0f} / {MAX_PIECES}"),
            ("10M full papers: CPU worker-hours / GPU-hours (estimate)",
             f"{hours(chunks, rate / chunk_cost):,.0f} / {hours(chunks, gpu_hi / chunk_cost):.0f}-"
             f"{hours(chunks, gpu_lo / chunk_cost):.0f}", "chunks / chunk rates")]
    lines = ["| quantity | value | from |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main_encode(argv=None):
    ap = argparse.ArgumentParser(prog="bench_scale.py encode", description="encoding throughput and memory per worker")
    ap.add_argument("--docs", type=int, default=2000, help="documents of the throughput runs")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the throughput runs")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--memory-sizes", default="30000,300000", help="corpus sizes of the memory runs ('' to skip)")
    ap.add_argument("--mem-shards", type=int, default=4)
    ap.add_argument("--mem-workers", type=int, default=2)
    ap.add_argument("--mem-chars", type=int, default=200, help="texts of the memory runs cut to this many characters")
    ap.add_argument("--workdir", help="where corpora and indexes are written (default: a temporary directory)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--out", help="record the run in this results file (docs/scale.md quotes it); needs both the "
                                  "throughput and the memory runs, which the capacity plan is computed from")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.docs < 0 or args.rounds < 1 or args.batch_size < 1 or min(args.mem_shards, args.mem_workers) < 1:
        ap.error("--docs must not be negative; --rounds, --batch-size, --mem-shards and --mem-workers at least 1")
    try:
        sizes = [int(s) for s in args.memory_sizes.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--memory-sizes must be comma-separated document counts, not {args.memory_sizes!r}")
    if args.out and not (args.docs and sizes):
        ap.error("--out records the capacity plan, which needs the throughput runs (--docs) and the memory runs "
                 "(--memory-sizes)")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.memory_child:
        Path(args.memory_child).write_text(json.dumps(memory_child(work, sizes, args.mem_shards, args.mem_workers,
                                                                   args.mem_chars, args.batch_size)))
        return
    load_before = os.getloadavg()
    res = {"cpus": os.cpu_count()}
    sections = []
    if args.docs:
        t = res["throughput"] = throughput(work, args.docs, args.rounds, args.batch_size)
        t["mean_word_pieces"] = mean_word_pieces(work / f"hepth-{args.docs}.jsonl")
        print(f"## Encoding throughput ({t['docs']} hep-th abstracts, {t['mean_word_pieces']:.1f} word pieces on "
              f"average, MiniLM, batch {t['batch_size']}, {os.cpu_count()} CPUs, {t['rounds']} interleaved rounds; "
              f"load average {t['load_before'][0]:.2f} -> {t['load_after'][0]:.2f})\n")
        sections += [("encoding throughput", throughput_table(t)), ("time ratios", ratios_table(t))]
        print(sections[0][1] + "\n\n" + sections[1][1])
    if sizes:
        res["memory"] = memory(work, sizes, args.mem_shards, args.mem_workers, args.mem_chars, args.batch_size)
        print(f"\n## Peak memory per worker ({args.mem_shards} shards, {args.mem_workers} workers, texts cut to "
              f"{args.mem_chars} characters)\n")
        sections.append(("peak memory per worker", memory_table(res["memory"])))
        print(sections[-1][1])
    if args.docs and sizes:
        plan = capacity_plan(res["throughput"]["encode_docs_per_s"]["ray1"], res["throughput"]["mean_word_pieces"],
                             max(v for m in res["memory"] for v in m["peak_rss_mib_per_worker"]))
        sections.append(("capacity plan", plan))
        print("\n## Capacity plan\n\n" + plan)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    if args.out:
        write_results(args.out, "bench_scale encode: sharded encoding on Ray against one process, memory per worker",
                      "benchmarks/bench_scale.py", ["encode", *(argv if argv is not None else sys.argv[2:])],
                      [f"throughput: the first {args.docs} hep-th abstracts, MiniLM (torch fp32), batch "
                       f"{args.batch_size}, {args.rounds} interleaved rounds; ratios are medians of the per-round time "
                       "ratios; Ray is started before the timings, as a cluster is up before a job",
                       f"memory: {args.mem_shards} shards, {args.mem_workers} workers, the hep-th abstracts repeated "
                       f"under new ids and cut to {args.mem_chars} characters; each size in a process of its own"],
                      sections, load_note(load_before))
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------- fanout (retrieval)


def bench_fanout(docs: int = 29555, dim: int = 384, shards: int = 2, queries: int = 200, k: int = 1000,
                 repeats: int = 7, index: Optional[str] = None, workdir: Optional[str] = None) -> dict:
    from pyterrier_dr import FlexIndex

    from pyterrier_sci.plugins.dense.fanout import ShardedDenseIndex, write_sharded_flex
    from pyterrier_sci.plugins.dense.retriever import _search
    tmp = Path(workdir or tempfile.mkdtemp(prefix="bench-fanout-"))
    rng = np.random.default_rng(0)
    if index:
        sharded = ShardedDenseIndex(index)
        vecs = sharded.vectors(np.arange(len(sharded)))
        docnos = sharded.docnos_of(np.arange(len(sharded))).tolist()
        source = f"vectors of {index} ({sharded.model})"
    else:
        vecs = rng.standard_normal((docs, dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        docnos = [f"d{i}" for i in range(docs)]
        sharded = write_sharded_flex(tmp / "sharded", docnos, vecs, shards, model="random")
        source = f"{docs} random unit vectors, dim {dim}"
    flat = FlexIndex(str(tmp / "flat"), verbose=False)
    flat.indexer().index({"docno": d, "doc_vec": v} for d, v in zip(docnos, vecs))
    picks = rng.choice(len(vecs), size=queries, replace=False)
    qvecs = vecs[picks] + 0.1 * rng.standard_normal((queries, vecs.shape[1])).astype(np.float32)
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(queries)], "query": ["-"] * queries})

    a, b = _search(flat, topics, qvecs, k), _search(sharded, topics, qvecs, k)  # also warms the page cache
    assert a["docno"].tolist() == b["docno"].tolist(), "fan-out results differ from the flat index's"
    assert np.abs(a["score"].to_numpy() - b["score"].to_numpy()).max() <= 1e-5
    flat_t, shard_t = [], []
    for _ in range(repeats):  # A B A B: load drift hits both sides alike
        t = time.perf_counter()
        _search(flat, topics, qvecs, k)
        flat_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        _search(sharded, topics, qvecs, k)
        shard_t.append(time.perf_counter() - t)
    ratio = statistics.median(s / f for s, f in zip(shard_t, flat_t))
    return {"source": source, "docs": len(vecs), "dim": int(vecs.shape[1]), "shards": sharded.num_shards,
            "queries": queries, "k": k, "repeats": repeats, "flat_s": statistics.median(flat_t),
            "sharded_s": statistics.median(shard_t), "ratio": ratio, "target": 1.2, "ok": ratio <= 1.2}


def main_fanout(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_scale.py fanout", description="fan-out retrieval latency vs flat")
    ap.add_argument("--docs", type=int, default=29555)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--index", help="an existing sharded index whose vectors to use")
    ap.add_argument("--out", help="record the run in this results file (docs/scale.md quotes it)")
    args = ap.parse_args(argv)
    if min(args.docs, args.dim, args.shards, args.queries, args.k, args.repeats) < 1:
        ap.error("--docs, --dim, --shards, --queries, --k and --repeats must be at least 1")
    load_before = os.getloadavg()
    r = bench_fanout(args.docs, args.dim, args.shards, args.queries, args.k, args.repeats, args.index)
    # the results were checked identical (docnos, scores within 1e-5) before the timing, or bench_fanout raised
    table = ("| search | flat s | sharded s | shards | median ratio sharded / flat (target <= 1.2) |\n"
             "|---|---|---|---|---|\n"
             f"| {r['source']}; {r['queries']} queries, k={r['k']}, {args.repeats} A B pairs "
             f"| {r['flat_s']:.3f} | {r['sharded_s']:.3f} | {r['shards']} | {r['ratio']:.2f} |")
    print(table)
    if args.out:
        write_results(args.out, "bench_scale fanout: fan-out retrieval over shards against the flat index",
                      "benchmarks/bench_scale.py", ["fanout", *(argv if argv is not None else sys.argv[2:])],
                      ["query encoding excluded (the same on both sides); flat and sharded interleaved, the median of "
                       "the per-pair ratios; results checked identical first"], [("fan-out", table)],
                      load_note(load_before))
    return 0 if r["ok"] else 1



# ----------------------------------------------------------------- llm (distributed LLM stage)


def llm_responder(kind, body):
    """A deterministic yes/no for every judgement prompt."""
    p = prompt_of(kind, body)
    return yes_no(sum(map(ord, p[-400:])) % 3 == 0, 0.8)


def bench_llm(queries: int = 16, depth: int = 20, latency: float = 0.05, concurrency: int = 4,
              num_cpus: int = 2) -> pd.DataFrame:
    from pyterrier_sci.llm import ResponseCache
    from pyterrier_sci.plugins.mir import MIRPointwise
    from pyterrier_sci.scale import on_ray, ray_session

    df = csfcube_rerank_sample(queries, depth)
    rows, outputs = [], {}
    with ScriptedServer(llm_responder, latency=latency) as srv, tempfile.TemporaryDirectory() as tmp, \
            ray_session(num_cpus=num_cpus):
        def settings(name):
            return {"base_url": srv.base_url, "model": "bench", "mode": "completion", "progress": False,
                    "concurrency": concurrency, "cache_dir": str(Path(tmp) / name)}

        for label, workers in (("one process", 0), ("on_ray, 1 worker", 1), ("on_ray, 2 workers", 2)):
            judge = MIRPointwise(settings(label), text_field="abstract")
            t = judge if workers == 0 else on_ray(judge, workers=workers, num_cpus=1)
            cache = ResponseCache(Path(tmp) / label)
            srv.reset()
            t0 = time.perf_counter()
            outputs[label] = t(df)                 # cold: starts the actors
            cold = time.perf_counter() - t0
            cache.clear()                          # warm: the same calls again, actors up
            srv.reset()
            t0 = time.perf_counter()
            warm_out = t(df)
            warm = time.perf_counter() - t0
            calls, distinct = srv.calls, len({json.dumps(b, sort_keys=True) for _, b in srv.requests})
            entries = len(cache)
            hits_before = judge.usage.cache_hits
            srv.reset()
            t0 = time.perf_counter()
            again = t(df)                          # rerun: everything from the cache
            rerun = time.perf_counter() - t0
            assert again.equals(outputs[label]) and warm_out.equals(outputs[label])
            if workers:
                t.close()
            rows.append({"run": label, "queries": df["qid"].nunique(), "LLM calls": calls,
                         "cold s": cold, "warm s": warm, "calls/s (warm)": calls / warm,
                         "cache entries": entries, "distinct requests": distinct,
                         "rerun server requests": srv.calls, "rerun cache hits": judge.usage.cache_hits - hits_before,
                         "rerun s": rerun})
    base = rows[0]["calls/s (warm)"]
    one = rows[1]["calls/s (warm)"]
    for r in rows:
        r["vs one process"] = r["calls/s (warm)"] / base
        r["vs 1 worker"] = r["calls/s (warm)"] / one if r["run"] != "one process" else float("nan")
    same = all(outputs[k].equals(outputs["one process"]) for k in outputs)
    table = pd.DataFrame(rows)
    table.attrs["identical"] = same
    return table


def main_llm(argv=None):
    ap = argparse.ArgumentParser(prog="bench_scale.py llm", description="LLM stage on Ray vs one process")
    ap.add_argument("--llm-queries", type=int, default=16)
    ap.add_argument("--llm-depth", type=int, default=20)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--out", help="record the run in this results file (docs/scale.md quotes it)")
    args = ap.parse_args(argv)
    if min(args.llm_queries, args.llm_depth, args.concurrency, args.num_cpus) < 1 or args.latency < 0:
        ap.error("--llm-queries, --llm-depth, --concurrency and --num-cpus must be at least 1, --latency not negative")
    load_before = os.getloadavg()
    table = bench_llm(args.llm_queries, args.llm_depth, args.latency, args.concurrency, args.num_cpus)
    header = (f"LLM stage (mir_pointwise), CSFCube method facet, {args.llm_queries} queries x top {args.llm_depth}; "
              f"loopback server with {args.latency * 1000:.0f} ms fixed latency; {args.concurrency} calls in flight "
              f"per worker; results identical to one process: {table.attrs['identical']}")
    print(header + "\n")
    print(markdown(table))
    if args.out:
        write_results(args.out, "bench_scale llm: an LLM stage on Ray workers against one process",
                      "benchmarks/bench_scale.py", ["llm", *(argv if argv is not None else sys.argv[2:])], [header],
                      [("LLM stage", markdown(table))], load_note(load_before))



def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"encode": main_encode, "fanout": main_fanout, "llm": main_llm}
    if argv and argv[0] in commands:
        return commands[argv[0]](argv[1:]) or 0
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    print(f"# bench_scale.py on {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n")
    status = 0
    for name in ("encode", "fanout", "llm"):
        print(f"\n# {name}\n", flush=True)
        status |= commands[name](argv) or 0
    return status


if __name__ == "__main__":
    raise SystemExit(main())
