"""CSFCube's official measures (``eval_scripts/ranking_eval.py``), as SciFACE evaluates with them: the
``sciface.*`` family (``sciface.NDCG%20``, ``sciface.MAP``, ...), averaged per test fold then across
folds; on ``sci/csfcube`` ids the short names (``NDCG%20``, ``MAP``) mean these."""
from pyterrier_sci import measures
from pyterrier_sci.datasets import csfcube


def _binary(grades):
    return [x >= 2 for x in grades]


#: short name -> (fn(grades of the ranked judged list, all grades of the query), description)
_DEFS = {
    "NDCG%20": (lambda g, j: measures.ndcg_at_k(g, int(0.20 * len(g))),
                "nDCG at 20% of the ranked pool (CSFCube, graded 0-3)"),
    "MAP": (lambda g, j: measures.average_precision(_binary(g)), "average precision, relevant = grade >= 2"),
    "RP": (lambda g, j: measures.r_precision_last_relevant(_binary(g)), "R-precision as rank_metrics defines it"),
    "P@20": (lambda g, j: measures.precision_at_k(_binary(g), 20), "precision at 20, grade >= 2"),
    "R@20": (lambda g, j: measures.recall_at_k(_binary(g), 20),
             "recall at 20 of the ranked pool's relevant, grade >= 2"),
    "RR": (lambda g, j: measures.reciprocal_rank(_binary(g)), "reciprocal rank, grade >= 2"),
    "NDCG": (lambda g, j: measures.ndcg_at_k(g, len(g)), "nDCG over the whole ranked pool"),
    "NDCG@20": (lambda g, j: measures.ndcg_at_k(g, 20), "nDCG at 20"),
}


def register_measures() -> None:
    """Registers ``sciface.<name>`` for each measure and the short names (``NDCG%20``, ``MAP``, ...) on
    ``sci/csfcube`` ids; the former names ``csfcube.<name>`` and a bare ``NDCG%20`` still work, with a
    deprecation warning."""
    aliases = {}
    for short, (fn, desc) in _DEFS.items():
        full = f"sciface.{short}"
        measures.register(full, measures.RankListMeasure(full, fn, group_of=csfcube.test_fold_of, description=desc,
                                                         over_pool=short not in ("P@20", "RR")),  # ideal/cutoff
                          replace=True)                                                           # from the pool
        aliases[short] = full
        measures.register_old_name(f"csfcube.{short}", full)
    measures.register_old_name("NDCG%20", "sciface.NDCG%20")
    measures.register_aliases(csfcube.NAME, aliases)
