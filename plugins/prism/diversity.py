"""PRISM's diversity measures (Table 8, appendix C): the dispersion of each query's top 200 candidates in an
embedding space, to support its claim that aspect queries retrieve more varied papers.

* ``prism.CosineDistance@200``: one minus the mean pairwise cosine similarity of the candidates' embeddings;
* ``prism.CentroidDistance@200``: the mean Euclidean distance of the embeddings to their centroid;
* ``prism.ConvexHullVolume@200``: the volume of the convex hull of the embeddings projected to three dimensions
  (the paper does not say how it projects: here onto the query's own top three principal components).

Any cutoff and the embedding settings are part of the name (``prism.CosineDistance(encoder='...')@100``; settings
``encoder``, ``fields``, ``index``: :mod:`pyterrier_sci.diversity`); the default encoder is the offline
all-MiniLM-L6-v2, the paper's are the retrievers' own (Jina-v2, text-embedding-3-small).  A query with fewer than
two candidates is left out of the mean.  The measures read no judgement and evaluate any dataset's runs.
"""
from pyterrier_sci import measures
from pyterrier_sci.diversity import (
    centroid_distance,
    convex_hull_volume,
    cosine_distance,
    embedding_family,
)

#: Table 8's cutoff: "diversity within top 200 retrieved candidates"
TOP = 200

#: ``{name: (score, description)}``
FAMILIES = {
    "prism.CosineDistance": (cosine_distance, "PRISM Table 8: 1 - mean pairwise cosine similarity of the top k "
                                              "documents' embeddings (higher = more diverse)"),
    "prism.CentroidDistance": (centroid_distance, "PRISM Table 8: mean Euclidean distance of the top k documents' "
                                                  "embeddings to their centroid"),
    "prism.ConvexHullVolume": (convex_hull_volume, "PRISM Table 8: volume of the convex hull of the top k "
                                                   "documents' embeddings projected to 3 dimensions (their top "
                                                   "principal components)"),
}


def register_measures() -> None:
    """Registers ``prism.CosineDistance@200``, ``prism.CentroidDistance@200`` and ``prism.ConvexHullVolume@200``
    (and, by name, any cutoff and embedding settings of the three)."""
    parse = embedding_family(FAMILIES, default_k=TOP)
    for family in FAMILIES:
        measures.register(f"{family}@{TOP}", lambda name=f"{family}@{TOP}": parse(name))
    measures.register_parser(parse)
