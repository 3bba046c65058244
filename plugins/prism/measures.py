"""PRISM's measure names: ``Recall@K`` is ir_measures' ``R@K`` and ``MRR@50`` its ``RR@50``; both are
aliases in experiments on ``sci/acl-fulltext`` and ``sci/scifullbench`` ids (nothing new is registered)."""
from pyterrier_sci import measures
from pyterrier_sci.datasets.acl_fulltext import NAME

#: the ids on which PRISM's names are aliases
DATASETS = (NAME, "sci/scifullbench")


def register_measures() -> None:
    """Declares ``Recall@{10,...,1000}`` and ``MRR@50`` as aliases on PRISM's datasets."""
    aliases = {f"Recall@{k}": f"R@{k}" for k in (10, 20, 50, 100, 200, 300, 1000)}
    aliases["MRR@50"] = "RR@50"
    for prefix in DATASETS:
        measures.register_aliases(prefix, aliases)
