"""Contrastive few-shot exemplars for MIR's pointwise judgement (§5.2.2): the training proposals most
similar to the test proposal (TF-IDF cosine), with their first ``per_label`` relevant and
non-relevant papers; a training proposal with the test query's ``qid`` or text is skipped.
"""
from __future__ import annotations

import re
from typing import List, Optional, Tuple, Union

import pandas as pd

from pyterrier_sci.corpus import irds_id

REQUIRED = ("qid", "query", "docno", "text", "label")


def load_training_set(source: Union[pd.DataFrame, str], text_fields=("title", "abstract", "text")) -> pd.DataFrame:
    """A frame with ``qid, query, docno, text, label`` (``title`` kept when present), from a
    DataFrame or an ir_datasets id (``irds:`` prefix allowed): queries, qrels and the docs store
    (title and the first present of ``abstract``/``text``)."""
    if isinstance(source, pd.DataFrame):
        missing = [c for c in REQUIRED if c not in source.columns]
        if missing:
            raise ValueError(f"few-shot training frame lacks columns {missing} (needs {list(REQUIRED)})")
        df = source.copy()
    else:
        import ir_datasets
        ds = ir_datasets.load(irds_id(source))
        queries = {q.query_id: (q.default_text() if hasattr(q, "default_text") else q.text) for q in ds.queries_iter()}
        qrels = pd.DataFrame([(q.query_id, q.doc_id, q.relevance) for q in ds.qrels_iter()],
                             columns=["qid", "docno", "label"])
        store = ds.docs_store()
        docs = store.get_many(list(qrels["docno"].unique()))
        titles, texts = {}, {}
        for did, d in docs.items():
            titles[did] = getattr(d, "title", "") or ""
            for f in text_fields[1:]:
                if getattr(d, f, None):
                    texts[did] = getattr(d, f)
                    break
            else:
                texts[did] = d.default_text() if hasattr(d, "default_text") else ""
        qrels = qrels[qrels["docno"].isin(docs.keys()) & qrels["qid"].isin(queries.keys())]
        df = qrels.assign(query=qrels["qid"].map(queries), title=qrels["docno"].map(titles),
                          text=qrels["docno"].map(texts))
    df["qid"] = df["qid"].astype(str)
    df["docno"] = df["docno"].astype(str)
    return df.reset_index(drop=True)


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", str(s)).strip().lower()


class ExemplarSelector:
    """Picks contrastive exemplars for a proposal.  Built lazily; picklable (refits on load)."""

    def __init__(self, source: Union[pd.DataFrame, str], num_proposals: int = 2, per_label: int = 1,
                 relevance_threshold: int = 1):
        self.source = source
        self.num_proposals = num_proposals
        self.per_label = per_label
        self.relevance_threshold = relevance_threshold
        self._fitted = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_fitted"] = None
        return d

    def _fit(self):
        if self._fitted is None:
            from sklearn.feature_extraction.text import TfidfVectorizer
            df = load_training_set(self.source)
            props = df.drop_duplicates("qid")[["qid", "query"]].reset_index(drop=True)
            vec = TfidfVectorizer(stop_words="english", sublinear_tf=True)
            mat = vec.fit_transform(props["query"].astype(str))
            self._fitted = (df, props, vec, mat)
        return self._fitted

    def select(self, query: str, qid: Optional[str] = None) -> List[Tuple[str, str, str, bool]]:
        """``[(proposal, title, text, relevant), ...]``: per similar proposal, relevant ones first."""
        df, props, vec, mat = self._fit()
        sims = (mat @ vec.transform([str(query)]).T).toarray().ravel()
        order = sorted(range(len(props)), key=lambda i: (-sims[i], i))
        out: List[Tuple[str, str, str, bool]] = []
        used = 0
        q_norm = _norm(query)
        for i in order:
            if used >= self.num_proposals:
                break
            pq, ptext = props.at[i, "qid"], props.at[i, "query"]
            if (qid is not None and str(pq) == str(qid)) or _norm(ptext) == q_norm:
                continue
            rows = df[df["qid"] == pq]
            rel = rows[rows["label"] >= self.relevance_threshold].head(self.per_label)
            non = rows[rows["label"] < self.relevance_threshold].head(self.per_label)
            if len(rel) == 0 and len(non) == 0:
                continue
            for part, flag in ((rel, True), (non, False)):
                for _, r in part.iterrows():
                    out.append((str(ptext), str(r.get("title", "") or ""), str(r["text"]), flag))
            used += 1
        return out
