"""Approximate nearest-neighbour (ANN) retrieval for the ``dense`` component: ``dense(ann="hnsw")``
(FAISS HNSW), ``"ivf"`` (FAISS IVF-Flat) or ``"voyager"`` (Spotify Voyager's HNSW), through the
ANN retrievers of ``pyterrier_dr.FlexIndex`` (``faiss_hnsw_retriever``, ``faiss_ivf_retriever``,
``voyager_retriever``), which build the ANN structure inside the index directory on first use.

pyterrier_dr writes that structure straight to its final name, so a killed build or a second process
could read a half-written file; here it is built by pyterrier_dr in a private mirror of the index
directory (symbolic links to its vectors), under :func:`pyterrier_sci.artifacts.lock`, and renamed
into place.  Searching uses the retriever's native index with per-call search parameters
(thread-safe, and ``% k`` fetches only ``k``: pyterrier_dr's ANN retrievers disable rank-cutoff
fusion and loop per query).  A flat index (:class:`~.flat.FlatIndex`) searches its structure; a sharded
one (:meth:`.fanout.ShardedDenseIndex.ann_search`) searches each shard's own and merges the per-shard top-k
lists by score.  Re-scoring stays exact.
"""
from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import pandas as pd

from pyterrier_sci.artifacts import atomic_file, host_tag, lock, process_alive
from pyterrier_sci.registry import Param, ParameterError, ParamSet

from .search import VectorIndex, prepare_queries, results_frame

#: the ``ann`` values of ``dense``
ANN_METHODS = ("hnsw", "ivf", "voyager")

#: per method, the settings (``ann_params``) and their defaults; pyterrier_dr's names and defaults,
#: except the search-time breadth (``ef_search``, ``n_probe``), raised to give recall@100 >= 0.97 on
#: CSFCube MiniLM vectors (benchmarks/bench_ann.py, docs/dense.md "Approximate retrieval")
ANN_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "hnsw": {"neighbours": 32, "ef_construction": 40, "ef_search": 128, "search_bounded_queue": True},
    "ivf": {"n_list": None, "train_sample": None, "n_probe": 32},
    "voyager": {"neighbours": 12, "ef_construction": 200, "random_seed": 1, "storage_data_type": "float32",
                "query_ef": 128},
}

_BIG = 1 << 24
_SETTINGS = {
    "hnsw": ParamSet({
        "neighbours": Param(int, min=2, max=512, note="the graph's M"),
        "ef_construction": Param(int, min=1, max=_BIG),
        "ef_search": Param(int, min=1, max=_BIG, note="FAISS searches max(ef_search, k) candidates"),
        "search_bounded_queue": Param(bool),
    }),
    "ivf": ParamSet({
        "n_list": Param(int, min=1, max=_BIG, optional=True,
                        note="None: the power of two >= sqrt(number of documents), at least 4"),
        "train_sample": Param(int, min=1, max=1 << 31, optional=True, note="None: 39 x n_list"),
        "n_probe": Param(int, min=1, max=_BIG),
    }),
    "voyager": ParamSet({
        "neighbours": Param(int, min=2, max=512),
        "ef_construction": Param(int, min=1, max=_BIG),
        "random_seed": Param(int, min=0),
        "storage_data_type": Param(str, choices=("float32", "float8", "e4m3")),
        "query_ef": Param(int, min=1, max=_BIG),
    }),
}

_RETRIEVERS = {"hnsw": "faiss_hnsw_retriever", "ivf": "faiss_ivf_retriever", "voyager": "voyager_retriever"}


def check_ann(ann: Optional[str], ann_params: Optional[dict] = None) -> Tuple[Optional[str], Dict[str, Any]]:
    """``(ann, settings)``: the method and its settings (defaults filled in), or one
    :class:`~pyterrier_sci.registry.ParameterError` naming the bad value (an unknown method, an
    unknown or out-of-range setting, settings without a method, ``voyager`` not installed)."""
    if ann is None:
        if ann_params:
            raise ParameterError("component 'dense': ann_params given without ann; set ann to one of "
                                 + ", ".join(repr(m) for m in ANN_METHODS), component="dense", param="ann_params")
        return None, {}
    if not isinstance(ann, str) or ann not in ANN_METHODS:
        try:
            Param(str, choices=ANN_METHODS).check(ann, "parameter 'ann'")
        except ValueError as e:
            raise ParameterError(f"component 'dense': {e}", component="dense", param="ann") from None
    if ann_params is not None and not isinstance(ann_params, dict):
        raise ParameterError(f"component 'dense': parameter 'ann_params' must be a mapping of {ann} settings "
                             f"({', '.join(ANN_DEFAULTS[ann])}), not {type(ann_params).__name__}",
                             component="dense", param="ann_params")
    given = _SETTINGS[ann].check(f"dense (ann={ann!r}, ann_params)", dict(ann_params or {}))
    if ann == "voyager" and importlib.util.find_spec("voyager") is None:
        raise ParameterError("component 'dense': ann='voyager' needs the voyager package (pip install voyager), "
                             "which is not installed; ann='hnsw' or 'ivf' use FAISS (installed)",
                             component="dense", param="ann")
    return ann, {**ANN_DEFAULTS[ann], **given}


