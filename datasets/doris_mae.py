"""DORIS-MAE (Wang et al., NeurIPS 2023 Datasets and Benchmarks): complex, multi-aspect research
queries over computer-science abstracts, judged per aspect by an LLM (Anno-GPT) and compiled with
Eq. 1 / Eq. 2 of the paper.  A re-ranking benchmark: every method ranks a query's candidate pool.

Registers ``sci/doris-mae[/train,/test,/subquery-{k}]`` over the full Zenodo release and the offline part
(``sci/doris-mae/birco-dev[/train20,/test20]``, ``/queries``, ``/subquery-2-texts``); qrels are S(p|Q) of
Eq. 1 and the aspect structure is on the dataset object.  See ``docs/doris-mae.md``.
"""

import functools
import hashlib
import itertools
import re
import warnings
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import ir_datasets
import pandas as pd

from pyterrier_sci.corpus import irds_id
from pyterrier_sci.data import (
    DataFile,
    MissingDataError,
    checksums_enabled,
    data_dir,
    iter_csv,
    iter_jsonl,
    read_json,
    read_text,
    verified_once,
)
from pyterrier_sci.irds import FnDocs, FnQrels, FnQueries, FnScoredDocs, register

NAME = "sci/doris-mae"
OFFLINE = NAME + "/birco-dev"
QUERIES_ONLY = NAME + "/queries"
SUBQUERY_TEXTS = NAME + "/subquery-2-texts"
ZENODO_URL = "https://zenodo.org/records/8299749/files/DORIS-MAE_dataset_v1.json?download=1"
_REPO = "github.com/Real-Doris-Mae/Doris-Mae-Dataset"
_SOURCE_RELEASE = "Zenodo https://doi.org/10.5281/zenodo.8299749 (DORIS-MAE_dataset_v1.json, CC BY-NC 4.0)"
_SOURCE_OFFLINE = f"{_REPO} (queries), github.com/BIRCO-benchmark/BIRCO (birco_dev); CC BY-NC 4.0"

#: the 60 test queries of section 5.3 (the authors' ``create_60_query_dataset``); the others are training
TEST_QUERY_IDS = (1, 8, 10, 16, 23, 28, 33, 37, 44, 46) + tuple(range(50, 100))
TRAIN_QUERY_IDS = tuple(i for i in range(50) if i not in TEST_QUERY_IDS)
#: abstracts the paper's evaluation never counts as relevant (``removed_list`` of its code)
REMOVED_ABSTRACTS = frozenset({"205580", "346695", "346826", "346836", "28674"})
SUBQUERY_SIZES = tuple(range(1, 10))   # a query has 3-9 aspects

_SOURCE_SHARED = "; or the project's shared/data/doris-mae"
FILES = {
    "release": DataFile("doris-mae/DORIS-MAE_dataset_v1.json", url=ZENODO_URL, source=_SOURCE_RELEASE),
    "queries": DataFile("doris-mae/queries_parsed.json", source=_SOURCE_OFFLINE + _SOURCE_SHARED,
                        sha256="4f75207ab1f6214dafe6fecd50306625e1671925f98fa6e81971637ec2a111d5"),
    "subquery2": DataFile("doris-mae/subquery-2.txt", source=_SOURCE_OFFLINE + _SOURCE_SHARED,
                          sha256="9206b07ea66479e6fa91e5e43e03b7f8d7981e1bf738d0ef30a8d802818282ae"),
    "birco_queries": DataFile("doris-mae/birco_dev/queries.jsonl", source=_SOURCE_OFFLINE + _SOURCE_SHARED,
                              sha256="16933f08e0886c564d8932cce81cef5747c54067ad0007004393637f2ff872a4"),
    "birco_corpus": DataFile("doris-mae/birco_dev/corpus.jsonl", source=_SOURCE_OFFLINE + _SOURCE_SHARED,
                             sha256="832a1ae4b017e0403809bece002768e7c42c1b82a252b597edd72a49086f8cab"),
    "birco_qrels": DataFile("doris-mae/birco_dev/qrels.tsv", source=_SOURCE_OFFLINE + _SOURCE_SHARED,
                            sha256="c884481c36a0f05b8674f605458c549d5463de42408b1bbd4fc0d305a27717b6"),
}
#: the offline files' counts (checked with the checksums)
COUNTS = {"queries": 100, "subquery2": 1003, "birco_queries": 40, "birco_corpus": 2938, "birco_qrels": 3129}


