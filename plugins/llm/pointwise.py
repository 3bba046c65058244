"""The pointwise base of the LLM re-rankers: one yes/no judgement per (query, document), then the
documents judged relevant first, each group in first-stage order."""
from __future__ import annotations

from typing import Dict

import numpy as np
import pandas as pd

from pyterrier_sci.llm import Choice

from .base import Failed, LLMReranker, order_relevant_first

DEFAULT_ANSWER_TEMPLATES = {"chat": "answer_json", "completion": "answer_yes_no"}
JUDGEMENT_COLUMNS = ("llm_relevant", "llm_confidence", "llm_reasoning", "llm_unusable")


class PointwiseJudge(LLMReranker):
    """Base of the pointwise judges: a yes/no decision per row (``_judge``), then the rows judged
    relevant first, each group in first-stage order (``_apply_judgements``).  Subclasses build the
    prompts; ``answer_templates`` (per client mode) append the answer instructions."""

    def _prompts(self, body: str) -> Dict[str, str]:
        answers = dict(DEFAULT_ANSWER_TEMPLATES)
        answers.update(self.answer_templates or {})
        return {mode: body.rstrip() + "\n" + self._template(spec) for mode, spec in answers.items()}

    def _judge(self, prompts: Dict[str, str]):
        return self.client.choose(prompts, ("Yes", "No"))

    def _apply_judgements(self, df: pd.DataFrame, results) -> pd.DataFrame:
        rel, conf, reason, bad = [], [], [], []
        for r in results:
            if isinstance(r, Failed) or not isinstance(r, Choice) or not r.usable:
                rel.append(np.nan)
                conf.append(np.nan)
                reason.append(r.error if isinstance(r, Failed) else (r.reasoning if isinstance(r, Choice) else ""))
                bad.append(True)
            else:
                rel.append(1.0 if r.answer == "Yes" else 0.0)
                conf.append(np.nan if r.confidence is None else float(r.confidence))
                reason.append(r.reasoning or r.text.strip())
                bad.append(False)
        df["llm_relevant"] = rel
        df["llm_confidence"] = conf
        df["llm_reasoning"] = reason
        df["llm_unusable"] = bad
        self.usage.add(unusable=sum(bad))
        unusable_relevant = self.unusable_as == "relevant"
        relevant = np.where(df["llm_unusable"], unusable_relevant, df["llm_relevant"] == 1.0)
        df["_pos"] = order_relevant_first(df, pd.Series(relevant, index=df.index))
        return df
