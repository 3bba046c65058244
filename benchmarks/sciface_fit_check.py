"""Does the SciFACE facet cross-encoder of ``sciface/table5`` fit the CSFCube queries it is trained on?

``pyterrier-sci reproduce sciface/table5 --tier full`` scores its SciFACE row (``pool >> sciface_ce``:
``sciface_rerank(train=True, epochs=3, triplets_per_seed=10, learning_rate=2e-5, max_length=256, val_seeds=2,
seed=42)``) at about the chance level of CSFCube's pools.  This script tells *under-trained* from *inverted or
mis-routed*, with the toolkit's own training path (``sciface_rerank(train=True)`` -> ``folds.fold_models``) and the
table's measures (``pyterrier_sci.evaluation.Experiment`` with ``NDCG%20`` and ``MAP`` on the facet's dataset, i.e.
``sciface.NDCG%20`` / ``sciface.MAP``: the mean of the fold means):

1. **Fit check**: each fold model (the model that re-ranks fold k is trained on the other fold's test queries, 2 of
   them held out for the per-epoch validation Spearman) scores the pools of its own training queries, its 2
   validation queries and the held-out fold (what the table scores).  Random (the mean of 100 shufflings of each
   pool, seed 0, as the table's random row) and BM25 (the table's: PISA, k1 0.9, b 0.4) on the same queries.
   Beside the official measures: the per-query Spearman(score, grade), and over all training triplets of the
   queries (the pairs of one query's pool with different training grades, Method collapsed 0-3 -> 0-2) the
   share the model orders right and the margin ranking loss (margin 0.5) of the saved model.
2. **Label direction**: every triplet's positive has the higher grade in the qrels (read independently of the
   pairs frame), with the Method collapse (2 and 3 tie: no triplet); the loss pushes the positive up.
3. **Fold routing**: the table's ``FoldRouted`` sends fold k's queries to the model trained on the other fold (its
   directory names that fold; the seeds it trained on exclude fold k); its output equals the per-model runs; the
   *swapped* routing (each query re-ranked by the model that saw it) is the fit check over all queries.
4. **Aggregation**: the two folds' runs are evaluated together as the table does (mean of the fold means) and, for
   comparison, as a pooled mean over the queries.
5. **Control**: the same recipe with many more optimisation steps (``--control-epochs``, no validation hold-out so
   the last epoch is the saved model) for one fold model (``--control-fold``), scored on its own training queries
   and on the held-out fold.

    python benchmarks/sciface_fit_check.py [--facets method background] [--control-facets method]
        [--control-epochs 12] [--control-fold fold2] [--work DIR] [--out benchmarks/results/sciface_fit_check.md]

``--work`` keeps the trained models and their scored pools (a rerun reuses them); default: a temporary directory.
All of it runs on the CPU (torch, the threads torch picks).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402

import pyterrier_sci as ps  # noqa: E402
from pyterrier_sci.bench import load_note, markdown, write_results  # noqa: E402
from pyterrier_sci.datasets import csfcube  # noqa: E402
from pyterrier_sci.evaluation import Experiment  # noqa: E402
from pyterrier_sci.experiment import topics_and_qrels  # noqa: E402
from pyterrier_sci.plugins.sciface import folds as Fo  # noqa: E402, N812
from pyterrier_sci.plugins.sciface.components import facet_rerank_component  # noqa: E402
from pyterrier_sci.plugins.sciface.cross_encoder import FacetCrossEncoder, FacetReranker  # noqa: E402
from pyterrier_sci.plugins.sciface.rerank import SeedText  # noqa: E402
from pyterrier_sci.plugins.sciface.triplets import csfcube_pairs, make_triplets, split_seeds  # noqa: E402
from pyterrier_sci.protocol import walk  # noqa: E402
from pyterrier_sci.registry import Context  # noqa: E402

#: the table's sciface_ce (pipelines/reproduce/sciface.yaml)
TABLE = dict(epochs=3, triplets_per_seed=10, learning_rate=2e-5, max_length=256, val_seeds=2, seed=42)
MEASURES = ["NDCG%20", "MAP"]
MARGIN = 0.5


def other(fold: str) -> str:
    return "fold2" if fold == "fold1" else "fold1"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def grade_map(qrels: pd.DataFrame) -> dict:
    return {(str(q), str(d)): int(g) for q, d, g in zip(qrels["qid"], qrels["docno"], qrels["label"])}


def train_split(facet: str, fold: str, settings: Fo.FoldSettings) -> dict:
    """``{"train": [...], "val": [...]}``: the seeds of the model that re-ranks ``fold``, split as
    ``folds._train_fold`` splits them."""
    pairs = csfcube_pairs([facet], split=f"{other(fold)}-test")
    n = pairs["seed_id"].nunique()
    split = split_seeds(pairs["seed_id"], val=settings.val_seeds / n if settings.val_seeds else 0, test=0,
                        seed=settings.seed)
    return {part: sorted(q for q, p in split.items() if p == part) for part in ("train", "val")}


# ----------------------------------------------------------------------------------------------
# checks 2 and 3 (cheap, no model)
# ----------------------------------------------------------------------------------------------
def check_label_direction(facet: str, grades: dict) -> str:
    """Every triplet of both folds' training pairs: the positive's qrels grade above the negative's (Method: after
    the 0-3 -> 0-2 collapse), and every pair of a query with different (collapsed) grades is a triplet."""
    collapse = facet == "method"
    n_trip = n_cross = 0
    for split in ("fold1-test", "fold2-test"):
        pairs = csfcube_pairs([facet], split=split)
        pairs = pairs[pairs[facet].notna()].reset_index(drop=True)
        t = make_triplets(pairs, facet, collapse)
        g = lambda i: grades[(pairs.at[i, "seed_id"], pairs.at[i, "cand_id"])]  # noqa: E731
        pos = np.array([g(i) for i in t["pos"]])
        neg = np.array([g(i) for i in t["neg"]])
        assert (pairs.loc[t["pos"], "seed_id"].to_numpy() == pairs.loc[t["neg"], "seed_id"].to_numpy()).all()
        if collapse:
            pos, neg = np.minimum(pos, 2), np.minimum(neg, 2)
        assert (pos > neg).all(), f"{facet} {split}: a triplet's positive is not the higher-graded paper"
        assert (t["pos_score"].to_numpy() == pos).all() and (t["neg_score"].to_numpy() == neg).all()
        expected = 0
        for _, grp in pairs.groupby("seed_id"):
            s = np.minimum(grp[facet].to_numpy(int), 2) if collapse else grp[facet].to_numpy(int)
            expected += int((s[:, None] > s[None, :]).sum())
        assert len(t) == expected, (len(t), expected)
        if collapse:  # 2-vs-3 pairs exist in the data and make no triplet
            raw = pairs[facet].to_numpy(int)
            n_cross += sum(int(((grp[facet].to_numpy(int) == 3)[:, None] & (grp[facet].to_numpy(int) == 2)[None, :])
                               .sum()) for _, grp in pairs.groupby("seed_id"))
            assert raw.max() == 3
        n_trip += len(t)
    import torch

    from pyterrier_sci.plugins.sciface.loss import MarginRankingLoss
    loss = MarginRankingLoss.__new__(MarginRankingLoss)
    torch.nn.Module.__init__(loss)
    loss.loss_fct = torch.nn.MarginRankingLoss(margin=MARGIN)
    right = float(loss.loss_from_scores(torch.tensor([1.0]), torch.tensor([0.0])))
    wrong = float(loss.loss_from_scores(torch.tensor([0.0]), torch.tensor([1.0])))
    assert right == 0.0 and abs(wrong - 1.5) < 1e-6, (right, wrong)
    extra = f"; {n_cross:,} grade-3 vs grade-2 pairs make no triplet (collapse)" if collapse else ""
    return (f"{facet}: all {n_trip:,} triplets of both folds have the higher qrels grade on the positive{extra}; "
            f"loss(pos 1, neg 0) = {right:.2f}, loss(pos 0, neg 1) = {wrong:.2f}")


def check_routing(facet: str, routed: Fo.FoldRouted, settings: Fo.FoldSettings, work: Path) -> str:
    splits = csfcube.splits()[facet]
    for fold in Fo.FOLDS:
        path = Path(routed.by_fold[fold].model.path)
        assert path == Fo.fold_model_path(fold, settings, work), (fold, path)
        assert f"-{other(fold)}-test-" in path.name, path.name
        seen = set(csfcube_pairs([facet], split=f"{other(fold)}-test")["seed_id"])
        assert seen == set(splits[f"{other(fold)}_test"]) and not seen & set(splits[f"{fold}_test"])
        assert all(csfcube.test_fold_of(q) == fold for q in splits[f"{fold}_test"])

    class Tag(pt.Transformer):
        def __init__(self, name):
            self.name = name

        def transform(self, inp):
            return inp.assign(routed_to=self.name)
    rows = pd.DataFrame({"qid": splits["fold1_test"] + splits["fold2_test"], "docno": "x", "score": 0.0, "rank": 0})
    out = Fo.FoldRouted({f: Tag(f) for f in Fo.FOLDS})(rows)
    assert (out["routed_to"] == out["qid"].map(csfcube.test_fold_of)).all()
    return (f"{facet}: fold1's {len(splits['fold1_test'])} queries go to the model trained on fold2-test, fold2's "
            f"{len(splits['fold2_test'])} to the one trained on fold1-test (directories and training seeds checked)")


# ----------------------------------------------------------------------------------------------
# scoring and evaluation
# ----------------------------------------------------------------------------------------------
def scored(model: FacetCrossEncoder, feats: pd.DataFrame, cache: Path) -> pd.DataFrame:
    """The model's run over every pool (all queries of both folds), cached beside the model."""
    f = cache / f"{Path(model.path).name}.pkl"
    if f.exists():
        return pd.read_pickle(f)
    t0 = time.perf_counter()
    run = FacetReranker(model, batch_size=32)(feats)[["qid", "docno", "score", "rank"]]
    print(f"  scored {len(feats):,} pairs with {Path(model.path).name} in {time.perf_counter() - t0:.0f} s",
          flush=True)
    run.to_pickle(f)
    return run


