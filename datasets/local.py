"""Local corpora: the collections a researcher registered (``ps.register_corpus``, ``pyterrier-sci corpus add``) as
``sci/local/NAME`` (:mod:`pyterrier_sci.local_corpus`).  Importing registers every corpus of the work directory by
its folder name (and the core-citation sets of its citations, HLM-Cite's task); nothing is read until a corpus is
used.  See ``docs/corpora.md``."""
from pyterrier_sci.local_corpus import LOCAL_DATASET_HOOKS, register_local_datasets

from .core_citations import register_local_core_citations

# a corpus whose papers carry citations gets core-citation sets too (sci/local/NAME/core-citations/...)
LOCAL_DATASET_HOOKS.append(register_local_core_citations)
register_local_datasets()
