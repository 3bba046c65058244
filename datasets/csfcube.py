"""CSFCube (Mysore et al., 2021): faceted query-by-example over computer-science abstracts.

Registers ``sci/csfcube[/{facet}][/{fold}-{test,dev}]`` (4,205 abstracts, graded 0-3, a pool re-ranking
benchmark) and reads - or rebuilds, :func:`rebuild_corpus` - the release's files; see ``docs/sciface.md``.
"""

import contextlib
import functools
import hashlib
import json
import logging
import re
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import ir_datasets
import pandas as pd

from pyterrier_sci import artifacts
from pyterrier_sci.agreement import register_judgements
from pyterrier_sci.data import (
    ENV_VAR,
    DamagedDataError,
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

log = logging.getLogger(__name__)

NAME = "sci/csfcube"
FACETS = ("background", "method", "result")
_REPO = "https://raw.githubusercontent.com/iesl/CSFCube/7ffe012c1d92c470f185fc086086caf5b8e05ef3/"
_SOURCE = "github.com/iesl/CSFCube (CC BY-NC 4.0), or the project's shared/data/csfcube"


def _release(name: str, md5: str, sha256: str) -> DataFile:
    return DataFile(f"csfcube/{name}", url=_REPO + name, md5=md5, source=_SOURCE, sha256=sha256)


FILES = {
    "splits": _release("evaluation_splits.json", "6f08545a80dcec24d187d5ab0c1be14c",
                       "1d23a1b2110e874809c9516f65c70e3c6e4b8fe3bd748ff36ff05c4875226c88"),
    "queries": _release("queries-release.csv", "6045c24599f7a6894808f955937f6bc6",
                        "6890b27986abe880129ca33ebd3f0f3e205fda086d57617fd4c2bd464ec3f1aa"),
    "background": _release("test-pid2anns-csfcube-background.json", "cbd85f7e9bb527acfe0a5928c05cbcae",
                           "2015cbf965377374e020b0ec133351ec1feb731b9a9c40da0e446ef6eee4fa5e"),
    "method": _release("test-pid2anns-csfcube-method.json", "08ae294faed4d8d30fb4b72268da3ab2",
                       "4d9b48f4b6a7a4fc24a30e0c0e74d1cc53eb4214ec4b855e3cd98e86829323a2"),
    "result": _release("test-pid2anns-csfcube-result.json", "18f884dadc406af00474be0bda9c1a89",
                       "5ed7a63bc20e3deb725f8ec82abfcb1c5d79673befc942509b48effceb3be031"),
    # rebuild_corpus() writes exactly these bytes from the release's readable annotations
    "corpus": DataFile("csfcube/abstracts-csfcube-reconstructed.jsonl",
                       source="delete it and it is rebuilt from csfcube/readable_annotations/*.txt "
                              "(pyterrier_sci.datasets.csfcube.rebuild_corpus()); " + _SOURCE,
                       sha256="1b1852477c507d5806462569e9048323d9693914b32348a5f8d000c0601a5eca"),
}
#: the release's counts (checked with the checksums): documents, and queries per facet
COUNTS = {"docs": 4205, "background": 16, "method": 17, "result": 17}


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
    """The corpus file, rebuilt first when it is missing and the readable annotations are there.  It
    must be the released file (its SHA-256) or, when the annotations gave other bytes, the
    toolkit's own rebuild: a file whose ``<name>.sha256`` record (written by :func:`rebuild_corpus`)
    it still matches."""
    f = FILES["corpus"]
    if not f.exists() and (data_dir() / "csfcube" / "readable_annotations").is_dir():
        rebuild_corpus()
    try:
        return f.resolve()
    except DamagedDataError:
        p = f.local()
        if _REBUILD_MARK in _read_record(p) and artifacts.verify_checksum(p):
            _say_once(f"{p} is the toolkit's own rebuild from readable_annotations (its recorded SHA-256), "
                      "not the released file's bytes")
            return p
        raise


#: the word :func:`rebuild_corpus` writes into the checksum record of a rebuild that differs from the release
_REBUILD_MARK = "rebuilt-by-pyterrier-sci"
_said: set = set()


def _read_record(path: Path) -> str:
    try:
        return Path(str(path) + ".sha256").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        log.warning(message)


def _read_docs(path: Path):
    for lineno, d in iter_jsonl(path, FILES["corpus"].remedy(), required=("paper_id",)):
        sents = d.get("abstract") or ()
        if not isinstance(sents, list):
            raise FILES["corpus"].damaged(f"'abstract' is {type(sents).__name__}, not a list of sentences",
                                          lineno, path)
        sents = tuple(sents)
        yield CSFCubeDoc(str(d["paper_id"]), d.get("title") or "", " ".join(sents), str(d.get("year") or ""),
                         sents, tuple(d.get("pred_labels") or ()))


def _iter_docs():
    verify()
    yield from _read_docs(_corpus_path())


@functools.lru_cache(maxsize=4)
def _docs_by_id(path: str, mtime: float) -> Dict[str, CSFCubeDoc]:
    return {d.doc_id: d for d in _read_docs(Path(path))}


def _docs() -> Dict[str, CSFCubeDoc]:
    p = _corpus_path()
    return _docs_by_id(str(p), p.stat().st_mtime_ns)


def docs() -> Dict[str, CSFCubeDoc]:
    verify()
    return _docs()


_GRADES = "relevance_adju"


@functools.lru_cache(maxsize=8)
def _annotations(facet: str, path: str, mtime: int) -> dict:
    f = FILES[facet]
    data = read_json(path, f.remedy(), expect=dict)
    for pid, ann in data.items():
        if (not isinstance(ann, dict) or not isinstance(ann.get("cands"), list)
                or not isinstance(ann.get(_GRADES), list)):
            raise f.damaged(f"query paper {pid}: expected an object with the lists 'cands' and '{_GRADES}'",
                            path=Path(path))
        if len(ann["cands"]) != len(ann[_GRADES]):
            raise f.damaged(f"query paper {pid} has {len(ann['cands'])} candidates but {len(ann[_GRADES])} grades "
                            f"('{_GRADES}'): every candidate needs a grade", path=Path(path))
        bad = [g for g in ann[_GRADES] if not isinstance(g, int) or not 0 <= g <= 3]
        if bad:
            raise f.damaged(f"query paper {pid} has grades outside 0-3: {bad[:5]}", path=Path(path))
    return data


def _annotations_of(facet: str) -> dict:
    p = FILES[facet].resolve()
    return _annotations(facet, str(p), p.stat().st_mtime_ns)


def annotations(facet: str) -> dict:
    """``{paper_id: {"cands": [...], "relevance_adju": [...], ...}}`` for one facet."""
    verify()
    return _annotations_of(facet)


_FOLDS = ("fold1_dev", "fold1_test", "fold2_dev", "fold2_test")


@functools.lru_cache(maxsize=2)
def _splits(path: str, mtime: int) -> dict:
    f = FILES["splits"]
    data = read_json(path, f.remedy(), expect=dict)
    for facet in FACETS:
        folds = data.get(facet)
        if not isinstance(folds, dict) or any(not isinstance(folds.get(k), list) for k in _FOLDS):
            raise f.damaged(f"facet '{facet}' lacks the fold lists {list(_FOLDS)}", path=Path(path))
    return data


def _splits_of() -> dict:
    p = FILES["splits"].resolve()
    return _splits(str(p), p.stat().st_mtime_ns)


def _read_queries(path: Path) -> Dict[str, dict]:
    """``{query id: row}`` of ``queries-release.csv``."""
    return {f"{row['pid']}_{row['facet']}": row
            for _, row in iter_csv(path, FILES["queries"].remedy(), required=("pid", "facet", "title"))}


def query_papers() -> set:
    """The paper ids of every released query (``queries-release.csv``, checked against its checksum): 34 papers,
    some the query of more than one facet."""
    return {row["pid"] for row in _read_queries(FILES["queries"].resolve()).values()}


def verify() -> None:
    """Checks the data directory's CSFCube files once (the verdict is cached by path, size and time):
    checksums (in :meth:`DataFile.resolve`), every annotated query in the queries file and the folds,
    every query paper and candidate in the corpus, and - with checksums on - the release's counts.
    Files that are missing are left to the reader that needs them (a :class:`MissingDataError`)."""
    present = [k for k in FILES if k != "corpus" and FILES[k].exists()]
    if FILES["corpus"].exists() or (data_dir() / "csfcube" / "readable_annotations").is_dir():
        present.append("corpus")
    paths = {k: (_corpus_path() if k == "corpus" else FILES[k].resolve()) for k in present}
    verified_once("csfcube", list(paths.values()), lambda: _check(paths))


def _check(paths: Dict[str, Path]) -> None:
    facets = [f for f in FACETS if f in paths]
    anns = {f: _annotations_of(f) for f in facets}
    if "corpus" in paths:
        corpus = _docs()
        if checksums_enabled() and len(corpus) != COUNTS["docs"]:
            raise FILES["corpus"].damaged(f"{len(corpus):,} documents, the release has {COUNTS['docs']:,}",
                                          path=paths["corpus"])
        for f, ann in anns.items():
            for pid, a in ann.items():
                absent = [str(c) for c in [pid] + a["cands"] if str(c) not in corpus]
                if absent:
                    raise FILES["corpus"].damaged(
                        f"{len(absent)} paper(s) that {FILES[f].local().name} judges are not in it (e.g. {absent[0]}, "
                        f"query {pid}_{f}): the corpus is incomplete", path=paths["corpus"])
    annotated = {f"{pid}_{f}" for f, ann in anns.items() for pid in ann}
    for f, ann in anns.items():
        if checksums_enabled() and len(ann) != COUNTS[f]:
            raise FILES[f].damaged(f"{len(ann)} queries, the release has {COUNTS[f]}", path=paths[f])
    if "queries" in paths:
        rows = _read_queries(paths["queries"])
        absent = sorted(annotated - set(rows))
        if absent:
            raise FILES["queries"].damaged(f"{len(absent)} annotated queries are not in it (e.g. {absent[0]}): "
                                           f"the file is incomplete or truncated", path=paths["queries"])
    if "splits" in paths and facets:
        s = _splits_of()
        for f in facets:
            listed = {q for k in _FOLDS for q in s[f][k]}
            unknown = sorted(listed - annotated)
            if unknown:
                raise FILES["splits"].damaged(f"fold queries without annotations in {FILES[f].local().name}: "
                                              f"{unknown[:3]}", path=paths["splits"])


def splits() -> dict:
    """The official folds: ``{facet|"all": {"fold1_dev": [...], "fold1_test": [...], ...}}``."""
    verify()
    s = dict(_splits_of())
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
    for qid, row in _read_queries(FILES["queries"].resolve()).items():
        if qid in wanted:
            d = by_id.get(row["pid"])
            text = d.default_text() if d is not None else row["title"]
            yield CSFCubeQuery(qid, text)


def iter_judged(facet: Optional[str] = None, split: Optional[str] = None):
    """``(query_id, candidate, grade)`` for every pool candidate of the selected queries (``facet``:
    ``background``, ``method``, ``result`` or ``None`` for all; ``split``: an official split such as
    ``"fold1-test"``, or ``None`` for every query): the adjudicated grades."""
    wanted = set(_query_ids(facet, split))
    for f in (FACETS if facet is None else (facet,)):
        for pid, ann in annotations(f).items():
            qid = f"{pid}_{f}"
            if qid in wanted:
                for cand, rel in zip(ann["cands"], ann["relevance_adju"]):
                    yield qid, str(cand), int(rel)


#: the judgement sets each CSFCube dataset offers (pyterrier_sci.agreement.judgements): each query was graded by
#: two of CSFCube's four annotators before adjudication (``relevance_ann1``-``relevance_ann4`` in the release's
#: test-pid2anns files, two per query): ``first_annotator`` is the lower-numbered one's grades, ``second_annotator``
#: the other's; ``adjudicated`` the grades the qrels hold
JUDGEMENT_SETS = ("first_annotator", "second_annotator", "adjudicated")
_ANNOTATOR = re.compile(r"relevance_ann(\d+)")


def judgement_sets(facet: Optional[str] = None, split: Optional[str] = None):
    """``{name: frame with qid, docno, label}`` of :data:`JUDGEMENT_SETS` for the selected queries: every pool
    candidate with the grade each of its two annotators, and the adjudication, gave it.  A query without two
    annotators' grades for every candidate is :class:`~pyterrier_sci.data.DamagedDataError` naming the file."""
    wanted = set(_query_ids(facet, split))
    rows: Dict[str, list] = {name: [] for name in JUDGEMENT_SETS}
    for f in (FACETS if facet is None else (facet,)):
        for pid, ann in annotations(f).items():
            qid = f"{pid}_{f}"
            if qid not in wanted:
                continue
            keys = sorted((k for k in ann if _ANNOTATOR.fullmatch(k)), key=lambda k: int(k[len("relevance_ann"):]))
            if len(keys) != 2 or any(not isinstance(ann[k], list) or len(ann[k]) != len(ann["cands"]) for k in keys):
                raise FILES[f].damaged(f"query paper {pid}: expected two annotators' grade lists "
                                       f"(relevance_annN), one grade per candidate; found {keys}",
                                       path=FILES[f].resolve())
            for name, key in zip(JUDGEMENT_SETS, keys + [_GRADES]):
                rows[name] += [(qid, str(c), float(g)) for c, g in zip(ann["cands"], ann[key])]
    return {name: pd.DataFrame(r, columns=["qid", "docno", "label"]) for name, r in rows.items()}


def _iter_qrels(facet, split):
    for qid, cand, rel in iter_judged(facet, split):
        yield ir_datasets.formats.GenericQrel(qid, cand, rel)


def _iter_pool(facet, split):
    for qid, cand, _ in iter_judged(facet, split):
        yield ir_datasets.formats.GenericScoredDoc(qid, cand, 0.0)


def rebuild_corpus(annotations_dir: Optional[Path] = None, out: Optional[Path] = None) -> Path:
    """Rebuilds the corpus jsonl from the release's ``readable_annotations/*.txt`` (title, year,
    abstract sentences and their facet labels of every query and candidate paper).  Written
    atomically; returns the path."""
    annotations_dir = Path(annotations_dir or data_dir() / "csfcube" / "readable_annotations")
    out = Path(out or FILES["corpus"].local())
    if not annotations_dir.is_dir():
        raise MissingDataError(f"cannot rebuild the CSFCube corpus: {annotations_dir} is missing. "
                               f"Get it from: {_SOURCE}")
    papers: Dict[str, dict] = {}
    label_re = re.compile(r"^([a-z_]+_label): (.*)$")
    for fname in sorted(annotations_dir.glob("*.txt")):
        text = read_text(fname, f"restore {annotations_dir} from: {_SOURCE}")
        for block in re.split(r"\n={10,}\n", "\n" + text):
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
    # the release's layout: papers in numeric id order, one JSON object a line, UTF-8 unescaped
    ordered = sorted(papers.values(), key=lambda p: (0, int(p["paper_id"])) if p["paper_id"].isdigit()
                     else (1, p["paper_id"]))
    text = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in ordered)
    try:
        artifacts.atomic_write_text(out, text, what="the rebuilt CSFCube corpus")
    except PermissionError as e:
        raise MissingDataError(f"cannot rebuild the CSFCube corpus at {out}: {e.strerror} (the data directory is "
                               f"read-only); restore the file, or set ${ENV_VAR} to a writable copy of the data "
                               f"directory. Get it from: {_SOURCE}") from None
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    record = Path(str(out) + ".sha256")
    if digest == FILES["corpus"].sha256:
        with contextlib.suppress(FileNotFoundError):
            record.unlink()  # a record of an earlier, different rebuild
        _say_once(f"rebuilt {out} from {annotations_dir}: {len(ordered):,} papers, byte for byte the released "
                  f"file (SHA-256 {digest[:12]}…)")
    else:
        artifacts.atomic_write_text(record, f"{digest}  {out.name}  {_REBUILD_MARK}\n", what="its checksum record")
        _say_once(f"rebuilt {out} from {annotations_dir}: {len(ordered):,} papers, but not the released file's bytes "
                  f"(SHA-256 {digest[:12]}…, released {FILES['corpus'].sha256[:12]}…): other annotations? It is "
                  f"used as the toolkit's own rebuild, its SHA-256 recorded in {record.name}")
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
        register_judgements(name, functools.partial(judgement_sets, facet, split))


_register_all()

#: id prefix -> what reports its missing files (``pyterrier-sci datasets``)
STATUS = {NAME: sys.modules[__name__]}
