"""A dense index split into shards (``pt_meta.json`` type ``dense_index``, format ``sharded_flex``;
the format is in ``docs/scale.md``): :class:`ShardedDenseIndex` loads the manifest, checks it against
every shard (one :class:`ShardedIndexError` naming the shard when anything disagrees) and searches the
shards in parallel (a thread pool over the memory-mapped shards: numpy's matrix products release the
GIL), merging each shard's exact top-k by score then global position, so results equal those of one
flat ``FlexIndex`` of the same corpus.  :func:`write_sharded_flex` writes the format from vectors one
already has (e.g. published embeddings); ``plugins/dense/sharded.py`` builds it from a corpus.
"""
from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Union

import numpy as np
import pyterrier_alpha as pta

from pyterrier_sci.artifacts import build_atomically, write_pt_meta
from pyterrier_sci.filesums import damaged_file, record_files
from pyterrier_sci.upstream import fix_npids_multi_block_lookup, fix_npids_single_docno_blocks

from .ann import ann_index, ann_topk
from .growth import DenseAppender, GrowingDenseIndex, retract_documents
from .index_meta import IndexRecord, vectors_label
from .retriever import DenseRetriever
from .search import merge_topk, prepare_queries, topk
from .shards import (
    ARTIFACT_FORMAT,
    ARTIFACT_TYPE,
    FORMAT_VERSION,
    SHARD_FILE,
    ShardedIndexError,
    check_finished,
    is_sharded,
    shard_name,
)

#: the name of a shard in a grown index: one of the first build (``shard-00002``, maybe at another position
#: since a retraction dropped a shard) or one written by an append or a retraction (``shard-00003.g00002``)
_GENERATION_SHARD = re.compile(r"^shard-\d{5}(\.g\d{5})?$")

__all__ = ["ShardedDenseIndex", "ShardedIndexError", "write_sharded_flex", "is_sharded", "shard_name",
           "ARTIFACT_TYPE", "ARTIFACT_FORMAT"]


