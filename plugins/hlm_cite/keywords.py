"""HLM-Cite's rule-based baseline (§4.1, "Keywords overlap"): the more keywords a candidate shares with the
query paper, the more likely it is a core citation.

A keyword is a lower-cased word of at least three characters (letters, digits and hyphens, starting with a
letter) that is not a stop word; a candidate's score is the number of distinct keywords its text shares with
the query's.  The paper names the rule, not its keyword extractor: this one is the toolkit's."""
from __future__ import annotations

import re
from typing import FrozenSet, Sequence, Union

import pandas as pd
import pyterrier as pt

__all__ = ["KeywordOverlap", "keywords", "STOP_WORDS"]

STOP_WORDS: FrozenSet[str] = frozenset(
    "a an the of and or in on for to with by from at as is are was were be this that these those we our "
    "it its which can using use used show shown paper".split())
_WORD = re.compile(r"[a-z][a-z0-9\-]+")


def keywords(text: str) -> FrozenSet[str]:
    """The keywords of ``text``: distinct lower-cased words of 3+ characters that are not stop words."""
    return frozenset(w for w in _WORD.findall(str(text).lower()) if len(w) > 2 and w not in STOP_WORDS)


class KeywordOverlap(pt.Transformer):
    """``hlm_keyword_overlap``: scores each candidate by the keywords its ``fields`` (joined) share with the
    query (``query_field``); re-ranks a pool (``pool >> text >> hlm_keyword_overlap``).  Ties keep the input's
    order (a stable sort), so a pool's first-stage order breaks them."""

    def __init__(self, fields: Union[str, Sequence[str]] = ("title", "abstract"), query_field: str = "query"):
        self.fields = [fields] if isinstance(fields, str) else list(fields)
        self.query_field = query_field

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        need = [self.query_field, *self.fields]
        missing = [c for c in need if c not in inp.columns]
        if missing:
            raise ValueError(f"hlm_keyword_overlap needs the columns {', '.join(missing)} (add the text first: "
                             f"pool >> text >> hlm_keyword_overlap); the input has {', '.join(map(str, inp.columns))}")
        out = inp.copy()
        if out.empty:
            return out.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        query_words = {qid: keywords(q) for qid, q in zip(out["qid"], out[self.query_field])}
        doc_words = {}   # once per document: large candidate sets share most candidates
        texts = out[self.fields].fillna("").astype(str).agg(" ".join, axis=1)
        for docno, text in zip(out["docno"], texts):
            if docno not in doc_words:
                doc_words[docno] = keywords(text)
        out["score"] = [float(len(query_words[q] & doc_words[d])) for q, d in zip(out["qid"], out["docno"])]
        out = out.sort_values(["qid", "score"], ascending=[True, False], kind="stable")
        return pt.model.add_ranks(out)

    def __repr__(self) -> str:
        return f"KeywordOverlap(fields={self.fields!r})"
