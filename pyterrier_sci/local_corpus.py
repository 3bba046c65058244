"""Your own papers as a corpus: a collection a researcher holds (a DataFrame, JSONL, CSV/TSV, BibTeX, CSL-JSON,
PDFs: :mod:`pyterrier_sci.records`) registered as the ir_datasets id ``sci/local/NAME``, usable wherever a
benchmark id is (components, ``pt.get_dataset("irds:sci/local/NAME")``, the CLI, pipeline files, ``serve``).

:func:`register_corpus` builds an artifact under ``<work dir>/corpora/NAME/<version>/``: the papers as normalised
records (``docs.jsonl.gz``), the topics and qrels given with them (``topics.tsv``, ``qrels.txt``), ``pt_meta.json``
and a manifest naming every source file with its SHA-256, the counts and the fields present.  The version is a
hash of the sources' content and of the settings that read them: registering the same files again returns at
once; a changed file is a new version, and ``current.json`` (written atomically) points the name at it.  Indexes,
docstores and saved runs of a local corpus are keyed by its version (:func:`pyterrier_sci.corpus.corpus_version`),
so a new version is never mixed with the indexes of the old one.  Records are streamed to disk: a collection is
never loaded whole.  See docs/corpora.md.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import typing
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import ir_datasets
import pandas as pd

from pyterrier_sci.artifacts import MANIFEST_NAME, atomic_write_text, build_atomically, lock, write_pt_meta
from pyterrier_sci.data import work_dir
from pyterrier_sci.errors import RecordError
from pyterrier_sci.generations import UPDATES_GROUP
from pyterrier_sci.irds import FnDocs, FnQrels, FnQueries, register
from pyterrier_sci.records import SUFFIXES, detect_format, json_lines, read_lines, read_records
from pyterrier_sci.registry import load_group
from pyterrier_sci.text import STANDARD_UNITS, ChunkDoc, chunk_corpus_id, chunk_documents

__all__ = ["ID_PREFIX", "LocalPaper", "LocalQuery", "LocalDocs", "LocalChunkDocs", "Section", "register_corpus",
           "corpora_dir", "local_corpora", "LOCAL_DATASET_HOOKS", "corpus_manifest", "remove_corpus",
           "register_local_datasets", "register_local_dataset", "local_name", "add_corpus_commands", "as_dataset"]

#: the ir_datasets ids of local corpora: ``sci/local/NAME``
ID_PREFIX = "sci/local/"
#: a corpus name: a folder of the work directory
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
ARTIFACT_TYPE, ARTIFACT_FORMAT = "sci_local_corpus", "jsonl"
_CURRENT = "current.json"
_CHUNK = 1 << 20


class Section(NamedTuple):
    heading: str
    text: str


class LocalPaper(NamedTuple):
    """A paper of a local corpus, shaped as the toolkit's full-paper corpora are (``sci/acl-fulltext``): ``text``
    is the title and abstract (the full text when a paper has neither), ``full_text`` the body where the source has
    one (a PDF's text), ``sections`` its ``(heading, text)`` sections, ``date`` ISO 8601, ``citations`` the docnos
    it cites."""
    doc_id: str
    text: str
    title: str
    abstract: str
    full_text: str
    sections: Tuple[Section, ...]
    date: str
    citations: Tuple[str, ...]

    def default_text(self) -> str:
        return self.text


class LocalQuery(NamedTuple):
    query_id: str
    text: str

    def default_text(self) -> str:
        return self.text


# the fields' types, not their names as strings (this module's annotations are postponed): PyTerrier's text
# loader (pt.text.get_text) offers the fields whose annotation is ``str``
for _cls in (Section, LocalPaper, LocalQuery):
    _cls.__annotations__ = typing.get_type_hints(_cls)


def corpora_dir() -> Path:
    """``<work dir>/corpora``: where local corpora are registered."""
    return Path(work_dir()) / "corpora"


def local_name(dataset: str) -> Optional[str]:
    """NAME of ``[irds:]sci/local/NAME[/...]``, else None."""
    ds = dataset[len("irds:"):] if dataset.startswith("irds:") else dataset
    if not ds.startswith(ID_PREFIX):
        return None
    return ds[len(ID_PREFIX):].split("/")[0] or None


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        raise RecordError("the corpus name", f"{name!r} is not a corpus name: letters, digits, '_', '.' and '-' "
                          "(at most 100, starting with a letter or digit); it names a folder of the work directory "
                          f"and the dataset id {ID_PREFIX}NAME")
    return name


def _current(name: str) -> Optional[Dict[str, Any]]:
    """The current version's record (``{"version", "path"}``) of a corpus, None when it has none."""
    p = corpora_dir() / name / _CURRENT
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("version"), str) or \
            not re.fullmatch(r"[0-9a-f]{12}", data["version"]):
        return None
    return data


