"""HLM-Cite on hep-th: the structure of the paper's Tables 2 and 3 on the data at hand.

Rows: keyword overlap, BM25, MiniLM (base), MiniLM + stage 1 only, + stage 2 only, + the full
curriculum, and (with ``--llm``) the full workflow: the curriculum model retrieves the top r=8 of
the candidate set and ``hlm_agents`` re-ranks all but the top keep_top=2 (HLM-Cite §3.3).

Protocol (printed with the table): queries of ``sci/hepth-core-citations`` (Eq. 1 on SNAP cit-HepTh),
test candidate sets of |C| = ``--size`` (5 core + 5 superficial + non-citations), training on
``--train-queries`` train-split queries (their |C| = 100 sets, for the non-citations), testing on
``--test-queries`` test-split queries (no query in both); frozen lower layers ``--frozen`` of MiniLM's 6;
measures PREC@3/5 and NDCG@3/5 with binary core labels.  The figures of the run are in the README's HLM-Cite section.

    PYTERRIER_SCI_DATA=../shared/data python examples/hlm_cite.py [--size 10] [--train-queries 200]
        [--test-queries 200] [--frozen 3] [--llm [--llm-queries 10]]
"""
import argparse
import json
import time
from pathlib import Path

import pandas as pd
import pyterrier as pt

import pyterrier_sci as ps
from pyterrier_sci.datasets import core_citations as cc
from pyterrier_sci.plugins.dense import DenseRetriever
from pyterrier_sci.plugins.hlm_cite.curriculum import train_curriculum
from pyterrier_sci.plugins.hlm_cite.keywords import KeywordOverlap

