"""HLM-Cite's LLM agentic ranking module (HLM-Cite §3.3, prompts in spirit of appendix A.1)."""
from __future__ import annotations

import json
import logging
import re
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import pandas as pd

from pyterrier_sci.artifacts import atomic_write_text
from pyterrier_sci.llm import LLMClient, LLMError, dryrun
from pyterrier_sci.llm.text import one_line, render
from pyterrier_sci.llm.trust import check_path, derived_settings
from pyterrier_sci.plugins.llm.base import Failed, LLMReranker, is_repaired, parse_permutation

log = logging.getLogger(__name__)

EXAMPLE_FILENAME = "hlm_one_shot_example.txt"
ANALYZER_MARK = "=== ANALYZER EXAMPLE ==="
DECIDER_MARK = "=== DECIDER EXAMPLE ==="


def split_analyses(text: str, m: int) -> List[str]:
    """Per candidate, the analyzer's paragraph ``Paper i: ...`` ("" where missing)."""
    text = text or ""
    if not re.search(r"(?im)^\W*paper\s*1\s*[:.)-]", text):
        text = "Paper 1: " + text.lstrip()
    out = [""] * m
    parts = re.split(r"(?im)^\W*paper\s*(\d+)\s*[:.)-]\s*", text)
    for i in range(1, len(parts) - 1, 2):
        k = int(parts[i])
        if 1 <= k <= m and not out[k - 1]:
            out[k - 1] = parts[i + 1].strip()
    return out


def parse_decision(text: str, m: int) -> Tuple[List[int], Dict[str, int], List[str]]:
    """The decider's ranking (repaired as in :func:`parse_permutation`) and explanations.  The
    ranking is read from the text before ``Explanations`` (after the last ``Ranking:`` there)."""
    text = text or ""
    m_ex = re.search(r"(?i)explanations?\s*:?", text)
    head, tail = (text[:m_ex.start()], text[m_ex.end():]) if m_ex else (text, "")
    if re.search(r"(?i)ranking\s*:", head):
        head = re.split(r"(?i)ranking\s*:", head)[-1]
    order, stats = parse_permutation(head, m)
    expl = [""] * m
    for k, body in re.findall(r"(?ims)^\W*paper\s*(\d+)\s*[:.)-]\s*(.*?)(?=^\W*paper\s*\d+\s*[:.)-]|\Z)", tail):
        k = int(k)
        if 1 <= k <= m and not expl[k - 1]:
            expl[k - 1] = body.strip()
    return order, stats, expl


def default_keep_top(retrieval_size: int = 8, num_core: int = 5) -> int:
    """HLM-Cite's rule: with retrieval size r and t core citations sought, the top 2t - r stay
    in place (r=8, t=5 -> 2, the paper's main setting; r=7 -> 3)."""
    return max(0, 2 * num_core - retrieval_size)


