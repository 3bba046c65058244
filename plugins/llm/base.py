"""What the LLM rerankers share: settings and client, text preparation, ordering, the policy for
unusable output."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.corpus import sorted_results
from pyterrier_sci.llm import LLMClient, LLMError, LLMSettings, Usage, settings_from
from pyterrier_sci.llm.client import UsesLLM
from pyterrier_sci.llm.text import join_fields, load_template, truncate
from pyterrier_sci.protocol import package_templates

ON_ERROR = ("raise", "flag")
DEFAULT_TEXT_FIELD = "text"
# read instead of a missing default ``text`` column: what the ``text`` component adds by default
TEXT_FALLBACK = ("abstract",)


class Failed:
    """Marks a call that failed for good when ``on_error="flag"``."""

    def __init__(self, error: str):
        self.error = error

    def __repr__(self):
        return f"Failed({self.error!r})"


class LLMReranker(UsesLLM, pt.Transformer):
    """Base of the LLM rerankers.  Subclasses set ``component_name`` and ``owned_columns`` and
    implement ``_rerank(df) -> df`` on a non-empty frame sorted by first-stage order that has a
    helper column ``_fs`` (0-based first-stage position within the query)."""

    component_name = "llm"
    owned_columns: Tuple[str, ...] = ("llm_unusable",)

    def _setup(self) -> None:
        """Called at the end of a subclass ``__init__`` (after it stored its arguments)."""
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, not {self.on_error!r}")
        llm = self.llm
        self.settings: LLMSettings = llm if isinstance(llm, LLMSettings) else settings_from(llm)
        self.usage = Usage(model=self.settings.model)
        self._client: Optional[LLMClient] = None
        self._templates: Dict[str, str] = {}
        self._fields: Optional[List[str]] = None
        # read every template now: a missing file, or one outside what an untrusted pipeline may
        # read, is an error when the pipeline is built, not after the first calls
        for name, spec in sorted(vars(self).items()):
            if name.endswith(("template", "_system")) and isinstance(spec, (str, Path)):
                self._template(spec, name)
            elif name == "answer_templates" and spec:
                for mode, one in dict(spec).items():
                    self._template(one, f"answer_templates[{mode!r}]")

    @classmethod
    def template_packages(cls) -> Tuple[str, ...]:
        """Where shipped templates are looked up: the package of this class and of each base
        re-ranker class, the most specific first (a paper plugin's re-ranker finds its own
        templates and those of :mod:`pyterrier_sci.plugins.llm`)."""
        found = []
        for c in cls.__mro__:
            if isinstance(c, type) and issubclass(c, LLMReranker):
                pkg = c.__module__.rpartition(".")[0] or c.__module__
                if pkg not in found:
                    found.append(pkg)
        return tuple(found)

    def sci_templates(self) -> Dict[str, str]:
        """The component protocol (:mod:`pyterrier_sci.protocol`): every template shipped where this
        re-ranker looks them up, and those it loaded (by the name or path given; an inline text by its
        hash)."""
        out: Dict[str, str] = {}
        for package in self.template_packages():
            out.update(package_templates(package))
        for key, text in self._templates.items():
            shown = key if "\n" not in key and len(key) < 200 else \
                "inline:" + hashlib.sha256(key.encode()).hexdigest()[:12]
            out[f"{type(self).__name__}:{shown}"] = text
        return out

    # -- client -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.settings.model!r}, base_url={self.settings.base_url!r})"

    def _template(self, spec, param: str = "template") -> str:
        key = spec if isinstance(spec, str) else repr(spec)
        if key not in self._templates:
            self._templates[key] = load_template(spec, self.template_packages(), sandbox=self.settings.sandbox,
                                                 what=f"{self.component_name} {param}")
        return self._templates[key]

    def _call(self, fn):
        """Wraps one unit of work: an :class:`LLMError` is raised (``on_error="raise"``) or turned
        into :class:`Failed` (``on_error="flag"``)."""
        def run(x):
            try:
                return fn(x)
            except LLMError as e:
                if self.on_error == "raise":
                    raise
                return Failed(str(e))
        return run

    # -- text -------------------------------------------------------------------------------
    def _text_fields(self, columns: Optional[Sequence[str]] = None) -> List[str]:
        """The columns read as the paper text.  With the default ``text`` and a frame without it,
        ``abstract`` (what ``pool >> text`` adds) is read instead."""
        if columns is None and self._fields is not None:
            return self._fields
        fields = [self.text_field] if isinstance(self.text_field, str) else list(self.text_field)
        if columns is not None and fields == [DEFAULT_TEXT_FIELD] and DEFAULT_TEXT_FIELD not in columns:
            fields = [next((f for f in TEXT_FALLBACK if f in columns), DEFAULT_TEXT_FIELD)]
        return fields

    def _doc(self, row, max_tokens=None) -> Tuple[str, str]:
        """(title, text) of a candidate, truncated to the token budget."""
        title = ""
        if self.title_field and self.title_field in row and self.title_field not in self._text_fields():
            v = row[self.title_field]
            title = "" if v is None or (isinstance(v, float) and v != v) else str(v).strip()
        text = join_fields(row, self._text_fields())
        return title, truncate(text, max_tokens if max_tokens is not None else self.max_doc_tokens)

    def _query(self, row) -> str:
        return truncate(str(row[self.query_field]), self.max_query_tokens)

    # -- frame handling ---------------------------------------------------------------------
    def _validate(self, inp: pd.DataFrame) -> None:
        pta.validate.result_frame(inp, extra_columns=[self.query_field, *self._text_fields(inp.columns)])

    def _empty(self, inp: pd.DataFrame) -> pd.DataFrame:
        cols = list(inp.columns)
        for c in ("score", "rank", *self.owned_columns):
            if c not in cols:
                cols.append(c)
        return pd.DataFrame(columns=cols)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self._validate(inp)
        if len(inp) == 0:
            return self._empty(inp)
        df = inp.copy()
        if "rank" in df.columns or "score" in df.columns:
            df = sorted_results(df)
        else:
            df = df.sort_values(["qid"], kind="stable")
        df = df.reset_index(drop=True)
        df["_fs"] = df.groupby("qid", sort=False).cumcount()
        self._fields = self._text_fields(inp.columns)
        try:
            out = self._rerank(df)
        finally:
            self._fields = None
        return _finish(out)

    def _rerank(self, df: pd.DataFrame) -> pd.DataFrame:
        raise NotImplementedError

    def rerank_per_query(self, df: pd.DataFrame) -> pd.DataFrame:
        """``_rerank`` of a reranker that orders each query's candidates on its own: ``self._rerank_query(group)``
        returns ``(order, flagged)`` (the new order as positions in the group; whether an answer was unusable),
        run through the client's ``map`` across queries; sets ``_pos`` and ``llm_unusable``."""
        groups = [g for _, g in df.groupby("qid", sort=False)]
        results = self.client.map(self._rerank_query, groups, desc=self.component_name)
        pos = pd.Series(0, index=df.index)
        flags = pd.Series(False, index=df.index)
        for g, (order, flagged) in zip(groups, results):
            idx = g.index.to_numpy()
            for new_pos, i in enumerate(order):
                pos[idx[i]] = new_pos
            flags[idx] = flagged
        df["_pos"] = pos
        df["llm_unusable"] = flags.astype(bool)
        return df


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """Expects ``_pos`` (new 0-based position within the query); sets ``score`` = n - position
    and 0-based ``rank`` through ``pt.model.add_ranks``."""
    n = df.groupby("qid", sort=False)["_pos"].transform("size")
    df["score"] = (n - df["_pos"]).astype(float)
    df = df.drop(columns=["_fs", "_pos"])
    return sorted_results(pt.model.add_ranks(df)).reset_index(drop=True)