TEXT = ("title", "abstract")  # as the training texts (HLM-Cite papers' default_text)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, nargs="+", default=[10], choices=cc.CANDIDATE_SIZES,
                    help="candidate-set sizes |C| to test on (one table each)")
    ap.add_argument("--train-queries", type=int, default=200)
    ap.add_argument("--test-queries", type=int, default=200)
    ap.add_argument("--frozen", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-seq-length", type=int, default=128, help="tokens per text while training")
    ap.add_argument("--models", default="runs/hlm-cite-models",
                    help="where the trained models go; a finished model there is reused (written atomically)")
    ap.add_argument("--encode-length", type=int, default=256,
                    help="tokens per text when encoding for evaluation, the same for every model (MiniLM's 256)")
    ap.add_argument("--llm", action="store_true", help="add the full workflow with the configured LLM")
    ap.add_argument("--llm-queries", type=int, default=10,
                    help="test queries for the workflow table (the first of the test queries; LLM calls are slow)")
    args = ap.parse_args(argv)

    train = cc.HEPTH.split("train", 100)  # training lists need non-citations: |C| = 100 on the train split
    papers = cc.HEPTH.papers()
    texts = {pid: p.default_text() for pid, p in papers.items()}
    tr_q = train.queries[:args.train_queries]
    work = Path(args.models) / f"q{len(tr_q)}-f{args.frozen}-e{args.epochs}-l{args.max_seq_length}"
    models, train_s = {}, {}
    for label, stages in (("stage 1 only", (1,)), ("stage 2 only", (2,)), ("curriculum (1+2)", (1, 2))):
        t = time.time()
        path = work / label.replace(" ", "_")
        if (path / "pt_meta.json").exists():  # reused: its training time is in its metadata (older models lack it)
            models[label] = path
            train_s[label] = json.loads((path / "pt_meta.json").read_text()).get("train_seconds", float("nan"))
            continue
        models[label] = train_curriculum("default", tr_q, train.candidates, texts, str(path),
                                         frozen_layers=args.frozen, stages=stages, stage1_epochs=args.epochs,
                                         stage2_epochs=args.epochs, batch_size=16, list_size=12,
                                         max_seq_length=args.max_seq_length)
        train_s[label] = time.time() - t
    for size in args.size:
        evaluate(size, args, models, tr_q, train_s)


CORPUS = "irds:sci/hepth-core-citations/test"  # the whole hep-th docstore (train and test sets share it)


def dense_on_corpus(model, args, name):
    """The dense component over ``model``'s own FlexIndex of the hep-th corpus (built once under
    ``--models``/indexes, atomically), every model encoding ``--encode-length`` tokens per text:
    re-scoring a candidate set, of any size, then uses the stored vectors."""
    index = Path(args.models) / "indexes" / f"{name.replace(' ', '_')}-l{args.encode_length}"
    dr = DenseRetriever(str(model), index=str(index), corpus=CORPUS, fields=TEXT, verbose=True)
    dr.encoder.max_seq_length = args.encode_length
    dr.flex_index()
    return dr


def evaluate(size, args, models, tr_q, train_s):
    ds_id = f"irds:sci/hepth-core-citations/test/c{size}"
    ds = pt.get_dataset(ds_id)
    topics = ds.get_topics()
    topics = topics[topics["qid"].isin(sorted(topics["qid"])[:args.test_queries])]
    qrels = ds.get_qrels()
    pool = ps.pipeline("pool", dataset=ds_id)
    measures = ps.measures.parse(["PREC@3", "PREC@5", "NDCG@3", "NDCG@5"], dataset=ds_id)
    systems = [pool >> ps.pipeline("text", dataset=ds_id) >> KeywordOverlap(),
               pool >> ps.pipeline("bm25", dataset=ds_id),
               pool >> dense_on_corpus("default", args, "base")]
    names = ["keyword overlap", "BM25", "MiniLM (base)"]
    for label, path in models.items():
        systems.append(pool >> dense_on_corpus(path, args, f"{Path(path).parent.name}-{label}"))
        names.append(f"MiniLM + {label}")
    table = ps.Experiment(systems, topics, qrels, measures, names=names, baseline=2)
    print(f"\nsci/hepth-core-citations, |C| = {size} (5 core + 5 superficial + non-citations); "
          f"trained on {len(tr_q)} train-split queries (|C| = 100), "
          f"tested on {len(topics)} test-split queries (disjoint); "
          f"MiniLM-L6 with {args.frozen} of 6 layers frozen, {args.max_seq_length} tokens while training, "
          f"{args.encode_length} when encoding; training seconds: "
          + ", ".join(f"{k} {v:.0f}" for k, v in train_s.items()))
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(table.round(4).to_string(index=False))
    base = table.set_index("name").loc["MiniLM (base)"]
    full = table.set_index("name").loc["MiniLM + curriculum (1+2)"]
    print(f"curriculum - base at |C| = {size}:", {str(m): round(full[str(m)] - base[str(m)], 4) for m in measures})
    if args.llm:
        workflow_table(size, args, models, topics, qrels, measures, pool, systems[2], systems[-1])


def workflow_table(size, args, models, topics, qrels, measures, pool, base, curriculum):
    """Table 3's structure on the first ``--llm-queries`` test queries: the retriever alone against
    the workflow of pipelines/hlm_cite.yaml (top r = 8 re-scored from the candidates' text, the
    agents re-rank ranks 3-8, top k = 5 returned) with the configured LLM (docs/llm.md)."""
    from pyterrier_sci.plugins.hlm_cite import HLMAgents
    topics = topics.head(args.llm_queries)
    agents = HLMAgents(keep_top=2, text_field="abstract", on_error="flag")
    text = ps.pipeline("text", dataset=f"irds:sci/hepth-core-citations/test/c{size}")
    t = time.time()
    table = ps.Experiment([base, curriculum, (curriculum % 8 >> text >> agents) % 5],
                          topics, qrels, measures, baseline=1,
                          names=["MiniLM (base)", "MiniLM + curriculum (1+2)", "HLM-Cite workflow (r=8, keep_top=2)"])
    u = agents.usage
    print(f"\nWorkflow, |C| = {size}, first {len(topics)} test queries, LLM {agents.settings.model!r} at "
          f"{agents.settings.base_url} ({time.time() - t:.0f} s; calls {u.calls}, unusable answers {u.unusable}, "
          f"repaired rankings {u.repaired}):")
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(table.round(4).to_string(index=False))


if __name__ == "__main__":
    main()