# (no `from __future__ import annotations` in this module: PyTerrier's text loader reads the str
# annotations of the document class to know which fields are text)
class DorisDoc(NamedTuple):
    doc_id: str
    title: str
    abstract: str
    url: str
    primary_category: str

    def default_text(self) -> str:
        return self.abstract


class DorisQuery(NamedTuple):
    query_id: str
    text: str

    def default_text(self) -> str:
        return self.text


class Aspect(NamedTuple):
    """One aspect of a query: its id, text and sub-aspects as ``(id, text)`` pairs.  Ids are the
    release's ``aspect_id`` (one id per distinct text, as ``aspect2aspect_id``); offline, an id
    derived from the text (``"t"`` + 10 hex digits of its SHA-1), so equal texts share one id too."""
    aspect_id: str
    text: str
    sub_aspects: Tuple[Tuple[str, str], ...]


class AspectQuery(NamedTuple):
    """A query with its aspect hierarchy.  ``parent_id`` is the full query a sub-query comes from
    (the query itself otherwise)."""
    query_id: str
    text: str
    aspects: Tuple[Aspect, ...]
    query_type: str
    parent_id: str

    def aspect_texts(self) -> List[str]:
        return [a.text for a in self.aspects]

    def aspect_ids(self) -> List[str]:
        """The distinct ids of the aspects and sub-aspects: the set Q of Eq. 1 (or q of Eq. 2)."""
        ids: List[str] = []
        for a in self.aspects:
            for i in (a.aspect_id,) + tuple(s for s, _ in a.sub_aspects):
                if i not in ids:
                    ids.append(i)
        return ids

    def id_texts(self) -> Dict[str, str]:
        """``{aspect id: text}`` for the aspects and sub-aspects."""
        out: Dict[str, str] = {}
        for a in self.aspects:
            out.setdefault(a.aspect_id, a.text)
            for s, t in a.sub_aspects:
                out.setdefault(s, t)
        return out

    @property
    def n_aspects(self) -> int:
        """|Q|: the number of distinct aspects and sub-aspects (the denominator of Eq. 1's average)."""
        return len(self.aspect_ids())


def text_aspect_id(text: str) -> str:
    return "t" + hashlib.sha1(text.strip().encode("utf-8")).hexdigest()[:10]


def subquery_id(query_id: str, positions: Sequence[int]) -> str:
    """``"12", (0, 2)`` -> ``"12_1_3"`` (1-based aspect positions)."""
    return "_".join([str(query_id)] + [str(p + 1) for p in positions])


def parse_query_id(qid: str) -> Tuple[str, Optional[Tuple[int, ...]]]:
    """``"12_1_3"`` -> ``("12", (0, 2))``; ``"12"`` -> ``("12", None)``."""
    parts = str(qid).split("_")
    if len(parts) == 1:
        return parts[0], None
    return parts[0], tuple(int(p) - 1 for p in parts[1:])


def subquery_of(query: AspectQuery, positions: Sequence[int], text: Optional[str] = None) -> AspectQuery:
    """The sub-query of ``query`` made of the aspects at ``positions`` (Eq. 2's q).  Its text is
    ``text`` or, without it, the aspects' texts joined."""
    aspects = tuple(query.aspects[p] for p in positions)
    if text is None:
        text = " ".join(a.text for a in aspects)
    return AspectQuery(subquery_id(query.query_id, positions), text, aspects, query.query_type, query.parent_id)


# ----------------------------------------------------------------------------------------------
# the full release (DORIS-MAE_dataset_v1.json, appendix A.4)
# ----------------------------------------------------------------------------------------------

