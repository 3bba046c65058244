"""The sharded dense index format (``pt_meta.json`` type ``dense_index``, format ``sharded_flex``; the layout
is in ``docs/scale.md``), shared by its builder (:mod:`.sharded`), its reader (:mod:`.fanout`) and the
retriever: the names, the shard plan and the one error class of building and reading it."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Tuple, Union

from pyterrier_sci.registry import PipelineError

__all__ = ["ARTIFACT_TYPE", "ARTIFACT_FORMAT", "FORMAT_VERSION", "SHARD_FILE", "LEGACY_VECTORS", "ShardedIndexError",
           "shard_name", "shard_bounds", "is_sharded", "check_finished"]

ARTIFACT_TYPE = "dense_index"
ARTIFACT_FORMAT = "sharded_flex"
FORMAT_VERSION = 1
#: each shard's own record (its build, range and files), inside the shard's directory
SHARD_FILE = "shard.json"
#: what shards of an index built before backends were recorded hold
LEGACY_VECTORS = "fp32"


class ShardedIndexError(PipelineError):
    """A sharded index cannot be built as asked (bad settings, an unknown corpus, a target directory holding
    shards of another build) or read (a missing, damaged or foreign shard, an unfinished build)."""


def shard_name(i: int) -> str:
    return f"shard-{i:05d}"


def shard_bounds(n: int, num_shards: int) -> List[Tuple[int, int]]:
    """``[(start, end), ...]``: shard i holds corpus positions ``[i*n//N, (i+1)*n//N)``."""
    return [(i * n // num_shards, (i + 1) * n // num_shards) for i in range(num_shards)]


def is_sharded(path: Union[str, os.PathLike]) -> bool:
    """Whether ``path`` holds a sharded dense index, finished (its manifest says so) or not (shard
    directories but no ``pt_meta.json`` yet)."""
    p = Path(path).expanduser()
    meta = p / "pt_meta.json"
    if meta.exists():
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and data.get("format") == ARTIFACT_FORMAT
    return p.is_dir() and any(c.name.startswith("shard-") and c.is_dir() for c in p.iterdir())


def check_finished(path: Union[str, os.PathLike]) -> None:
    """One :class:`ShardedIndexError` for a sharded index directory without its manifest: an unfinished build."""
    if not (Path(path) / "pt_meta.json").exists():
        raise ShardedIndexError(f"sharded dense index {str(path)!r}: has no pt_meta.json: an unfinished build (run "
                                "the build again to resume it)")
