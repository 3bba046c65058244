"""MIR (000_17ca5570851d03ea.txt) on the data at hand: the structure of Tables 2, 5 and 10.

    python examples/mir.py --threads 1           # BM25, MiniLM, MiniLM fine-tuned (Table 2)
    python examples/mir.py --ablations           # + w/o MAG-guided sampling (Table 5),
                                                 #   T1 / T1+T2 / T1+T3 / all (Table 10)
    python examples/mir.py --llm http://127.0.0.1:8080/v1 --llm-queries 5   # + mir_pointwise / mir_agent (Table 3)

Offline only the dev split of MIR-MultiCite exists, so the protocol is: train on the
chronologically first 60% of the dev proposals (``sci/mir-multicite/dev/chrono-train``), test on
the other 40% (``.../dev/chrono-test``, restricted corpus = their cited papers; extended corpus =
the training proposals' cited papers plus each test proposal's own ground truth).  No proposal is
in both parts.  The fine-tuning defaults (per-context samples, triplets T1+T2, margin 0.2, lr 1e-5,
1 epoch, ``max_seq_length`` 256 while training) were chosen on a chronological validation slice of
the training proposals (``examples/mir_validation.py``, three seeds each), never on the test ones
(docs/mir.md).  Trained models are kept in the work directory (keyed by their settings), so a rerun
evaluates without training again.  All figures are x100, averaged over the test proposals that have
at least one methodologically cited paper (§6.2).

The LLM part is optional and small: re-ranking the top ``--llm-k`` of the fine-tuned retriever for
``--llm-queries`` proposals with whatever OpenAI-compatible server ``--llm`` names (offline:
``pyterrier-sci llm serve`` runs gemma-3 270M, a base model - expect little from it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # defaults: the configuration chosen on a validation slice of the training proposals (docs/mir.md)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--samples", default="contexts", choices=["contexts", "proposals"])
    ap.add_argument("--triplets", default="T1+T2", choices=["T1", "T1+T2", "T1+T3", "all"])
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--margin", type=float, default=0.2)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--frozen-layers", type=int, default=0,
                    help="keep the embeddings and the lowest n transformer layers at the base weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (1 is several times faster than 2 on a machine whose cores are shared)")
    ap.add_argument("--ablations", action="store_true",
                    help="also train w/o S and the other triplet sets (T1, T1+T2, T1+T3, all)")
    ap.add_argument("--llm", default=None,
                    help="base URL of an OpenAI-compatible server: adds mir_pointwise / mir_agent")
    ap.add_argument("--llm-mode", default="completion", choices=["completion", "chat", "auto"])
    ap.add_argument("--llm-k", type=int, default=10, help="re-rank the fine-tuned top k (the paper's elbow choice: 10)")
    ap.add_argument("--llm-queries", type=int, default=5)
    ap.add_argument("--llm-concurrency", type=int, default=2, help="requests in flight to the LLM server")
    ap.add_argument("--json", default=None, help="write the tables to this JSON file")
    args = ap.parse_args(argv)

    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    import pandas as pd
    import pyterrier as pt

    import pyterrier_sci as ps
    from pyterrier_sci.datasets import mir_multicite as M  # noqa: N812
    from pyterrier_sci.plugins.mir.mag import MethodologyAdjacencyGraph
    from pyterrier_sci.plugins.mir.training import mir_dense_component

    TRAIN, TEST_R, TEST_E = ("irds:sci/mir-multicite/dev/chrono-train",  # noqa: N806
                             "irds:sci/mir-multicite/dev/chrono-test",
                             "irds:sci/mir-multicite/dev/chrono-test/extended")
    train_q, test_q = M.chrono_parts(M.load_split("dev"))
    assert not set(train_q) & set(test_q)
    graph = MethodologyAdjacencyGraph.from_dataset(TRAIN)
    n_gt = sum(1 for q in test_q if M._view_of(TEST_R).judged().get(q) and any(M._view_of(TEST_R).judged()[q].values()))
    print("Protocol (offline): MIR-MultiCite dev split, proposals ordered by the date of their citing paper;")
    print(f"  train = the first {len(train_q)} proposals ({train_q[0]} .. {train_q[-1]}), {graph}")
    print(f"  test  = the other {len(test_q)} proposals ({n_gt} with ground truth; no proposal in both parts)")
    print(f"  restricted corpus = the test proposals' {pt.get_dataset(TEST_R).irds_ref().docs_count()} cited papers; "
          f"extended = the {len(graph.papers)} training papers + each proposal's ground truth")
    base_cfg = dict(epochs=args.epochs, samples=args.samples, triplets=args.triplets, batch_size=args.batch_size,
                    learning_rate=args.lr, margin=args.margin, alpha=args.alpha, max_seq_length=args.max_seq_length,
                    seed=args.seed, frozen_layers=args.frozen_layers)
    print(f"  fine-tuning: all-MiniLM-L6-v2, {json.dumps(base_cfg)}")
    sys.stdout.flush()

    def ft(**over):
        cfg = {**base_cfg, **over}
        return mir_dense_component(train=True, train_dataset=TRAIN, verbose=True, **cfg)

    def on(ds, model_path):
        return ps.pipeline("pool", dataset=ds) >> mir_dense_component(model=model_path, dataset=ds)

    systems = {"BM25": lambda ds: ps.pipeline("pool >> bm25", dataset=ds),
               "MiniLM": lambda ds: ps.pipeline("pool >> dense", dataset=ds)}
    started = time.time()
    ft_all = ft().model
    print(f"  fine-tuned model: {ft_all} ({time.time() - started:.0f} s incl. training when not cached)")
    systems["MiniLM (FT)"] = lambda ds, t=ft_all: on(ds, t)
    ablations = {}
    triplet_rows = ["T1", "T1+T2", "T1+T3", "all"]
    if args.ablations:
        for name, over in [("w/o S", {"sampling": False})] + [(t, {"triplets": t}) for t in triplet_rows
                                                              if t != args.triplets]:
            t0 = time.time()
            ablations[name] = ft(**over).model
            print(f"  ablation {name}: {ablations[name]} ({time.time() - t0:.0f} s)")
            systems[f"MiniLM (FT) {name}"] = lambda ds, t=ablations[name]: on(ds, t)

    measures = ["R@3", "R@5", "mAP"]
    tables = {}
    for setting, ds in (("Extended", TEST_E), ("Restricted", TEST_R)):
        d = pt.get_dataset(ds)
        res = ps.Experiment([f(ds) for f in systems.values()], d.get_topics(), d.get_qrels(),
                            ps.measures.parse(measures, dataset=ds), names=list(systems))
        tables[setting] = res.set_index("name")[[str(m) for m in ps.measures.parse(measures, dataset=ds)]] * 100
        tables[setting].columns = measures
    table = pd.concat(tables, axis=1).round(2)
    pd.set_option("display.width", 200)
    main_rows = ["BM25", "MiniLM", "MiniLM (FT)"]
    print("\nTable 2 (structure): test proposals of the chronological split, x100")
    print(table.loc[main_rows].to_string())
    margin = (table.loc["MiniLM (FT)"] - table.loc["MiniLM"]).round(2)
    print("Fine-tuned - base (MiniLM):", ", ".join(f"{s} {m} {v:+.2f}" for (s, m), v in margin.items()))
    if ablations:
        print("\nTable 5 (structure): ablation of MAG-guided sampling, mAP x100")
        t5 = table.loc[["MiniLM (FT)", "MiniLM (FT) w/o S"], [("Extended", "mAP"), ("Restricted", "mAP")]]
        print(t5.to_string())
        print("\nTable 10 (structure): triplet configurations, x100")
        rows = {"Base": "MiniLM",
                **{("T1+T2+T3" if t == "all" else t): ("MiniLM (FT)" if t == args.triplets else f"MiniLM (FT) {t}")
                   for t in triplet_rows}}
        t10 = table.loc[list(rows.values())]
        t10.index = list(rows)
        print(t10.to_string())

    llm_table = None
    if args.llm:
        llm_table = _llm_part(args, ft_all, TEST_R, TRAIN, graph, measures)
    if args.json:
        out = {"protocol": {"train": train_q, "test": test_q}, "config": base_cfg,
               "table": {f"{s}/{m}": table[(s, m)].to_dict() for s, m in table.columns}}
        if llm_table is not None:
            out["llm"] = llm_table.to_dict()
        from pathlib import Path

        from pyterrier_sci.data import atomic_write_text
        atomic_write_text(Path(args.json), json.dumps(out, indent=2))


def _llm_part(args, ft_path, test_ds, train_ds, graph, measures):
    """Table 3 (structure): zero-shot pointwise, few-shot pointwise (exemplars from the training MAG),
    MIR-Agent, re-ranking the fine-tuned retriever's top k on the restricted corpus."""
    import pyterrier as pt

    import pyterrier_sci as ps
    from pyterrier_sci.plugins.mir import MIRAgent, MIRPointwise
    from pyterrier_sci.plugins.mir.training import mir_dense_component
    llm = {"base_url": args.llm, "mode": args.llm_mode, "progress": False, "concurrency": args.llm_concurrency}
    d = pt.get_dataset(test_ds)
    topics = d.get_topics()
    qrels = d.get_qrels()
    with_gt = qrels[qrels["label"] > 0]["qid"].unique().tolist()
    topics = topics[topics["qid"].isin(with_gt[:args.llm_queries])]
    first = ps.pipeline("pool", dataset=test_ds) >> mir_dense_component(model=ft_path, dataset=test_ds) % args.llm_k
    text = ps.pipeline("text", dataset=test_ds)
    systems = [first,
               first >> text >> MIRPointwise(llm, text_field="abstract", on_error="flag"),
               first >> text >> MIRPointwise(llm, text_field="abstract", exemplars=graph.exemplar_frame(),
                                             on_error="flag"),
               first >> text >> MIRAgent(llm, text_field="abstract", on_error="flag", analysis_max_tokens=128)]
    names = [f"MiniLM (FT) top {args.llm_k}", "+ mir_pointwise (zero-shot)",
             "+ mir_pointwise (few-shot, MAG exemplars)", "+ mir_agent (zero-shot)"]
    # each system runs once; its frame gives both the measures and how often the LLM said "relevant"
    # (re-ranking keeps the first-stage order among the papers judged relevant, §5.2.1, so an LLM
    # that judges every paper relevant leaves the ranking as it was)
    frames = [system.transform(topics) for system in systems]
    res = ps.Experiment(frames, topics, qrels, ps.measures.parse(measures, dataset=test_ds), names=names)
    res = res.set_index("name") * 100
    res.columns = measures
    # share of the readable judgements that said "relevant" (NaN when none was readable)
    res["judged relevant %"] = [float("nan")] + [100 * f["llm_relevant"].dropna().eq(1).mean() for f in frames[1:]]
    print(f"\nTable 3 (structure): LLM re-ranking of the top {args.llm_k}, {len(topics)} test proposals, "
          f"restricted corpus, LLM at {args.llm} ({args.llm_mode} mode), x100")
    print(res.round(2).to_string())
    from pyterrier_sci.llm import usage_report
    print("\nLLM usage (calls, unusable answers, ...):")
    print(usage_report(systems[1:], names=names[1:]).to_string(index=False))
    return res


if __name__ == "__main__":
    main()