class Release:
    """The parsed ``DORIS-MAE_dataset_v1.json``: ``aspect2aspect_id``, ``aspect_id2aspect``,
    ``Query`` (list: ``query_text``, ``query_type``, ``idea_from``, ``candidate_pool``,
    ``sent2aspect_id``, ``aspect_id2sent``, ``aspects`` = {aspect id: [sub-aspect ids]}), ``Corpus``
    (list indexed by ``abstract_id``), ``Annotation`` (``aspect_id``, ``abstract_id``, ``gpt_response``,
    ``score``) and ``Test_set`` (``aspect_id``, ``abstract_id``, ``human_annotation``)."""

    def __init__(self, data: dict):
        self.raw = data
        self.id2text: Dict[str, str] = {str(k): v for k, v in (data.get("aspect_id2aspect") or {}).items()}
        if not self.id2text:
            self.id2text = {str(v): k for k, v in (data.get("aspect2aspect_id") or {}).items()}
        self.queries_raw: List[dict] = list(data.get("Query") or [])
        self.scores: Dict[Tuple[str, str], int] = {}
        for a in data.get("Annotation") or []:
            self.scores[(str(a["aspect_id"]), str(a["abstract_id"]))] = int(a["score"])
        self.queries: List[AspectQuery] = [self._query(i, q) for i, q in enumerate(self.queries_raw)]
        self.by_id: Dict[str, AspectQuery] = {q.query_id: q for q in self.queries}

    def _query(self, index: int, q: dict) -> AspectQuery:
        aspects = []
        for aid, subs in (q.get("aspects") or {}).items():
            aid = str(aid)
            subs = tuple((str(s), self.id2text.get(str(s), "")) for s in subs)
            aspects.append(Aspect(aid, self.id2text.get(aid, ""), subs))
        return AspectQuery(str(index), q.get("query_text", ""), tuple(aspects), str(q.get("query_type") or ""),
                           str(index))

    def pool(self, parent_id: str) -> List[str]:
        return [str(d) for d in self.queries_raw[int(parent_id)].get("candidate_pool") or []]

    def subqueries(self, k: int) -> Iterator[AspectQuery]:
        """Every combination of ``k`` aspects of every query, as the authors' ``create_subquery_dataset``:
        the text joins the query sentences of those aspects (``aspect_id2sent``, in combination order,
        each sentence once); a combination is left out when its sentences also belong to other aspects
        (``sent2aspect_id`` names more than ``k`` aspects)."""
        for q, raw in zip(self.queries, self.queries_raw):
            id2sent = {str(a): list(s) for a, s in (raw.get("aspect_id2sent") or {}).items()}
            sent2ids = {s: [str(x) for x in ids] for s, ids in (raw.get("sent2aspect_id") or {}).items()}
            for comb in itertools.combinations(range(len(q.aspects)), k):
                sents: List[str] = []
                for p in comb:
                    for s in id2sent.get(q.aspects[p].aspect_id, []):
                        if s not in sents:
                            sents.append(s)
                covered = {i for s in sents for i in sent2ids.get(s, [])}
                if len(covered) > k:
                    continue
                yield subquery_of(q, comb, " ".join(sents))

    def docs(self) -> Iterator[DorisDoc]:
        corpus = self.raw.get("Corpus") or []
        items = corpus.items() if isinstance(corpus, dict) else enumerate(corpus)
        for i, d in items:
            yield DorisDoc(str(d.get("abstract_id", i)), d.get("title") or "", d.get("original_abstract") or "",
                           d.get("url") or "", d.get("primary_category") or "")

    def test_set(self) -> List[dict]:
        return list(self.raw.get("Test_set") or self.raw.get("Test Set") or self.raw.get("Test_Set") or [])


