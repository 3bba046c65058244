"""MIR (methodology inspiration retrieval): the Methodology Adjacency Graph, the fine-tuned
retriever ``mir_dense``, the LLM judges ``mir_pointwise`` / ``mir_agent`` with their exemplars, and
the proposal extraction.  See ``docs/mir.md``."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "mag": ("Edge", "Sample", "MethodologyAdjacencyGraph"),
    "training": ("KeywordExtractor", "DomainIndex", "MAGSampler", "JointTripletLoss", "EpochBatchSampler",
                "MIRTrainingConfig", "MIRModel", "train_mir", "mir_retriever", "TRIPLET_SETS", "evaluate_part",
                "table2_figures"),
    "judges": ("MIRPointwise", "MIRAgent"),
    "exemplars": ("REQUIRED", "load_training_set", "ExemplarSelector"),
    "proposals": ("OWNED", "METHODOLOGICAL_INTENTS", "parse_proposal", "ProposalExtractor", "build_mir_data"),
    "components": ("mir_dense_component", "mir_pointwise_component", "mir_agent_component"),
    "experiments": ("add_training_arguments", "parse_training_arguments", "training_config"),
    "measures": ("MIRMeasure", "PAPER_MEASURES", "measure", "evaluate"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
