"""Benchmark of the LLM re-rankers on a CSFCube sample against a loopback OpenAI-compatible server
with a fixed latency (``pyterrier_sci.llm.loopback``, scripted answers).

Reports per re-ranker: LLM calls and prompt/completion tokens per query, wall time with sequential
calls (concurrency 1) and with concurrent calls (``--concurrency``), the speed-up, and the calls a
rerun makes with the response cache warm (target 0).  The two settings run interleaved (sequential,
concurrent, sequential, ... for ``--rounds`` rounds after an untimed one, no cache), so a loaded
machine slows both alike: times are medians, the speed-up is the median (min-max) of the per-round
speed-ups.  Prints a markdown table and the load average before and after.

    PYTERRIER_SCI_DATA=/work/shared/data python benchmarks/bench_llm.py [--queries 5] [--depth 20]
        [--latency 0.05] [--concurrency 8] [--rounds 3] [--out benchmarks/results/bench_llm.md]

``--out`` records the run (``pyterrier_sci.bench.write_results``); docs/llm.md quotes its table.

Token counts are the server's (whitespace words of the prompt; the scripted server has no
tokenizer), so they compare re-rankers with each other, not with a real model's bill.
"""
from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

import pandas as pd

from pyterrier_sci.bench import csfcube_rerank_sample, interleaved, load_note, markdown, write_results
from pyterrier_sci.llm.loopback import Reply, ScriptedServer, choice_reply, prompt_of, yes_no


def responder(kind, body):
    """Deterministic answers for every prompt the re-rankers send (completion mode)."""
    p = prompt_of(kind, body).rstrip()
    h = sum(map(ord, p[-400:]))
    if p.endswith("Answer (Yes or No):"):
        return yes_no(h % 3 == 0, 0.8)
    if p.endswith("Answer (A or B):"):
        return choice_reply("A" if h % 2 else "B")
    if p.endswith("Ranking: ["):
        ids = re.findall(r"^\[(\d+)\]", p, re.M)
        return Reply("] > [".join(reversed(ids)) + "]")
    if p.endswith("Ranking: paper"):
        part = p.rsplit("Candidates:", 1)[-1]
        ids = list(dict.fromkeys(re.findall(r"^Paper (\d+): Title:", part, re.M)))
        ids = list(reversed(ids))
        reasons = "\n".join(f"Paper {i}: reason {i}" for i in ids)
        return Reply(" " + ", paper ".join(ids) + "\nExplanations:\n" + reasons)
    return Reply("The core problem is X; the paper addresses sub-problem Y with method Z.")


def rerankers():
    from pyterrier_sci.plugins.hlm_cite import HLMAgents
    from pyterrier_sci.plugins.llm import Listwise, PairwiseTournament
    from pyterrier_sci.plugins.mir import MIRAgent, MIRPointwise
    common = dict(text_field="abstract")
    return {
        "mir_pointwise": lambda llm, d: MIRPointwise(llm, **common),
        "mir_agent": lambda llm, d: MIRAgent(llm, **common),
        "listwise (20/10)": lambda llm, d: Listwise(llm, **common),
        "listwise (4/2)": lambda llm, d: Listwise(llm, window=4, stride=2, **common),
        "pairwise_tournament": lambda llm, d: PairwiseTournament(llm, **common),
        "hlm_agents": lambda llm, d: HLMAgents(llm, example_path=str(Path(d) / "hlm_example.txt"), **common),
    }


def run(args) -> pd.DataFrame:
    df = csfcube_rerank_sample(args.queries, args.depth)
    nq = df["qid"].nunique()
    rows = []
    with ScriptedServer(responder, latency=args.latency) as srv, tempfile.TemporaryDirectory() as tmp:
        base = {"base_url": srv.base_url, "model": "bench", "mode": "completion", "progress": False}
        for name, make in rerankers().items():
            ex_dir = Path(tmp) / re.sub(r"\W+", "_", name)
            ex_dir.mkdir()
            # the guider's example is made once, outside the timings
            if name == "hlm_agents":
                make({**base, "cache_dir": ""}, ex_dir).one_shot_example()
            made = {}

            def side(conc):
                def run():
                    made[conc] = make({**base, "cache_dir": "", "concurrency": conc}, ex_dir)
                    return made[conc](df)
                return run
            timings = interleaved({"sequential": side(1), "concurrent": side(args.concurrency)}, args.rounds,
                                  warmup=1)  # one untimed round: clients, imports, first connections
            usage = made[args.concurrency].usage
            cache = str(Path(tmp) / "cache" / name)
            make({**base, "cache_dir": cache, "concurrency": args.concurrency}, ex_dir)(df)
            srv.reset()
            again = make({**base, "cache_dir": cache, "concurrency": args.concurrency}, ex_dir)
            again(df)
            rows.append({
                "reranker": name,
                "calls/query": usage.calls / nq,
                "prompt tokens/query": usage.prompt_tokens / nq,
                "completion tokens/query": usage.completion_tokens / nq,
                "sequential s": timings.median("sequential"),
                f"concurrent s (x{args.concurrency})": timings.median("concurrent"),
                "speed-up (median, min-max)": str(timings.ratio("sequential", "concurrent")),
                "calls on cached rerun": again.usage.calls,
                "server requests on rerun": srv.calls,
            })
    return pd.DataFrame(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=5)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of sequential and concurrent calls")
    ap.add_argument("--out", help="record the run in this results file (docs/llm.md quotes it)")
    args = ap.parse_args()
    if min(args.queries, args.depth, args.concurrency, args.rounds) < 1 or args.latency < 0:
        ap.error("--queries, --depth, --concurrency and --rounds must be at least 1, --latency not negative")
    load_before = os.getloadavg()
    table = run(args)
    header = (f"CSFCube method facet, {args.queries} queries x top {args.depth} of the pool; "
              f"loopback server with {args.latency * 1000:.0f} ms fixed latency; {args.rounds} interleaved rounds")
    note = load_note(load_before)
    print(f"{header}; {note}\n")
    print(markdown(table))
    if args.out:
        write_results(args.out, "bench_llm: the LLM re-rankers against a loopback server with a fixed latency",
                      "benchmarks/bench_llm.py", None, [header], [("re-rankers", markdown(table))], note)


if __name__ == "__main__":
    main()
