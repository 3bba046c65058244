"""DORIS-MAE on the offline data: rows of the paper's Table 2 / Table 14 and its Table 8 (supervised
contrastive learning vs the pretrained model), with the paper's measures.

    PYTHONSAFEPATH=1 PYTERRIER_SCI_DATA=../shared/data .venv/bin/python examples/doris_mae.py

Protocol (printed with the tables):

* data: ``sci/doris-mae/birco-dev``, the 40 DORIS-MAE queries the offline data has (they are the
  paper's 40 *training* queries) with BIRCO's candidate pools of 58-103 abstracts (subsets of the
  original pools of 99-138); relevance = Eq. 1 recovered exactly from the normalised scores;
* every method re-ranks each query's pool; measures as the paper's code defines them (x100),
  +- = bootstrap standard error over queries (1,000 resamples); Random = the mean over 100 shufflings;
* Table A: all 40 queries.  Table B: the 20 test queries of ``birco-dev/test20``; the fine-tuned model
  is trained on the other 20 (``birco-dev/train20``) - the paper trains on 40 and tests on 60, which
  needs the full release;
* fine-tuning: all-MiniLM-L6-v2, cosine triplet loss (Eq. 3) with margin ``--margin``, triplets
  (query, higher-scored abstract, lower-scored abstract) drawn from the training queries' pools, one
  epoch, max_seq_length 256 (``--triplets-per-query``, ``--batch-size``); a few minutes on 2 CPU cores.
"""
import argparse
import hashlib
import json
import sys
import time

import numpy as np
import pandas as pd
import pyterrier as pt

import pyterrier_sci as ps
from pyterrier_sci.corpus import PoolRetriever
from pyterrier_sci.data import work_dir
from pyterrier_sci.datasets import doris_mae as dm
from pyterrier_sci.plugins.doris_mae import ContrastiveModel, MaxSimScorer, fine_tune, make_triplets
from pyterrier_sci.plugins.doris_mae import measures as dmm

DS = "irds:sci/doris-mae/birco-dev"


class TfIdfScorer(pt.Transformer):
    """TF-IDF cosine between the query and each abstract (scikit-learn, IDF fitted on the corpus)."""

    def __init__(self, corpus_texts):
        from sklearn.feature_extraction.text import TfidfVectorizer
        self.vectorizer = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit(corpus_texts)

    def transform(self, inp):
        q = self.vectorizer.transform(inp["query"].tolist())
        d = self.vectorizer.transform(inp["text"].tolist())
        out = inp.assign(score=np.asarray(q.multiply(d).sum(axis=1)).ravel())
        out = out.sort_values(["qid", "score"], ascending=[True, False], kind="stable").reset_index(drop=True)
        out["rank"] = out.groupby("qid").cumcount()
        return out


