"""PRISM's Table 1 and Table 6 on sci/acl-fulltext (1,672 ACL papers with full text).

Table 1: the retrieval setups of PRISM §4.2 - A2A, F2F, A2C, F2C - against PRISM (abstract query
plus research-question, method and experiment queries against 256-word chunks, RRF k=60), with the
offline all-MiniLM-L6-v2 (single-vector), BM25 (PISA, sparse) and ColBERT (multi-vector,
``pip install pyterrier-sci[colbert]``) - ``--engines``.  The aspect queries come from
the LLM-free section optimiser; ``--llm`` adds PRISM's LLM agents (one per aspect) and the
single-agent variant, talking to the server of the ``llm:`` section of pipelines/prism.yaml
(default: ``pyterrier-sci llm serve``, gemma-3 270M) on ``--llm-queries`` queries.

Table 6: PRISM without the abstract query, fusing the aspect rankings by RRF, by late
interaction (MaxSim) and by naive score summation; and the chunk->paper aggregations on A2C.

    python examples/prism.py                                   # all 949 queries, MiniLM, 256-word chunks
    python examples/prism.py --queries 200 --engines minilm,bm25 --chunks 3000
    python examples/prism.py --engines colbert                 # ColBERTv2 (hub); --checkpoint default offline
    python examples/prism.py --queries 200 --llm --llm-queries 20 --llm-max-tokens 256 --llm-paper-tokens 1500

Indexes are built on first use under the work directory ($PYTERRIER_SCI_HOME); runs are kept
in ``--save-dir`` and reused.  The tables are printed and written to ``<save-dir>/results.md``.
"""
import argparse
import os
import random
import time
from pathlib import Path

import pandas as pd
import pyterrier as pt

import pyterrier_sci as ps
from pyterrier_sci.data import atomic_write_text
from pyterrier_sci.llm import usage_report
from pyterrier_sci.pipeline import build_all, load_config

CONFIG = Path(__file__).resolve().parents[1] / "pipelines" / "prism.yaml"
MEASURES1 = ["Recall@50", "Recall@100", "Recall@200", "Recall@300", "MRR@50", "nDCG@50"]
MEASURES6 = ["MRR@50", "Recall@100", "Recall@200"]
# the setups as expression templates over an engine's abstract ({a}), full-text ({f}) and chunk ({c}) indexes
SETUPS = {
    "A2A": "paper_fields >> A >> {a} >> exclude",
    "F2F": "paper_fields >> F >> {f} >> exclude",
    "A2C": "paper_fields >> A >> {c} >> papers >> exclude",
    "F2C": "paper_fields >> F >> {c} >> papers >> exclude",
    "PRISM": ("paper_fields >> sections >> rrf(A >> {a} >> exclude, R >> {c} >> papers >> exclude, "
              "M >> {c} >> papers >> exclude, E >> {c} >> papers >> exclude, k=60)"),
}
TABLE6 = {
    "PRISM_noA2A_RRF": ("paper_fields >> sections >> rrf(R >> {c} >> papers >> exclude, M >> {c} >> papers >> exclude, "
                          "E >> {c} >> papers >> exclude, k=60)"),
    "PRISM_noA2A_MaxSim": ("paper_fields >> sections >> aspect_fusion(R >> {c}, M >> {c}, E >> {c}, method='maxsim') "
                           ">> exclude"),
    "PRISM_noA2A_naive": ("paper_fields >> sections >> aspect_fusion(R >> {c}, M >> {c}, E >> {c}, method='sum') "
                          ">> exclude"),
    "A2C_max": "paper_fields >> A >> {c} >> papers >> exclude",
    "A2C_kmaxavg": "paper_fields >> A >> {c} >> chunks_to_papers(agg='kmaxavg', k=2) >> exclude",
    "A2C_mean": "paper_fields >> A >> {c} >> chunks_to_papers(agg='mean') >> exclude",
    "A2C_sum": "paper_fields >> A >> {c} >> chunks_to_papers(agg='sum') >> exclude",
}
LLM_SETUPS = {
    "PRISM_agents": SETUPS["PRISM"].replace("sections", "llm_agents"),
    "PRISM_single": SETUPS["PRISM"].replace("sections", "llm_single"),
}


