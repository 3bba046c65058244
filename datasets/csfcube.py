"""CSFCube (Mysore et al., 2021): faceted query-by-example over computer-science abstracts.

Registered ids (``pt.get_dataset("irds:<id>")``):

=====================================  ====================================================
``sci/csfcube``                        all 50 query-facet pairs (the test set of all facets)
``sci/csfcube/{facet}``                one facet: ``background`` (16), ``method`` (17), ``result`` (17)
``sci/csfcube[/{facet}]/fold1-test``   the official cross-validation folds; ``fold1-test`` is
``sci/csfcube[/{facet}]/fold2-test``   ``fold2-dev`` and the reverse, as in ``evaluation_splits.json``
``sci/csfcube[/{facet}]/fold1-dev``
``sci/csfcube[/{facet}]/fold2-dev``
=====================================  ====================================================

* documents (4,205): ``doc_id``, ``title``, ``abstract`` (sentences joined), ``year``,
  ``sentences`` and ``sentence_labels`` (the per-sentence facet labels of the release);
* queries: ``query_id`` = ``<paper id>_<facet>``, ``text`` = the query paper's title and abstract
  (the query paper is itself in the corpus: look it up with ``query_paper_id``);
* qrels: the adjudicated graded judgements 0-3 (``relevance_adju``) of every pool candidate;
* scoreddocs (``get_results()``): each query's candidate pool, all with score 0.  CSFCube is a
  re-ranking benchmark: systems rank the pool (component ``pool`` in the pipeline language).

The official measures are registered (see :mod:`pyterrier_sci.measures`): ``NDCG%20`` and the
``csfcube.*`` family (``MAP``, ``RP``, ``P@20``, ``R@20``, ``RR``, ``NDCG``, ``NDCG@20``); in an
experiment on a ``sci/csfcube`` id the short names (``MAP`` ...) mean these.  They follow
``eval_scripts/ranking_eval.py``: binary measures count grade >= 2, nDCG uses the grades with the
``rank_metrics`` discount, NDCG%20 cuts at 20% of the ranked pool, run documents outside the pool are
dropped and pool documents missing from the run are not appended, and the mean is taken per fold,
then across the folds present.

Files (under ``$PYTERRIER_SCI_DATA/csfcube``): the verbatim release files download from the
official repository when missing and the network allows; the corpus file
``abstracts-csfcube-reconstructed.jsonl`` is rebuilt from the release's ``readable_annotations/``
(the release's own corpus file is not published) - see :func:`rebuild_corpus`.
"""

import csv
import functools
import json
import os
import re
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import ir_datasets

from pyterrier_sci import measures as _measures
from pyterrier_sci.data import DataFile, MissingDataError, data_dir
from ._base import FnDocs, FnQrels, FnQueries, FnScoredDocs, register

NAME = "sci/csfcube"
FACETS = ("background", "method", "result")
_REPO = "https://raw.githubusercontent.com/iesl/CSFCube/7ffe012c1d92c470f185fc086086caf5b8e05ef3/"
_SOURCE = "github.com/iesl/CSFCube (CC BY-NC 4.0), or the project's shared/data/csfcube"


def _release(name: str, md5: str) -> DataFile:
    return DataFile(f"csfcube/{name}", url=_REPO + name, md5=md5, source=_SOURCE)


FILES = {
    "splits": _release("evaluation_splits.json", "6f08545a80dcec24d187d5ab0c1be14c"),
    "queries": _release("queries-release.csv", "6045c24599f7a6894808f955937f6bc6"),
    "background": _release("test-pid2anns-csfcube-background.json", "cbd85f7e9bb527acfe0a5928c05cbcae"),
    "method": _release("test-pid2anns-csfcube-method.json", "08ae294faed4d8d30fb4b72268da3ab2"),
    "result": _release("test-pid2anns-csfcube-result.json", "18f884dadc406af00474be0bda9c1a89"),
    "corpus": DataFile("csfcube/abstracts-csfcube-reconstructed.jsonl",
                       source="rebuilt from csfcube/readable_annotations/*.txt by "
                              "pyterrier_sci.datasets.csfcube.rebuild_corpus(); " + _SOURCE),
}


# (no `from __future__ import annotations` in this module: PyTerrier's text loader reads the str
# annotations of the document class to know which fields are text)
class CSFCubeDoc(NamedTuple):
    doc_id: str
    title: str
    abstract: str
    year: str
    sentences: Tuple[str, ...]
    sentence_labels: Tuple[str, ...]

    def default_text(self) -> str:
        return f"{self.title} {self.abstract}"


