"""The papers' benchmarks as ir_datasets ids under ``sci/...``; importing this package registers them.

Each module documents its ids, fields and files.  Data is read from the data directory
(:func:`pyterrier_sci.data.data_dir`); registering reads no file.
"""
from . import csfcube  # noqa: F401  (registers sci/csfcube...)
from ._pool import PoolRetriever, pool_component

__all__ = ["csfcube", "PoolRetriever", "pool_component"]