def engines(args, cfg):
    """{engine: {"a", "f", "c"}} - the components of each retriever family, added to ``cfg``."""
    out = {}
    unit = f"sci/acl-fulltext/chunks-{args.chunks}"
    for e in args.engines.split(","):
        if e == "minilm":
            cfg.components["minilm_C"]["dataset"] = unit
            out[e] = {"a": "minilm_A", "f": "minilm_F", "c": "minilm_C"}
        elif e == "bm25":  # PISA; full papers as BM25 queries are left out (thousands of terms)
            cfg.components["bm25_A"] = {"component": "bm25", "dataset": "sci/acl-fulltext", "num_results": 1000}
            cfg.components["bm25_C"] = {"component": "bm25", "dataset": unit, "num_results": 3000}
            out[e] = {"a": "bm25_A", "f": None, "c": "bm25_C"}
        elif e == "colbert":
            if not colbert_available():
                raise SystemExit("the colbert component is not installed: pip install 'pyterrier-sci[colbert]'")
            for k in ("colbert_A", "colbert_F", "colbert_C"):
                if args.checkpoint:
                    cfg.components[k]["checkpoint"] = args.checkpoint
            cfg.components["colbert_C"]["dataset"] = unit
            out[e] = {"a": "colbert_A", "f": "colbert_F", "c": "colbert_C"}
        else:
            raise SystemExit(f"unknown engine {e!r}: minilm, bm25, colbert")
    return out


def add_pipelines(cfg, templates, eng, parts):
    names = []
    for setup, expr in templates.items():
        if "{f}" in expr and parts["f"] is None:
            continue
        name = f"{setup}_{eng}"
        cfg.pipelines[name] = expr.format(**parts)
        names.append(name)
    return names


def colbert_available() -> bool:
    return "colbert" in ps.registry.names()