class CSFCubeQuery(NamedTuple):
    query_id: str
    text: str

    def default_text(self) -> str:
        return self.text


def query_paper_id(query_id: str) -> str:
    """``"10014168_background"`` -> ``"10014168"``."""
    return query_id.rsplit("_", 1)[0]


def query_facet(query_id: str) -> str:
    return query_id.rsplit("_", 1)[1]


# ----------------------------------------------------------------------------------------------
# reading the files
# ----------------------------------------------------------------------------------------------

def missing_files() -> List[str]:
    """Files of the data directory that are missing (the corpus counts as present when it can be rebuilt)."""
    missing = [str(f.local()) for key, f in FILES.items() if key != "corpus" and not f.exists()]
    if not FILES["corpus"].exists() and not (data_dir() / "csfcube" / "readable_annotations").is_dir():
        missing.append(str(FILES["corpus"].local()))
    return missing


def _corpus_path() -> Path:
    f = FILES["corpus"]
    if not f.exists() and (data_dir() / "csfcube" / "readable_annotations").is_dir():
        rebuild_corpus()
    return f.resolve()


def _iter_docs():
    with open(_corpus_path(), encoding="utf-8") as fin:
        for line in fin:
            d = json.loads(line)
            sents = tuple(d.get("abstract") or ())
            yield CSFCubeDoc(str(d["paper_id"]), d.get("title") or "", " ".join(sents), str(d.get("year") or ""),
                             sents, tuple(d.get("pred_labels") or ()))


@functools.lru_cache(maxsize=4)
def _docs_by_id(path: str, mtime: float) -> Dict[str, CSFCubeDoc]:
    return {d.doc_id: d for d in _iter_docs()}


def docs() -> Dict[str, CSFCubeDoc]:
    p = _corpus_path()
    return _docs_by_id(str(p), p.stat().st_mtime)


@functools.lru_cache(maxsize=8)
def _annotations(facet: str, path: str) -> dict:
    with open(path, encoding="utf-8") as fin:
        return json.load(fin)


def annotations(facet: str) -> dict:
    """``{paper_id: {"cands": [...], "relevance_adju": [...], ...}}`` for one facet."""
    return _annotations(facet, str(FILES[facet].resolve()))


@functools.lru_cache(maxsize=2)
def _splits(path: str) -> dict:
    with open(path, encoding="utf-8") as fin:
        return json.load(fin)


def splits() -> dict:
    """The official folds: ``{facet|"all": {"fold1_dev": [...], "fold1_test": [...], ...}}``."""
    s = dict(_splits(str(FILES["splits"].resolve())))
    if "all" not in s:
        s["all"] = {k: [q for f in FACETS for q in s[f][k]] for k in s[FACETS[0]]}
    return s


def test_fold_of(query_id: str) -> Optional[str]:
    """``"fold1"`` or ``"fold2"``: which official test fold a query belongs to (None if unknown)."""
    try:
        facet = query_facet(query_id)
        folds = splits()[facet]
    except (KeyError, IndexError, MissingDataError):
        return None
    for fold in ("fold1", "fold2"):
        if query_id in folds[f"{fold}_test"]:
            return fold
    return None


def _query_ids(facet: Optional[str], split: Optional[str]) -> List[str]:
    facets = FACETS if facet is None else (facet,)
    if split is None:
        return [f"{pid}_{f}" for f in facets for pid in annotations(f)]
    return list(splits()["all" if facet is None else facet][split.replace("-", "_")])


def _iter_queries(facet, split):
    wanted = set(_query_ids(facet, split))
    by_id = docs()
    with open(FILES["queries"].resolve(), encoding="utf-8") as fin:
        for row in csv.DictReader(fin):
            qid = f"{row['pid']}_{row['facet']}"
            if qid in wanted:
                d = by_id.get(row["pid"])
                text = d.default_text() if d is not None else row["title"]
                yield CSFCubeQuery(qid, text)


def _iter_judged(facet, split):
    """``(query_id, candidate, grade)`` for every pool candidate of the selected queries."""
    wanted = set(_query_ids(facet, split))
    for f in (FACETS if facet is None else (facet,)):
        for pid, ann in annotations(f).items():
            qid = f"{pid}_{f}"
            if qid in wanted:
                for cand, rel in zip(ann["cands"], ann["relevance_adju"]):
                    yield qid, str(cand), int(rel)


def _iter_qrels(facet, split):
    for qid, cand, rel in _iter_judged(facet, split):
        yield ir_datasets.formats.GenericQrel(qid, cand, rel)


def _iter_pool(facet, split):
    for qid, cand, _ in _iter_judged(facet, split):
        yield ir_datasets.formats.GenericScoredDoc(qid, cand, 0.0)