def fmt_table(table: pd.DataFrame, measures, se: bool) -> str:
    rows = []
    for r in table.to_dict("records"):
        cells = [r["name"]]
        for m in measures:
            v = f"{r[m]:.2f}"
            if se and not pd.isna(r.get(m + " SE")):
                v += f" ± {r[m + ' SE']:.2f}"
            cells.append(v)
        rows.append(cells)
    head = ["Method"] + [m.replace("NDCGexp@10%", "NDCG^exp@10%") for m in measures]
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    def line(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100, help="random shufflings for the Random row")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the standard errors")
    ap.add_argument("--triplets-per-query", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--margin", type=float, default=0.1)
    ap.add_argument("--learning-rate", type=float, default=2e-5)
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-finetune", action="store_true")
    ap.add_argument("--retrain", action="store_true", help="train again even if the model of this configuration exists")
    args = ap.parse_args(argv)
    started = time.time()
    measures = dmm.PAPER_MEASURES

    topics = dm.aspect_topics(DS)
    test_ids, train_ids = dm.birco_query_ids("test20"), dm.birco_query_ids("train20")
    import ir_datasets
    store = ir_datasets.load(DS[5:]).docs_store()
    pool = PoolRetriever(DS)(topics[["qid", "query", "aspects"]])
    pool["text"] = [store.get(d).abstract for d in pool["docno"]]
    print(f"DORIS-MAE offline ({DS}): {len(topics)} queries, {len(pool)} pool abstracts "
          f"({pool.groupby('qid').size().min()}-{pool.groupby('qid').size().max()} per query)", file=sys.stderr)

    systems = {
        "BM25": ps.pipeline("pool >> bm25", dataset=DS),
        "TF-IDF": TfIdfScorer([d.abstract for d in ir_datasets.load(DS[5:]).docs_iter()]),
        "MiniLM whole text": MaxSimScorer("default", "whole", "whole"),
        "MiniLM sentences (Eq. 4)": MaxSimScorer("default", "sentences", "sentences"),
        "MiniLM aspects concatenated": MaxSimScorer("default", "aspects_concat", "whole"),
        "MiniLM one vector per aspect*": MaxSimScorer("default", "aspects", "sentences"),
    }
    runs = {}
    for name, system in systems.items():
        t = time.time()
        runs[name] = system(topics[["qid", "query"]]) if name == "BM25" else system(pool)
        print(f"  {name}: {time.time() - t:.0f} s", file=sys.stderr)

    # ---- fine-tuning on train20, test on test20 -------------------------------------------------
    ft_row = None
    if not args.skip_finetune:
        config = {"base": "default", "train": train_ids, "per_query": args.triplets_per_query, "seed": args.seed,
                  "margin": args.margin, "batch": args.batch_size, "lr": args.learning_rate, "len": args.max_seq_length}
        digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
        out = work_dir() / "models" / ("doris-scl-minilm-" + digest)
        t = time.time()
        if out.exists() and not args.retrain:
            model = ContrastiveModel(out)
            print(f"  fine-tuned model reused: {out}", file=sys.stderr)
        else:
            triplets = make_triplets(DS, qids=train_ids, per_query=args.triplets_per_query, seed=args.seed)
            print(f"  fine-tuning on {len(triplets)} triplets of {len(train_ids)} queries ...", file=sys.stderr)
            model = fine_tune(triplets, out, base_model="default", margin=args.margin, epochs=1,
                              batch_size=args.batch_size, learning_rate=args.learning_rate,
                              max_seq_length=args.max_seq_length, seed=args.seed, overwrite=True)
        info = model.training
        print(f"  fine-tuning: {info['triplets']} triplets, {len(info.get('loss_history', []))} steps, "
              f"{info['seconds']:.0f} s training ({time.time() - t:.0f} s here)", file=sys.stderr)
        test_pool = pool[pool["qid"].isin(test_ids)]
        runs["MiniLM fine-tuned, whole text"] = MaxSimScorer(str(out), "whole", "whole")(test_pool)
        runs["MiniLM fine-tuned, sentences"] = MaxSimScorer(str(out), "sentences", "sentences")(test_pool)
        ft_row = info

    # ---- tables ------------------------------------------------------------------------------
    base_rows = {k: v for k, v in runs.items() if "fine-tuned" not in k}
    rnd_all = dmm.random_baseline(DS, trials=args.trials, seed=args.seed, measures=measures)
    table_a = pd.concat([rnd_all, dmm.evaluate(base_rows, DS, measures, bootstrap=args.bootstrap, seed=args.seed)],
                        ignore_index=True)
    rnd_test = dmm.random_baseline(DS, trials=args.trials, seed=args.seed, measures=measures, qids=test_ids)
    table_b = pd.concat([rnd_test, dmm.evaluate(runs, DS, measures, bootstrap=args.bootstrap, seed=args.seed,
                                                qids=test_ids)],
                        ignore_index=True)

    kept = dm.scores_frame(DS).groupby("qid")["relevant"].any()
    print()
    print("Protocol: DORIS-MAE offline data (sci/doris-mae/birco-dev): the paper's 40 training queries with BIRCO's")
    print("pools of 58-103 abstracts (subsets of the original 99-138). Every method re-ranks each pool. "
          "Measures as the")
    print("paper's code defines them, x100; ± = bootstrap standard error over queries; Random = mean of "
          f"{args.trials} shufflings.")
    print(f"R@k, RP and MAP leave out queries without a relevant abstract ({int((~kept).sum())} of 40 here; "
          f"{int((~kept[test_ids]).sum())} of the 20 test queries).  * = one vector per aspect, abstracts by sentence "
          "(appendix C.3, approach 2).")
    print()
    print("Table A (structure of Table 2 / 12 / 13): all 40 queries")
    print(fmt_table(table_a, measures, se=True))
    print()
    print("Table B (structure of Table 14 and Table 8): the 20 test queries of birco-dev/test20")
    print(fmt_table(table_b, measures, se=True))
    if ft_row is not None:
        b = table_b.set_index("name")
        delta = {m: b.loc["MiniLM fine-tuned, whole text", m] - b.loc["MiniLM whole text", m] for m in measures}
        print()
        print(f"Fine-tuned on the 20 queries of birco-dev/train20 ({ft_row['triplets']} triplets, "
              f"margin {ft_row['margin']}, "
              f"1 epoch, batch {ft_row['batch_size']}, max_seq_length {ft_row['max_seq_length']}); "
              "tested on the other 20.")
        print("Fine-tuned minus pretrained (whole text): " + ", ".join(f"{m} {v:+.2f}" for m, v in delta.items()))
    print(f"\n({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
