"""HLM-Cite on CPU: retrieval latency against the candidate-set size, and curriculum training
throughput per stage, each as a ratio against the raw work in the same run.

Retrieval (``--queries`` test queries of ``sci/hepth-core-citations``, the offline MiniLM):
the corpus (27,769 hep-th abstracts) is encoded once into the toolkit's FlexIndex (the ``dense``
component's index; ``--max-seq-length`` tokens per abstract, 128 by default to halve that one-off
cost - latency on stored vectors does not depend on it); then per candidate-set size

* |C| = 1,000 and 10,000: the toolkit re-scores each query's candidate set with the stored vectors
  (``pool >> dense``, the pool frame prepared beforehand), against raw numpy on the same vectors
  (gather the candidates' rows, one matrix-vector product, ``argsort``);
* |C| = 27,769 (the whole corpus): the toolkit's retrieval mode (exhaustive search, top 1,000),
  against one numpy matrix product and ``argpartition``.

Both sides encode their queries with the same model.  Latency is per query: the median of
``--repeats`` interleaved rounds (raw, toolkit, raw, toolkit, ... after one untimed round), with the
median (min-max) of the per-round toolkit/raw ratios.

Training: ``train_curriculum`` (sentence-transformers' trainer) for ``--steps`` steps of stage 1
(triplets: query, core citation, non-citation; ``MultipleNegativesRankingLoss``) and of stage 2
(lists of 12; NeuralNDCG), against a plain torch loop doing the same forward, loss, backward and
AdamW step on the same batches (the compute floor), ``--train-rounds`` interleaved rounds.
Throughput in examples per second (median round).  The load average before and after is printed.

    PYTERRIER_SCI_DATA=../shared/data python benchmarks/bench_hlm.py [--queries 100] [--steps 8] [--repeats 3]
        [--train-rounds 2] [--out benchmarks/results/bench_hlm.md]

``--out`` records the run (``pyterrier_sci.bench.write_results``): sections ``retrieval`` and ``training``,
which docs/hlm-cite.md quotes.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pyterrier_sci.bench import interleaved, load_note, markdown, write_results


def retrieval(args, work):
    import pyterrier as pt

    import pyterrier_sci as ps  # noqa: F401
    from pyterrier_sci.plugins.dense import DenseRetriever, dense_component
    from pyterrier_sci.registry import Context
    corpus = "irds:sci/hepth-core-citations/test"  # the whole hep-th corpus (train and test share it)
    dr = dense_component(context=Context(dataset=corpus, work_dir=work), verbose=True)
    dr.encoder.max_seq_length = args.max_seq_length  # the stored vectors' quality does not change latency
    t = time.perf_counter()
    flex = dr.flex_index()
    build_s = time.perf_counter() - t
    docnos, dvecs, _ = flex.payload()
    dvecs = np.asarray(dvecs, dtype=np.float32)
    row = {d: i for i, d in enumerate(docnos.fwd[np.arange(len(dvecs))])}
    enc = dr.encoder
    rows = []
    for size in (1000, 10000, None):
        if size:
            ds = pt.get_dataset(f"irds:sci/hepth-core-citations/test/c{size}")
            topics = ds.get_topics().sort_values("qid").head(args.queries).reset_index(drop=True)
            pool = ps.pipeline("pool", dataset=f"irds:sci/hepth-core-citations/test/c{size}")(topics)
            groups = [(q, pool.loc[pool.qid == q, "docno"].map(row).to_numpy()) for q in topics["qid"]]

            def toolkit():
                dr.__dict__.pop("_query_memo", None)  # the retriever memoises query vectors: encode them, as raw does
                return dr(pool)

            def raw():
                qv = enc.encode(topics["query"].tolist(), batch_size=32, convert_to_numpy=True)
                out = []
                for (q, idx), v in zip(groups, qv):
                    s = dvecs[idx] @ v
                    out.append(idx[np.argsort(-s, kind="stable")])
                return out
            label = f"{size:,}"
        else:
            ds = pt.get_dataset("irds:sci/hepth-core-citations/test/c10")
            topics = ds.get_topics().sort_values("qid").head(args.queries).reset_index(drop=True)
            retr = DenseRetriever(dr.model, index=dr.index, num_results=1000, verbose=False)

            def toolkit():
                return retr(topics)

            def raw():
                qv = enc.encode(topics["query"].tolist(), batch_size=32, convert_to_numpy=True)
                s = qv @ dvecs.T
                top = np.argpartition(-s, 999, axis=1)[:, :1000]
                return np.take_along_axis(top, np.argsort(-np.take_along_axis(s, top, 1), axis=1), 1)
            label = f"{len(dvecs):,} (all, top 1000)"
        t = interleaved({"raw": raw, "toolkit": toolkit}, args.repeats, warmup=1)
        n = len(topics)
        rows.append({"|C|": label, "queries": n, "toolkit ms/query": 1000 * t.median("toolkit") / n,
                     "raw ms/query": 1000 * t.median("raw") / n,
                     "toolkit / raw (median, min-max)": str(t.ratio("toolkit", "raw"))})
    return build_s, len(dvecs), pd.DataFrame(rows)


def training(args, work):
    import torch
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from pyterrier_sci.datasets import core_citations as cc
    from pyterrier_sci.plugins.dense import load_sentence_transformer
    from pyterrier_sci.plugins.hlm_cite.curriculum import (
        NeuralNDCGLoss,
        freeze_lower_layers,
        stage1_examples,
        stage2_examples,
        train_curriculum,
    )
    train = cc.HEPTH.split("train", 100)
    papers = cc.HEPTH.papers()
    texts = {pid: p.default_text() for pid, p in papers.items()}
    qs = train.queries[:200]
    rows = []
    for stage, batch, make, n_texts in ((1, 16, lambda: stage1_examples(qs, train.candidates, texts, 1), 3),
                                        (2, 4, lambda: stage2_examples(qs, train.candidates, texts, 12), 13)):
        data = make()
        steps = args.steps
        n_examples = steps * batch

        def toolkit():
            out = Path(work) / f"stage{stage}"
            shutil.rmtree(out, ignore_errors=True)
            train_curriculum("default", qs, train.candidates, texts, str(out), frozen_layers=3, stages=(stage,),
                             batch_size=batch if stage == 1 else 16, max_steps=steps, max_seq_length=128)

        def raw():
            torch.manual_seed(0)
            model = load_sentence_transformer("default", "cpu")
            model.max_seq_length = 128
            freeze_lower_layers(model, 3)
            loss = MultipleNegativesRankingLoss(model) if stage == 1 else NeuralNDCGLoss(model)
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-5)
            cols = [c for c in data if c != "label"]
            model.train()
            for s in range(steps):
                sl = slice(s * batch, (s + 1) * batch)
                feats = [{k: v for k, v in model.tokenize(data[c][sl]).items()} for c in cols]
                labels = (torch.tensor(data["label"][sl]) if stage == 2 else torch.zeros(len(data[cols[0]][sl])))
                opt.zero_grad()
                loss(feats, labels).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()

        t = interleaved({"raw": raw, "toolkit": toolkit}, args.train_rounds)
        tk, rw = t.median("toolkit"), t.median("raw")
        unit = "triplets" if stage == 1 else "lists of 12"
        rows.append({"stage": stage, "batch": batch, "steps": steps, "examples": f"{n_examples} {unit}",
                     "toolkit ex/s": n_examples / tk, "texts/s": n_examples * n_texts / tk,
                     "raw loop ex/s": n_examples / rw,
                     "time ratio toolkit / raw (median, min-max)": str(t.ratio("toolkit", "raw"))})
    return pd.DataFrame(rows)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds of each retrieval step")
    ap.add_argument("--train-rounds", type=int, default=2, help="interleaved rounds of each training stage")
    ap.add_argument("--max-seq-length", type=int, default=128,
                    help="tokens per abstract when encoding the corpus (128 halves the one-off encoding time)")
    ap.add_argument("--skip", choices=["retrieval", "training"], action="append", default=[])
    ap.add_argument("--work", default=None, help="work directory (the corpus index is kept there)")
    ap.add_argument("--out", help="record the run in this results file (docs/hlm-cite.md quotes it)")
    args = ap.parse_args(argv)
    if min(args.queries, args.steps, args.repeats, args.train_rounds, args.max_seq_length) < 1:
        ap.error("--queries, --steps, --repeats, --train-rounds and --max-seq-length must be at least 1")
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-hlm-"))
    os.environ.setdefault("PYTERRIER_SCI_HOME", str(work))
    import torch
    load_before = os.getloadavg()
    print(f"CPU threads: {torch.get_num_threads()}")
    sections, details = [], [f"torch threads: {torch.get_num_threads()}"]
    if "retrieval" not in args.skip:
        build_s, n, table = retrieval(args, work)
        details.append(f"retrieval: MiniLM, {n:,} hep-th abstracts encoded once at {args.max_seq_length} tokens into "
                       f"the dense component's FlexIndex ({build_s:.0f} s, or less when --work kept it); "
                       f"{args.queries} test queries, query encoding included on both sides, {args.repeats} "
                       "interleaved rounds after one untimed")
        print(f"\nRetrieval, MiniLM, {n:,} hep-th abstracts (index build incl. encoding: {build_s:.0f} s)")
        sections.append(("retrieval", markdown(table)))
        print(sections[-1][1])
    if "training" not in args.skip:
        table = training(args, work)
        details.append(f"training: MiniLM-L6, 3 of 6 layers frozen, 128 tokens, {args.steps} steps per stage, "
                       f"{args.train_rounds} interleaved rounds; train_curriculum (model load and save included) "
                       "against a plain torch loop on the same batches")
        print("\nCurriculum training throughput on CPU (MiniLM-L6, 3 of 6 layers frozen, 128 tokens)")
        sections.append(("training", markdown(table)))
        print(sections[-1][1])
    print(f"\n{load_note(load_before)}")
    peak = f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    print(peak)
    if args.out:
        write_results(args.out, "bench_hlm: HLM-Cite's retrieval and curriculum training against the raw work",
                      "benchmarks/bench_hlm.py", argv, details + [peak], sections, load_note(load_before))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