# --------------------------------------------------------------------------- the ANN structure

def _build_kwargs(flex, ann: str, s: Dict[str, Any]) -> Dict[str, Any]:
    """The keyword arguments of pyterrier_dr's builder that fix the structure (not the search)."""
    if ann == "hnsw":
        return {"neighbours": s["neighbours"], "ef_construction": s["ef_construction"]}
    if ann == "voyager":
        return {k: s[k] for k in ("neighbours", "ef_construction", "random_seed", "storage_data_type")}
    n = len(flex)
    n_list, train = s["n_list"], s["train_sample"]
    if n_list is None:  # pyterrier_dr's rule, made explicit so that the file name is known here
        if train is None:
            n_list = max(int(1 << math.ceil(math.log2(math.ceil(math.sqrt(max(n, 1)))))), 4)
        else:
            n_list = max(math.floor(train / 39), 4)
    if train is None:
        train = n_list * 39
    if n_list > n:
        raise ParameterError(f"component 'dense': ann='ivf' with n_list={n_list} posting lists over an index of "
                             f"{n} documents ({flex.index_path}); set ann_params n_list <= {n}",
                             component="dense", param="ann_params")
    if min(train, n) < n_list:
        raise ParameterError(f"component 'dense': ann='ivf' trains {n_list} centroids on train_sample="
                             f"{min(train, n)} vectors; give at least n_list", component="dense", param="ann_params")
    return {"n_list": n_list, "train_sample": train}


def structure_name(flex, ann: str, kwargs: Dict[str, Any]) -> str:
    """The file pyterrier_dr keeps the structure in, inside the FlexIndex directory."""
    if ann == "hnsw":  # not pyterrier_dr's name: a graph without storage (see _load)
        return f"pyterrier_sci-hnsw_n-{kwargs['neighbours']}_ef-{kwargs['ef_construction']}.faiss"
    if ann == "ivf":
        return f"ivf_nlist-{kwargs['n_list']}_train-{kwargs['train_sample']}.faiss"
    import voyager
    from pyterrier_dr import SimFn
    space = {SimFn.dot: voyager.Space.InnerProduct, SimFn.cos: voyager.Space.Cosine}[flex.sim_fn]
    storage = {"float32": voyager.StorageDataType.Float32, "float8": voyager.StorageDataType.Float8,
               "e4m3": voyager.StorageDataType.E4M3}[kwargs["storage_data_type"]]
    return (f"voyager-{space.name}-{kwargs['neighbours']}-{kwargs['ef_construction']}-{kwargs['random_seed']}-"
            f"{storage.name}.voyager")


_MIRROR_RE = re.compile(r"^\.ann-build-(\d+)\.([A-Za-z0-9_]+)$")
_MIRRORED = ("pt_meta.json", "vecs.f4", "docnos.npids")


def _remove_stale_mirrors(directory: Path) -> None:
    for entry in directory.iterdir():
        m = _MIRROR_RE.match(entry.name)
        if m and m.group(2) == host_tag() and int(m.group(1)) != os.getpid() and not process_alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


def _build_structure(flex, ann: str, kwargs: Dict[str, Any], name: str) -> None:
    """Builds ``name`` with pyterrier_dr in a mirror of the index directory, then renames it into the
    index directory: under the structure's lock, so a second process waits and then reads it."""
    from pyterrier_dr import FlexIndex

    target = flex.index_path / name
    with lock(target, what=f"the {ann} structure of {flex.index_path}"):
        if target.exists():
            return
        _remove_stale_mirrors(flex.index_path)
        mirror = flex.index_path / f".ann-build-{os.getpid()}.{host_tag()}"
        shutil.rmtree(mirror, ignore_errors=True)
        mirror.mkdir()
        try:
            for f in _MIRRORED:
                (mirror / f).symlink_to((flex.index_path / f).resolve())
            getattr(FlexIndex(str(mirror), sim_fn=flex.sim_fn, verbose=False), _RETRIEVERS[ann])(**kwargs)
            if not (mirror / name).exists():
                made = sorted(p.name for p in mirror.iterdir() if p.name not in _MIRRORED)
                raise RuntimeError(f"pyterrier_dr's {_RETRIEVERS[ann]} wrote {made}, not {name}: "
                                   "this pyterrier_dr version names its ANN files otherwise")
            os.replace(mirror / name, target)
        finally:
            shutil.rmtree(mirror, ignore_errors=True)


def _build(flex, ann: str, kwargs: Dict[str, Any], path: Path):
    """Builds the structure with pyterrier_dr (in memory) and writes it to ``path`` atomically;
    returns the native index."""
    import faiss

    if ann == "voyager":
        _build_structure(flex, ann, kwargs, path.name)
        return _load(flex, ann, kwargs, path)
    native = getattr(flex, _RETRIEVERS[ann])(**kwargs, cache=False).faiss_index
    with atomic_file(path, f"the {ann} structure of {flex.index_path}") as tmp:
        if ann == "hnsw":  # the graph only: the vectors are the index's own vecs.f4
            faiss.write_index(native, str(tmp), faiss.IO_FLAG_SKIP_STORAGE)
        else:
            faiss.write_index(native, str(tmp))
    return native


