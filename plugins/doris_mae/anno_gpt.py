"""Anno-GPT (DORIS-MAE §4): LLM annotation of (aspect, abstract) pairs on the 0-2 scale (resumable,
``templates/anno_gpt*.txt``), compilation of query and sub-query rankings (Eqs. 1-2), and the
agreement statistics (scikit-learn / scipy) with bootstrap CIs of Table 1; ``pyterrier-sci annotate
run|compile|agreement``.  See ``docs/doris-mae.md``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_sci.agreement import accuracy, label_codes, macro_f1, spearman
from pyterrier_sci.artifacts import atomic_file
from pyterrier_sci.corpus import irds_id
from pyterrier_sci.datasets import doris_mae
from pyterrier_sci.datasets.doris_mae import subquery_of
from pyterrier_sci.llm import LLMClient, LLMError, LLMSettings, Usage, settings_from
from pyterrier_sci.llm.client import UsesLLM
from pyterrier_sci.llm.text import estimate_tokens, load_template, render, truncate
from pyterrier_sci.pipeline import load_config

TEMPLATE_PACKAGE = __package__
#: the four labels of the prompt and their 0-2 scores (DISPUTE and AGREE are both level 1)
LABEL_SCORES = {"DISAGREE": 0, "DISPUTE": 1, "AGREE": 1, "CONCUR": 2}
_LABEL_RE = re.compile(r"\b(DISAGREE|DISPUTE|AGREE|CONCUR)(?:S|D)?\b")
MODES = ("reasoning", "choice")
PAIR_KEY = ("aspect_id", "docno")


def parse_label(text: str) -> Optional[str]:
    """The decision of an answer: the *last* of DISAGREE / DISPUTE / AGREE / CONCUR written in capitals
    (``DISAGREES``, ``CONCURS`` count too), as the prompt asks; ``None`` when there is none (lower-case
    mentions are not decisions: the reasoning discusses the rules in lower case)."""
    found = list(_LABEL_RE.finditer(text or ""))
    return found[-1].group(1) if found else None


# ------------------------------------------------------------------------------------------------
# question pairs
# ------------------------------------------------------------------------------------------------

def question_pairs(dataset: str, qids: Optional[Iterable[str]] = None, limit: Optional[int] = None) -> pd.DataFrame:
    """The (aspect or sub-aspect, abstract) pairs of a ``sci/doris-mae`` id: columns ``aspect_id``,
    ``aspect``, ``docno``, ``abstract`` and ``qids`` (the queries the pair serves), one row per distinct
    (aspect id, abstract); ``qids`` restricts the queries, ``limit`` keeps the first pairs."""
    import ir_datasets

    queries = doris_mae.aspect_queries(dataset)
    pools = doris_mae.scores_frame(dataset).groupby("qid", sort=False)["docno"].apply(list).to_dict()
    keep = None if qids is None else {str(q) for q in qids}
    rows: Dict[Tuple[str, str], dict] = {}
    for qid, q in queries.items():
        if keep is not None and qid not in keep:
            continue
        texts = q.id_texts()
        for aid in q.aspect_ids():
            for d in pools.get(qid, []):
                key = (aid, d)
                if key in rows:
                    rows[key]["qids"].append(qid)
                else:
                    rows[key] = {"aspect_id": aid, "aspect": texts[aid], "docno": d, "qids": [qid]}
        if limit is not None and len(rows) >= limit:
            break
    df = pd.DataFrame(list(rows.values()), columns=["aspect_id", "aspect", "docno", "qids"])
    if limit is not None:
        df = df.head(limit)
    store = ir_datasets.load(irds_id(dataset)).docs_store()
    docs = store.get_many(list(dict.fromkeys(df["docno"]))) if len(df) else {}
    df.insert(3, "abstract", [docs[d].default_text() for d in df["docno"]])
    return df.reset_index(drop=True)


# ------------------------------------------------------------------------------------------------
# the annotator
# ------------------------------------------------------------------------------------------------

@dataclass
class CostEstimate:
    """Tokens and cost of annotating ``pairs`` pairs (``cost_usd`` None without a price for the model)."""
    pairs: int
    prompt_tokens: int
    completion_tokens: int
    model: str
    cost_usd: Optional[float]
    price: Optional[Dict[str, float]] = None

    def describe(self) -> str:
        lines = [f"{self.pairs:,} question pairs to annotate with {self.model}",
                 f"estimated tokens: prompt ~{self.prompt_tokens:,}, completion ~{self.completion_tokens:,} "
                 f"(4 characters per token; cached answers cost nothing)"]
        if self.cost_usd is None:
            lines.append(f"estimated cost: unknown (no price for model {self.model!r}: set llm.prices, or "
                         "--price-prompt/--price-completion in USD per million tokens)")
        else:
            lines.append(f"estimated cost: ${self.cost_usd:,.2f} (USD per million tokens: "
                         f"prompt {self.price['prompt']:g}, completion {self.price['completion']:g})")
        return "\n".join(lines)


class AnnoGPT(UsesLLM):
    """Annotates question pairs with an LLM.

    Args:
        llm: LLM settings (a dict such as a pipeline config's ``llm:`` section, :class:`LLMSettings`,
            or ``None`` for the defaults and environment).
        template: a template of this package (``anno_gpt``: the paper's prompt; ``anno_gpt_choice``:
            a one-word answer), a file, or template text with ``$aspect`` and ``$abstract``.
        mode: ``reasoning`` (free text with reasoning, decision = the last capitalised label; the
            paper's procedure) or ``choice`` (a decision between the four labels through
            :meth:`LLMClient.choose`: log-probabilities of a plain completion for base models, no
            reasoning kept).
        max_tokens: cap on the generated tokens of a reasoning answer.
        max_abstract_tokens: truncate abstracts to about this many tokens (``None``: no limit).
        on_error: ``raise`` (a call that failed after the client's retries stops the run) or
            ``flag`` (the pair is recorded as unusable with the error, and can be retried later).
    """

    def __init__(self, llm: Union[None, dict, LLMSettings] = None, template: Optional[str] = None,
                 mode: str = "reasoning", max_tokens: int = 768, max_abstract_tokens: Optional[int] = None,
                 on_error: str = "raise"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if on_error not in ("raise", "flag"):
            raise ValueError("on_error must be 'raise' or 'flag'")
        self.settings = llm if isinstance(llm, LLMSettings) else settings_from(llm)
        self.mode = mode
        self.template_spec = template or ("anno_gpt" if mode == "reasoning" else "anno_gpt_choice")
        self.template = load_template(self.template_spec, package=TEMPLATE_PACKAGE, sandbox=self.settings.sandbox)
        self.max_tokens = max_tokens
        self.max_abstract_tokens = max_abstract_tokens
        self.on_error = on_error
        self.usage = Usage(model=self.settings.model)
        self._client: Optional[LLMClient] = None

    def __repr__(self) -> str:
        return f"AnnoGPT(model={self.settings.model!r}, mode={self.mode!r}, template={self.template_spec!r})"

    def prompt(self, aspect: str, abstract: str) -> str:
        return render(self.template, aspect=aspect, abstract=truncate(abstract, self.max_abstract_tokens))

    # -- one pair -----------------------------------------------------------------------------
    def annotate_one(self, aspect: str, abstract: str) -> Dict[str, Any]:
        """``{"label", "score", "reasoning", "usable", "error"}`` for one pair."""
        prompt = self.prompt(aspect, abstract)
        try:
            if self.mode == "reasoning":
                comp = self.client.generate(prompt, max_tokens=self.max_tokens)
                text = comp.text
                label = parse_label(text)
            else:
                choice = self.client.choose(prompt, options=tuple(LABEL_SCORES))
                text, label = choice.text, choice.answer
        except LLMError as e:
            if self.on_error == "raise":
                raise
            self.usage.add(unusable=1)
            return {"label": None, "score": None, "reasoning": "", "usable": False, "error": str(e)}
        if label is None:
            self.usage.add(unusable=1)
        return {"label": label, "score": LABEL_SCORES.get(label) if label else None, "reasoning": text,
                "usable": label is not None, "error": ""}

    # -- many pairs ---------------------------------------------------------------------------
    def annotate(self, pairs: pd.DataFrame) -> pd.DataFrame:
        """``pairs`` (columns ``aspect``, ``abstract``; others kept) with ``label``, ``score`` (0-2, NaN
        when unusable), ``reasoning``, ``usable``, ``error`` and ``model`` added; calls run concurrently."""
        pairs = pairs.reset_index(drop=True)
        out = self.client.map(lambda r: self.annotate_one(r[0], r[1]), list(zip(pairs["aspect"], pairs["abstract"])),
                              desc="anno-gpt")
        res = pd.DataFrame(out, columns=["label", "score", "reasoning", "usable", "error"])
        res["score"] = pd.to_numeric(res["score"], errors="coerce")
        return pd.concat([pairs, res], axis=1).assign(model=self.settings.model)

    def estimate(self, pairs: pd.DataFrame, completion_tokens: int = 350,
                 prices: Optional[Mapping[str, float]] = None) -> CostEstimate:
        """Tokens (4 characters per token) and cost of annotating ``pairs``; ``completion_tokens`` per answer
        (the paper's reasoning answers run to a few hundred tokens; ``choice`` mode answers 3).  Prices
        (USD per million tokens, ``{"prompt": .., "completion": ..}``) come from ``prices`` or the
        settings' price table for the model."""
        prompt_tokens = sum(estimate_tokens(self.prompt(a, b)) for a, b in zip(pairs["aspect"], pairs["abstract"]))
        per = 3 if self.mode == "choice" else int(completion_tokens)
        completion = per * len(pairs)
        price = dict(prices) if prices else (dict(self.settings.prices.get(self.settings.model, {})) or None)
        cost = None
        if price:
            price = {"prompt": float(price.get("prompt", 0.0)), "completion": float(price.get("completion", 0.0))}
            cost = (prompt_tokens * price["prompt"] + completion * price["completion"]) / 1e6
        return CostEstimate(len(pairs), prompt_tokens, completion, self.settings.model, cost, price)

    def annotate_file(self, pairs: pd.DataFrame, path: Union[str, Path], chunk_size: int = 64,
                      progress: bool = True) -> pd.DataFrame:
        """Annotates the pairs not yet in the JSONL file ``path`` (by ``aspect_id``, ``docno``) and
        appends each finished chunk to it (one JSON object per pair, flushed and synced), so an
        interrupted run resumes where it stopped; unusable answers are kept in the file and not asked
        again (delete their lines to retry).  Returns every annotation of the file."""
        path = Path(path)
        _drop_partial_last_line(path)
        done = read_annotations(path)
        done_keys = set(zip(done["aspect_id"].astype(str), done["docno"].astype(str))) if len(done) else set()
        todo = pairs[[(str(a), str(d)) not in done_keys for a, d in zip(pairs["aspect_id"], pairs["docno"])]]
        todo = todo.drop_duplicates(list(PAIR_KEY)).reset_index(drop=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        bar = pt.tqdm(total=len(todo), desc="anno-gpt", unit="pair", disable=not progress or len(todo) == 0)
        try:
            for start in range(0, len(todo), chunk_size):
                chunk = self.annotate(todo.iloc[start:start + chunk_size])
                with open(path, "a", encoding="utf-8") as fout:
                    for rec in chunk.to_dict("records"):
                        fout.write(json.dumps(_jsonable(rec), ensure_ascii=False) + "\n")
                    fout.flush()
                    os.fsync(fout.fileno())
                bar.update(len(chunk))
        finally:
            bar.close()
        return read_annotations(path)


def _drop_partial_last_line(path: Path) -> None:
    """Cuts a last line without its newline (a write interrupted half-way) so that appending starts
    on a line of its own."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        f.truncate(data.rfind(b"\n") + 1)


def _jsonable(rec: dict) -> dict:
    out = {}
    for k, v in rec.items():
        if isinstance(v, float) and math.isnan(v):
            v = None
        elif isinstance(v, (np.integer,)):
            v = int(v)
        elif isinstance(v, (np.floating,)):
            v = float(v)
        elif isinstance(v, np.bool_):
            v = bool(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[k] = v
    return out


def read_annotations(path: Union[str, Path]) -> pd.DataFrame:
    """The annotations of a JSONL file written by :meth:`AnnoGPT.annotate_file` (an empty frame when the
    file does not exist; a truncated last line, from an interrupted write, is ignored)."""
    path = Path(path)
    cols = ["aspect_id", "aspect", "docno", "label", "score", "reasoning", "usable"]
    if not path.exists():
        return pd.DataFrame(columns=cols)
    recs = []
    with open(path, encoding="utf-8") as fin:
        for line in fin:
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    df = pd.DataFrame(recs) if recs else pd.DataFrame(columns=cols)
    for c in ("aspect_id", "docno"):
        if c in df.columns:
            df[c] = df[c].astype(str)
    if "score" in df.columns:
        df["score"] = pd.to_numeric(df["score"], errors="coerce")
    return df.drop_duplicates(list(PAIR_KEY), keep="last").reset_index(drop=True)


# ------------------------------------------------------------------------------------------------
# Eq. 1 and Eq. 2
# ------------------------------------------------------------------------------------------------

def _score_table(annotations: pd.DataFrame) -> Dict[Tuple[str, str], float]:
    ann = annotations.dropna(subset=["score"])
    return {(str(a), str(d)): float(s) for a, d, s in zip(ann["aspect_id"], ann["docno"], ann["score"])}


def compile_scores(annotations: pd.DataFrame, queries, pools: Optional[Mapping[str, Sequence[str]]] = None,
                   missing: str = "error") -> pd.DataFrame:
    """Eq. 1 (Eq. 2 for sub-queries): for each query (:class:`~pyterrier_sci.datasets.doris_mae.AspectQuery`,
    a list or ``{qid: query}``) and each abstract of its pool, S = the sum of the pair scores of the
    query's distinct aspects and sub-aspects.  ``pools`` gives each query's abstracts (default: every
    abstract annotated for one of its aspects).  A pair without a usable score is an error
    (``missing="error"``), counts 0 (``"zero"``), or leaves the abstract out (``"skip"``).

    Returns ``qid``, ``docno``, ``score`` (S), ``n_aspects`` (|Q|), ``normalised`` (S/|Q|), ``relevant``
    (normalised >= 1), in pool order."""
    if missing not in ("error", "zero", "skip"):
        raise ValueError("missing must be 'error', 'zero' or 'skip'")
    table = _score_table(annotations)
    qs = list(queries.values()) if isinstance(queries, Mapping) else list(queries)
    by_aspect: Dict[str, List[str]] = {}
    for a, d in table:
        by_aspect.setdefault(a, []).append(d)
    rows = []
    for q in qs:
        ids = q.aspect_ids()
        if pools is not None:
            docs = list(pools.get(q.query_id, pools.get(q.parent_id, [])))
        else:
            docs = list(dict.fromkeys(d for a in ids for d in by_aspect.get(a, [])))
        n = len(ids)
        for d in docs:
            total, absent = 0.0, []
            for a in ids:
                s = table.get((a, d))
                if s is None:
                    absent.append(a)
                else:
                    total += s
            if absent:
                if missing == "error":
                    raise ValueError(f"query {q.query_id}: no usable annotation of abstract {d} for aspect(s) "
                                     f"{', '.join(absent[:5])}{' ...' if len(absent) > 5 else ''} "
                                     "(missing='zero' counts them 0)")
                if missing == "skip":
                    continue
            rows.append((q.query_id, d, total, n))
    df = pd.DataFrame(rows, columns=["qid", "docno", "score", "n_aspects"])
    if len(df) and (df["score"] == df["score"].round()).all():
        df["score"] = df["score"].astype(int)
    df["normalised"] = df["score"] / df["n_aspects"]
    df["relevant"] = df["score"] >= df["n_aspects"]
    return df


def subquery_scores(annotations: pd.DataFrame, queries, k: int = 2,
                    pools: Optional[Mapping[str, Sequence[str]]] = None, missing: str = "error") -> pd.DataFrame:
    """Eq. 2 for every combination of ``k`` aspects of each query (sub-query ids ``<qid>_<i>_<j>``, 1-based
    aspect positions; each aspect brings its sub-aspects).  Unlike the release's ``subquery-k`` ids, no
    combination is left out here: which query sentences belong to which aspect is not needed."""
    qs = list(queries.values()) if isinstance(queries, Mapping) else list(queries)
    subs = [subquery_of(q, comb) for q in qs for comb in itertools.combinations(range(len(q.aspects)), k)]
    return compile_scores(annotations, subs, pools=pools, missing=missing)


def rankings(scores: pd.DataFrame) -> Dict[str, List[str]]:
    """``{qid: docnos by decreasing S}`` (ties keep pool order): the ground-truth ranking of each query."""
    out = {}
    for qid, g in scores.groupby("qid", sort=False):
        out[str(qid)] = list(g.sort_values("score", ascending=False, kind="stable")["docno"])
    return out


def to_qrels(scores: pd.DataFrame) -> pd.DataFrame:
    """PyTerrier qrels (``qid``, ``docno``, ``label`` = S, ``n_aspects``) that the ``doris.*`` measures read."""
    return scores[["qid", "docno", "score", "n_aspects"]].rename(columns={"score": "label"}).reset_index(drop=True)


# ------------------------------------------------------------------------------------------------
# agreement statistics
# ------------------------------------------------------------------------------------------------

METRICS = {"f1_macro": macro_f1, "accuracy": accuracy, "spearman": spearman}
METRIC_NAMES = {"f1_macro": "F1-score (macro)", "accuracy": "Accuracy", "spearman": "Spearman's rho"}


def agreement(a: Sequence, b: Sequence) -> Dict[str, float]:
    """Macro-F1, exact accuracy and Spearman's rho between two annotators' scores of the same pairs."""
    return {name: fn(a, b) for name, fn in METRICS.items()}


def adjudicate(*annotators: Sequence) -> np.ndarray:
    """Majority vote per pair (the paper's adjudication of its three human annotators); without a
    majority, the median (the middle score when three annotators all differ)."""
    m = np.stack([np.asarray(x, dtype=float) for x in annotators], axis=1)
    out = np.empty(m.shape[0])
    for i, row in enumerate(m):
        vals, counts = np.unique(row, return_counts=True)
        out[i] = vals[np.argmax(counts)] if counts.max() * 2 > len(row) else np.median(row)
    return out


def bootstrap_ci(statistic, *columns: Sequence, n: int = 1000, seed: int = 0, alpha: float = 0.05
                 ) -> Tuple[float, float, np.ndarray]:
    """Percentile bootstrap CI of ``statistic(*columns)`` resampling the pairs (rows) with replacement,
    the same rows for every column: ``(low, high, the n bootstrap values)``."""
    cols = [np.asarray(c) for c in columns]
    size = len(cols[0])
    rng = np.random.default_rng(seed)
    values = np.empty(n)
    for i in range(n):
        idx = rng.integers(0, size, size)
        values[i] = statistic(*[c[idx] for c in cols])
    with np.errstate(all="ignore"):
        low, high = np.nanpercentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high), values


def resampled(name: str, a: Sequence, b: Sequence, idx: np.ndarray) -> np.ndarray:
    """``METRICS[name](a[idx[r]], b[idx[r]])`` for every bootstrap resample ``r`` (row of ``idx``) at
    once, with the same library calls on the resamples stacked: scikit-learn's per-label F1 and
    confusion counts over labels made distinct per resample (macro-F1 averages the labels a resample
    uses, accuracy counts its agreements), and scipy's average ranks and Pearson correlation per row
    (Spearman).  Thousands of resamples cost one call instead of thousands."""
    n, size = idx.shape
    if size == 0:
        return np.full(n, np.nan)
    if name == "spearman":
        from scipy.stats import pearsonr, rankdata
        ra = rankdata(np.asarray(a, dtype=float)[idx], axis=1)
        rb = rankdata(np.asarray(b, dtype=float)[idx], axis=1)
        constant = (ra == ra[:, :1]).all(axis=1) | (rb == rb[:, :1]).all(axis=1)
        out = np.full(n, np.nan)
        if (~constant).any():
            out[~constant] = pearsonr(ra[~constant], rb[~constant], axis=1).statistic
        return out
    from sklearn.metrics import multilabel_confusion_matrix, precision_recall_fscore_support
    ca, cb = label_codes(a, b)
    n_labels = int(max(ca.max(), cb.max())) + 1
    offset = (np.arange(n) * n_labels)[:, None]
    ya, yb = (ca[idx] + offset).ravel(), (cb[idx] + offset).ravel()
    labels = np.arange(n * n_labels)
    if name == "accuracy":
        tp = multilabel_confusion_matrix(ya, yb, labels=labels)[:, 1, 1].reshape(n, n_labels)
        return tp.sum(axis=1) / size
    f1 = precision_recall_fscore_support(ya, yb, labels=labels, average=None, zero_division=0)[2].reshape(n, n_labels)
    used = (np.bincount(ya, minlength=n * n_labels) + np.bincount(yb, minlength=n * n_labels)).reshape(n, n_labels) > 0
    return np.array([np.mean(f1[r][used[r]]) for r in range(n)])


def _mean_pairwise(metric, cols: Sequence[np.ndarray], pairs: Sequence[Tuple[int, int]]) -> float:
    vals = [metric(cols[i], cols[j]) for i, j in pairs]
    return float(np.nanmean(vals)) if vals else float("nan")


def agreement_report(data: pd.DataFrame, humans: Sequence[str], llms: Sequence[str], n: int = 1000, seed: int = 0,
                     alpha: float = 0.05) -> pd.DataFrame:
    """Table 1 of the paper from a frame with one score column per annotator (rows: the same pairs).

    Columns per metric (macro-F1, accuracy, Spearman): ``LLM&Adj`` (each LLM run against the majority of
    the humans, averaged over runs), ``avg H&H`` (mean over human pairs), ``avg LLM&H`` (mean over
    every LLM run x human), their percentile bootstrap CIs (``H&H CI``, ``LLM&H CI``), ``difference``
    (avg LLM&H - avg H&H) and ``p-value`` of the null hypothesis "no difference": a paired bootstrap
    over the pairs (the same resample for every annotator) of the difference, two-sided,
    ``p = min(1, 2 * min(P(d* <= 0), P(d* >= 0)))``.  The paper does not spell out its test; this is
    the bootstrap test consistent with its bootstrap CIs.  Needs two humans or more."""
    humans, llms = list(humans), list(llms)
    if len(humans) < 2:
        raise ValueError("the human-human agreement needs at least two human annotators")
    if not llms:
        raise ValueError("name at least one LLM annotator column")
    df = data[humans + llms].dropna()
    cols = [df[c].to_numpy(dtype=float) for c in humans + llms]
    h = list(range(len(humans)))
    g = list(range(len(humans), len(humans) + len(llms)))
    hh = list(itertools.combinations(h, 2))
    gh = [(i, j) for i in g for j in h]
    adj = adjudicate(*[cols[i] for i in h])
    size = len(df)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, size, size=(n, size)) if size else np.zeros((n, 0), dtype=int)
    rows = []
    for name, metric in METRICS.items():
        boot = {(i, j): resampled(name, cols[i], cols[j], idx) for i, j in hh + gh}
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # a resample where no pair has a value
            boot_hh = np.nanmean(np.stack([boot[p] for p in hh]), axis=0)
            boot_gh = np.nanmean(np.stack([boot[p] for p in gh]), axis=0)
        diff = boot_gh - boot_hh
        ok = ~np.isnan(diff)
        p = float(min(1.0, 2 * min(np.mean(diff[ok] <= 0), np.mean(diff[ok] >= 0)))) if ok.any() else float("nan")
        q = [100 * alpha / 2, 100 * (1 - alpha / 2)]
        with np.errstate(all="ignore"):
            hh_ci = tuple(float(x) for x in np.nanpercentile(boot_hh, q))
            gh_ci = tuple(float(x) for x in np.nanpercentile(boot_gh, q))
        avg_hh, avg_gh = _mean_pairwise(metric, cols, hh), _mean_pairwise(metric, cols, gh)
        rows.append({"metric": METRIC_NAMES[name], "LLM&Adj": float(np.mean([metric(cols[i], adj) for i in g])),
                     "avg H&H": avg_hh, "avg LLM&H": avg_gh, "H&H CI": hh_ci, "LLM&H CI": gh_ci,
                     "difference": avg_gh - avg_hh, "p-value": p, "pairs": size})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------
# the command line: pyterrier-sci annotate ...
# ------------------------------------------------------------------------------------------------

def add_annotate_commands(subparsers) -> argparse.ArgumentParser:
    """Adds ``annotate`` (sub-commands ``run``, ``compile``, ``agreement``) to an argparse sub-parsers
    object; sets ``func=annotate_main``."""
    p = subparsers.add_parser("annotate", help="Anno-GPT: LLM annotation of aspect-abstract pairs, Eq. 1-2, agreement")
    sub = p.add_subparsers(dest="annotate_command", metavar="{run,compile,agreement}")

    s = sub.add_parser("run", help="annotate the question pairs of a DORIS-MAE dataset "
                                   "(cost estimate first; resumable)")
    s.add_argument("dataset", help="a sci/doris-mae id, e.g. irds:sci/doris-mae/birco-dev")
    s.add_argument("--output", required=True, help="JSONL file of annotations; pairs already in it are skipped")
    s.add_argument("--queries", help="comma-separated query ids (default: all of the dataset)")
    s.add_argument("--limit", type=int, help="annotate at most this many pairs")
    s.add_argument("--mode", choices=MODES, default="reasoning")
    s.add_argument("--template",
                   help="prompt template (default: anno_gpt, the paper's; anno_gpt_choice in choice mode)")
    s.add_argument("--config", help="pipeline YAML whose llm: section gives the LLM settings")
    s.add_argument("--model", help="LLM model name (overrides config and environment)")
    s.add_argument("--base-url", help="OpenAI-compatible /v1 URL (overrides config and environment)")
    s.add_argument("--concurrency", type=int, help="requests in flight")
    s.add_argument("--max-tokens", type=int, default=768, help="cap on a reasoning answer's tokens (default 768)")
    s.add_argument("--max-abstract-tokens", type=int, help="truncate abstracts to about this many tokens")
    s.add_argument("--completion-tokens", type=int, default=350,
                   help="tokens per answer assumed by the estimate (default 350)")
    s.add_argument("--price-prompt", type=float, help="USD per million prompt tokens, for the estimate")
    s.add_argument("--price-completion", type=float, help="USD per million completion tokens, for the estimate")
    s.add_argument("--on-error", choices=("raise", "flag"), default="raise")
    s.add_argument("--chunk-size", type=int, default=64, help="pairs written to the file at a time")
    s.add_argument("--dry-run", action="store_true", help="print the estimate and stop")
    s.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation after the estimate")

    s = sub.add_parser("compile", help="Eq. 1 (or Eq. 2 with --subquery K): query rankings from annotations, as qrels")
    s.add_argument("annotations", help="JSONL file written by 'annotate run' (or a CSV with aspect_id, docno, score)")
    s.add_argument("--dataset", required=True, help="the sci/doris-mae id the annotations belong to (queries, pools)")
    s.add_argument("--subquery", type=int, help="compile the sub-queries of K aspects (Eq. 2)")
    s.add_argument("--missing", choices=("error", "zero", "skip"), default="error")
    s.add_argument("--output", required=True, help="TSV: qid, docno, score, n_aspects, normalised, relevant")

    s = sub.add_parser("agreement", help="agreement statistics between annotators (Table 1 of the paper)")
    s.add_argument("file", help="CSV/TSV/JSONL with one score column per annotator, one row per pair")
    s.add_argument("--humans", required=True, help="comma-separated human annotator columns (two or more)")
    s.add_argument("--llm", required=True, help="comma-separated LLM annotator columns (e.g. two runs)")
    s.add_argument("--bootstrap", type=int, default=1000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", action="store_true")
    p.set_defaults(func=annotate_main)
    return p


def _read_table(path: str, annotations: bool = False) -> pd.DataFrame:
    if path.endswith((".jsonl", ".jsonl.gz")):
        return read_annotations(path) if annotations else pd.read_json(path, lines=True)
    if path.endswith((".tsv", ".tsv.gz")):
        return pd.read_csv(path, sep="\t")
    return pd.read_csv(path)


def _settings(args) -> LLMSettings:
    config = {}
    if getattr(args, "config", None):
        config = dict(load_config(args.config).settings.get("llm") or {})
    overrides = {k: v for k, v in (("model", args.model), ("base_url", args.base_url),
                                   ("concurrency", args.concurrency)) if v is not None}
    return settings_from(config, **overrides)


def _cmd_run(args) -> int:
    qids = [q.strip() for q in args.queries.split(",")] if args.queries else None
    pairs = question_pairs(args.dataset, qids=qids, limit=args.limit)
    ann = AnnoGPT(_settings(args), template=args.template, mode=args.mode, max_tokens=args.max_tokens,
                  max_abstract_tokens=args.max_abstract_tokens, on_error=args.on_error)
    done = read_annotations(args.output)
    done_keys = set(zip(done["aspect_id"].astype(str), done["docno"].astype(str))) if len(done) else set()
    todo = pairs[[(a, d) not in done_keys for a, d in zip(pairs["aspect_id"], pairs["docno"])]]
    prices = None
    if args.price_prompt is not None or args.price_completion is not None:
        prices = {"prompt": args.price_prompt or 0.0, "completion": args.price_completion or 0.0}
    est = ann.estimate(todo, completion_tokens=args.completion_tokens, prices=prices)
    print(f"Anno-GPT on {args.dataset}: {len(pairs):,} question pairs, "
          f"{len(pairs) - len(todo):,} already in {args.output}")
    print(est.describe())
    if args.dry_run or len(todo) == 0:
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            print("not annotating: confirm with --yes (no terminal to ask)", file=sys.stderr)
            return 2
        if input("proceed? [y/N] ").strip().lower() not in ("y", "yes"):
            print("not annotating", file=sys.stderr)
            return 1
    result = ann.annotate_file(pairs, args.output, chunk_size=args.chunk_size)
    u = ann.usage
    usable = int(result["usable"].fillna(False).astype(bool).sum()) if "usable" in result.columns else len(result)
    print(f"{len(result):,} annotations in {args.output} ({usable:,} usable); this run: {u.calls} calls, "
          f"{u.cache_hits} cache hits, {u.prompt_tokens:,} prompt + {u.completion_tokens:,} completion tokens, "
          f"{u.unusable} unusable answers")
    return 0


def _cmd_compile(args) -> int:
    ann = _read_table(args.annotations, annotations=True)
    ann["aspect_id"], ann["docno"] = ann["aspect_id"].astype(str), ann["docno"].astype(str)
    queries = doris_mae.aspect_queries(args.dataset)
    base = {q.query_id: q for q in queries.values()}
    pools = doris_mae.scores_frame(args.dataset).groupby("qid", sort=False)["docno"].apply(list).to_dict()
    if args.subquery:
        scores = subquery_scores(ann, base, args.subquery, pools=pools, missing=args.missing)
    else:
        scores = compile_scores(ann, base, pools=pools, missing=args.missing)
    with atomic_file(args.output, "--output") as tmp:
        scores.to_csv(tmp, sep="\t", index=False)
    print(f"wrote {len(scores):,} judgements of {scores['qid'].nunique()} queries "
          f"({int(scores['relevant'].sum())} relevant) to {args.output}", file=sys.stderr)
    return 0


def _cmd_agreement(args) -> int:
    df = _read_table(args.file)
    humans = [c.strip() for c in args.humans.split(",") if c.strip()]
    llms = [c.strip() for c in args.llm.split(",") if c.strip()]
    missing = [c for c in humans + llms if c not in df.columns]
    if missing:
        raise ValueError(f"columns not in {args.file}: {', '.join(missing)} (found {', '.join(map(str, df.columns))})")
    table = agreement_report(df, humans, llms, n=args.bootstrap, seed=args.seed)
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        show = table.copy()
        for c in ("LLM&Adj", "avg H&H", "avg LLM&H", "difference"):
            show[c] = show[c].map(lambda x: f"{100 * x:.2f}")
        for c in ("H&H CI", "LLM&H CI"):
            show[c] = show[c].map(lambda t: f"({100 * t[0]:.2f}, {100 * t[1]:.2f})")
        show["p-value"] = show["p-value"].map(lambda x: f"{x:.2f}")
        print(show.to_string(index=False))
    return 0


def annotate_main(args: argparse.Namespace) -> int:
    """Runs an ``annotate`` sub-command; returns the exit status."""
    cmd = getattr(args, "annotate_command", None)
    if cmd == "run":
        return _cmd_run(args)
    if cmd == "compile":
        return _cmd_compile(args)
    if cmd == "agreement":
        return _cmd_agreement(args)
    print("usage: pyterrier-sci annotate {run,compile,agreement} ...", file=sys.stderr)
    return 2
