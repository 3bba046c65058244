"""pyterrier-sci: the methods of five scientific-retrieval papers as PyTerrier transformers.

::

    import pyterrier as pt, pyterrier_sci as ps
    pipe = ps.pipeline("pool >> bm25", dataset="irds:sci/csfcube")
    ps.Experiment([pipe], topics, qrels, ["NDCG%20", "MAP"], dataset="sci/csfcube", baseline=0)

``ps.Experiment`` is ``pt.Experiment`` with the papers' own averaging (see ``docs/evaluation.md``).

Importing the package registers the benchmarks as ir_datasets ids under ``sci/``, and your own collections
(``ps.register_corpus("NAME", "papers.bib")``) as ``sci/local/NAME`` (``docs/corpora.md``).
"""
__version__ = "0.1.0"

import os as _os

# Ray's driver would install its failure handler for SIGSEGV & co. over the JVM's that runs Lucene in this
# process, and ray.shutdown resets them to the default action: the JVM's next safepoint then killed the process.
# Ray reads this setting when it is imported, so it is set before anything here imports Ray (docs/scale.md).
_os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")

from pyterrier_sci import data, measures, registry  # noqa: E402, F401
from pyterrier_sci.data import MissingDataError, data_dir
from pyterrier_sci.evaluation import Experiment
from pyterrier_sci.local_corpus import corpus_manifest, register_corpus
from pyterrier_sci.pipeline import PipelineConfig, PipelineError, load_config, pipeline
from pyterrier_sci.registry import DATASETS_GROUP, Context, component, load_group, register

load_group(DATASETS_GROUP)  # the benchmark modules register the sci/... ids

__all__ = ["pipeline", "Experiment", "PipelineError", "PipelineConfig", "load_config", "measures", "registry",
           "register",
           "component", "Context", "data_dir", "MissingDataError", "data", "register_corpus",
           "corpus_manifest"]