def _version_dir(name: str, version: Optional[str] = None) -> Optional[Path]:
    version = version or (_current(name) or {}).get("version")
    return corpora_dir() / name / version if version else None


def corpus_manifest(name: str) -> Dict[str, Any]:
    """The manifest of a corpus's current version (sources and their SHA-256, counts, fields)."""
    _check_name(name)
    d = _version_dir(name)
    path = d / "manifest.json" if d else corpora_dir() / name
    try:
        return json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        raise RecordError(str(path), f"no corpus {name!r} is registered (pyterrier-sci corpus add {name} PATH, "
                          "or ps.register_corpus)") from None


def local_corpora() -> Dict[str, Dict[str, Any]]:
    """``{name: manifest}`` of the corpora registered in the work directory."""
    out = {}
    d = corpora_dir()
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        if p.is_dir() and NAME.fullmatch(p.name) and _current(p.name):
            try:
                out[p.name] = corpus_manifest(p.name)
            except RecordError:
                continue
    return out


# ------------------------------------------------------------------------------------------- identity
def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _files(source: Any) -> List[Path]:
    """The files a path source reads: the file, or every PDF under a directory (sorted)."""
    p = Path(source)
    if p.is_dir():
        return sorted(x for x in p.rglob("*") if x.is_file() and x.suffix.lower() == ".pdf")
    return [p]


def _describe(source: Any) -> List[Dict[str, Any]]:
    """Each source's files with their SHA-256 and size (a DataFrame: its content hash and shape)."""
    out = []
    for s in source if isinstance(source, (list, tuple)) else [source]:
        if isinstance(s, pd.DataFrame):
            digest = hashlib.sha256(pd.util.hash_pandas_object(s.astype(str), index=False).values.tobytes())
            digest.update(json.dumps([str(c) for c in s.columns]).encode("utf-8"))
            out.append({"dataframe": True, "rows": int(len(s)), "columns": [str(c) for c in s.columns],
                        "sha256": digest.hexdigest()})
            continue
        p = Path(s)
        if not p.exists():
            raise RecordError(str(p), "no such file or directory")
        for f in _files(p):
            out.append({"path": str(f.resolve()), "sha256": _file_sha256(f), "bytes": f.stat().st_size})
        if p.is_dir() and not _files(p):
            raise RecordError(str(p), "the directory holds no PDF")
    return out


def _aux(path: Any, what: str) -> Optional[Dict[str, Any]]:
    if path is None or isinstance(path, dict):
        return None if path is None else {"mapping": hashlib.sha256(json.dumps(path, sort_keys=True, default=str)
                                                                     .encode("utf-8")).hexdigest()}
    p = Path(path)
    if not p.is_file():
        raise RecordError(str(p), f"the {what} file does not exist")
    return {"path": str(p.resolve()), "sha256": _file_sha256(p), "bytes": p.stat().st_size}


# ------------------------------------------------------------------------------------- topics, qrels
def _line_error(path: str, n: int, problem: str) -> RecordError:
    return RecordError(path, problem, f"line {n}")


def _topic_rows(path: Path, encoding: str) -> Iterator[Tuple[int, Any, Any]]:
    """``(line number, qid, query)`` of each topic line, as the file gives them."""
    if path.suffix.lower() in (".jsonl", ".json"):
        for n, obj in json_lines(path, encoding):
            topic = obj if isinstance(obj, dict) else {}
            yield n, topic.get("qid", topic.get("query_id")), topic.get("query", topic.get("text"))
    else:
        for n, line, _ in read_lines(path, encoding):
            if line.strip():
                qid, _, query = line.rstrip("\r\n").partition("\t")
                yield n, qid, query


def _read_topics(path: Path, encoding: str) -> Iterator[Tuple[str, str]]:
    """``(qid, query)`` from a TSV (``qid<TAB>query``) or JSONL (``{"qid"|"query_id", "query"|"text"}``) file."""
    for n, qid, query in _topic_rows(path, encoding):
        if qid in (None, "") or not isinstance(query, str) or not query.strip():
            raise _line_error(str(path), n, "a topic is a query id and a query text (TSV: qid<TAB>query; JSONL: "
                              "{\"qid\", \"query\"})")
        yield str(qid).strip(), " ".join(query.split())


