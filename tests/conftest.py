"""Test setup: data from ../shared/data (or $PYTERRIER_SCI_DATA), indexes in one session directory."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYTERRIER_SCI_DATA", str((ROOT.parent / "shared" / "data").resolve()))
os.environ.setdefault("PYTERRIER_SCI_OFFLINE", "1")  # tests never download
os.environ.setdefault("PT_TEST_TRANSFORMER_REPORTS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# before any test module imports Ray, which reads it then: Ray's failure handler would take SIGSEGV from the JVM
# that runs Lucene in this process (pyterrier_sci/signals.py; pyterrier_sci sets it too, when imported first)
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
# `make test` runs two worker processes (pytest-xdist) on the machine's cores, each engine with as many threads as
# cores: OpenMP's threads (torch) then sleep when they wait, instead of spinning on the core the other worker computes
# on (numerics unchanged). Read when torch starts, so before any test module imports it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
DATA = Path(os.environ["PYTERRIER_SCI_DATA"])


def pytest_configure(config):
    import tempfile
    if "PYTERRIER_SCI_HOME" not in os.environ:
        os.environ["PYTERRIER_SCI_HOME"] = tempfile.mkdtemp(prefix="pyterrier-sci-test-")


def load_example(name: str):
    """An ``examples/<name>.py`` script as a module (the examples are scripts, not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"{name}_example", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def mir_dev():
    """The parsed MIR-MultiCite dev split (skips without the data)."""
    from pyterrier_sci.datasets import mir_multicite as M
    if not (DATA / "mir-multicite").exists():
        pytest.skip(f"MIR-MultiCite data not found under {DATA}")
    return M.load_split("dev")


def specter_run(facets):
    """SPECTER's official CSFCube sample rankings of ``facets`` as a PyTerrier result frame."""
    import json

    import pandas as pd
    rows = []
    for f in facets:
        ranked = json.loads((DATA / "csfcube" / "sample_ranked_pools" /
                             f"test-pid2pool-csfcube-specter-{f}-ranked.json").read_text())
        for pid, cands in ranked.items():
            for rank, (doc, _dist) in enumerate(cands):
                rows.append((f"{pid}_{f}", doc, float(len(cands) - rank), rank))
    return pd.DataFrame(rows, columns=["qid", "docno", "score", "rank"])


def popen_python(code: str, *args):
    """A Python subprocess running ``code`` (dedented) with ``args``, its output captured as text."""
    import subprocess
    import sys
    import textwrap
    env = dict(os.environ, PYTHONSAFEPATH="1")
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_file(path: Path, proc, seconds: float = 120) -> None:
    """Waits until ``path`` exists; fails if ``proc`` ends first or ``seconds`` pass."""
    import time
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the subprocess ended early ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def needs_data(*parts):
    path = DATA.joinpath(*parts)
    return pytest.mark.skipif(not path.exists(), reason=f"benchmark data not found: {path}")


@pytest.fixture(scope="session")
def csfcube():
    import pyterrier as pt

    import pyterrier_sci  # noqa: F401  (registers the datasets)
    if not (DATA / "csfcube").exists():
        pytest.skip(f"CSFCube data not found under {DATA}")
    return pt.get_dataset("irds:sci/csfcube")


@pytest.fixture(scope="session")
def tiny_dataset():
    """``sci-test/tiny``: the pools of three CSFCube method queries (a few hundred real abstracts)
    as a small ir_datasets corpus with those queries and qrels, for the slower (dense) tests."""
    import ir_datasets

    import pyterrier_sci  # noqa: F401
    from pyterrier_sci.datasets import csfcube
    from pyterrier_sci.irds import FnDocs, FnQrels, FnQueries, register
    if not (DATA / "csfcube").exists():
        pytest.skip(f"CSFCube data not found under {DATA}")
    name = "sci-test/tiny"
    qids = ["10010426_method", "5052952_method", "11310392_method"]
    qrels = [q for q in ir_datasets.load("sci/csfcube/method").qrels_iter() if q.query_id in qids]
    wanted = {q.doc_id for q in qrels} | {csfcube.query_paper_id(q) for q in qids}
    docs = [d for d in csfcube.docs().values() if d.doc_id in wanted]
    queries = [q for q in ir_datasets.load("sci/csfcube/method").queries_iter() if q.query_id in qids]
    register(name, FnDocs(name, lambda: iter(docs), csfcube.CSFCubeDoc),
             FnQueries(name, lambda: iter(queries), csfcube.CSFCubeQuery),
             FnQrels(lambda: iter(qrels), {}))
    return pt_dataset(name)


def pt_dataset(name):
    import pyterrier as pt
    return pt.get_dataset("irds:" + name)


import pyterrier as _pt  # noqa: E402


class TransformerTestCase(_pt.testing.TransformerTestCase):
    """``pt.testing.TransformerTestCase`` without ``pt.schematic.draw``, which fetches assets from
    the web (these machines are offline); the schematic itself is still built and checked."""

    def test_schematic(self):
        import pyterrier.documentation as doc
        if doc._cached_objects_inv is None:
            doc._cached_objects_inv = {}  # schematics look up documentation links online otherwise
        schematic = _pt.schematic.transformer_schematic(self.transformer)
        if schematic["type"] == "transformer":
            self.assertLessEqual(len(schematic["label"]), 20, f"long schematic label {schematic['label']!r}")
