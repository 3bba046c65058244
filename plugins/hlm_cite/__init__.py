"""HLM-Cite: the retrieval curriculum (stage 1 contrastive, stage 2 NeuralNDCG), the LLM agents
(``hlm_agents``), and the curriculum as a training step (``hlm_dense(train=True)``).  See ``docs/hlm-cite.md``."""
from pyterrier_sci.lazy import lazy_exports

_MODULES = {  # module -> the public names it defines, imported on first use
    "curriculum": ("NeuralNDCGLoss", "stage1_examples", "stage2_examples", "train_curriculum"),
    "agents": ("EXAMPLE_FILENAME", "ANALYZER_MARK", "DECIDER_MARK", "split_analyses", "parse_decision",
              "default_keep_top", "HLMAgents", "parse_example", "read_example"),
    "training": ("TRAIN_DATASET", "STAGES", "CurriculumSettings", "training_queries", "curriculum_model_path",
                 "trained_curriculum"),
    "components": ("hlm_agents_component", "hlm_dense_component"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