def _read_qrels(path: Path, encoding: str) -> Iterator[Tuple[str, str, int]]:
    """``(qid, docno, grade)`` from TREC qrels (``qid 0 docno grade``) or ``qid<TAB>docno<TAB>grade``."""
    for n, line, _ in read_lines(path, encoding):
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in (3, 4):
            raise _line_error(str(path), n, "a judgement is 'qid 0 docno grade' (TREC qrels) or 'qid docno grade'")
        qid, docno, grade = parts[0], parts[-2], parts[-1]
        try:
            yield qid, docno, int(grade)
        except ValueError:
            raise _line_error(str(path), n, f"the grade {grade!r} is not a whole number") from None


# ------------------------------------------------------------------------------------------- building
def _write_docs(records: Iterator[dict], tmp: Path) -> Dict[str, Any]:
    """Streams the records into ``docs.jsonl.gz``; returns the counts (documents, and per field how many have it)."""
    counts = {"documents": 0, "fields": {k: 0 for k in ("title", "abstract", "text", "date", "citations",
                                                          "sections")}}
    with gzip.open(tmp / "docs.jsonl.gz", "wt", encoding="utf-8", compresslevel=5) as out:
        for r in records:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")
            counts["documents"] += 1
            for k in counts["fields"]:
                counts["fields"][k] += bool(r.get(k))
    return counts


def register_corpus(name: str, source: Union[str, os.PathLike, pd.DataFrame, Sequence[Any]], *,
                    format: Optional[str] = None, fields: Optional[Dict[str, Any]] = None,  # noqa: A002
                    date: Any = None, citations: Any = None, topics: Union[None, str, os.PathLike] = None,
                    qrels: Union[None, str, os.PathLike] = None, encoding: str = "utf-8", append: bool = False,
                    retract: Union[None, str, os.PathLike, Sequence[str]] = None, grow: bool = True) -> str:
    """Registers a collection of papers as ``sci/local/NAME`` and returns its PyTerrier id
    (``"irds:sci/local/NAME"``).

    Args:
        name: the corpus name (letters, digits, ``_``, ``.``, ``-``).
        source: a file (JSONL[.gz], CSV, TSV, BibTeX, CSL-JSON, PDF), a directory of PDFs, a pandas DataFrame, or
            a list of them; ``format``, ``fields``, ``date``, ``citations`` and ``encoding`` as
            :func:`pyterrier_sci.records.read_records` takes them (field defaults per format there).
        topics: a TSV (``qid<TAB>query``) or JSONL (``{"qid", "query"}``) file of queries for experiments.
        qrels: TREC qrels (``qid 0 docno grade``) of those topics; every docno must be a paper of the corpus.

        append: the papers of ``source`` are added to the corpus's current version (a docno it holds is an error:
            retract it first to replace it); its topics and qrels are kept unless new ones are given.
        retract: docnos (a list, or a file with one a line) removed from the current version (with ``append``, or
            alone with ``source=None``); their judgements are dropped.
        grow: when the new version replaces another, the indexes of that version whose update equals a rebuild
            (Lucene BM25, flat and sharded dense: docs/indexes.md) are carried over to the new one by appending and
            retracting the papers that differ (when they are at most half of the new collection), instead of being
            rebuilt on first use.

    A source that has not changed (same bytes, same settings) is not read again; a changed one is a new version
    that ``sci/local/NAME`` then means.  Raises :class:`~pyterrier_sci.errors.RecordError` naming the file and
    line for anything that cannot be read (nothing is registered then)."""
    _check_name(name)
    if qrels is not None and topics is None and not append:
        raise RecordError(str(qrels), "qrels judge topics: give topics= too")
    base = None
    if append or retract is not None:
        base = (_current(name) or {}).get("version")
        if base is None:
            raise RecordError(str(corpora_dir() / name), f"no corpus {name!r} is registered to "
                              f"{'append to' if append else 'retract from'}: register it first")
    if source is None and not (retract is not None and not append):
        raise RecordError("the corpus source", "give the papers to register (a file, folder, DataFrame or list)")
    if source is not None and base is not None and not append:
        raise RecordError("the corpus source", "retract= alone removes papers from the current version; to add "
                          "papers as well, give append=True")
    return _register(name, source, [] if source is None else _describe(source), format=format, fields=fields,
                     date=date, citations=citations, topics=topics, qrels=qrels, encoding=encoding, base=base,
                     retract=_retracted(retract), grow=grow)


def _retracted(retract: Union[None, str, os.PathLike, Sequence[str]]) -> Optional[List[str]]:
    """The docnos to retract: a list, or a file (one a line, ``#`` comments); each once."""
    if retract is None:
        return None
    if isinstance(retract, (str, os.PathLike)):
        path = Path(retract)
        if not path.is_file():
            raise RecordError(str(path), "no such file of docnos to retract")
        ids = [line.strip() for _, line, _ in read_lines(path, "utf-8") if line.strip() and not line.startswith("#")]
        where = str(path)
    else:
        ids, where = [str(x) for x in retract], "retract="
    seen = set()
    for d in ids:
        if d in seen:
            raise RecordError(where, f"docno {d!r} is given twice")
        seen.add(d)
    if not ids:
        raise RecordError(where, "no docno to retract")
    return ids


