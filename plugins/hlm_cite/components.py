"""HLM-Cite's pipeline components: ``hlm_agents`` (the analyzer, decider and guider of §3.3) and
``hlm_dense`` (a retriever fine-tuned by the retrieval curriculum, §3.2, trained on first use)."""
from __future__ import annotations

from typing import Optional, Sequence

import pyterrier as pt

from pyterrier_sci.corpus import dataset_of
from pyterrier_sci.errors import ParameterError
from pyterrier_sci.plugins.dense.components import dense_component
from pyterrier_sci.plugins.llm.components import build_llm_component, declare_llm_params
from pyterrier_sci.registry import DATASET, MAX_RESULTS, PATH, Param, params
from pyterrier_sci.training import refuse_training_on_test_queries

from .agents import EXAMPLE_FILENAME, HLMAgents
from .keywords import KeywordOverlap
from .training import STAGES, TRAIN_DATASET, CurriculumSettings, trained_curriculum, training_queries

__all__ = ["hlm_agents_component", "hlm_dense_component", "keyword_overlap_component"]


@declare_llm_params(HLMAgents, keep_top=Param(int, min=0, max=MAX_RESULTS), example_path=Param(PATH, optional=True),
                    guider_task=Param(PATH, optional=True))
def hlm_agents_component(*inputs, context=None, **params):
    """``hlm_agents``: HLM-Cite's analyzer, decider and guider; the top ``keep_top`` stay in place."""
    if "example_path" not in params and context is not None:
        params["example_path"] = str(context.workdir() / "llm" / EXAMPLE_FILENAME)
    return build_llm_component(HLMAgents, inputs, context, params)


@params(model=Param(str, min_len=1, optional=True), dataset=Param(DATASET, optional=True),
        fields=Param(list, item=str, min_len=1, optional=True), index=Param(bool, optional=True),
        batch_size=Param(int, min=1, max=65536), train=Param(bool),
        train_queries=Param(int, min=1, max=10_000_000, optional=True),
        stages=Param(str, choices=STAGES, optional=True),
        frozen_layers=Param(int, min=0, max=1000, optional=True), epochs=Param(int, min=1, max=1000, optional=True),
        train_batch_size=Param(int, min=2, max=65536, optional=True),
        list_size=Param(int, min=2, max=1000, optional=True),
        learning_rate=Param(float, min=1e-9, max=1.0, optional=True),
        max_seq_length=Param(int, min=8, max=8192, optional=True), seed=Param(int, min=0, max=2**32 - 1, optional=True),
        max_steps=Param(int, min=1, max=10_000_000, optional=True))
def hlm_dense_component(*inputs, context=None, model: Optional[str] = None, dataset: Optional[str] = None,
                        fields: Optional[Sequence[str]] = None, index: Optional[bool] = False, batch_size: int = 32,
                        verbose: bool = False, train: bool = False, train_queries: Optional[int] = None,
                        stages: Optional[str] = None, frozen_layers: Optional[int] = None,
                        epochs: Optional[int] = None, train_batch_size: Optional[int] = None,
                        list_size: Optional[int] = None, learning_rate: Optional[float] = None,
                        max_seq_length: Optional[int] = None, seed: Optional[int] = None,
                        max_steps: Optional[int] = None) -> pt.Transformer:
    """``hlm_dense(train=True)``: ``model`` (default: the offline all-MiniLM-L6-v2) fine-tuned by HLM-Cite's
    retrieval curriculum on the first ``train_queries`` queries of hep-th's training split
    (:mod:`~pyterrier_sci.plugins.hlm_cite.training`; ``stages`` ``1+2``, ``1`` or ``2``, ``frozen_layers``,
    ``epochs`` per stage, ``train_batch_size``, ``list_size``, ``learning_rate``, ``max_seq_length`` while
    training, ``seed``, ``max_steps``; unset: :class:`~.training.CurriculumSettings`' defaults), trained on
    first use and kept in the work directory keyed by them; then it re-scores as ``dense`` does (``index``
    false by default: the input's ``text`` column, ``fields`` of the dataset when given).  A training query
    that is also a query of the dataset is refused."""
    given = dict(train_queries=train_queries, stages=stages, frozen_layers=frozen_layers, epochs=epochs,
                 train_batch_size=train_batch_size, list_size=list_size, learning_rate=learning_rate,
                 max_seq_length=max_seq_length, seed=seed, max_steps=max_steps)
    training = {k: v for k, v in given.items() if v is not None}
    if not train:
        if training:
            raise ParameterError(f"hlm_dense: {', '.join(sorted(training))} need train=True",
                                 component="hlm_dense", param="train")
    else:
        if "train_batch_size" in training:  # the settings' name: the component's batch_size is the encoder's
            training["batch_size"] = training.pop("train_batch_size")
        try:
            settings = CurriculumSettings(base_model=model or "default", **training)
        except ValueError as e:
            raise ParameterError(f"hlm_dense: {e}", component="hlm_dense", param="stages") from None
        refuse_training_on_test_queries("hlm_dense", training_queries(settings), TRAIN_DATASET,
                                        dataset_of(dataset, context, "hlm_dense", required=False), "train_queries")
        model = str(trained_curriculum(settings, context.workdir() if context is not None else None, verbose))
    retriever = dense_component(context=context, model=model, dataset=dataset, fields=fields, index=index,
                                batch_size=batch_size, verbose=verbose)
    if len(inputs) > 1:
        raise ValueError("hlm_dense takes at most one input pipeline")
    return inputs[0] >> retriever if inputs else retriever



@params(fields=Param(list, item=str, min_len=1), query_field=Param(str, min_len=1))
def keyword_overlap_component(*inputs, context=None, fields: Sequence[str] = ("title", "abstract"),
                              query_field: str = "query") -> pt.Transformer:
    """``hlm_keyword_overlap``: HLM-Cite's rule-based baseline, candidates by the keywords they share with the
    query paper (``pool >> text >> hlm_keyword_overlap``; ``fields`` default title and abstract)."""
    scorer = KeywordOverlap(fields=fields, query_field=query_field)
    if len(inputs) > 1:
        raise ValueError("hlm_keyword_overlap takes at most one input pipeline")
    return inputs[0] >> scorer if inputs else scorer