def evaluate(runs: dict, qids, topics, qrels, dataset: str) -> dict:
    """``{name: {measure: value, measure + " pooled": plain mean over queries}}`` of ``runs`` on ``qids``."""
    qids = set(qids)
    tp = topics[topics["qid"].isin(qids)].reset_index(drop=True)
    qr = qrels[qrels["qid"].astype(str).isin(qids)].reset_index(drop=True)
    names = list(runs)
    res, per = Experiment([runs[n][runs[n]["qid"].isin(qids)].reset_index(drop=True) for n in names], tp, qr,
                          MEASURES, names=names, dataset=dataset, perquery="both", verbose=False)
    shown = [c for c in res.columns if c != "name"][:len(MEASURES)]
    out = {}
    for _, row in res.iterrows():
        d = {m: float(row[c]) for m, c in zip(MEASURES, shown)}
        for m, c in zip(MEASURES, shown):
            d[m + " pooled"] = float(per[(per["name"] == row["name"]) & (per["measure"] == c)]["value"].mean())
        out[row["name"]] = d
    return out


def random_figures(pool: pd.DataFrame, qids, topics, qrels, dataset: str, trials: int, seed: int = 0) -> dict:
    """The table's random row on ``qids``: the mean of ``trials`` uniform shufflings of each pool."""
    pool = pool[pool["qid"].isin(set(qids))][["qid", "docno"]].sort_values(["qid", "docno"], kind="stable")
    pool = pool.reset_index(drop=True)
    rng = np.random.default_rng(seed)
    runs = {}
    for i in range(trials):
        run = pool.assign(score=rng.random(len(pool)))
        run["rank"] = run.groupby("qid")["score"].rank(ascending=False, method="first").astype(int) - 1
        runs[f"r{i}"] = run
    ev = evaluate(runs, qids, topics, qrels, dataset)
    return {k: float(np.mean([v[k] for v in ev.values()])) for k in next(iter(ev.values()))}