def _stored(version_dir: Path) -> Iterator[Dict[str, Any]]:
    """The records of a registered version, as stored."""
    with gzip.open(version_dir / "docs.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _combined(base_dir: Optional[Path], retract: Optional[List[str]], new: Optional[Iterator[dict]],
              counts: Dict[str, int]) -> Iterator[dict]:
    """The records of a new version: the base version's (less those retracted), then the new ones (a docno the base
    holds is an error); ``counts`` gets ``appended`` and ``retracted``."""
    held = set()
    gone = set(retract or ())
    if base_dir is not None:
        for r in _stored(base_dir):
            held.add(r["docno"])
            if r["docno"] not in gone:
                yield r
        missing = sorted(gone - held)
        if missing:
            raise RecordError("retract=", f"{len(missing)} docno(s) to retract are not in the corpus, e.g. "
                              f"{missing[:3]}")
        counts["retracted"] = len(gone)
    for r in new or ():
        if r["docno"] in held and r["docno"] not in gone:
            raise RecordError("the appended papers", f"docno {r['docno']!r} is already in the corpus: retract it "
                              "first to replace it (retract=[...] with append=True)")
        counts["appended"] = counts.get("appended", 0) + 1
        yield r


def _register(name: str, source: Any, described: List[Dict[str, Any]], *, format: Optional[str],  # noqa: A002
              fields: Optional[Dict[str, Any]], date: Any, citations: Any, topics: Any, qrels: Any,
              encoding: str, base: Optional[str] = None, retract: Optional[List[str]] = None,
              grow: bool = True) -> str:
    """:func:`register_corpus` once its sources are described (:func:`_describe`: their SHA-256s); ``base``: the
    version ``source`` is appended to (and ``retract`` removed from)."""
    settings = {"format": format, "fields": fields, "date": None if date is None else str(date),
                "encoding": encoding, "citations": _aux(citations, "citations"), "topics": _aux(topics, "topics"),
                "qrels": _aux(qrels, "qrels")}
    change = None if base is None else {"base": base, "retract": sorted(retract or ())}
    identity = json.dumps({"sources": [{k: v for k, v in d.items() if k != "path"} for d in described],
                           "settings": settings, **({"change": change} if change else {})},
                          sort_keys=True, default=str)
    version = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:12]
    target = corpora_dir() / name / version
    base_dir = _version_dir(name, base) if base else None
    base_manifest = json.loads((base_dir / "manifest.json").read_text(encoding="utf-8")) if base_dir else {}

    def build(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        new = None if source is None else read_records(source, format=format, fields=fields, date=date,
                                                       citations=citations, encoding=encoding)
        change_counts: Dict[str, int] = {}
        counts = _write_docs(_combined(base_dir, retract, new, change_counts) if base_dir else new, tmp)
        if counts["documents"] == 0:
            raise RecordError(str(corpora_dir() / name), "retracting them would leave the corpus empty")
        docnos = None
        if topics is not None:
            seen = {}
            for qid, query in _read_topics(Path(topics), encoding):
                if qid in seen:
                    raise RecordError(str(topics), f"query id {qid!r} is given twice")
                seen[qid] = query
            if not seen:
                raise RecordError(str(topics), "no topic")
            (tmp / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in seen.items()), encoding="utf-8")
            counts["topics"] = len(seen)
        elif base_dir is not None and (base_dir / "topics.tsv").is_file():   # kept from the base version
            shutil.copyfile(base_dir / "topics.tsv", tmp / "topics.tsv")
            counts["topics"] = base_manifest.get("topics")
            seen = dict(_read_topics(tmp / "topics.tsv", "utf-8"))
        if qrels is not None or base_dir is not None and (base_dir / "qrels.txt").is_file() and topics is None:
            docnos = {r["docno"] for r in _stored(tmp)}
            rows, dropped = [], 0
            given = qrels is not None
            path = Path(qrels) if given else base_dir / "qrels.txt"
            for qid, docno, grade in _read_qrels(path, encoding if given else "utf-8"):
                if qid not in seen:
                    raise RecordError(str(path), f"judges query {qid!r}, which is not one of the topics")
                if docno not in docnos:
                    if given:
                        raise RecordError(str(path), f"judges document {docno!r}, which is not a paper of the corpus")
                    dropped += 1    # a retracted paper's judgement
                    continue
                rows.append(f"{qid} 0 {docno} {grade}\n")
            (tmp / "qrels.txt").write_text("".join(rows), encoding="utf-8")
            counts["judgements"] = len(rows)
            if dropped:
                counts["judgements_dropped"] = dropped
        sources = [] if source is None else (source if isinstance(source, (list, tuple)) else [source])
        formats = sorted(set(base_manifest.get("formats", [])) | {
            "dataframe" if isinstance(x, pd.DataFrame) else (format or detect_format(x)) for x in sources})
        write_pt_meta(tmp, type=ARTIFACT_TYPE, format=ARTIFACT_FORMAT, name=name, version=version)
        grown = {"grown_from": {"version": base, **change_counts}} if base else {}
        atomic_write_text(tmp / "manifest.json", json.dumps(
            {"name": name, "dataset": f"irds:{ID_PREFIX}{name}", "version": version, "formats": formats,
             "sources": base_manifest.get("sources", []) + described, "settings": settings, **grown, **counts},
            indent=1, sort_keys=True) + "\n", "the corpus manifest")

    build_atomically(target, build, what=f"the local corpus {name}")
    with lock(corpora_dir() / name / _CURRENT, "the corpus's current version"):
        previous = (_current(name) or {}).get("version")
        if previous != version:
            atomic_write_text(corpora_dir() / name / _CURRENT, json.dumps({"version": version}) + "\n",
                              "the corpus's current version")
    register_local_dataset(name)
    if grow and previous and previous != version and (corpora_dir() / name / previous / "docs.jsonl.gz").is_file():
        carry_indexes(name, previous, version)
    return f"irds:{ID_PREFIX}{name}"