@functools.lru_cache(maxsize=2)
def _release(path: str, mtime: float) -> Release:
    f = FILES["release"]
    data = read_json(path, f.remedy(), expect=dict)
    for key, kind in (("Query", list), ("Corpus", (list, dict)), ("Annotation", list)):
        if not isinstance(data.get(key), kind):
            raise f.damaged(f"expected the release's '{key}' {'list' if kind is list else 'list or object'}, "
                            f"found {type(data.get(key)).__name__}", path=Path(path))
    corpus = data["Corpus"]
    ids = {str(d.get("abstract_id", i)) for i, d in (corpus.items() if isinstance(corpus, dict) else enumerate(corpus))}
    for i, q in enumerate(data["Query"]):
        if (not isinstance(q, dict) or not isinstance(q.get("candidate_pool"), list)
                or not isinstance(q.get("aspects"), dict)):
            raise f.damaged(f"query {i}: expected an object with 'candidate_pool' (list) and 'aspects' (object)",
                            path=Path(path))
        absent = [str(d) for d in q["candidate_pool"] if str(d) not in ids]
        if absent:
            raise f.damaged(f"query {i}: {len(absent)} pool abstract(s) are not in the Corpus (e.g. {absent[0]}): "
                            f"the file is incomplete", path=Path(path))
    for a in data["Annotation"]:
        if not isinstance(a, dict) or any(k not in a for k in ("aspect_id", "abstract_id", "score")):
            raise f.damaged(f"an Annotation entry lacks 'aspect_id', 'abstract_id' or 'score': {str(a)[:80]}",
                            path=Path(path))
    try:
        return Release(data)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise f.damaged(f"unexpected release structure ({type(e).__name__}: {e})", path=Path(path)) from None


def release() -> Release:
    """The full release (downloaded from Zenodo when missing and the network allows)."""
    p = FILES["release"].resolve()
    return _release(str(p), p.stat().st_mtime)


def release_available() -> bool:
    return FILES["release"].exists()


# ----------------------------------------------------------------------------------------------
# the offline part: queries_parsed.json and BIRCO's dev set
# ----------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def _offline_queries(path: str, mtime: float) -> Dict[str, AspectQuery]:
    f = FILES["queries"]
    parsed = read_json(path, f.remedy(), expect=list)
    out = {}
    for i, q in enumerate(parsed):
        try:
            aspects = tuple(Aspect(text_aspect_id(a["text"]), a["text"],
                                   tuple((text_aspect_id(s["text"]), s["text"]) for s in a.get("sub_aspects") or ()))
                            for a in q["aspects"])
            qid = str(q["query_id"])
            out[qid] = AspectQuery(qid, q["query_text"], aspects, str(q.get("query_type") or ""), qid)
        except (KeyError, TypeError, AttributeError) as e:
            raise f.damaged(f"query entry {i} lacks {e} or is not shaped as {{query_id, query_text, aspects: "
                            f"[{{text, sub_aspects}}]}}", path=Path(path)) from None
    if checksums_enabled() and len(out) != COUNTS["queries"]:
        raise f.damaged(f"{len(out)} queries, the release has {COUNTS['queries']}", path=Path(path))
    return out


def offline_queries() -> Dict[str, AspectQuery]:
    """The 100 queries of ``queries_parsed.json`` (from the authors' ``queries.txt``), by id."""
    p = FILES["queries"].resolve()
    return _offline_queries(str(p), p.stat().st_mtime_ns)


def _docno(cid: str) -> str:
    return cid[2:] if cid.startswith("c_") else cid


def _qid(bq: str) -> str:
    return bq[2:] if bq.startswith("q_") else bq


@functools.lru_cache(maxsize=2)
def _birco(qrels_path: str, mtime: float) -> Tuple[Dict[str, List[Tuple[str, float]]], Tuple[str, ...]]:
    f = FILES["birco_qrels"]
    pools: Dict[str, List[Tuple[str, float]]] = {}
    n = 0
    for line, row in iter_csv(qrels_path, f.remedy(), required=("qid", "cid", "relevance_normalized"), delimiter="\t"):
        try:
            score = float(row["relevance_normalized"])
            qid = _qid(row["qid"])
            int(qid)
        except ValueError as e:
            raise f.damaged(f"expected a query id q_<n> and a number ({e})", line, Path(qrels_path)) from None
        pools.setdefault(qid, []).append((_docno(row["cid"]), score))
        n += 1
    if checksums_enabled() and (len(pools), n) != (COUNTS["birco_queries"], COUNTS["birco_qrels"]):
        raise f.damaged(f"{n:,} judgements of {len(pools)} queries, the release has {COUNTS['birco_qrels']:,} of "
                        f"{COUNTS['birco_queries']}", path=Path(qrels_path))
    return pools, tuple(sorted(pools, key=int))