class HLMAgents(LLMReranker):
    """HLM-Cite's agentic ranking (§3.3): the **analyzer** explains why the query paper would cite
    each candidate; the **decider** ranks the candidates from those analyses, with explanations;
    the **guider** produces a one-shot example once, which both are shown (chain of thought).

    Only the lower part of the retrieved list is re-ranked: the top ``keep_top`` candidates stay in
    place (HLM-Cite: with retrieval size 8 and 5 core citations the top 2 are exempt; default 2).

    The guider runs the analyzer and decider on a worked task (``guider_task``, default the
    paper's Transformer-XL example in ``templates/hlm_guider_task.json``) and stores the
    example, with the task's reviewed ranking, in ``example_path`` (a text file a person can
    review and edit; lines starting with ``#`` are ignored).  If the file exists it is used as
    is and the guider makes no call.  ``guider=False`` runs without the example.  ``analyzer=False``
    is the paper's ablation "w/o Analyzer" (§4.4): the decider ranks from the raw titles and
    abstracts (``raw_decider_template``), one call per query; the one-shot example is still the
    guider's (its decider part).

    Unusable output: when the decider's answer names no candidate (or a call fails with
    ``on_error="flag"``), the query keeps its first-stage order and its re-ranked rows are flagged
    ``llm_unusable``; a malformed ranking is repaired as in :class:`~.listwise.Listwise` and
    counted in ``usage.repaired``; a missing analysis is passed on as empty.

    Output columns: ``llm_analysis``, ``llm_explanation``, ``llm_fixed`` (kept on top),
    ``llm_unusable``; ``score`` = n - new position.

    Args:
        keep_top: candidates exempt from re-ranking.
        guider, example_path, guider_task, guider_llm: the one-shot example (``guider_llm``:
            settings of the guider's model, default the same as ``llm``; HLM-Cite used GPT-4).
        analyzer: run the analyzer (default) or let the decider read the abstracts instead.
        analyzer_template, analyzer_system, decider_template, decider_system, raw_decider_template: templates
            (``$example``, ``$query``, ``$candidates``).
        analysis_max_tokens, decision_max_tokens: generation budgets.
    """

    component_name = "hlm_agents"
    owned_columns = ("llm_analysis", "llm_explanation", "llm_fixed", "llm_unusable")

    def __init__(self, llm=None, *, keep_top: int = 2, guider: bool = True, analyzer: bool = True,
                 example_path: Optional[Union[str, Path]] = None, guider_task: Optional[Union[str, Path]] = None,
                 guider_llm=None, text_field: Union[str, Sequence[str]] = "text",
                 title_field: Optional[str] = "title", query_field: str = "query",
                 analyzer_template: str = "hlm_analyzer", analyzer_system: str = "hlm_analyzer_system",
                 decider_template: str = "hlm_decider", decider_system: str = "hlm_decider_system",
                 raw_decider_template: str = "hlm_decider_raw",
                 analysis_max_tokens: int = 800, decision_max_tokens: int = 600,
                 max_doc_tokens: Optional[int] = 250, max_query_tokens: Optional[int] = 400,
                 on_error: str = "raise"):
        self.llm = llm
        self.keep_top = keep_top
        self.guider = guider
        self.analyzer = analyzer
        self.example_path = example_path
        self.guider_task = guider_task
        self.guider_llm = guider_llm
        self.text_field = text_field
        self.title_field = title_field
        self.query_field = query_field
        self.analyzer_template = analyzer_template
        self.analyzer_system = analyzer_system
        self.decider_template = decider_template
        self.decider_system = decider_system
        self.raw_decider_template = raw_decider_template
        self.analysis_max_tokens = analysis_max_tokens
        self.decision_max_tokens = decision_max_tokens
        self.max_doc_tokens = max_doc_tokens
        self.max_query_tokens = max_query_tokens
        self.on_error = on_error
        if keep_top < 0:
            raise ValueError("keep_top must be >= 0")
        self._setup()
        self._example: Optional[Tuple[str, str]] = None
        # as trusted as the component's own settings (a pipeline cannot send the key elsewhere)
        self._guider_settings = derived_settings(self.settings, guider_llm)
        if example_path:
            check_path(example_path, self.settings.sandbox, "hlm_agents example_path")
        if guider_task:
            check_path(guider_task, self.settings.sandbox, "hlm_agents guider_task")

    def __getstate__(self):
        state = super().__getstate__()
        state["_example"] = None
        return state

    # -- the agents -------------------------------------------------------------------------
    def _analyze(self, client: LLMClient, query: str, docs: List[Tuple[str, str]], example: str) -> List[str]:
        cands = "\n".join(f"Paper {i + 1}: Title: {t}\n  Abstract: {one_line(x)}" for i, (t, x) in enumerate(docs))
        prompt = render(self._template(self.analyzer_template), example=example, query=query, candidates=cands)
        text = client.generate(prompt, system=self._template(self.analyzer_system),
                               max_tokens=self.analysis_max_tokens).text
        return split_analyses(text, len(docs))

    def _decide(self, client: LLMClient, query: str, docs: List[Tuple[str, str]], analyses: Optional[List[str]],
                example: str):
        """The decider's ranking; ``analyses`` None: from the raw titles and abstracts (no analyzer, §4.4)."""
        if analyses is None:
            cands = "\n".join(f"Paper {i + 1}: Title: {t}\n  Abstract: {one_line(x)}" for i, (t, x) in enumerate(docs))
            template = self.raw_decider_template
        else:
            cands = "\n".join(f"Paper {i + 1}: Title: {t}\n  Analysis: {one_line(a) or '(none)'}"
                              for i, ((t, _), a) in enumerate(zip(docs, analyses)))
            template = self.decider_template
        prompt = render(self._template(template), example=example, query=query, candidates=cands)
        text = client.generate(prompt, system=self._template(self.decider_system),
                               max_tokens=self.decision_max_tokens).text
        return parse_decision(text, len(docs))

    # -- the guider -------------------------------------------------------------------------
    def _resolved_example_path(self) -> Optional[Path]:
        if self.example_path:
            return check_path(self.example_path, self.settings.sandbox, "hlm_agents example_path")
        d = self.settings.resolved_cache_dir()
        return d / EXAMPLE_FILENAME if d is not None else None

    def one_shot_example(self) -> Tuple[str, str]:
        """(analyzer example, decider example): read from ``example_path``, else made by the guider
        and written there."""
        if not self.guider:
            return "", ""
        if self._example is not None:
            return self._example
        path = self._resolved_example_path()
        if path is not None and path.is_file():
            try:
                self._example = read_example(path)
            except (OSError, UnicodeDecodeError) as e:
                raise ValueError(f"cannot read the HLM-Cite one-shot example {path}: {e}; "
                                 "fix the file (UTF-8 text) or delete it to let the guider write a new one") from None
            return self._example
        if path is not None and (path.exists() or path.is_symlink()):
            raise ValueError(f"hlm_agents example_path {str(path)!r} exists and is not a regular file; "
                             "name a file (it is written once by the guider)")
        text = self.run_guider()
        if dryrun.active() is not None:   # a dry run's answers are stand-ins: no example is written or kept
            return parse_example(text)
        if path is not None:
            atomic_write_text(path, text, "hlm_agents example_path")
            log.info("HLM-Cite guider wrote its one-shot example to %s; review and edit it there", path)
        self._example = parse_example(text)
        return self._example

    def run_guider(self) -> str:
        """Runs analyzer and decider on the guider task; returns the example file's text."""
        if self.guider_task:
            path = check_path(self.guider_task, self.settings.sandbox, "hlm_agents guider_task")
            try:
                task = json.loads(path.read_text(encoding="utf8"))
                docs = [(str(c["title"]), str(c.get("text", ""))) for c in task["candidates"]]
                query = str(task["query"])
                given = [int(i) for i in task.get("ranking") or []]
                if any(not 1 <= i <= len(docs) for i in given):
                    raise ValueError(f"ranking {given} names papers outside 1..{len(docs)}")
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"guider_task {str(path)!r} is not a guider task (JSON with 'query' and "
                                 f"'candidates' [{{'title', 'text'}}, ...]): {type(e).__name__}: {e}") from None
        else:
            task = json.loads(resources.files("pyterrier_sci.plugins.hlm_cite").joinpath(
                "templates", "hlm_guider_task.json").read_text(encoding="utf8"))
            docs = [(c["title"], c.get("text", "")) for c in task["candidates"]]
            query = task["query"]
        settings = getattr(self, "_guider_settings", None) or derived_settings(self.settings, self.guider_llm)
        client = self.client if settings == self.settings else LLMClient(settings, usage=self.usage)
        analyses = self._analyze(client, query, docs, "")
        order, stats, expl = self._decide(client, query, docs, analyses, "")
        ranking = [int(i) for i in task.get("ranking") or [o + 1 for o in order]]
        lines = [f"# HLM-Cite one-shot example, made by the guider (model {settings.model!r}).",
                 "# Review and edit it: the analyzer sees the first section, the decider the second.",
                 "# The ranking is the task's reviewed ranking; lines starting with '#' are ignored.",
                 f"# Notes of the task: {task.get('notes', '')}",
                 ANALYZER_MARK, f"Query paper:\n{query}", "", "Candidate papers:"]
        lines += [f"Paper {i + 1}: Title: {t}\n  Abstract: {x}" for i, (t, x) in enumerate(docs)]
        lines += ["", "Analysis:"]
        lines += [f"Paper {i + 1}: {one_line(a) or '(no analysis)'}" for i, a in enumerate(analyses)]
        lines += ["", DECIDER_MARK, f"Query paper:\n{query}", "", "Candidates:"]
        lines += [f"Paper {i + 1}: Title: {t}\n  Analysis: {one_line(a) or '(no analysis)'}"
                  for i, ((t, _), a) in enumerate(zip(docs, analyses))]
        lines += ["", "Ranking: " + ", ".join(f"paper {i}" for i in ranking), "Explanations:"]
        todo = "(to be written by the reviewer)"
        lines += [f"Paper {i}: {one_line(expl[i - 1]) if 0 < i <= len(expl) and expl[i - 1] else todo}"
                  for i in ranking]
        return "\n".join(lines) + "\n"

    def _example_block(self, part: str) -> str:
        return render(self._template("hlm_example_header"), example_text=part) if part.strip() else ""

    # -- transform --------------------------------------------------------------------------
    def _rerank_query(self, job):
        query, docs, ex_a, ex_d = job
        if not self.analyzer:   # the ablation "w/o Analyzer": one call, the decider alone
            order, stats, expl = self._decide(self.client, query, docs, None, ex_d)
            return [""] * len(docs), order, stats, expl
        analyses = self._analyze(self.client, query, docs, ex_a)
        order, stats, expl = self._decide(self.client, query, docs, analyses, ex_d)
        return analyses, order, stats, expl

    def _rerank(self, df: pd.DataFrame) -> pd.DataFrame:
        guider_failed = None
        try:
            ex_a, ex_d = self.one_shot_example()
        except LLMError as e:   # the guider is under the same error policy as the other calls
            if self.on_error == "raise":
                raise
            guider_failed, ex_a, ex_d = Failed(f"the guider failed: {e}"), "", ""
        ex_a, ex_d = self._example_block(ex_a), self._example_block(ex_d)
        groups = [g for _, g in df.groupby("qid", sort=False)]
        jobs, targets = [], []
        for g in groups:
            rest = g[g["_fs"] >= self.keep_top]
            if len(rest) >= 2:
                jobs.append((self._query(g.iloc[0]), [self._doc(r) for _, r in rest.iterrows()], ex_a, ex_d))
                targets.append(rest.index.to_numpy())
        if guider_failed is not None:
            results = [guider_failed] * len(jobs)
        else:
            results = self.client.map(self._call(self._rerank_query), jobs, desc=self.component_name)
        df["_pos"] = df["_fs"]
        df["llm_analysis"] = ""
        df["llm_explanation"] = ""
        df["llm_fixed"] = df["_fs"] < self.keep_top
        df["llm_unusable"] = False
        for idx, res in zip(targets, results):
            if isinstance(res, Failed):
                self.usage.add(unusable=1)
                df.loc[idx, "llm_unusable"] = True
                df.loc[idx, "llm_explanation"] = res.error
                continue
            analyses, order, stats, expl = res
            df.loc[idx, "llm_analysis"] = analyses
            df.loc[idx, "llm_explanation"] = expl
            if stats["valid"] == 0:
                self.usage.add(unusable=1)
                df.loc[idx, "llm_unusable"] = True
                continue
            if is_repaired(stats):
                self.usage.add(repaired=1)
            base = int(df.loc[idx, "_fs"].min())
            for new, o in enumerate(order):
                df.loc[idx[o], "_pos"] = base + new
        return df


def parse_example(text: str) -> Tuple[str, str]:
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    body = "\n".join(lines)
    if ANALYZER_MARK in body and DECIDER_MARK in body:
        a = body.split(ANALYZER_MARK, 1)[1]
        a, d = a.split(DECIDER_MARK, 1)
        return a.strip(), d.strip()
    return body.strip(), body.strip()


def read_example(path: Union[str, Path]) -> Tuple[str, str]:
    return parse_example(Path(path).read_text(encoding="utf8"))