def _load(flex, ann: str, kwargs: Dict[str, Any], path: Path):
    """The native index of a built structure, through pyterrier_dr's retriever."""
    if ann == "hnsw":
        # pyterrier_dr's own HNSW file (an empty storage) is refused by FAISS >= 1.9 when read back;
        # ours is written without storage, which is then the FlexIndex's flat vectors, as in pyterrier_dr
        import faiss
        native = faiss.read_index(str(path), faiss.IO_FLAG_SKIP_STORAGE)
        native.storage = flex.faiss_flat_retriever().faiss_index  # kept alive by the FlexIndex's cache
        flex._cache[("faiss_hnsw", kwargs["neighbours"], kwargs["ef_construction"])] = native
        return flex.faiss_hnsw_retriever(**kwargs).faiss_index
    retriever = getattr(flex, _RETRIEVERS[ann])(**kwargs)  # reads the file
    return retriever.voyager_index if ann == "voyager" else retriever.faiss_index


def ann_index(flex, ann: str, settings: Dict[str, Any]):
    """The native ANN index (a ``faiss.Index`` or ``voyager.Index``) of the FlexIndex ``flex``, from
    pyterrier_dr's ANN retriever; the structure is built on first use (locked: a second process
    waits, then reads it; written atomically) and kept in the FlexIndex's cache.  In a read-only
    index directory a FAISS structure is built in memory for this process."""
    from pyterrier_dr import SimFn

    if ann in ("hnsw", "ivf") and flex.sim_fn == SimFn.cos:
        raise ParameterError(f"component 'dense': ann={ann!r} (FAISS) searches by inner product, but the index "
                             f"{flex.index_path} uses cosine similarity; use ann='voyager' or an index of "
                             "normalised vectors with sim_fn dot", component="dense", param="ann")
    kwargs = _build_kwargs(flex, ann, settings)
    name = structure_name(flex, ann, kwargs)
    key = ("pyterrier_sci.ann", name)
    if key in flex._cache:
        return flex._cache[key]
    path = flex.index_path / name
    native = None
    if not path.exists() and os.access(flex.index_path, os.W_OK):
        with lock(path, what=f"the {ann} structure of {flex.index_path}"):
            if not path.exists():
                native = _build(flex, ann, kwargs, path)
    if native is None:
        if path.exists():
            native = _load(flex, ann, kwargs, path)
        elif ann == "voyager":
            raise PermissionError(f"ann='voyager': the index directory {flex.index_path} is read-only and holds no "
                                  f"{name}; build it once where the directory is writable")
        else:
            native = getattr(flex, _RETRIEVERS[ann])(**kwargs, cache=False).faiss_index
    flex._cache[key] = native
    return native


# ----------------------------------------------------------------------------------------- search

def ann_topk(native, ann: str, settings: Dict[str, Any], qvecs, k: int, num_docs: int):
    """``(scores, ids)`` of shape ``(len(qvecs), min(k, num_docs))``, each row by score (descending)
    then id; where the structure found fewer than ``k`` documents (IVF probing small lists), the row
    ends in ids -1 with score -inf."""
    qvecs = np.ascontiguousarray(qvecs, dtype=np.float32)
    k = min(k, num_docs)
    if ann == "voyager":
        ids, dist = native.query(qvecs, k, settings["query_ef"])
        ids = np.asarray(ids, dtype=np.int64).reshape(len(qvecs), -1)
        scores = 1.0 - np.asarray(dist, dtype=np.float32).reshape(len(qvecs), -1)  # inner product / cosine
    else:
        import faiss
        if ann == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=settings["ef_search"],
                                                bounded_queue=settings["search_bounded_queue"])
        else:
            params = faiss.SearchParametersIVF(nprobe=settings["n_probe"])
        scores, ids = native.search(qvecs, k, params=params)
    scores = np.where(ids < 0, -np.inf, scores).astype(np.float32)
    order = np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids), -scores), axis=1)
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def ann_search(index: VectorIndex, inp: pd.DataFrame, qvecs, k: int, ann: str,
               settings: Dict[str, Any]) -> pd.DataFrame:
    """The result frame of ANN top-``k`` retrieval for each row of the query frame ``inp`` (``qvecs`` its
    encoded queries) over a flat or a sharded index (its ``ann_search``: a sharded index searches each shard's
    own structure and merges the lists by score); like the exact search's frame, ranks from 0, ties by index
    position."""
    if ann == "voyager":  # voyager's Cosine space normalises itself
        qvecs = np.asarray(qvecs, dtype=np.float32)
    else:
        qvecs = prepare_queries(qvecs, index.sim_fn)
    best_s, best_i = index.ann_search(ann, settings, qvecs, k)
    return results_frame(inp, best_s, best_i, index.docnos_of, padded=True)
