"""Local corpora: the collections a researcher registered (``ps.register_corpus``, ``pyterrier-sci corpus add``) as
``sci/local/NAME`` (:mod:`pyterrier_sci.local_corpus`).  Importing registers every corpus of the work directory by
its folder name; nothing is read until a corpus is used.  See ``docs/corpora.md``."""
from pyterrier_sci.local_corpus import register_local_datasets

register_local_datasets()
