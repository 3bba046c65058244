"""SciFACE stage 1: :func:`gather_candidates` (the top ``k`` of each seed from any first stage, the
seed removed), :class:`FacetLabeller` (Background and Method scores 0-3 by the LLM with the paper's
prompt; unusable answers counted, never guessed) and :func:`label_pairs` (training pairs for the
facet cross-encoders).  See ``docs/sciface.md``.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, Optional, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.llm import LLMClient, LLMError, LLMSettings, Usage, settings_from
from pyterrier_sci.llm.client import UsesLLM, extract_json
from pyterrier_sci.llm.text import render, template_or_text, truncate

FACETS = ("background", "method")
OWNED = ("background", "method", "background_reason", "method_reason", "label_unusable")


def parse_facet_label(text: str) -> Optional[Dict[str, Any]]:
    """``{"background": int, "method": int, "background_reason": str, "method_reason": str}`` from a
    model answer, or ``None`` when it is unusable.  Scores must be integers 0-3 (``2`` or ``"2"``;
    ``2.5``, ``4``, ``"high"`` are unusable); each facet may be ``{"score": s, "reason": r}`` or a
    bare score."""
    obj = extract_json(text or "")
    if obj is None:
        return None
    obj = {str(k).strip().lower(): v for k, v in obj.items()}
    out: Dict[str, Any] = {}
    for f in FACETS:
        v = obj.get(f)
        reason = ""
        if isinstance(v, dict):
            v = {str(k).lower(): x for k, x in v.items()}
            reason = str(v.get("reason", "") or "")
            v = v.get("score")
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, str):
            if not v.strip().isdigit():
                return None
            v = int(v.strip())
        if isinstance(v, float):
            if not v.is_integer():
                return None
            v = int(v)
        if not isinstance(v, (int, np.integer)) or not 0 <= int(v) <= 3:
            return None
        out[f] = int(v)
        out[f"{f}_reason"] = reason
    return out


class FacetLabeller(UsesLLM, pt.Transformer):
    """LLM facet labels for each (seed, candidate) row of a result frame.

    Seed text: ``query_title`` / ``query_abstract`` (:class:`pyterrier_sci.plugins.sciface.SeedText`
    adds them), else the ``query``.  Candidate: ``title`` / ``abstract``.  Adds ``background``,
    ``method`` (0-3, NaN when unusable), ``background_reason``, ``method_reason`` and
    ``label_unusable``; input columns, scores and ranks are kept (it labels, it does not re-rank).

    Args:
        llm: client settings (dict, :class:`LLMSettings` or None = environment defaults).
        system_template / user_template: template names, paths or text (``$seed_title``,
            ``$seed_abstract``, ``$cand_title``, ``$cand_abstract``).
        max_abstract_tokens: per-abstract budget (4 characters a token).
        on_error: ``"raise"`` (an :class:`LLMError` stops the run) or ``"flag"`` (the row is unusable).
    """

    def __init__(self, llm: Union[None, dict, LLMSettings] = None, system_template: Optional[str] = None,
                 user_template: Optional[str] = None, max_abstract_tokens: int = 400, max_tokens: int = 256,
                 on_error: str = "raise"):
        if on_error not in ("raise", "flag"):
            raise ValueError("on_error must be 'raise' or 'flag'")
        self.llm = llm
        self.system_template = system_template
        self.user_template = user_template
        self.max_abstract_tokens = max_abstract_tokens
        self.max_tokens = max_tokens
        self.on_error = on_error
        self.settings = llm if isinstance(llm, LLMSettings) else settings_from(llm)
        self.usage = Usage(model=self.settings.model)
        self._system = template_or_text(system_template, "facet_label_system.txt", __package__, self.settings.sandbox)
        self._user = template_or_text(user_template, "facet_label_user.txt", __package__, self.settings.sandbox)
        self._client: Optional[LLMClient] = None

    def __repr__(self) -> str:
        return f"FacetLabeller(model={self.settings.model!r})"

    def prompt(self, row) -> str:
        t = self.max_abstract_tokens
        if "query_abstract" in row:
            st, sa = row.get("query_title", ""), row["query_abstract"]
        else:
            st, sa = "", row["query"]
        return render(self._user, seed_title=st, seed_abstract=truncate(sa, t),
                      cand_title=row.get("title", ""), cand_abstract=truncate(row["abstract"], t))

    def _label(self, prompt: str):
        try:
            return parse_facet_label(self.client.generate(prompt, system=self._system, max_tokens=self.max_tokens).text)
        except LLMError:
            if self.on_error == "raise":
                raise
            return None

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.columns(inp, includes=["qid", "docno", "abstract"])
        if "query_abstract" not in inp.columns and "query" not in inp.columns:
            raise ValueError("FacetLabeller needs the seed text: query_title/query_abstract (SeedText) or query")
        if len(inp) == 0:
            return pd.DataFrame(columns=list(inp.columns) + [c for c in OWNED if c not in inp.columns])
        df = inp.copy()
        prompts = [self.prompt(r) for r in df.to_dict("records")]
        labels = self.client.map(self._label, prompts, desc="facet labels")
        unusable = [lab is None for lab in labels]
        self.usage.add(unusable=int(sum(unusable)))
        for f in FACETS:
            df[f] = [np.nan if lab is None else lab[f] for lab in labels]
            df[f"{f}_reason"] = [None if lab is None else lab[f"{f}_reason"] for lab in labels]
        df["label_unusable"] = unusable
        return df


def gather_candidates(first_stage: pt.Transformer, seeds: pd.DataFrame, k: int = 30,
                      exclude_seed: bool = True) -> pd.DataFrame:
    """Candidates for each seed paper from any first stage (BM25, dense, ...).

    ``seeds``: ``seed_id`` (the seed's docno in the first stage's corpus), ``seed_title``,
    ``seed_abstract``.  The first stage receives ``qid = seed_id`` and ``query = title + abstract``
    (plus ``query_title`` / ``query_abstract``); the seed itself is dropped and the top ``k`` kept.
    Returns the result frame (``qid``, ``docno``, ``score``, ``rank`` and the query columns)."""
    missing = {"seed_id", "seed_title", "seed_abstract"} - set(seeds.columns)
    if missing:
        raise ValueError(f"seeds frame lacks {sorted(missing)}")
    q = pd.DataFrame({"qid": seeds["seed_id"].astype(str),
                      "query": (seeds["seed_title"].fillna("") + " " + seeds["seed_abstract"].fillna("")).str.strip(),
                      "query_title": seeds["seed_title"].to_numpy(),
                      "query_abstract": seeds["seed_abstract"].to_numpy()})
    res = first_stage(q)
    if exclude_seed:
        res = res[res["docno"].astype(str) != res["qid"].astype(str)]
    res = res.sort_values(["qid", "score"], ascending=[True, False], kind="stable")
    res = res.groupby("qid", sort=False).head(k).drop(columns=["rank"], errors="ignore")
    for c in ("query", "query_title", "query_abstract"):
        if c not in res.columns:
            res = res.merge(q[["qid", c]], on="qid", how="left")
    return pt.model.add_ranks(res.reset_index(drop=True))


def label_pairs(labelled: pd.DataFrame) -> pd.DataFrame:
    """A labelled result frame -> a pairs frame (``seed_id``, ``seed_title``, ``seed_abstract``,
    ``cand_id``, ``cand_title``, ``cand_abstract``, ``background``, ``method``), unusable rows
    skipped; ``.attrs["unusable"]`` holds how many were skipped."""
    ok = labelled[~labelled["label_unusable"].astype(bool)]
    pairs = pd.DataFrame({
        "seed_id": ok["qid"].astype(str).to_numpy(),
        "seed_title": ok["query_title"].to_numpy() if "query_title" in ok.columns else "",
        "seed_abstract": (ok["query_abstract"] if "query_abstract" in ok.columns else ok["query"]).to_numpy(),
        "cand_id": ok["docno"].astype(str).to_numpy(),
        "cand_title": ok["title"].to_numpy() if "title" in ok.columns else "",
        "cand_abstract": ok["abstract"].to_numpy(),
        "background": ok["background"].astype(int).to_numpy(),
        "method": ok["method"].astype(int).to_numpy(),
    })
    pairs.attrs["unusable"] = int(len(labelled) - len(ok))
    return pairs


def __getattr__(name: str):  # PEP 562: moved to .components (which imports this module); the old import path works
    if name == "facet_label_component":
        return importlib.import_module(f"{__package__}.components").facet_label_component
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
