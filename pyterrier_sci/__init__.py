"""pyterrier-sci: the methods of five scientific-retrieval papers as PyTerrier transformers.

::

    import pyterrier as pt, pyterrier_sci as ps
    pipe = ps.pipeline("pool >> bm25", dataset="irds:sci/csfcube")
    ps.Experiment([pipe], topics, qrels, ["NDCG%20", "MAP"], dataset="sci/csfcube", baseline=0)

``ps.Experiment`` is ``pt.Experiment`` with the papers' own averaging (see ``docs/evaluation.md``).

Importing the package registers the benchmarks as ir_datasets ids under ``sci/``.
"""
__version__ = "0.1.0"

from pyterrier_sci import data, measures, registry  # noqa: F401
from pyterrier_sci.data import MissingDataError, data_dir
from pyterrier_sci.evaluation import Experiment
from pyterrier_sci.pipeline import PipelineConfig, PipelineError, load_config, pipeline
from pyterrier_sci.registry import DATASETS_GROUP, Context, component, load_group, register

load_group(DATASETS_GROUP)  # the benchmark modules register the sci/... ids

__all__ = ["pipeline", "Experiment", "PipelineError", "PipelineConfig", "load_config", "measures", "registry",
           "register",
           "component", "Context", "data_dir", "MissingDataError", "data"]
