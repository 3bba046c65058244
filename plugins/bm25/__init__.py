"""Lexical retrieval: BM25 on PISA (default) or Lucene through Pyserini (the ``bm25`` component, corpus
indexing and the index artifacts) and TF-IDF cosine re-ranking of candidate pools (the ``tfidf`` component)."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "retriever": ("BACKENDS", "build_index", "corpus_index", "load_index", "pisa_derived_files", "pisa_bm25", "BM25",
                  "DamagedIndexError"),
    "components": ("bm25_component", "tfidf_component"),
    "tfidf": ("TfidfScorer", "clean_text", "STOP_WORDS"),
    "indexing": ("index_corpus", "CorpusError", "checked_docs", "PISA_BATCH_SIZE", "LUCENE_BATCH_SIZE"),
    "lucene": ("LuceneIndex", "LuceneIndexer", "LuceneBM25", "start_jvm", "MAX_CLAUSE_COUNT"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