def fit_stats(run: pd.DataFrame, qids, grades: dict, collapse: bool) -> dict:
    """Mean per-query Spearman(score, grade); over all training triplets of the queries (pairs of one pool with
    different training grades): the share ordered right and the mean margin ranking loss."""
    from scipy.stats import spearmanr
    rhos, right, total, losses = [], 0, 0, []
    for q, df in run[run["qid"].isin(set(qids))].groupby("qid"):
        g = np.array([grades[(q, d)] for d in df["docno"]])
        s = df["score"].to_numpy(float)
        if len(set(g)) > 1:
            rhos.append(spearmanr(s, g).statistic)
        t = np.minimum(g, 2) if collapse else g
        hi, lo = np.nonzero(t[:, None] > t[None, :])
        diff = s[hi] - s[lo]
        right += int((diff > 0).sum())
        total += len(diff)
        losses.append(np.maximum(0.0, MARGIN - diff))
    return {"spearman": float(np.mean(rhos)), "pair_acc": right / total if total else float("nan"),
            "triplet_loss": float(np.concatenate(losses).mean()) if losses else float("nan")}


def meta_of(model: FacetCrossEncoder) -> dict:
    return model.meta["training"]


def row(facet, model, scored_on, qids, fig, fit=None, meta=None) -> dict:
    r = {"facet": facet, "model": model, "scored on": scored_on, "queries": len(qids),
         "NDCG%20": round(100 * fig["NDCG%20"], 2), "MAP": round(100 * fig["MAP"], 2),
         "pairs ordered right": "-" if fit is None else f"{100 * fit['pair_acc']:.1f}%",
         "mean query Spearman": "-" if fit is None else f"{fit['spearman']:+.3f}",
         "triplet loss (saved model)": "-" if fit is None else f"{fit['triplet_loss']:.3f}",
         "training loss (trainer mean)": "-", "steps": "-", "best epoch": "-"}
    if meta is not None:
        r["training loss (trainer mean)"] = f"{meta['train_loss']:.3f}"
        r["steps"] = str(meta["steps"])
        r["best epoch"] = "-" if meta.get("best_epoch") is None else f"{meta['best_epoch']}/{meta['epochs']}"
    return r