def _birco_of() -> Tuple[Dict[str, List[Tuple[str, float]]], Tuple[str, ...]]:
    verify_offline()
    p = FILES["birco_qrels"].resolve()
    return _birco(str(p), p.stat().st_mtime_ns)


def verify_offline() -> None:
    """Checks the offline files once (the verdict is cached by path, size and time): checksums,
    every judged query in ``queries_parsed.json`` and every judged abstract in the BIRCO corpus."""
    keys = ("queries", "birco_corpus", "birco_qrels", "birco_queries")
    paths = [FILES[k].resolve() for k in keys]
    verified_once("doris-mae/birco-dev", paths, lambda: _check_offline(*paths))


def _check_offline(queries: Path, corpus: Path, qrels: Path, birco_queries: Path) -> None:
    by_id = _offline_queries(str(queries), queries.stat().st_mtime_ns)
    pools = _birco(str(qrels), qrels.stat().st_mtime_ns)[0]
    rows = iter_jsonl(birco_queries, FILES["birco_queries"].remedy(), required=("qid",))
    listed = {_qid(str(d["qid"])) for _, d in rows}
    unjudged = sorted(listed - set(pools), key=lambda q: (len(q), q))
    if unjudged:
        raise FILES["birco_qrels"].damaged(f"{len(unjudged)} of the {len(listed)} queries of {birco_queries.name} "
                                           f"have no judgements in it (e.g. q_{unjudged[0]}): the file is incomplete "
                                           f"or truncated", path=qrels)
    unknown = sorted(set(pools) - set(by_id))
    if unknown:
        raise FILES["queries"].damaged(f"queries judged in {qrels.name} are not in it: {unknown[:5]}", path=queries)
    ids = {d.doc_id for d in _read_offline_docs(corpus)}
    if checksums_enabled() and len(ids) != COUNTS["birco_corpus"]:
        raise FILES["birco_corpus"].damaged(f"{len(ids):,} abstracts, the release has {COUNTS['birco_corpus']:,}",
                                            path=corpus)
    absent = sorted({d for pool in pools.values() for d, _ in pool} - ids)
    if absent:
        raise FILES["birco_corpus"].damaged(f"{len(absent)} abstract(s) judged in {qrels.name} are not in it (e.g. "
                                            f"{absent[0]}): the corpus is incomplete", path=corpus)


def birco_pools() -> Dict[str, List[Tuple[str, float]]]:
    """``{query id: [(docno, normalised score S/|Q|), ...]}`` in the file's pool order."""
    return _birco_of()[0]


def birco_query_ids(split: Optional[str] = None) -> List[str]:
    """The 40 offline query ids (numeric order); ``split`` ``"train20"`` / ``"test20"`` alternates them."""
    ids = list(_birco_of()[1])
    if split is None:
        return ids
    if split not in ("train20", "test20"):
        raise ValueError(f"unknown split {split!r}")
    return ids[0::2] if split == "train20" else ids[1::2]


def sum_from_normalised(normalised: float, n_aspects: int, qid: str = "?", docno: str = "?") -> int:
    """S(p|Q) from BIRCO's S/|Q| (an integer up to rounding error; a warning when it is not)."""
    s = normalised * n_aspects
    r = int(round(s))
    if abs(s - r) > 1e-6:
        warnings.warn(f"DORIS-MAE offline qrels: {normalised} x |Q|={n_aspects} is not an integer for query {qid}, "
                      f"abstract {docno}; rounded to {r}")
    return r


