"""The papers' benchmarks as ir_datasets ids under ``sci/...``: one module per benchmark, data loading
and registration only.  Each module registers its ids when imported (``import pyterrier_sci`` imports
them through the ``pyterrier_sci.datasets`` entry-point group) and documents its ids,
fields and files.  Data is read from the data directory (:func:`pyterrier_sci.data.data_dir`);
registering reads no file.
"""
if __name__ == "datasets":
    # The repository root is on sys.path (python run from the checkout), so this folder was found
    # as the top-level module "datasets" - the name of Hugging Face's package, which
    # sentence-transformers imports.  Hand that import the real package instead.
    import importlib as _importlib
    import os as _os
    import sys as _sys
    _root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    _saved = list(_sys.path)
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or _os.getcwd()) != _root]
    try:
        del _sys.modules["datasets"]
        _sys.modules["datasets"] = _importlib.import_module("datasets")
    finally:
        _sys.path[:] = _saved
