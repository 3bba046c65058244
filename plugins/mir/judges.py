"""MIR's pointwise re-ranker and MIR-Agent (MIR §5.2.1, prompts in spirit of appendix B.7)."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import pandas as pd

from pyterrier_sci.llm.text import render, truncate
from pyterrier_sci.plugins.llm.base import Failed
from pyterrier_sci.plugins.llm.pointwise import JUDGEMENT_COLUMNS, PointwiseJudge

from .exemplars import ExemplarSelector


class MIRPointwise(PointwiseJudge):
    """MIR's pointwise re-ranker: a binary methodological-relevance judgement for each
    (proposal, paper); papers judged relevant move before the others, each group keeping the
    first-stage order (MIR §5.2.1).

    Zero-shot, or few-shot with contrastive exemplars: for the ``num_shots`` training proposals
    most similar to the query (TF-IDF cosine), ``per_label`` relevant and non-relevant papers.

    Output columns: ``llm_relevant`` (1.0/0.0, NaN when unusable), ``llm_confidence``
    (probability of the given answer, from log-probabilities in completion mode or the JSON
    ``confidence`` in chat mode), ``llm_reasoning``, ``llm_unusable``; ``score``/``rank`` follow
    the new order (score = n - position).

    Unusable output (no Yes/No to be read; or a failed call with ``on_error="flag"``): the row is
    flagged ``llm_unusable`` and treated per ``unusable_as``: ``"relevant"`` (default; it is not
    demoted, so it keeps its first-stage place among the rows kept on top) or ``"non_relevant"``.

    Args:
        llm: LLM settings (:class:`~pyterrier_sci.llm.LLMSettings` or dict; default environment).
        text_field: column(s) with the paper text (``text``; full text works alike).
        title_field: column with the title, used when present.
        query_field: column with the proposal.
        text_name: how the prompt names the paper text (``Abstract``, ``Full Paper``).
        exemplars: few-shot training set: a DataFrame (qid, query, docno, text, label[, title]) or
            an ir_datasets id; ``None`` = zero-shot.
        num_shots: how many similar training proposals give exemplars.
        per_label: relevant and non-relevant papers shown per training proposal.
        relevance_threshold: training labels >= this are relevant.
        template: the prompt template (name in ``templates/``, path or text): ``$text_name``,
            ``$exemplars``, ``$proposal``, ``$title``, ``$paper``.
        answer_templates: per mode, the answer instructions appended (``{"chat": "answer_json",
            "completion": "answer_yes_no"}``).
        max_doc_tokens / max_query_tokens / max_exemplar_tokens: token budgets (estimated).
        unusable_as: ``"relevant"`` or ``"non_relevant"``.
        on_error: ``"raise"`` (a call failing after its retries stops the run with
            :class:`~pyterrier_sci.llm.LLMError`) or ``"flag"`` (treated as unusable output).
    """

    component_name = "mir_pointwise"
    owned_columns = JUDGEMENT_COLUMNS

    def __init__(self, llm=None, *, text_field: Union[str, Sequence[str]] = "text",
                 title_field: Optional[str] = "title", query_field: str = "query", text_name: str = "Abstract",
                 exemplars: Union[None, pd.DataFrame, str] = None, num_shots: int = 2, per_label: int = 1,
                 relevance_threshold: int = 1, template: str = "pointwise",
                 answer_templates: Optional[Mapping[str, str]] = None,
                 max_doc_tokens: Optional[int] = 1024, max_query_tokens: Optional[int] = 512,
                 max_exemplar_tokens: Optional[int] = 120, unusable_as: str = "relevant",
                 on_error: str = "raise"):
        self.llm = llm
        self.text_field = text_field
        self.title_field = title_field
        self.query_field = query_field
        self.text_name = text_name
        self.exemplars = exemplars
        self.num_shots = num_shots
        self.per_label = per_label
        self.relevance_threshold = relevance_threshold
        self.template = template
        self.answer_templates = answer_templates
        self.max_doc_tokens = max_doc_tokens
        self.max_query_tokens = max_query_tokens
        self.max_exemplar_tokens = max_exemplar_tokens
        self.unusable_as = unusable_as
        self.on_error = on_error
        if unusable_as not in ("relevant", "non_relevant"):
            raise ValueError("unusable_as must be 'relevant' or 'non_relevant'")
        self._selector = (ExemplarSelector(exemplars, num_shots, per_label, relevance_threshold)
                          if exemplars is not None else None)
        self._setup()

    def exemplar_block(self, query: str, qid: Optional[str] = None) -> str:
        """The few-shot section of the prompt for one proposal ("" when zero-shot)."""
        if self._selector is None or not self.num_shots:
            return ""
        shots = self._selector.select(query, qid)
        if not shots:
            return ""
        one = self._template("exemplar")
        examples = "".join(render(one, proposal=truncate(p, self.max_exemplar_tokens), title=t,
                                  paper=truncate(x, self.max_exemplar_tokens),
                                  label="Relevant" if rel else "Not relevant") for p, t, x, rel in shots)
        return render(self._template("exemplars"), examples=examples.rstrip())

    def _rerank(self, df: pd.DataFrame) -> pd.DataFrame:
        body_t = self._template(self.template)
        blocks = {}
        for qid, q in df.drop_duplicates("qid")[["qid", self.query_field]].itertuples(index=False):
            blocks[qid] = self.exemplar_block(q, qid)
        jobs = []
        for _, row in df.iterrows():
            title, text = self._doc(row)
            body = render(body_t, text_name=self.text_name, exemplars=blocks[row["qid"]],
                          proposal=self._query(row), title=title, paper=text)
            jobs.append(self._prompts(body))
        results = self.client.map(self._call(self._judge), jobs, desc=self.component_name)
        return self._apply_judgements(df, results)


class MIRAgent(PointwiseJudge):
    """MIR-Agent (MIR §5.2.1): (i) a proposal analysis (objective, core problem, sub-problems,
    plan of action), made once per query and reused for all its papers; (ii) a paper analysis
    per candidate given that analysis; (iii) a final yes/no judgement from the proposal, the
    paper and both analyses.  Relevant papers first, first-stage order within each group.

    Output columns: those of :class:`MIRPointwise` (``llm_reasoning`` holds the paper analysis),
    plus ``llm_proposal_analysis``.  Unusable output: as :class:`MIRPointwise` (an empty analysis
    is passed on as it is; only an unreadable final judgement makes the row unusable).

    Args: as :class:`MIRPointwise` (no few-shot), plus the templates ``proposal_template``
    (``$proposal``), ``paper_template`` (``$proposal``, ``$proposal_analysis``, ``$text_name``,
    ``$title``, ``$paper``), ``judgement_template`` (the same and ``$paper_analysis``), and
    ``analysis_max_tokens`` (generation budget of each analysis).
    """

    component_name = "mir_agent"
    owned_columns = JUDGEMENT_COLUMNS + ("llm_proposal_analysis",)

    def __init__(self, llm=None, *, text_field: Union[str, Sequence[str]] = "text",
                 title_field: Optional[str] = "title", query_field: str = "query", text_name: str = "Abstract",
                 proposal_template: str = "agent_proposal_analysis", paper_template: str = "agent_paper_analysis",
                 judgement_template: str = "agent_judgement", answer_templates: Optional[Mapping[str, str]] = None,
                 analysis_max_tokens: int = 400, max_doc_tokens: Optional[int] = 1024,
                 max_query_tokens: Optional[int] = 512, unusable_as: str = "relevant", on_error: str = "raise"):
        self.llm = llm
        self.text_field = text_field
        self.title_field = title_field
        self.query_field = query_field
        self.text_name = text_name
        self.proposal_template = proposal_template
        self.paper_template = paper_template
        self.judgement_template = judgement_template
        self.answer_templates = answer_templates
        self.analysis_max_tokens = analysis_max_tokens
        self.max_doc_tokens = max_doc_tokens
        self.max_query_tokens = max_query_tokens
        self.unusable_as = unusable_as
        self.on_error = on_error
        if unusable_as not in ("relevant", "non_relevant"):
            raise ValueError("unusable_as must be 'relevant' or 'non_relevant'")
        self._setup()

    def _generate(self, prompt: str) -> str:
        return self.client.generate(prompt, max_tokens=self.analysis_max_tokens).text.strip()

    def _rerank(self, df: pd.DataFrame) -> pd.DataFrame:
        queries = df.drop_duplicates("qid")
        pt_prop = self._template(self.proposal_template)
        prop_prompts = [render(pt_prop, proposal=self._query(r)) for _, r in queries.iterrows()]
        gen = self._call(self._generate)
        prop = self.client.map(gen, prop_prompts, desc=f"{self.component_name}: proposals")
        analyses = {qid: ("" if isinstance(a, Failed) else a) for qid, a in zip(queries["qid"], prop)}

        pt_paper = self._template(self.paper_template)
        fields = []
        for _, row in df.iterrows():
            title, text = self._doc(row)
            fields.append(dict(proposal=self._query(row), proposal_analysis=analyses[row["qid"]],
                               text_name=self.text_name, title=title, paper=text))
        papers = self.client.map(gen, [render(pt_paper, **f) for f in fields], desc=f"{self.component_name}: papers")
        papers = ["" if isinstance(p, Failed) else p for p in papers]

        pt_judge = self._template(self.judgement_template)
        jobs = [self._prompts(render(pt_judge, paper_analysis=pa, **f)) for f, pa in zip(fields, papers)]
        results = self.client.map(self._call(self._judge), jobs, desc=f"{self.component_name}: judgements")
        df = self._apply_judgements(df, results)
        # the paper analysis is the agent's reasoning; keep a chat judgement's own reasoning after it
        df["llm_reasoning"] = [p if not r or r == p else (p + "\n\n" + r if p else r)
                               for p, r in zip(papers, df["llm_reasoning"])]
        df["llm_proposal_analysis"] = df["qid"].map(analyses)
        return df
