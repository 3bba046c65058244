"""HLM-Cite's measures (§4): ``hlm.PREC@3``, ``hlm.PREC@5`` (share of core citations in the top k) and
``hlm.NDCG@3``, ``hlm.NDCG@5`` (binary core labels, ideal from all core candidates); on the core-citation
ids the short names ``PREC@k`` and ``NDCG@k`` mean these (a bare ``PREC@k`` elsewhere is the former name,
still accepted with a deprecation warning)."""
from pyterrier_sci import measures
from pyterrier_sci.datasets.core_citations import CORE

#: the core-citation ids on which ``NDCG@k`` / ``PREC@k`` mean ``hlm.NDCG@k`` / ``hlm.PREC@k``
DATASETS = ("sci/hepth-core-citations", "sci/acl-core-citations", "sci/hlm")


def _prec(k):
    return lambda g, j: sum(1 for x in g[:k] if x >= CORE) / k


def _ndcg(k):
    return lambda g, j: measures.ndcg_at_k([1 if x >= CORE else 0 for x in g], k, first_undiscounted=False,
                                           ideal=[1 if x >= CORE else 0 for x in j])


def register_measures() -> None:
    """Registers ``hlm.PREC@k`` and ``hlm.NDCG@k`` (k = 3, 5) and the short names on the core-citation ids."""
    for k in (3, 5):
        measures.register(f"hlm.PREC@{k}", measures.RankListMeasure(
            f"hlm.PREC@{k}", _prec(k), description=f"share of core citations in the top {k}"), replace=True)
        measures.register_old_name(f"PREC@{k}", f"hlm.PREC@{k}")
        measures.register(f"hlm.NDCG@{k}", measures.RankListMeasure(
            f"hlm.NDCG@{k}", _ndcg(k), description=f"nDCG@{k}, binary core labels, ideal from all core candidates"),
            replace=True)
    aliases = {"NDCG@3": "hlm.NDCG@3", "NDCG@5": "hlm.NDCG@5", "PREC@3": "hlm.PREC@3", "PREC@5": "hlm.PREC@5"}
    for prefix in DATASETS:
        measures.register_aliases(prefix, aliases)