class ShardedDenseIndex(pta.Artifact):
    """A sharded dense index (a ``pt.Artifact``: ``pt.Artifact.load(path)`` returns one).

    Args:
        path: the index directory (``pt_meta.json`` and ``shard-00000/`` ...).
        threads: shards searched at once (default: the number of shards, at most the CPU count).

    Loading validates the manifest against every shard: a missing shard, a shard whose
    ``shard.json`` names another model, corpus, fields or range, counts that do not add up, or a
    shard FlexIndex of another dimension is one :class:`ShardedIndexError` naming the shard.
    """

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT
    ARTIFACT_PACKAGE_HINT = "pyterrier-sci"

    def __init__(self, path: Union[str, os.PathLike], *, threads: Optional[int] = None):
        super().__init__(path)
        self.index_path = Path(path)
        self.manifest = self._read_manifest()
        m = self.manifest
        self.model: str = m["model"]
        self.model_id: str = m.get("model_id") or m["model"]
        self.dim: int = int(m["dim"])
        self.corpus: Optional[str] = m.get("corpus")
        self.fields = tuple(m["fields"]) if m.get("fields") else None
        self.num_docs: int = int(m["num_docs"])
        self.sim_fn_name: str = m.get("sim_fn") or "dot"
        self.threads = threads
        self.shards = self._open_shards()
        self.starts = np.array([s["start"] for s in m["shards"]], dtype=np.int64)
        self._pool = None

    # -- loading and validation ------------------------------------------------------------------
    def _fail(self, why: str, shard: Optional[str] = None):
        where = f"shard {shard!r} " if shard else ""
        raise ShardedIndexError(f"sharded dense index {str(self.index_path)!r}: {where}{why}")

    def _read_manifest(self) -> dict:
        p = self.index_path
        if not p.is_dir():
            raise FileNotFoundError(f"sharded dense index not found: {p}")
        check_finished(p)
        try:
            m = json.loads((p / "pt_meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            self._fail(f"has an unreadable pt_meta.json ({e})")
        if not isinstance(m, dict) or m.get("type") != ARTIFACT_TYPE or m.get("format") != ARTIFACT_FORMAT:
            self._fail(f"pt_meta.json is not a {ARTIFACT_TYPE}/{ARTIFACT_FORMAT} manifest")
        missing = [k for k in ("model", "dim", "num_docs", "num_shards", "shards") if k not in m]
        if missing:
            self._fail(f"pt_meta.json lacks {missing}")
        if m.get("version", FORMAT_VERSION) != FORMAT_VERSION:
            self._fail(f"pt_meta.json has format version {m.get('version')!r}; this version reads {FORMAT_VERSION}")
        shards = m["shards"]
        if not isinstance(shards, list) or len(shards) != m["num_shards"] or not shards:
            self._fail(f"the manifest lists {len(shards) if isinstance(shards, list) else 'no'} shards "
                       f"but says num_shards={m['num_shards']}")
        pos = 0
        for i, s in enumerate(shards):
            if not isinstance(s, dict):
                self._fail(f"pt_meta.json's shards entry {i} is {type(s).__name__} {str(s)[:60]!r}, not a mapping "
                           "with name, start, end and num_docs (the manifest is damaged: rerun the build)")
            bad = [k for k in ("start", "end", "num_docs") if type(s.get(k)) is not int]
            if bad:
                self._fail(f"pt_meta.json's shards entry {i} has no whole number for {bad} (the manifest is damaged: "
                           "rerun the build)")
            name = s.get("name")
            # a shard written by an append or a retraction (docs/indexes.md) has its generation in its name
            if name != shard_name(i) and not (isinstance(s.get("built"), dict) and isinstance(name, str)
                                              and _GENERATION_SHARD.match(name)):
                self._fail(f"manifest entry {i} is named {name!r}, expected {shard_name(i)!r}")
            if s.get("start") != pos or s.get("end", -1) - s.get("start", 0) != s.get("num_docs"):
                self._fail(f"the manifest's range [{s.get('start')}, {s.get('end')}) with num_docs={s.get('num_docs')} "
                           f"does not continue the previous shards (expected start {pos})", name)
            pos = s["end"]
        if pos != m["num_docs"]:
            self._fail(f"the shards hold {pos} documents but the manifest says num_docs={m['num_docs']}")
        return m

    def _open_shards(self) -> List:
        from pyterrier_dr import FlexIndex
        m = self.manifest
        out = []
        for i, s in enumerate(m["shards"]):
            name = s["name"]
            d = self.index_path / name
            if not d.is_dir():
                self._fail("is missing (no such directory)", name)
            try:
                info = json.loads((d / "shard.json").read_text(encoding="utf-8"))
            except FileNotFoundError:
                self._fail("has no shard.json", name)
            except (OSError, ValueError) as e:
                self._fail(f"has an unreadable shard.json ({e})", name)
            # a shard appended later, or moved by a retraction, records in its shard.json what it was built as
            # (the manifest entry's "built"): its position, the shard count, corpus and range of then
            built = s.get("built") if isinstance(s.get("built"), dict) else {}
            want = {"shard": built.get("shard", i), "num_shards": built.get("num_shards", m["num_shards"]),
                    "model": m["model"], "model_id": m.get("model_id"), "dim": m["dim"],
                    "corpus": built.get("corpus", m.get("corpus")), "fields": m.get("fields"),
                    "start": built.get("start", s["start"]), "end": built.get("end", s["end"]),
                    "num_docs": s["num_docs"]}
            for key, value in want.items():
                if key == "model_id" and value is None or key == "model" and m.get("model_id"):
                    continue  # the model is checked by its resolved id (a resumed build may name it otherwise)
                if info.get(key) != value:
                    self._fail(f"is from another build: its shard.json says {key}={info.get(key)!r}, "
                               f"the manifest {key}={value!r}", name)
            try:
                meta = json.loads((d / "pt_meta.json").read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                self._fail(f"is not a readable FlexIndex ({type(e).__name__}: {e})", name)
            if meta.get("type") != "dense_index" or meta.get("format") != "flex":
                self._fail(f"is not a FlexIndex (type {meta.get('type')!r}, format {meta.get('format')!r})", name)
            if meta.get("vec_size") != m["dim"]:
                self._fail(f"holds vectors of dimension {meta.get('vec_size')}, the manifest says dim={m['dim']}",
                           name)
            if meta.get("doc_count") != s["num_docs"]:
                self._fail(f"holds {meta.get('doc_count')} documents, the manifest says {s['num_docs']}", name)
            vecs = d / "vecs.f4"
            if not vecs.exists() or vecs.stat().st_size != 4 * s["num_docs"] * m["dim"]:
                self._fail(f"has a vecs.f4 of {vecs.stat().st_size if vecs.exists() else 0} bytes, expected "
                           f"{4 * s['num_docs'] * m['dim']} (damaged or truncated)", name)
            problem = damaged_file(d, info.get("files"), str(d / SHARD_FILE))
            if problem:
                self._fail(f"is damaged: {problem}; rerun the build that made it (it rebuilds damaged shards)", name)
            flex = FlexIndex(str(d), sim_fn=self.sim_fn_name, verbose=False)
            flex.payload()  # opened now: this process keeps the generation it loaded while an update replaces shards
            out.append(flex)
        return out

    # -- properties ------------------------------------------------------------------------------
    @property
    def sim_fn(self):
        from pyterrier_dr import SimFn
        return SimFn(self.sim_fn_name)

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    def __len__(self) -> int:
        return self.num_docs

    @property
    def record(self) -> IndexRecord:
        """What the manifest records about the encoder of the vectors (:mod:`.index_meta`)."""
        return IndexRecord.from_meta(self.manifest, self.index_path)

    def check_model(self, model: Optional[str] = None, backend: Optional[str] = None,
                    precision: Optional[str] = None) -> None:
        """One :class:`~.index_meta.IndexSettingsError` unless queries encoded with ``model``, ``backend``
        and ``precision`` (each None: the index's own) are comparable with the index's vectors: the same
        model (name, resolved path or hub id, or weights), the same precision and, for int8, the same backend
        (fp32 backends all give the same vectors)."""
        self.record.resolve(model, backend, precision)

    # -- search ----------------------------------------------------------------------------------
    def _map(self, fn, items):
        n = self.threads or min(self.num_shards, os.cpu_count() or 1)
        if n <= 1 or len(items) <= 1:
            return [fn(x) for x in items]
        if self._pool is None or self._pool._max_workers != n:
            self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="shard")
        return list(self._pool.map(fn, items))

    def search(self, qvecs, k: int):
        """``(scores, positions)``, each ``(len(qvecs), min(k, num_docs))``: the top-``k`` documents of
        each query over all shards, by score (descending) then global position (ascending), exactly
        as a flat search; positions are global (shard start + FlexIndex docid)."""
        qvecs = prepare_queries(qvecs, self.sim_fn)
        cos = self.sim_fn_name == "cos"

        def one(i):
            dvecs, _ = self.shards[i].payload(return_docnos=False)
            return topk(dvecs, qvecs, k, offset=int(self.starts[i]), cos=cos, ordered=False)  # merged below
        parts = self._map(one, list(range(self.num_shards)))
        return merge_topk([p[0] for p in parts], [p[1] for p in parts], min(k, self.num_docs))

    def ann_search(self, ann: str, settings: dict, qvecs, k: int):
        """Each shard's ANN top-k (:mod:`.ann`; each shard its own structure, positions made global),
        merged by score then position."""
        def one(i):
            shard = self.shards[i]
            s, ids = ann_topk(ann_index(shard, ann, settings), ann, settings, qvecs, k, len(shard))
            return s, np.where(ids < 0, -1, ids + int(self.starts[i]))
        parts = self._map(one, list(range(self.num_shards)))
        return merge_topk([p[0] for p in parts], [p[1] for p in parts], min(k, self.num_docs))

    def docnos_of(self, positions) -> np.ndarray:
        """The docnos (an object array) at global ``positions``."""
        positions = np.asarray(positions, dtype=np.int64)
        flat = positions.ravel()
        uniq, inverse = np.unique(flat, return_inverse=True)
        shard = np.searchsorted(self.starts, uniq, side="right") - 1
        out = np.empty(len(uniq), dtype=object)
        for i in np.unique(shard):
            sel = shard == i
            lookup = self.shards[i].payload(return_dvecs=False)[0]
            out[sel] = np.asarray(lookup.fwd[uniq[sel] - self.starts[i]], dtype=object)
        return out[inverse].reshape(positions.shape)

    def positions_of(self, docnos: Sequence[str]) -> np.ndarray:
        """Global positions of ``docnos`` (-1 where a docno is in no shard; the first shard holding
        it when several do)."""
        docnos = np.asarray(docnos, dtype=str)
        uniq, inverse = np.unique(docnos, return_inverse=True)
        fix_npids_multi_block_lookup()   # pyterrier_sci.upstream: numbered blocks after the first

        def one(i):
            lookup = self.shards[i].payload(return_dvecs=False)[0]
            return np.asarray(lookup.inv[uniq], dtype=np.int64)
        found = self._map(one, list(range(self.num_shards)))
        pos = np.full(len(uniq), -1, dtype=np.int64)
        for i in reversed(range(self.num_shards)):  # the first shard wins
            hit = found[i] >= 0
            pos[hit] = found[i][hit] + self.starts[i]
        return pos[inverse]

    def vectors(self, positions) -> np.ndarray:
        """The stored vectors (float32 rows) at global ``positions`` (all valid)."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty((len(positions), self.dim), dtype=np.float32)
        shard = np.searchsorted(self.starts, positions, side="right") - 1

        def one(i):
            rows = np.flatnonzero(shard == i)
            if len(rows):
                local = positions[rows] - self.starts[i]
                order = np.argsort(local, kind="stable")  # read the memory map in file order
                dvecs, _ = self.shards[i].payload(return_docnos=False)
                out[rows[order]] = dvecs[local[order]]
        self._map(one, list(range(self.num_shards)))
        return out

    # -- growth (plugins/dense/growth.py, docs/indexes.md) ------------------------------------------
    @property
    def generation(self) -> int:
        """The generation this object loaded (0: as built; each append or retraction adds one)."""
        return int(self.manifest.get("generation", 0) or 0)

    def indexer(self, mode: str = "append", batch_size: int = 32, verbose: bool = False) -> DenseAppender:
        """``index.indexer(mode='append')``: a ``pt.Indexer`` appending documents (``doc_vec``, or text encoded
        with the index's encoder) as a new shard, one new generation (this object keeps the one it loaded:
        load the index again to search the new one)."""
        return GrowingDenseIndex(self.index_path).indexer(mode, batch_size=batch_size, verbose=verbose)

    def retract(self, docnos) -> "ShardedDenseIndex":
        """Retracts ``docnos`` (a list or a file of them) as a new generation (the shards holding one are
        written again); returns the index loaded at that generation."""
        retract_documents(self.index_path, docnos)
        return ShardedDenseIndex(self.index_path, threads=self.threads)

    # -- transformers ----------------------------------------------------------------------------
    def retriever(self, model: Optional[str] = None, **kwargs) -> DenseRetriever:
        """The ``dense`` transformer over this index: its model, backend, precision, calibration and fields
        are the ones the manifest records (:mod:`.index_meta`); a keyword given that contradicts them is one
        :class:`~.index_meta.IndexSettingsError`."""
        return DenseRetriever(model or self.model, index=self, **kwargs)

    dense = retriever

    def __repr__(self) -> str:
        return f"ShardedDenseIndex({str(self.index_path)!r}, shards={self.num_shards}, docs={self.num_docs})"

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_pool"] = None
        return state


def write_sharded_flex(path: Union[str, os.PathLike], docnos: Iterable[str], vectors, num_shards: int, *,
                       model: str, model_id: Optional[str] = None, corpus: Optional[str] = None,
                       fields: Optional[Sequence[str]] = None, sim_fn: str = "dot",
                       encoder: Optional[dict] = None) -> ShardedDenseIndex:
    """Writes a sharded dense index from vectors already at hand (``vectors[i]`` is ``docnos[i]``'s,
    in corpus order), in the format that ``plugins/dense/sharded.py`` builds: each shard atomically,
    the manifest last.  ``encoder``: what encoded the vectors (:func:`.index_meta.encoder_record`), recorded
    in the manifest (default: only ``model``, fp32 vectors).  Returns the loaded index."""
    from pyterrier_dr import FlexIndex
    docnos = list(docnos)
    vectors = np.asarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    if len(docnos) != n:
        raise ValueError(f"{len(docnos)} docnos for {n} vectors")
    if not 1 <= num_shards <= max(n, 1):
        raise ValueError(f"num_shards={num_shards}: between 1 and the number of documents ({n})")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model_id = model_id or model
    fields = list(fields) if fields else None
    entries = []
    for i in range(num_shards):
        start, end = i * n // num_shards, (i + 1) * n // num_shards
        info = {"shard": i, "num_shards": num_shards, "model": model, "model_id": model_id, "dim": dim,
                "corpus": corpus, "fields": fields, "start": start, "end": end, "num_docs": end - start}

        def build(tmp, start=start, end=end, info=info):
            fix_npids_single_docno_blocks()  # pyterrier_sci.upstream: one-docno blocks
            FlexIndex(str(tmp), verbose=False).indexer().index(
                {"docno": docnos[j], "doc_vec": vectors[j]} for j in range(start, end))
            (Path(tmp) / SHARD_FILE).write_text(json.dumps(dict(info, files=record_files(tmp)), indent=2),
                                                encoding="utf-8")
        build_atomically(path / shard_name(i), build)
        entries.append({"name": shard_name(i), "start": start, "end": end, "num_docs": end - start})
    encoder = dict(encoder) if encoder else {"model": model, "model_id": model_id, "backend": "torch",
                                            "precision": "fp32"}
    write_pt_meta(path, type=ARTIFACT_TYPE, format=ARTIFACT_FORMAT, package_hint="pyterrier-sci",  # last: complete
                  version=FORMAT_VERSION, model=model, model_id=model_id, dim=dim, sim_fn=sim_fn, corpus=corpus,
                  fields=fields, num_docs=n, num_shards=num_shards, shards=entries, backend=encoder.get("backend"),
                  precision=encoder.get("precision"), encoder=encoder,
                  vectors=vectors_label(encoder.get("backend"), encoder.get("precision"), encoder.get("settings_hash")))
    return ShardedDenseIndex(path)