def _read_offline_docs(path: Path):
    for _, d in iter_jsonl(path, FILES["birco_corpus"].remedy(), required=("cid",)):
        yield DorisDoc(_docno(str(d["cid"])), d.get("title") or "", d.get("text") or "", "", "")


def _iter_offline_docs():
    verify_offline()
    yield from _read_offline_docs(FILES["birco_corpus"].resolve())


def _subquery_texts() -> List[Tuple[str, str]]:
    f = FILES["subquery2"]
    path = f.resolve()
    text = read_text(path, f.remedy())
    out = []
    for block in re.split(r"\n=+\n", "\n" + text):
        m = re.match(r"\s*Subquery:\s*(\d+)\s*\n(.*)", block, re.S)
        if m:
            out.append((m.group(1), m.group(2).strip()))
    if not out or (checksums_enabled() and len(out) != COUNTS["subquery2"]):
        raise f.damaged(f"{len(out):,} sub-queries ('Subquery: <n>' blocks), the release has {COUNTS['subquery2']:,}",
                        path=path)
    return out


# ----------------------------------------------------------------------------------------------
# one view over both sources
# ----------------------------------------------------------------------------------------------

def _variant_queries(variant: str) -> List[AspectQuery]:
    """The queries (with aspects) of one registered id, by its suffix after ``sci/doris-mae``."""
    if variant in ("", "train", "test"):
        qs = release().queries
        if variant:
            wanted = {str(i) for i in (TRAIN_QUERY_IDS if variant == "train" else TEST_QUERY_IDS)}
            qs = [q for q in qs if q.query_id in wanted]
        return qs
    if variant.startswith("subquery-") and variant[len("subquery-"):].isdigit():
        return list(release().subqueries(int(variant[len("subquery-"):])))
    if variant.startswith("birco-dev"):
        split = variant[len("birco-dev/"):] or None
        by_id = offline_queries()
        return [by_id[q] for q in birco_query_ids(split)]
    if variant == "queries":
        return list(offline_queries().values())
    if variant == "subquery-2-texts":
        queries = [(q.query_id, _norm_ws(q.text)) for q in offline_queries().values()]
        out = []
        for sid, text in _subquery_texts():
            out.append(AspectQuery("s" + sid, text, (), "", _parent_of(text, queries)))
        return out
    raise KeyError(f"unknown DORIS-MAE variant {variant!r}")


