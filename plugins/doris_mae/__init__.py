"""DORIS-MAE: the multi-vector MaxSim scorer (``doris_maxsim``), the supervised contrastive
fine-tuning and Anno-GPT (the LLM annotation of aspect/abstract pairs).  See ``docs/doris-mae.md``."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "maxsim": ("QUERY_MODES", "DOC_MODES", "split_sentences", "SentenceEncoder", "shared_encoder",
              "MaxSimScorer"),
    "components": ("maxsim_component",),
    "training": ("make_triplets", "TRAINING_FILE", "ContrastiveModel", "fine_tune", "ContrastiveSettings",
                 "trained_model_path", "trained_model"),
    "anno_gpt": ("TEMPLATE_PACKAGE", "LABEL_SCORES", "MODES", "PAIR_KEY", "parse_label", "question_pairs",
                "CostEstimate", "AnnoGPT", "read_annotations", "compile_scores", "subquery_scores", "rankings",
                "to_qrels", "accuracy", "macro_f1", "spearman", "METRICS", "METRIC_NAMES", "agreement",
                "adjudicate", "bootstrap_ci", "resampled", "agreement_report", "add_annotate_commands",
                "annotate_main"),
    "measures": ("recall_at_k", "r_precision", "average_precision", "ndcg_at_fraction", "reciprocal_rank_at_max",
                 "DorisMeasure", "PAPER_MEASURES", "TABLE2_MEASURES", "measure", "bootstrap_se", "evaluate",
                 "random_baseline"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
