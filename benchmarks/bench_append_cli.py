"""Appending 1 % new documents to a Lucene BM25 index *from the command line*, with and without a resident appender
(``pyterrier-sci index --output PATH --resident``, :mod:`pyterrier_sci.resident`), against rebuilding the index of the
final collection in a running process (the in-process figure of ``bench_append.py``: the strictest bar, as a
rebuild from the command line pays the command's start as well).

The documents are a stream of hep-th papers (``sci/hepth-core-citations/train``, title + abstract): the base index
holds the first N; round r appends the r-th next batch of N x ``--fraction`` papers (new ids), so the index grows
by a batch a round.  Each round times, interleaved (the order alternates), the wall time of

* ``pyterrier-sci index --output A --append BATCH`` with a resident appender of A running (a subprocess: the
  interpreter's start, the entry point, the socket, the change);
* the same command on a copy B without one (the toolkit's imports, the JVM's start, the change);
* the rebuild of the final collection in this process (its JVM warm: built once before the timing).

    python benchmarks/bench_append_cli.py [--docs 27000] [--fraction 0.01] [--rounds 5]
        [--out benchmarks/results/bench_append_cli.md]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from pyterrier_sci.bench import interleaved, load_note, markdown, write_results
from pyterrier_sci_launcher import resident_update

DATASET = "irds:sci/hepth-core-citations/train"
#: the installed command (its console script beside this interpreter), else the same entry point through ``-c``
COMMAND = [str(Path(sys.executable).with_name("pyterrier-sci"))] \
    if Path(sys.executable).with_name("pyterrier-sci").is_file() else \
    [sys.executable, "-c", "import sys; from pyterrier_sci_launcher import main; sys.exit(main())"]


def _wait_resident(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until the resident appender of ``path`` answers a ping."""
    import socket

    from pyterrier_sci_launcher import PROTOCOL, socket_path
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the resident appender exited with status {proc.returncode}: {proc.stderr.read()}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(socket_path(path)))
            s.sendall(json.dumps({"protocol": PROTOCOL, "op": "ping"}).encode() + b"\n")
            if s.recv(65536):
                return
        except OSError:
            time.sleep(0.2)
        finally:
            s.close()
    raise SystemExit("the resident appender did not start")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=27_000)
    p.add_argument("--fraction", type=float, default=0.01)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="benchmarks/results/bench_append_cli.md")
    p.add_argument("--dataset", default=DATASET, help="the stream (default hep-th; e.g. "
                                                      "irds:sci/acl-fulltext/chunks-128)")
    args = p.parse_args(argv)
    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.bm25 import index_corpus
    n_new = max(1, int(args.docs * args.fraction))
    docs = list(itertools.islice(corpus_texts(args.dataset), args.docs + n_new * args.rounds))
    if len(docs) < args.docs + n_new * args.rounds:
        raise SystemExit(f"{args.dataset} has {len(docs):,} documents: fewer than asked for")
    base = docs[:args.docs]
    batches = [[{"docno": f"new~{d['docno']}", "text": d["text"]} for d in docs[args.docs + r * n_new:
                                                                             args.docs + (r + 1) * n_new]]
               for r in range(args.rounds)]
    before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-append-cli-") as tmp:
        work = Path(tmp)
        index_corpus(base, work / "resident", "lucene")
        shutil.copytree(work / "resident", work / "plain")
        files = []
        for r, batch in enumerate(batches):
            files.append(work / f"batch-{r}.jsonl")
            files[-1].write_text("".join(json.dumps(d) + "\n" for d in batch), encoding="utf-8")
        env = {**os.environ, "PYTERRIER_SCI_HOME": str(work / "home")}
        proc = subprocess.Popen(COMMAND + ["index", "--output", str(work / "resident"), "--resident"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_resident(work / "resident", proc)
            rounds = {"resident": itertools.count(), "plain": itertools.count(), "rebuild": itertools.count()}

            def cli(which):
                def run():
                    r = next(rounds[which])
                    subprocess.run(COMMAND + ["index", "--output", str(work / which), "--append", str(files[r])],
                                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                return run

            def rebuild():
                r = next(rounds["rebuild"])
                final = base + [d for b in batches[:r + 1] for d in b]
                index_corpus(final, work / f"rebuilt-{r}", "lucene")
            index_corpus(base[:100], work / "jvm-warm", "lucene")   # the rebuild's JVM starts before the timing
            t = interleaved({"resident": cli("resident"), "plain": cli("plain"), "rebuild": rebuild}, args.rounds,
                            alternate=True)
            served = resident_update(work / "resident", None, None)   # an empty update: the appender still answers
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        for which in ("resident", "plain"):
            meta = json.loads((work / which / "pt_meta.json").read_text())
            assert meta["docs"]["count"] == args.docs + n_new * args.rounds, (which, meta["docs"])
    rows = []
    stream = "" if args.dataset == DATASET else f", {args.dataset[5:]}"
    for side, name in (("resident", "CLI append, resident appender running"),
                       ("plain", "CLI append, no resident appender")):
        r = t.ratio(side, "rebuild")
        rows.append({"path": name + stream, "base docs": args.docs, "appended": n_new, "append s": t.median(side),
                     "in-process rebuild s": t.median("rebuild"),
                     "append / rebuild": f"{100 * r.median:.2f} % ({100 * r.min:.2f}-{100 * r.max:.2f}, n={r.n})"})
    details = [f"the appender answered an empty update with: {served.get('error') if served else 'nothing'}"]
    print(write_results(Path(args.out), f"bench_append_cli: {100 * args.fraction:g} % appended from the command line",
                        "benchmarks/bench_append_cli.py", argv, details,
                        [("time (median of the rounds; ratio per round: median, min-max)",
                          markdown(pd.DataFrame(rows)))], load_note(before)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
