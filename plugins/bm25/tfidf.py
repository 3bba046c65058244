"""TF-IDF cosine re-ranking of each query's candidates (the ``tfidf`` component): :class:`TfidfScorer`.

It is the lexical baseline of the pool benchmarks as DORIS-MAE's authors ran it (their
``benchmarking/other_models/tfidf_scoring.py``, github.com/Real-Doris-Mae/Doris-Mae-Dataset at 034cd27): for
each query, scikit-learn's ``TfidfVectorizer()`` with its defaults is fitted on the texts of that query's
candidate pool only (not on the corpus), the whole query is transformed with it, and each candidate scores the
cosine between the two vectors.  See ``docs/doris-mae.md``.
"""
from __future__ import annotations

import re
from typing import List, Optional, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.corpus import doc_texts

__all__ = ["TfidfScorer", "clean_text", "STOP_WORDS"]

#: the stop-word lists ``stop_words`` may name (scikit-learn's built-in list)
STOP_WORDS = ("english",)

# the authors' ``preprocessing``: web addresses, ``$`` (LaTeX math) and line breaks
_URL = re.compile(r"(((https?|ftp)://)|(www.))[^\s/$.?#].[^\s]*")


def clean_text(text: str) -> str:
    """A document text as DORIS-MAE's benchmarking code cleans an abstract before TF-IDF and BM25: web
    addresses removed, ``$`` removed and line breaks made spaces."""
    return _URL.sub("", text).replace("\n", " ").replace("$", "")


def _as_text(value) -> str:
    return value if isinstance(value, str) else ""   # None / NaN: an empty text


class TfidfScorer(pt.Transformer):
    """Re-scores each query's candidates by the cosine between TF-IDF vectors of the query and of each
    candidate's text, the IDF (and the vocabulary) fitted on that query's candidates.

    Per query, a ``sklearn.feature_extraction.text.TfidfVectorizer`` (smoothed IDF, l2-normalised rows, words
    of two or more letters or digits) is fitted on the texts of the query's rows of the input frame; the
    query is transformed with it and a row's score is the cosine of the two vectors, from 0 to 1.  The
    defaults are the DORIS-MAE authors' settings (``TfidfVectorizer()`` as it comes, documents cleaned by
    :func:`clean_text`, the query as it is).  Only terms that occur in the candidates count: a query term
    absent from every candidate contributes nothing.

    Defined edge cases, none an error: a query with no term in the candidates' vocabulary, a candidate with
    an empty (or missing) text, and a pool with no term at all (every text empty or stop words) score 0;
    an empty input gives an empty frame with ``score`` and ``rank``.  Ranks are 0-based by score, ties in
    input order (the candidates' first-stage order).

    Args:
        dataset: an ir_datasets id whose docstore gives the document texts when the input has no
            ``text_field`` column (``pool >> tfidf``).
        text_field: the input column with the document text (default ``text``).
        fields: the document fields read from the docstore, joined with a space (default: the document's
            ``default_text()``, the abstract for DORIS-MAE).
        lowercase: lower-case before tokenising (the authors: yes).
        sublinear_tf: ``1 + log(tf)`` instead of ``tf`` (the authors: no).
        stop_words: ``None`` (the authors) or ``"english"`` (scikit-learn's list).
        clean: apply :func:`clean_text` to the document texts (the authors: yes; the query is never cleaned,
            as in their code).
        verbose: a progress bar over the queries.
    """

    def __init__(self, dataset: Optional[str] = None, text_field: str = "text", fields: Optional[Sequence[str]] = None,
                 lowercase: bool = True, sublinear_tf: bool = False, stop_words: Optional[str] = None,
                 clean: bool = True, verbose: bool = False):
        if stop_words is not None and stop_words not in STOP_WORDS:
            raise ValueError(f"stop_words must be None or one of {STOP_WORDS}, not {stop_words!r}")
        self.dataset = dataset
        self.text_field = text_field
        self.fields = tuple(fields) if fields else None
        self.lowercase = lowercase
        self.sublinear_tf = sublinear_tf
        self.stop_words = stop_words
        self.clean = clean
        self.verbose = verbose

    def _vectorizer(self):
        from sklearn.feature_extraction.text import TfidfVectorizer
        return TfidfVectorizer(lowercase=self.lowercase, sublinear_tf=self.sublinear_tf, stop_words=self.stop_words)

    def _texts(self, inp: pd.DataFrame) -> List[str]:
        if self.text_field in inp.columns:
            texts = [_as_text(t) for t in inp[self.text_field].tolist()]
        elif self.dataset:
            texts = doc_texts(self.dataset, inp["docno"].astype(str).tolist(), self.fields)
        else:
            raise ValueError(f"tfidf needs a {self.text_field!r} column in its input (the document text) or a dataset "
                           f"to read the documents from: give dataset='irds:...' or a pipeline dataset")
        return [clean_text(t) for t in texts] if self.clean else texts

    def scores(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """The cosine of ``query`` with each of ``texts``, the vectorizer fitted on ``texts`` (cleaned or not
        as given); zeros when the texts hold no term."""
        if not len(texts):
            return np.zeros(0)
        vec = self._vectorizer()
        try:
            docs = vec.fit_transform(list(texts))
        except ValueError:
            if any(vec.build_analyzer()(t) for t in texts):
                raise
            return np.zeros(len(texts))   # an empty vocabulary: no text has a term
        q = vec.transform([_as_text(query)])
        return np.asarray((docs @ q.T).toarray()).ravel()   # rows are unit length (or zero): the cosine

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["query"])
        out = inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns]).reset_index(drop=True)
        if len(out) == 0:
            return out.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        texts = self._texts(out)
        score = np.zeros(len(out))
        groups = out.groupby("qid", sort=False).indices
        for qid, idx in pt.tqdm(groups.items(), total=len(groups), desc="tfidf", unit="q", disable=not self.verbose):
            score[idx] = self.scores(out["query"].iat[idx[0]], [texts[i] for i in idx])
        out = out.assign(score=score, _order=np.arange(len(out)))
        out = out.sort_values(["qid", "score", "_order"], ascending=[True, False, True], kind="stable")
        out = out.drop(columns="_order").reset_index(drop=True)
        out["rank"] = out.groupby("qid").cumcount()
        return out

    def _key(self):
        return (self.dataset, self.text_field, self.fields, self.lowercase, self.sublinear_tf, self.stop_words,
                self.clean)

    def __repr__(self) -> str:
        ds = f"dataset={self.dataset!r}, " if self.dataset else ""
        return (f"TfidfScorer({ds}lowercase={self.lowercase}, sublinear_tf={self.sublinear_tf}, "
                f"stop_words={self.stop_words!r}, clean={self.clean})")

    def __eq__(self, other) -> bool:
        return isinstance(other, TfidfScorer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("TfidfScorer",) + self._key())