# ----------------------------------------------------------------------------------------------
def run_facet(facet: str, work: Path, args, rows: list, notes: list, control: bool) -> None:
    ds = f"irds:sci/csfcube/{facet}"
    ctx = Context(dataset=ds, work_dir=str(work))
    topics, qrels = topics_and_qrels(ds)
    qrels = qrels.assign(qid=qrels["qid"].astype(str), docno=qrels["docno"].astype(str))
    grades = grade_map(qrels)
    collapse = facet == "method"
    splits = csfcube.splits()[facet]
    fold_q = {f: list(splits[f"{f}_test"]) for f in Fo.FOLDS}
    cache = work / "fit_check_runs"
    cache.mkdir(parents=True, exist_ok=True)

    notes.append("label direction - " + check_label_direction(facet, grades))

    pool = ps.pipeline("pool", context=ctx)(topics)
    feats = (SeedText(ds) >> pt.text.get_text(pt.get_dataset(ds), ["title", "abstract"]))(pool)
    bm25 = ps.pipeline("pool >> bm25(backend='pisa', k1=0.9, b=0.4)", context=ctx)(topics)

    # the table's models, through the table's component (trained on first use, each fold on the other fold)
    settings = Fo.FoldSettings(facet=facet, **TABLE)
    t0, c0 = time.perf_counter(), time.process_time()
    cached = all((Fo.fold_model_path(f, settings, work) / "pt_meta.json").exists() for f in Fo.FOLDS)
    comp = facet_rerank_component(context=ctx, train=True, **TABLE)
    routed = next(t for t in walk(comp) if isinstance(t, Fo.FoldRouted))
    timing = cache / f"{facet}-table-models.timing.json"
    if not cached:
        timing.write_text(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}))
    if timing.exists():
        t = json.loads(timing.read_text())
        notes.append(f"cost - {facet}: the table's two fold models trained in {t['wall_s']:.0f} s wall, "
                     f"{t['cpu_s']:.0f} s CPU (measured when first trained{', reused here' if cached else ''})")
    notes.append("fold routing - " + check_routing(facet, routed, settings, work))
    models = {f: routed.by_fold[f].model for f in Fo.FOLDS}
    runs = {f: scored(models[f], feats, cache) for f in Fo.FOLDS}

    # the routed pipeline's own output equals the per-model runs (first 5 candidates of every query)
    few = feats.sort_values(["qid", "docno"]).groupby("qid").head(5)
    got = routed(few).set_index(["qid", "docno"])["score"]
    want = pd.concat([runs[csfcube.test_fold_of(q)][runs[csfcube.test_fold_of(q)]["qid"] == q]
                      for q in few["qid"].unique()]).set_index(["qid", "docno"])["score"].reindex(got.index)
    gap = float((got - want).abs().max())
    assert gap < 1e-3, gap
    notes.append(f"fold routing - {facet}: FoldRouted's scores = the per-model runs of the model that never saw the "
                 f"query (max |difference| {gap:.1e} over {len(few)} rows)")

    table_run = pd.concat([runs[f][runs[f]["qid"].isin(fold_q[f])] for f in Fo.FOLDS], ignore_index=True)
    swapped = pd.concat([runs[other(f)][runs[other(f)]["qid"].isin(fold_q[f])] for f in Fo.FOLDS],
                        ignore_index=True)
    all_q = fold_q["fold1"] + fold_q["fold2"]
    ev = evaluate({"table": table_run, "swapped": swapped, "bm25": bm25}, all_q, topics, qrels, ds)
    rnd = random_figures(pool, all_q, topics, qrels, ds, args.shuffles)
    rows.append(row(facet, "table routing (each query by the model that never saw it)", "all queries, held out",
                    all_q, ev["table"], fit_stats(table_run, all_q, grades, collapse)))
    rows.append(row(facet, "swapped routing (each query by the model trained on its fold)",
                    "all queries, own fold (train + val)", all_q, ev["swapped"],
                    fit_stats(swapped, all_q, grades, collapse)))
    rows.append(row(facet, "BM25", "all queries", all_q, ev["bm25"]))
    rows.append(row(facet, f"random ({args.shuffles} shufflings)", "all queries", all_q, rnd))
    for name in ("table", "swapped", "bm25"):
        notes.append(f"aggregation - {facet} {name}: NDCG%20 {100 * ev[name]['NDCG%20']:.2f} (mean of fold means) vs "
                     f"{100 * ev[name]['NDCG%20 pooled']:.2f} (pooled over queries); MAP "
                     f"{100 * ev[name]['MAP']:.2f} vs {100 * ev[name]['MAP pooled']:.2f}")

    def per_model(label: str, model: FacetCrossEncoder, run: pd.DataFrame, fold: str, parts: dict) -> None:
        meta = meta_of(model)
        own = f"own training queries ({other(fold)}-test{' less val' if parts['val'] else ', all'})"
        sets = [(own, parts["train"]),
                (f"own validation queries ({other(fold)}-test)", parts["val"]),
                (f"held-out fold ({fold}-test, as the table)", fold_q[fold])]
        sets = [(n, q) for n, q in sets if q]
        for name, q in sets:
            e = evaluate({"model": run, "bm25": bm25}, q, topics, qrels, ds)
            r = random_figures(pool, q, topics, qrels, ds, args.shuffles)
            rows.append(row(facet, label, name, q, e["model"], fit_stats(run, q, grades, collapse), meta))
            rows.append(row(facet, "BM25", name, q, e["bm25"]))
            rows.append(row(facet, f"random ({args.shuffles} shufflings)", name, q, r))

    for fold in Fo.FOLDS:
        per_model(f"table recipe, model for {fold} (trained on {other(fold)}-test)", models[fold], runs[fold], fold,
                  train_split(facet, fold, settings))

    if control:
        fold = args.control_fold
        cs = Fo.FoldSettings(facet=facet, **{**TABLE, "epochs": args.control_epochs, "val_seeds": 0})
        path = Fo.fold_model_path(fold, cs, work)
        t0, c0 = time.perf_counter(), time.process_time()
        losses_file = cache / f"{path.name}.step_losses.json"
        if (path / "pt_meta.json").exists():
            model = FacetCrossEncoder(path)
        else:
            print(f"[{facet}] control: training the model for {fold} on {other(fold)}-test, {args.control_epochs} "
                  "epochs, no validation hold-out", flush=True)
            from pyterrier_sci.plugins.sciface import training as Tr  # noqa: N812
            real, losses = Tr.run_trainer, []

            def recording(trainer, verbose=False):  # the training path's own trainer run; keeps its step losses
                out = real(trainer, verbose)
                losses.extend(out)
                return out
            Tr.run_trainer = recording
            try:
                model = Fo._train_fold(fold, cs, path, work, verbose=False)
            finally:
                Tr.run_trainer = real
            losses_file.write_text(json.dumps({"losses": losses, "wall_s": time.perf_counter() - t0,
                                               "cpu_s": time.process_time() - c0}))
        if losses_file.exists():
            rec = json.loads(losses_file.read_text())
            losses = rec["losses"]
            notes.append(f"cost - {facet}: the control model trained in {rec['wall_s']:.0f} s wall, "
                         f"{rec['cpu_s']:.0f} s CPU (measured when first trained); {meta_of(model)['steps']} steps, "
                         f"{meta_of(model)['triplets_per_epoch']} triplets per epoch")
            per_epoch = -(-meta_of(model)["triplets_per_epoch"] // 16)
            ep = [float(np.mean(losses[i:i + per_epoch])) for i in range(0, len(losses), per_epoch)]
            notes.append(f"control - {facet}: training loss per epoch (mean of its {per_epoch} steps): "
                         + ", ".join(f"{x:.3f}" for x in ep))
        run = scored(model, feats[feats["qid"].isin(fold_q["fold1"] + fold_q["fold2"])], cache)
        per_model(f"control: {args.control_epochs} epochs, no val hold-out, model for {fold} "
                  f"(trained on {other(fold)}-test)", model, run, fold, train_split(facet, fold, cs))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--facets", nargs="+", default=["method", "background"], choices=["method", "background"])
    ap.add_argument("--control-facets", nargs="*", default=["method"], choices=["method", "background"])
    ap.add_argument("--control-epochs", type=int, default=12)
    ap.add_argument("--control-fold", default="fold2", choices=list(Fo.FOLDS),
                    help="the fold whose model the control trains (on the other fold's test queries)")
    ap.add_argument("--shuffles", type=int, default=100)
    ap.add_argument("--work", default=None, help="keeps the models and scored pools (default: a temporary directory)")
    ap.add_argument("--out", default="benchmarks/results/sciface_fit_check.md")
    ap.add_argument("--note", default=None, help="a line added to the results file's header")
    args = ap.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="sciface-fit-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    rows, notes = [], []
    for facet in args.facets:
        run_facet(facet, work, args, rows, notes, facet in (args.control_facets or []))
        record(args, argv, rows, notes, t0, c0, load0)   # after each facet: a stopped run keeps what it did
    print(markdown(pd.DataFrame(rows)))
    print("\n".join(notes))
    return pd.DataFrame(rows)


def record(args, argv, rows, notes, t0, c0, load0) -> None:
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    df = pd.DataFrame(rows)
    details = [f"CPU model (/proc/cpuinfo): {cpu_name()}; torch threads {__import__('torch').get_num_threads()}; "
               f"date {time.strftime('%Y-%m-%d')}",
               f"table recipe (pipelines/reproduce/sciface.yaml sciface_ce): {json.dumps(TABLE)}; MiniLM body, fresh "
               "head, margin 0.5, batch 16, Method collapse 0-3 -> 0-2",
               "measures: the table's NDCG%20 and MAP (sciface.*; the mean of the fold means - one fold = the plain "
               "mean), in percent; random = the mean of seeded uniform shufflings of each pool (seed 0), BM25 = the "
               "table's (PISA, k1 0.9, b 0.4) on the same queries",
               "pairs ordered right / triplet loss: over all training triplets of the queries (pool pairs with "
               "different training grades), from the saved model's scores; training loss (trainer mean): the "
               "trainer's mean loss over all steps (pt_meta.json); best epoch: the epoch the validation Spearman "
               "kept",
               f"whole run {wall:.0f} s wall, {cpu:.0f} s CPU of this process (models cached in --work are not "
               "retrained)"] + ([f"note: {args.note}"] if args.note else [])
    sections = [("figures", markdown(df)), ("checks", "\n".join(f"* {n}" for n in notes))]
    write_results(args.out, "sciface_fit_check: does the SciFACE stand-in fit its own training queries?",
                  "benchmarks/sciface_fit_check.py", argv, details, sections, load_note(load0))


if __name__ == "__main__":
    main()
