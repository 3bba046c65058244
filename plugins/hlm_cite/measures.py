"""HLM-Cite's measures (§4): ``PREC@3``, ``PREC@5`` (share of core citations in the top k) and
``hlm.NDCG@3``, ``hlm.NDCG@5`` (binary core labels, ideal from all core candidates; ``NDCG@k`` on the
core-citation ids)."""
from pyterrier_sci import measures
from pyterrier_sci.datasets.core_citations import CORE

#: the core-citation ids on which ``NDCG@3`` / ``NDCG@5`` mean ``hlm.NDCG@3`` / ``hlm.NDCG@5``
DATASETS = ("sci/hepth-core-citations", "sci/acl-core-citations", "sci/hlm")


def _prec(k):
    return lambda g, j: sum(1 for x in g[:k] if x >= CORE) / k


def _ndcg(k):
    return lambda g, j: measures.ndcg_at_k([1 if x >= CORE else 0 for x in g], k, first_undiscounted=False,
                                           ideal=[1 if x >= CORE else 0 for x in j])


def register_measures() -> None:
    """Registers ``PREC@k`` and ``hlm.NDCG@k`` (k = 3, 5) and the ``NDCG@k`` aliases on the core-citation ids."""
    for k in (3, 5):
        measures.register(f"PREC@{k}", measures.RankListMeasure(
            f"PREC@{k}", _prec(k), description=f"share of core citations in the top {k}"), replace=True)
        measures.register(f"hlm.NDCG@{k}", measures.RankListMeasure(
            f"hlm.NDCG@{k}", _ndcg(k), description=f"nDCG@{k}, binary core labels, ideal from all core candidates"),
            replace=True)
    aliases = {"NDCG@3": "hlm.NDCG@3", "NDCG@5": "hlm.NDCG@5"}
    for prefix in DATASETS:
        measures.register_aliases(prefix, aliases)
