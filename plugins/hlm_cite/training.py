"""HLM-Cite's retrieval curriculum as a declared training step: ``hlm_dense(train=True)``.

The retriever is fine-tuned by :func:`~.curriculum.train_curriculum` (stage 1: contrastive with core
citations against superficial and non-citations; stage 2: NeuralNDCG over ranked lists; ``stages`` picks
one or both, as the paper's ablation does) on the first ``train_queries`` queries of hep-th's training
split (their |C| = 100 candidate sets supply the non-citations), on first use; the model is kept in the
work directory keyed by its settings (:func:`curriculum_model_path`), and the component then re-scores
with it exactly as ``dense`` does with the base model.  A training query that is also a query of the
pipeline's dataset is refused: the split's queries are disjoint from the test split's.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Tuple, Union

from pyterrier_sci.datasets import core_citations as cc
from pyterrier_sci.training import about_to_train, settings_key, trained_model_dir

from .curriculum import train_curriculum

__all__ = ["TRAIN_DATASET", "STAGES", "CurriculumSettings", "training_queries", "curriculum_model_path",
           "trained_curriculum"]

#: the training split the curriculum reads (its |C| = 100 sets hold non-citations for stage 1's negatives)
TRAIN_DATASET = "irds:sci/hepth-core-citations/train/c100"
#: the curricula ``stages`` may name: both stages (the paper's), or one alone (its ablation, Table 3)
STAGES = ("1+2", "1", "2")


@dataclass(frozen=True)
class CurriculumSettings:
    """The curriculum's settings (defaults: docs/hlm-cite.md's run: MiniLM with 3 of its 6 layers frozen,
    128 word pieces while training, one epoch per stage, batch 16 / 4 lists of 12, 200 training queries)."""
    base_model: str = "default"
    train_queries: int = 200
    stages: str = "1+2"
    frozen_layers: int = 3
    epochs: int = 1
    batch_size: int = 16
    list_size: int = 12
    learning_rate: float = 2e-5
    max_seq_length: int = 128
    seed: int = 0
    max_steps: Optional[int] = None

    def __post_init__(self):
        if self.stages not in STAGES:
            raise ValueError(f"stages must be one of {STAGES}, not {self.stages!r}")

    def stage_numbers(self) -> Tuple[int, ...]:
        return tuple(int(s) for s in self.stages.split("+"))

    def key(self, legacy: bool = False) -> str:
        return settings_key(asdict(self), legacy=legacy)


def training_queries(settings: CurriculumSettings) -> list:
    """The query ids the curriculum trains on: the first ``train_queries`` of the training split."""
    return list(cc.HEPTH.split("train", 100).queries[:settings.train_queries])


def curriculum_model_path(settings: CurriculumSettings, work: Union[None, str, Path] = None) -> Path:
    """``<work>/models/hlm-cite/sci__hepth-core-citations__train__c100-<settings key>``."""
    return trained_model_dir("hlm-cite", TRAIN_DATASET, settings.key(), work, legacy_key=settings.key(legacy=True))


def trained_curriculum(settings: CurriculumSettings, work: Union[None, str, Path] = None,
                       verbose: bool = False) -> Path:
    """The path of the model trained with ``settings``: read back when complete, else trained there first
    (atomically: an interrupted training leaves nothing a later call would take for a model)."""
    path = curriculum_model_path(settings, work)
    if (path / "pt_meta.json").exists():
        return path
    about_to_train(path, "the HLM-Cite curriculum model")
    train = cc.HEPTH.split("train", 100)
    queries = training_queries(settings)
    if not queries:
        raise ValueError(f"{TRAIN_DATASET} has no training query")
    texts = {pid: p.default_text() for pid, p in cc.HEPTH.papers().items()}
    if verbose:
        print(f"hlm_dense: training the curriculum (stages {settings.stages}) on {len(queries)} queries of "
              f"{TRAIN_DATASET} into {path} (once)", flush=True)
    return Path(train_curriculum(settings.base_model, queries, train.candidates, texts, str(path),
                                 frozen_layers=settings.frozen_layers, stages=settings.stage_numbers(),
                                 stage1_epochs=settings.epochs, stage2_epochs=settings.epochs,
                                 batch_size=settings.batch_size, list_size=settings.list_size,
                                 lr=settings.learning_rate, seed=settings.seed, max_steps=settings.max_steps,
                                 max_seq_length=settings.max_seq_length, verbose=verbose))