def subset(topics: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    if not n or n >= len(topics):
        return topics
    qids = sorted(topics["qid"])
    random.Random(seed).shuffle(qids)
    return topics[topics["qid"].isin(set(qids[:n]))].reset_index(drop=True)


def experiment(systems, names, dataset, topics, measures, save_dir, baseline=0):
    ds = pt.get_dataset(dataset)
    qrels = ds.get_qrels()
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    t = time.time()
    table = ps.Experiment([systems[n] for n in names], topics, qrels, ps.measures.parse(measures, dataset=dataset),
                          names=names, baseline=baseline, batch_size=25, save_dir=str(save_dir), save_mode="reuse",
                          round=4)
    return table, time.time() - t


def to_markdown(table: pd.DataFrame, measures) -> str:
    cols = ["name"] + [str(m) for m in ps.measures.parse(measures, dataset="sci/acl-fulltext")]
    head = ["system"] + list(measures)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, row in table.iterrows():
        vals = [f"{100 * row[c]:.2f}" for c in cols[1:]]
        lines.append("| " + " | ".join([row["name"]] + vals) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=0,
                    help="evaluate on a seeded sample of this many queries (0: all 949)")
    ap.add_argument("--engines", default="minilm", help="comma-separated: minilm, bm25, colbert")
    ap.add_argument("--chunks", type=int, default=256, help="chunk unit (a registered sci/acl-fulltext/chunks-<unit>)")
    ap.add_argument("--checkpoint", default=None,
                    help="ColBERT checkpoint (default: the config's colbert-ir/colbertv2.0)")
    ap.add_argument("--llm", action="store_true", help="add PRISM's LLM optimisers (multi-agent and single-agent)")
    ap.add_argument("--llm-queries", type=int, default=20, help="queries for the LLM rows (they are slow on CPU)")
    ap.add_argument("--llm-max-tokens", type=int, default=2000, help="generation budget per answer (PRISM: 2,000)")
    ap.add_argument("--llm-paper-tokens", type=int, default=6000, help="the paper is cut to about this many tokens")
    ap.add_argument("--tables", default="1,6", help="which tables to run: 1, 6 or 1,6")
    ap.add_argument("--save-dir", default="runs/prism")
    args = ap.parse_args()

    cfg = load_config(CONFIG)
    engs = engines(args, cfg)
    for name, comp in (("llm_agents", "prism_agents"), ("llm_single", "prism_single_agent")):
        cfg.components[name] = {"component": comp, "max_tokens": args.llm_max_tokens,
                                "max_paper_tokens": args.llm_paper_tokens, "on_error": "flag"}
    out_dir = Path(args.save_dir) / (f"c{args.chunks}-" + (f"q{args.queries}" if args.queries else "all"))
    out_dir.mkdir(parents=True, exist_ok=True)
    report = [f"# PRISM on sci/acl-fulltext ({args.queries or 'all'} queries; chunks of {args.chunks} words; "
              f"engines {', '.join(engs)})", ""]
    tables = set(args.tables.split(","))
    datasets = ["irds:sci/acl-fulltext/references", "irds:sci/acl-fulltext/references-or-citers"]
    for dataset in datasets if "1" in tables else []:
        short = dataset.split("/")[-1]
        topics = subset(pt.get_dataset(dataset).get_topics("text"), args.queries)
        for eng, parts in engs.items():
            names = add_pipelines(cfg, SETUPS, eng, parts)
            systems = build_all(cfg, names, dataset=dataset)
            table, secs = experiment(systems, names, dataset, topics, MEASURES1, out_dir / short / eng)
            print(f"\nTable 1 - {short}, {eng} ({len(topics)} queries, {secs:.0f} s)")
            print(table.to_string(index=False))
            report += [f"## Table 1: {short}, {eng} ({len(topics)} queries)", "", to_markdown(table, MEASURES1), ""]
            if args.llm:
                names = add_pipelines(cfg, {"A2A": SETUPS["A2A"], "PRISM": SETUPS["PRISM"], **LLM_SETUPS}, eng, parts)
                llm_topics = subset(topics, args.llm_queries)
                systems = build_all(cfg, names, dataset=dataset)
                t, secs = experiment(systems, names, dataset, llm_topics, MEASURES1,
                                     out_dir / short / f"{eng}-llm{len(llm_topics)}")
                print(f"\nTables 1-2 with LLM optimisers - {short}, {eng} ({len(llm_topics)} queries, {secs:.0f} s)")
                print(t.to_string(index=False))
                print(usage_report([systems[n] for n in names], names=names).to_string(index=False))
                report += [f"### LLM optimisers: {short}, {eng} ({len(llm_topics)} queries, model "
                           f"{cfg.settings.get('llm', {}).get('model', 'default')})", "", to_markdown(t, MEASURES1), ""]
    if "6" in tables:
        dataset = datasets[1]
        topics = subset(pt.get_dataset(dataset).get_topics("text"), args.queries)
        for eng, parts in engs.items():
            names = add_pipelines(cfg, TABLE6, eng, parts)
            systems = build_all(cfg, names, dataset=dataset)
            table, secs = experiment(systems, names, dataset, topics, MEASURES6, out_dir / "table6" / eng)
            print(f"\nTable 6 - references-or-citers, {eng} ({len(topics)} queries, {secs:.0f} s)")
            print(table.to_string(index=False))
            report += [f"## Table 6: references-or-citers, {eng} ({len(topics)} queries)", "",
                       to_markdown(table, MEASURES6), ""]
    atomic_write_text(out_dir / "results.md", "\n".join(report) + "\n")
    print(f"\nwritten: {out_dir / 'results.md'}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