def order_relevant_first(df: pd.DataFrame, relevant: pd.Series) -> pd.Series:
    """MIR's rule: papers judged relevant first, then the others; first-stage order inside each
    group.  Returns the new 0-based position of each row (aligned with ``df``)."""
    key = pd.DataFrame({"qid": df["qid"], "grp": np.where(relevant, 0, 1), "fs": df["_fs"]}, index=df.index)
    key = key.sort_values(["qid", "grp", "fs"], kind="stable")
    key["_pos"] = key.groupby("qid", sort=False).cumcount()
    return key["_pos"].reindex(df.index)


def parse_permutation(text: str, m: int) -> Tuple[List[int], Dict[str, int]]:
    """Reads a ranking of ``m`` items (1-based identifiers) from model output and repairs it.

    Repair rule: the identifiers are read in order; duplicates (after the first) and unknown
    identifiers (outside 1..m) are dropped; identifiers that never appear are appended in their
    input order.  ``[3, 3, 99, 1]`` over 4 items becomes ``[3, 1, 2, 4]`` (one duplicate, one
    unknown, two missing).  Returns the 0-based order and the counts ``duplicates``, ``unknown``,
    ``missing``, ``valid`` (``valid == 0`` means the output was unusable).
    """
    seen: List[int] = []
    dup = unk = 0
    for tok in re.findall(r"\d+", text or ""):
        i = int(tok)
        if not 1 <= i <= m:
            unk += 1
        elif i in seen:
            dup += 1
        else:
            seen.append(i)
    valid = len(seen)
    missing = [i for i in range(1, m + 1) if i not in seen]
    order = [i - 1 for i in seen + missing]
    return order, {"duplicates": dup, "unknown": unk, "missing": len(missing), "valid": valid}


def is_repaired(stats: Dict[str, int]) -> bool:
    return stats["valid"] > 0 and (stats["duplicates"] + stats["unknown"] + stats["missing"]) > 0