def _norm_ws(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _parent_of(text: str, queries: Sequence[Tuple[str, str]]) -> str:
    """The query whose text contains the most sentences of a sub-query text ("" when none)."""
    sents = [x for x in re.split(r"(?<=[.?!])\s+", _norm_ws(text)) if len(x) >= 15]
    best, best_n = "", 0
    for qid, qtext in queries:
        n = sum(1 for x in sents if x in qtext)
        if n > best_n:
            best, best_n = qid, n
    return best


def _judged(variant: str) -> Iterator[Tuple[str, str, int]]:
    """``(query id, docno, S)`` for every pool abstract of every query of the variant (Eq. 1 / Eq. 2)."""
    if variant.startswith("birco-dev"):
        pools = birco_pools()
        for q in _variant_queries(variant):
            n = q.n_aspects
            for docno, norm in pools.get(q.query_id, []):
                yield q.query_id, docno, sum_from_normalised(norm, n, q.query_id, docno)
        return
    rel = release()
    for q in _variant_queries(variant):
        ids = q.aspect_ids()
        for docno in rel.pool(q.parent_id):
            yield q.query_id, docno, sum(rel.scores.get((i, docno), 0) for i in ids)


def _iter_queries(variant):
    for q in _variant_queries(variant):
        yield DorisQuery(q.query_id, q.text)


def _iter_qrels(variant):
    for qid, docno, s in _judged(variant):
        yield ir_datasets.formats.GenericQrel(qid, docno, s)


def _iter_pool(variant):
    if variant.startswith("birco-dev"):
        pools = birco_pools()
        for q in _variant_queries(variant):
            for docno, _ in pools.get(q.query_id, []):
                yield ir_datasets.formats.GenericScoredDoc(q.query_id, docno, 0.0)
        return
    rel = release()
    for q in _variant_queries(variant):
        for docno in rel.pool(q.parent_id):
            yield ir_datasets.formats.GenericScoredDoc(q.query_id, docno, 0.0)


class AspectQueries:
    """The ir_datasets constituent that puts :meth:`aspect_queries_iter` on a DORIS-MAE dataset."""

    def __init__(self, variant: str):
        self._variant = variant

    def aspect_queries_iter(self) -> Iterator[AspectQuery]:
        """The queries with their aspect hierarchy (:class:`AspectQuery`)."""
        return iter(_variant_queries(self._variant))

    def aspect_queries(self) -> Dict[str, AspectQuery]:
        return {q.query_id: q for q in _variant_queries(self._variant)}


def _variant_of(dataset: str) -> str:
    ds = irds_id(dataset)
    if ds != NAME and not ds.startswith(NAME + "/"):
        raise ValueError(f"{dataset} is not a DORIS-MAE id ({NAME}/...)")
    return ds[len(NAME) + 1:]


def aspect_queries(dataset: str) -> Dict[str, AspectQuery]:
    """``{query id: AspectQuery}`` of a ``sci/doris-mae`` id."""
    return {q.query_id: q for q in _variant_queries(_variant_of(dataset))}


def aspect_topics(dataset: str):
    """A PyTerrier topics frame (``qid``, ``query``) with the aspect structure: ``aspects`` (tuple of
    aspect texts, sub-aspects excluded), ``sub_aspects`` (tuple of tuples of texts) and
    ``n_aspects`` (|Q|).  The ``aspects`` column is what the aspect modes of the dense scorer read."""
    rows = [{"qid": q.query_id, "query": q.text, "aspects": tuple(q.aspect_texts()),
             "sub_aspects": tuple(tuple(t for _, t in a.sub_aspects) for a in q.aspects),
             "n_aspects": q.n_aspects} for q in _variant_queries(_variant_of(dataset))]
    return pd.DataFrame(rows, columns=["qid", "query", "aspects", "sub_aspects", "n_aspects"])


def scores_frame(dataset: str):
    """The judgements of a ``sci/doris-mae`` id as a frame: ``qid``, ``docno``, ``score`` (S of Eq. 1/2),
    ``n_aspects`` (|Q|), ``normalised`` (S/|Q|) and ``relevant`` (normalised >= 1, removed abstracts
    excluded), in pool order."""
    variant = _variant_of(dataset)
    n = {q.query_id: q.n_aspects for q in _variant_queries(variant)}
    rows = [(qid, d, s, n[qid]) for qid, d, s in _judged(variant)]
    df = pd.DataFrame(rows, columns=["qid", "docno", "score", "n_aspects"])
    df["normalised"] = df["score"] / df["n_aspects"]
    df["relevant"] = (df["score"] >= df["n_aspects"]) & ~df["docno"].isin(REMOVED_ABSTRACTS)
    return df


def human_test_set():
    """The release's 250 human-annotated question pairs (``aspect_id``, ``abstract_id``, ``aspect``,
    ``annotator_1``..``annotator_3``) and the LLM's score of the same pairs (``gpt``), for the
    agreement statistics of :mod:`pyterrier_sci.plugins.doris_mae.anno_gpt`."""
    rel = release()
    rows = []
    for t in rel.test_set():
        aid, doc = str(t["aspect_id"]), str(t["abstract_id"])
        row = {"aspect_id": aid, "abstract_id": doc, "aspect": rel.id2text.get(aid, ""),
               "gpt": rel.scores.get((aid, doc))}
        for k, v in sorted((t.get("human_annotation") or {}).items()):
            row[k] = int(v)
        rows.append(row)
    return pd.DataFrame(rows)


def aspect_count(qid: str) -> int:
    """|Q| of a query or sub-query id (``"12"``, ``"12_1_3"``): from the full release when it is present,
    else from ``queries_parsed.json``.  Used by the measures when the qrels carry no ``n_aspects``."""
    parent, positions = parse_query_id(qid)
    if release_available():
        by_id = release().by_id
    else:
        try:
            by_id = offline_queries()
        except MissingDataError:
            by_id = {}
    if parent not in by_id:
        raise ValueError(f"DORIS-MAE measures need |Q| (the number of aspects and sub-aspects) of query {qid!r}: "
                         f"it is no query of the data directory {data_dir()}; add an 'n_aspects' column to the qrels")
    q = by_id[parent]
    return q.n_aspects if positions is None else subquery_of(q, positions).n_aspects


# ----------------------------------------------------------------------------------------------
# which files each registered id needs (pyterrier-sci datasets)
# ----------------------------------------------------------------------------------------------

class _Part:
    def __init__(self, keys: Sequence[str]):
        self.keys = tuple(keys)

    def missing_files(self) -> List[str]:
        return [str(FILES[k].local()) for k in self.keys if not FILES[k].exists()]


def missing_files() -> List[str]:
    """Files of the full release that are missing (the offline ids are listed separately in :data:`STATUS`)."""
    return _Part(["release"]).missing_files()


#: id prefix -> what it needs; the most specific prefixes first (for ``registry_status``)
STATUS = {
    OFFLINE: _Part(["queries", "birco_queries", "birco_corpus", "birco_qrels"]),
    QUERIES_ONLY: _Part(["queries"]),
    SUBQUERY_TEXTS: _Part(["subquery2", "queries"]),
    NAME: _Part(["release"]),
}


# ----------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------

_RELEASE_DOCS = FnDocs(NAME, lambda: release().docs(), DorisDoc, count_hint=363133)
_OFFLINE_DOCS = FnDocs(OFFLINE, _iter_offline_docs, DorisDoc, count_hint=2938)
_QREL_DEFS = {0: "S(p|Q) of Eq. 1: the sum of the 0-2 scores of the query's aspects and sub-aspects; "
                 "relevant when S(p|Q) / |Q| >= 1 (|Q|: pyterrier_sci.datasets.doris_mae.aspect_count)"}


def _register_all():
    full = [("", "DORIS-MAE, all 100 queries (full release)"),
            ("train", "DORIS-MAE training queries (40, section 5.3)"),
            ("test", "DORIS-MAE test queries (60, section 5.3)")]
    full += [(f"subquery-{k}", f"DORIS-MAE sub-queries of {k} aspect(s) (Eq. 2)") for k in SUBQUERY_SIZES]
    offline = [("birco-dev", "DORIS-MAE offline: 40 queries with BIRCO's pools"),
               ("birco-dev/train20", "DORIS-MAE offline: 20 training queries of the 40"),
               ("birco-dev/test20", "DORIS-MAE offline: 20 test queries of the 40")]
    for docs, namespace, variants in ((_RELEASE_DOCS, None, full), (_OFFLINE_DOCS, OFFLINE, offline)):
        for variant, title in variants:
            name = NAME + ("/" + variant if variant else "")
            register(name, docs,
                     FnQueries(namespace or name, functools.partial(_iter_queries, variant), DorisQuery),
                     FnQrels(functools.partial(_iter_qrels, variant), _QREL_DEFS),
                     FnScoredDocs(functools.partial(_iter_pool, variant)),
                     AspectQueries(variant),
                     documentation={"pretty_name": title, "desc": __doc__.split("\n\n")[0]})
    for variant, title in [("queries", "DORIS-MAE: the 100 queries with aspects (no documents)"),
                           ("subquery-2-texts", "DORIS-MAE: the 1,003 two-aspect sub-query texts (no judgements)")]:
        name = NAME + "/" + variant
        register(name, FnQueries(name, functools.partial(_iter_queries, variant), DorisQuery), AspectQueries(variant),
                 documentation={"pretty_name": title, "desc": __doc__.split("\n\n")[0]})


_register_all()