#: the index kinds (``<type>.<format>`` of their ``pt_meta.json``) whose update equals a rebuild of the final
#: collection (Lucene's BM25 statistics are the collection's; a flat or sharded dense index holds each document's
#: vector): carried over to a corpus's new version.  PISA's update is a rebuild, and a ColBERT index grown by a
#: partition is not its rebuild: those are built for the new version on first use.
CARRIED_INDEXES = ("sparse_index.lucene", "dense_index.flex", "dense_index.sharded_flex")


def _record_hash(r: Dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(r, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def carry_indexes(name: str, old: str, new: str, max_share: float = 0.5) -> List[Path]:
    """Carries the indexes of version ``old`` of a local corpus over to version ``new`` (:data:`CARRIED_INDEXES`):
    each is copied and the papers that differ are retracted and appended (one generation each), atomically, so
    ``new``'s index equals the one a rebuild would give.  Nothing is carried when more than ``max_share`` of the
    new collection differs (a rebuild on first use is cheaper).  Returns the indexes made."""
    _check_name(name)
    old_dir, new_dir = corpora_dir() / name / old, corpora_dir() / name / new
    root = work_dir() / "indexes"
    src_root = root / (f"{ID_PREFIX}{name}".replace("/", "__") + f"@{old}")
    dst_root = root / (f"{ID_PREFIX}{name}".replace("/", "__") + f"@{new}")
    if not src_root.is_dir() or src_root.is_symlink():
        return []
    updates = load_group(UPDATES_GROUP)
    kinds = {}
    for index in sorted(src_root.iterdir()):
        meta = index / "pt_meta.json"
        if index.is_symlink() or not meta.is_file() or (dst_root / index.name).exists():
            continue
        try:
            m = json.loads(meta.read_text(encoding="utf-8"))
        except ValueError:
            continue
        kind = f"{m.get('type')}.{m.get('format')}"
        if kind in CARRIED_INDEXES and kind in updates:
            kinds[index] = updates[kind]
    if not kinds:
        return []
    old_hash = {r["docno"]: _record_hash(r) for r in _stored(old_dir)}
    made: List[Path] = []
    with tempfile.TemporaryDirectory(prefix="carry-", dir=root) as scratch:
        appended, n_new, n_appended = Path(scratch) / "appended.jsonl", 0, 0
        seen, changed = set(), set()
        with open(appended, "w", encoding="utf-8") as out:
            for r in _stored(new_dir):
                n_new += 1
                seen.add(r["docno"])
                before = old_hash.get(r["docno"])
                if before != _record_hash(r):
                    if before is not None:
                        changed.add(r["docno"])
                    paper = _paper(r)
                    out.write(json.dumps({"docno": paper.doc_id, "text": paper.text, "title": paper.title,
                                          "abstract": paper.abstract, "date": paper.date}, ensure_ascii=False) + "\n")
                    n_appended += 1
        gone = sorted((set(old_hash) - seen) | changed)   # a changed paper is retracted, then appended
        if n_appended + len(gone) > max_share * n_new:
            return []
        retracted = Path(scratch) / "retracted.txt"
        retracted.write_text("".join(d + "\n" for d in gone), encoding="utf-8")
        for index, update in kinds.items():
            def build(tmp: Path, index=index, update=update) -> None:
                shutil.copytree(index, tmp, symlinks=True)
                (tmp / MANIFEST_NAME).unlink(missing_ok=True)
                update(tmp, append=appended if n_appended else None, retract=retracted if gone else None,
                       verbose=False)
            made.append(build_atomically(dst_root / index.name, build,
                                         what=f"the {index.name} index of {ID_PREFIX}{name} version {new}"))
    return made


def as_dataset(dataset: Any) -> Any:
    """A dataset argument as an id: a DataFrame of papers, or the path of a file (JSONL[.gz], CSV, TSV, BibTeX,
    CSL-JSON, PDF) or folder of PDFs, is registered first (:func:`register_corpus`, as ``sci/local/<stem>-<hash>``,
    the hash of the DataFrame's content or the path's location, so two files called ``papers.jsonl`` are two
    corpora) and its id returned; anything else is returned as it is."""
    if isinstance(dataset, pd.DataFrame):
        described = _describe(dataset)   # hashed once: it names the corpus and keys its version
        return _register(f"dataframe-{described[0]['sha256'][:10]}", dataset, described, format=None, fields=None,
                         date=None, citations=None, topics=None, qrels=None, encoding="utf-8")
    if not isinstance(dataset, (str, os.PathLike)) or str(dataset).startswith("irds:"):
        return dataset
    p = Path(dataset).expanduser()
    suffixes = "".join(p.suffixes[-2:]).lower()
    if not (p.is_dir() or p.is_file() and (p.suffix.lower() in SUFFIXES or suffixes.endswith((".jsonl.gz",
                                                                                             ".ndjson.gz")))):
        return dataset
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", p.name.split(".")[0]).strip("-.") or "papers"
    where = hashlib.sha256(str(p.resolve()).encode("utf-8")).hexdigest()[:8]
    return register_corpus(f"{stem[:80]}-{where}", p)


def remove_corpus(name: str) -> Path:
    """Removes a registered corpus (every version) from the work directory; its indexes stay until removed."""
    _check_name(name)
    d = corpora_dir() / name
    if not d.is_dir() or d.is_symlink():
        raise RecordError(str(d), f"no corpus {name!r} is registered")
    with lock(d / _CURRENT, "the corpus's current version"):
        shutil.rmtree(d)
    return d


# ---------------------------------------------------------------------------------------- ir_datasets
class _VersionedDocs(FnDocs):
    """Documents made from a local corpus's current version: their docstore lives under that version
    (``<work dir>/irds/<id>/<version>/``), and ``sci_version()`` keys their indexes and saved runs by it."""

    def __init__(self, name: str, corpus: str, iter_fn, cls):
        super().__init__(name, iter_fn, cls)
        self._corpus = corpus

    def sci_version(self) -> Optional[str]:
        """The current version of the corpus (what its indexes, docstore and saved runs are keyed by)."""
        return (_current(self._corpus) or {}).get("version")

    def _store_path(self) -> Path:
        return Path(work_dir()) / "irds" / self._name / (self.sci_version() or "none") / "docs.pklz4"


class LocalDocs(_VersionedDocs):
    """The papers of a local corpus's current version."""

    def __init__(self, name: str):
        super().__init__(f"{ID_PREFIX}{name}", name, self._papers, LocalPaper)

    def _directory(self) -> Path:
        d = _version_dir(self._corpus)
        if d is None or not (d / "docs.jsonl.gz").is_file():
            raise RecordError(str(corpora_dir() / self._corpus), f"the corpus {self._corpus!r} is not registered "
                              f"in this work directory ({corpora_dir()}): pyterrier-sci corpus add {self._corpus} "
                              "PATH, or ps.register_corpus")
        return d

    def _papers(self) -> Iterator[LocalPaper]:
        with gzip.open(self._directory() / "docs.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                yield _paper(json.loads(line))

    def docs_count(self):
        try:
            return int(json.loads((self._directory() / "manifest.json").read_text(encoding="utf-8"))["documents"])
        except (OSError, ValueError, KeyError):
            return super().docs_count()

    def known_count(self) -> Optional[int]:
        return self.docs_count()


def _paper(r: Dict[str, Any]) -> LocalPaper:
    """A stored record (a line of ``docs.jsonl.gz``) as the corpus's document."""
    title, abstract, body = r.get("title", ""), r.get("abstract", ""), r.get("text", "")
    return LocalPaper(r["docno"], " ".join(x for x in (title, abstract) if x) or body, title, abstract, body,
                      tuple(Section(x.get("title", ""), x.get("text", "")) for x in r.get("sections") or ()),
                      r.get("date", ""), tuple(r.get("citations") or ()))


def _version_file(name: str, filename: str, what: str) -> Path:
    """A file of a corpus's current version; one error saying how to register it with ``what`` when absent."""
    d = _version_dir(name)
    path = d / filename if d else None
    if path is None or not path.is_file():
        raise RecordError(str(corpora_dir() / name), f"the corpus {name!r} was registered without {what}: register "
                          "it with topics= and qrels= to run and evaluate experiments on it")
    return path


def _topics_of(name: str) -> Iterator[LocalQuery]:
    with open(_version_file(name, "topics.tsv", "topics"), encoding="utf-8") as f:
        for line in f:
            qid, _, text = line.rstrip("\n").partition("\t")
            yield LocalQuery(qid, text)


def _qrels_of(name: str) -> Iterator[ir_datasets.formats.TrecQrel]:
    with open(_version_file(name, "qrels.txt", "qrels"), encoding="utf-8") as f:
        for line in f:
            qid, _, docno, grade = line.split()
            yield ir_datasets.formats.TrecQrel(qid, docno, int(grade), "0")


class LocalChunkDocs(_VersionedDocs):
    """``sci/local/NAME/chunks-<unit>``: the chunks of a local corpus's current version (of each paper's full text,
    else its title and abstract), keyed by that version as the corpus is."""

    def __init__(self, name: str, unit: int, stride: Optional[int]):
        super().__init__(chunk_corpus_id(f"{ID_PREFIX}{name}", unit), name, self._chunks, ChunkDoc)
        self._unit, self._stride = unit, stride

    def _chunks(self) -> Iterator[ChunkDoc]:
        papers = (p._replace(full_text=p.full_text or p.text) for p in LocalDocs(self._corpus).docs_iter())
        return chunk_documents(papers, unit=self._unit, stride=self._stride, text_field="full_text",
                               title_field="title")


class LocalQueries(FnQueries):
    """The topics of a local corpus's current version; a version registered without topics has none (ir_datasets'
    ``has_queries()`` is false, as for a corpus that never had any)."""

    def __init__(self, name: str):
        super().__init__(f"{ID_PREFIX}{name}", lambda: _topics_of(name), LocalQuery)
        self._corpus = name

    @property
    def queries_handler(self):   # what ir_datasets looks up to know whether a dataset has queries
        if not _has_file(self._corpus, "topics.tsv"):
            raise AttributeError("queries_handler")
        return lambda: self


class LocalQrels(FnQrels):
    """The qrels of a local corpus's current version (none when it was registered without them)."""

    def __init__(self, name: str):
        super().__init__(lambda: _qrels_of(name), {0: "not relevant", 1: "relevant", 2: "highly relevant"},
                         ir_datasets.formats.TrecQrel)
        self._corpus = name

    @property
    def qrels_handler(self):
        if not _has_file(self._corpus, "qrels.txt"):
            raise AttributeError("qrels_handler")
        return lambda: self


def _has_file(name: str, filename: str) -> bool:
    d = _version_dir(name)
    return d is not None and (d / filename).is_file()


#: functions called with a corpus's name when it is registered, each registering ids derived from it (the datasets
#: layer adds its own: the core-citation sets of a corpus with citations, ``datasets/local.py``)
LOCAL_DATASET_HOOKS: List[Any] = []


def register_local_dataset(name: str) -> str:
    """Registers ``sci/local/NAME`` with ir_datasets (once per process; the version is looked up on use), and the
    ids :data:`LOCAL_DATASET_HOOKS` derive from it."""
    _check_name(name)
    dsid = f"{ID_PREFIX}{name}"
    register(dsid, LocalDocs(name), LocalQueries(name), LocalQrels(name),
             documentation={"desc": f"a local collection registered with pyterrier-sci corpus add ({name})"})
    for unit, stride in STANDARD_UNITS.items():   # its papers cut into windows, for PRISM's chunk retrievers
        chunks = LocalChunkDocs(name, unit, stride)
        register(chunks.docs_namespace(), chunks, documentation={
            "desc": f"{dsid} cut into windows of {unit} tokens (docno <paper>%p<i>; pyterrier_sci.text)"})
    for hook in LOCAL_DATASET_HOOKS:
        hook(name)
    return dsid


def register_local_datasets() -> List[str]:
    """Registers every corpus of the work directory (its folder names only: nothing is read)."""
    d = corpora_dir()
    try:
        names = sorted(p.name for p in d.iterdir() if NAME.fullmatch(p.name)) if d.is_dir() else []
    except OSError:
        names = []
    return [register_local_dataset(n) for n in names]


# ------------------------------------------------------------------------------------------------ CLI
def _field_mapping(items: Optional[Sequence[str]]) -> Optional[Dict[str, str]]:
    if not items:
        return None
    out = {}
    for item in items:
        ours, sep, theirs = item.partition("=")
        if not sep or not ours.strip() or not theirs.strip():
            raise RecordError("--field", f"{item!r}: give OURS=THEIRS, e.g. --field 'abstract=Abstract Note'")
        out[ours.strip()] = theirs.strip()
    return out


def add_corpus_commands(subparsers) -> argparse.ArgumentParser:
    """Adds ``corpus add|list|show|remove`` to the CLI (entry point ``pyterrier_sci.cli``)."""
    p = subparsers.add_parser("corpus", help="register your own papers (JSONL, CSV, BibTeX, CSL-JSON, PDFs) as "
                                             "sci/local/NAME, usable wherever a benchmark id is (docs/corpora.md)")
    sub = p.add_subparsers(dest="corpus_command", required=True)
    a = sub.add_parser("add", help="register (or update) a collection: pyterrier-sci corpus add NAME PATH...")
    a.add_argument("name", help="the corpus name: its dataset id is irds:sci/local/NAME")
    a.add_argument("paths", nargs="*", help="files (JSONL[.gz], CSV, TSV, BibTeX, CSL-JSON, PDF) or folders of PDFs "
                                            "(none with --retract alone)")
    a.add_argument("--format", default=None, help="the format of every path (default: from each file's suffix)")
    a.add_argument("--field", action="append", metavar="OURS=THEIRS",
                   help="map a field to your column or key, e.g. --field 'abstract=Abstract Note' (repeatable)")
    a.add_argument("--date", default=None, help="the column or key of the dates, when not the format's default")
    a.add_argument("--citations", default=None, help="citation links: citing<TAB>cited pairs or JSONL")
    a.add_argument("--topics", default=None, help="queries for experiments: qid<TAB>query, or JSONL")
    a.add_argument("--qrels", default=None, help="TREC qrels of those topics")
    a.add_argument("--encoding", default="utf-8", help="of text files (default utf-8)")
    a.add_argument("--append", action="store_true", help="add the papers of PATHS to the corpus's current version")
    a.add_argument("--retract", metavar="IDS", help="remove the docnos of IDS (one a line) from the current version")
    a.add_argument("--no-grow", dest="grow", action="store_false",
                   help="do not carry the previous version's indexes over (they are built on first use instead)")
    sub.add_parser("list", help="the registered corpora")
    s = sub.add_parser("show", help="a corpus's manifest: sources and their SHA-256, counts, fields")
    s.add_argument("name")
    r = sub.add_parser("remove", help="remove a corpus (every version) from the work directory")
    r.add_argument("name")
    p.set_defaults(func=corpus_main)
    return p


def corpus_main(args: argparse.Namespace) -> int:
    """Runs ``pyterrier-sci corpus ...``; returns the exit status."""
    if args.corpus_command == "add":
        start = time.perf_counter()
        paths = list(args.paths) if len(args.paths) > 1 else (args.paths[0] if args.paths else None)
        dsid = register_corpus(args.name, paths, format=args.format, fields=_field_mapping(args.field),
                               date=args.date, citations=args.citations, topics=args.topics, qrels=args.qrels,
                               encoding=args.encoding, append=args.append, retract=args.retract, grow=args.grow)
        m = corpus_manifest(args.name)
        extra = "".join(f", {m[k]} {k}" for k in ("topics", "judgements") if m.get(k))
        grown = m.get("grown_from")
        if grown:
            extra += (f"; from version {grown['version']}: {grown.get('appended', 0)} appended, "
                      f"{grown.get('retracted', 0)} retracted")
        print(f"{dsid}: {m['documents']} papers{extra} (version {m['version']}; {time.perf_counter() - start:.1f} s)")
        return 0
    if args.corpus_command == "list":
        corpora = local_corpora()
        if not corpora:
            print(f"no corpus registered in {corpora_dir()}")
        for name, m in corpora.items():
            print(f"irds:{ID_PREFIX}{name}\t{m.get('documents')} papers\tversion {m.get('version')}\t"
                  + ", ".join(m.get("formats") or []))
        return 0
    if args.corpus_command == "show":
        print(json.dumps(corpus_manifest(args.name), indent=1, sort_keys=True))
        return 0
    print(f"removed {remove_corpus(args.name)}")
    return 0