def rebuild_corpus(annotations_dir: Optional[Path] = None, out: Optional[Path] = None) -> Path:
    """Rebuilds the corpus jsonl from the release's ``readable_annotations/*.txt`` (title, year,
    abstract sentences and their facet labels of every query and candidate paper).  Written
    atomically; returns the path."""
    annotations_dir = Path(annotations_dir or data_dir() / "csfcube" / "readable_annotations")
    out = Path(out or FILES["corpus"].local())
    if not annotations_dir.is_dir():
        raise MissingDataError(f"cannot rebuild the CSFCube corpus: {annotations_dir} is missing. Get it from: {_SOURCE}")
    papers: Dict[str, dict] = {}
    label_re = re.compile(r"^([a-z_]+_label): (.*)$")
    for fname in sorted(annotations_dir.glob("*.txt")):
        for block in re.split(r"\n={10,}\n", "\n" + fname.read_text(encoding="utf-8")):
            m = re.search(r"paper_id: (\S+); YEAR: (\S*)", block)
            t = re.search(r"^TITLE: (.*)$", block, re.M)
            if not m or not t:
                continue
            sents, labels = [], []
            body = block[block.index("ABSTRACT:") + len("ABSTRACT:"):] if "ABSTRACT:" in block else ""
            for line in body.strip().splitlines():
                lm = label_re.match(line.strip())
                if lm:
                    labels.append(lm.group(1))
                    sents.append(lm.group(2))
                elif sents and line.strip():
                    sents[-1] += " " + line.strip()
            papers.setdefault(m.group(1), {"paper_id": m.group(1), "title": t.group(1).strip(), "year": m.group(2),
                                           "abstract": sents, "pred_labels": labels})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fout:
        for p in papers.values():
            fout.write(json.dumps(p) + "\n")
    os.replace(tmp, out)
    return out


# ----------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------

_DOCS = FnDocs(NAME, _iter_docs, CSFCubeDoc, count_hint=4205)
_QREL_DEFS = {0: "Dissimilar", 1: "Somewhat similar", 2: "Near-identical", 3: "Identical"}


def _register_all():
    variants = [(None, None)] + [(f, None) for f in FACETS]
    variants += [(f, s) for f in (None,) + FACETS for s in ("fold1-test", "fold2-test", "fold1-dev", "fold2-dev")]
    for facet, split in variants:
        name = "/".join(x for x in (NAME, facet, split) if x)
        register(name, _DOCS,
                 FnQueries(NAME, functools.partial(_iter_queries, facet, split), CSFCubeQuery),
                 FnQrels(functools.partial(_iter_qrels, facet, split), _QREL_DEFS),
                 FnScoredDocs(functools.partial(_iter_pool, facet, split)),
                 documentation={"pretty_name": f"CSFCube {facet or 'all facets'}{' ' + split if split else ''}",
                                "desc": __doc__.split("\n\n")[0]})


def _register_measures():
    M = _measures
    defs = {
        "NDCG%20": (lambda g, j: M.ndcg_at_k(g, int(0.20 * len(g))), "nDCG at 20% of the ranked pool (CSFCube, graded 0-3)"),
        "MAP": (lambda g, j: M.average_precision([x >= 2 for x in g]), "average precision, relevant = grade >= 2"),
        "RP": (lambda g, j: M.r_precision_last_relevant([x >= 2 for x in g]), "R-precision as rank_metrics defines it"),
        "P@20": (lambda g, j: M.precision_at_k([x >= 2 for x in g], 20), "precision at 20, grade >= 2"),
        "R@20": (lambda g, j: M.recall_at_k([x >= 2 for x in g], 20), "recall at 20 of the ranked pool's relevant, grade >= 2"),
        "RR": (lambda g, j: M.reciprocal_rank([x >= 2 for x in g]), "reciprocal rank, grade >= 2"),
        "NDCG": (lambda g, j: M.ndcg_at_k(g, len(g)), "nDCG over the whole ranked pool"),
        "NDCG@20": (lambda g, j: M.ndcg_at_k(g, 20), "nDCG at 20"),
    }
    aliases = {}
    for short, (fn, desc) in defs.items():
        full = f"csfcube.{short}"
        m = M.RankListMeasure(short if short == "NDCG%20" else full, fn, group_of=test_fold_of, description=desc)
        M.register(full, m, replace=True)
        aliases[short] = full
    M.register("NDCG%20", M.get("csfcube.NDCG%20"), replace=True)
    M.register_aliases(NAME, aliases)


_register_all()
_register_measures()
