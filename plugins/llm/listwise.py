"""Listwise (RankGPT sliding window) and pairwise tournament re-rankers (MIR appendix B.4)."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pandas as pd

from pyterrier_sci.llm import LLMError
from pyterrier_sci.llm.text import one_line, render

from .base import Failed, LLMReranker, is_repaired, parse_permutation


class Listwise(LLMReranker):
    """RankGPT-style listwise re-ranking (Sun et al. 2023; MIR B.4 "Listwise"): a window of
    ``window`` candidates slides from the bottom of the list to the top by ``stride``; the LLM
    orders each window by methodological relevance; ``passes`` repeats the whole sweep.

    Malformed output is repaired (:func:`~._base.parse_permutation`): identifiers are read in
    order, duplicates and unknown identifiers dropped, missing ones appended in their input order;
    each repaired window counts in ``usage.repaired``.  A window whose output names no valid
    identifier (empty, prose, a failed call with ``on_error="flag"``) keeps its order, counts in
    ``usage.unusable`` and flags its rows ``llm_unusable``.

    Output columns: ``llm_unusable``; ``score`` = n - new position, 0-based ``rank``.

    Args:
        window, stride, passes: the sliding window (default 20 / 10, one pass).
        template: ``$proposal``, ``$passages`` (``[i] title: text`` lines), ``$num``.
        max_doc_tokens: budget per candidate (default 120, as RankGPT's short passages).
        ranking_max_tokens: generation budget per window (default 6 tokens per candidate + 10).
        Other arguments as :class:`~.pointwise.MIRPointwise`.
    """

    component_name = "listwise"
    owned_columns = ("llm_unusable",)

    def __init__(self, llm=None, *, window: int = 20, stride: int = 10, passes: int = 1,
                 text_field: Union[str, Sequence[str]] = "text", title_field: Optional[str] = "title",
                 query_field: str = "query", template: str = "listwise",
                 max_doc_tokens: Optional[int] = 120, max_query_tokens: Optional[int] = 400,
                 ranking_max_tokens: Optional[int] = None, on_error: str = "raise"):
        self.llm = llm
        self.window = window
        self.stride = stride
        self.passes = passes
        self.text_field = text_field
        self.title_field = title_field
        self.query_field = query_field
        self.template = template
        self.max_doc_tokens = max_doc_tokens
        self.max_query_tokens = max_query_tokens
        self.ranking_max_tokens = ranking_max_tokens
        self.on_error = on_error
        if window < 2 or stride < 1 or stride > window:
            raise ValueError("listwise needs window >= 2 and 1 <= stride <= window")
        self._setup()

    def windows(self, n: int) -> List[Tuple[int, int]]:
        """The (start, end) windows of one pass over ``n`` items, bottom first (RankGPT)."""
        if n <= 1:
            return []
        out = []
        end = n
        start = max(n - self.window, 0)
        while True:
            out.append((start, end))
            if start == 0:
                break
            end -= self.stride
            start = max(end - self.window, 0)
        return out

    def _rank_window(self, query: str, docs: List[Tuple[str, str]]) -> Tuple[List[int], Dict[str, int]]:
        passages = "\n".join(f"[{i + 1}] {t + ': ' if t else ''}{one_line(x)}" for i, (t, x) in enumerate(docs))
        prompt = render(self._template(self.template), proposal=query, passages=passages, num=len(docs))
        budget = self.ranking_max_tokens or 6 * len(docs) + 10
        text = self.client.generate(prompt, max_tokens=budget).text
        return parse_permutation(text, len(docs))

    def _rerank_query(self, group: pd.DataFrame) -> Tuple[List[int], List[bool]]:
        order = list(range(len(group)))       # positions into group (first-stage order)
        flagged = [False] * len(group)
        query = self._query(group.iloc[0])
        docs = [self._doc(r) for _, r in group.iterrows()]
        for _ in range(self.passes):
            for start, end in self.windows(len(order)):
                ids = order[start:end]
                try:
                    perm, stats = self._rank_window(query, [docs[i] for i in ids])
                except LLMError:
                    if self.on_error == "raise":
                        raise
                    perm = list(range(len(ids)))
                    stats = {"valid": 0, "duplicates": 0, "unknown": 0, "missing": len(ids)}
                if stats["valid"] == 0:
                    self.usage.add(unusable=1)
                    for i in ids:
                        flagged[i] = True
                    continue
                if is_repaired(stats):
                    self.usage.add(repaired=1)
                order[start:end] = [ids[p] for p in perm]
        return order, flagged

    def _rerank(self, df: pd.DataFrame) -> pd.DataFrame:
        return self.rerank_per_query(df)


def swiss_pairs(order: List[int], played: set) -> Tuple[List[Tuple[int, int]], Optional[int]]:
    """Pairs neighbours of ``order`` (best first) that have not met yet; falls back to a repeat
    when no fresh opponent is left.  Returns the pairs and the item left without one (odd n)."""
    free = list(order)
    pairs = []
    while len(free) >= 2:
        a = free.pop(0)
        j = next((k for k, b in enumerate(free) if frozenset((a, b)) not in played), 0)
        b = free.pop(j)
        pairs.append((a, b))
    return pairs, (free[0] if free else None)


class PairwiseTournament(LLMReranker):
    """MIR's pairwise tournament (appendix B.4): in each of ``rounds`` rounds, the candidates are
    sorted by their current wins (first-stage order breaking ties) and neighbours are paired
    (k/2 pairs, Swiss style: no pair meets twice while a fresh opponent is left; with odd k the
    last one sits the round out).  The LLM says which paper of each pair offers more
    methodological insight for the proposal; the winner gets a point.  Papers are ranked by
    their wins summed over the rounds, first-stage order breaking ties.

    Unusable output (neither A nor B readable; a failed call with ``on_error="flag"``): nobody
    scores, both rows are flagged ``llm_unusable``, ``usage.unusable`` counts the comparison.

    Output columns: ``llm_wins``, ``llm_unusable``; ``score`` = n - new position.

    Args:
        rounds: tournament rounds (MIR: 3).
        both_orders: ask each pair twice (A/B and B/A) against position bias; a point needs both.
        template: ``$proposal``, ``$title_a``, ``$paper_a``, ``$title_b``, ``$paper_b``.
        answer_templates: per mode, appended instructions (``answer_ab_json`` / ``answer_ab``).
    """

    component_name = "pairwise_tournament"
    owned_columns = ("llm_wins", "llm_unusable")

    def __init__(self, llm=None, *, rounds: int = 3, both_orders: bool = False,
                 text_field: Union[str, Sequence[str]] = "text", title_field: Optional[str] = "title",
                 query_field: str = "query", template: str = "pairwise",
                 answer_templates: Optional[Mapping[str, str]] = None,
                 max_doc_tokens: Optional[int] = 400, max_query_tokens: Optional[int] = 400,
                 on_error: str = "raise"):
        self.llm = llm
        self.rounds = rounds
        self.both_orders = both_orders
        self.text_field = text_field
        self.title_field = title_field
        self.query_field = query_field
        self.template = template
        self.answer_templates = answer_templates
        self.max_doc_tokens = max_doc_tokens
        self.max_query_tokens = max_query_tokens
        self.on_error = on_error
        self._setup()

    def _prompts(self, query, a, b) -> Dict[str, str]:
        body = render(self._template(self.template), proposal=query, title_a=a[0], paper_a=a[1],
                      title_b=b[0], paper_b=b[1])
        answers = {"chat": "answer_ab_json", "completion": "answer_ab"}
        answers.update(self.answer_templates or {})
        return {m: body.rstrip() + "\n" + self._template(t) for m, t in answers.items()}

    def _compare(self, job) -> Optional[int]:
        """0 if the first paper wins, 1 if the second, None when unusable."""
        query, a, b = job
        ch = self.client.choose(self._prompts(query, a, b), ("A", "B"))
        if not ch.usable:
            return None
        first = 0 if ch.answer == "A" else 1
        if not self.both_orders:
            return first
        ch2 = self.client.choose(self._prompts(query, b, a), ("A", "B"))
        if not ch2.usable:
            return None
        second = 1 if ch2.answer == "A" else 0
        return first if first == second else -1   # -1: split decision, no point

    def _rerank(self, df: pd.DataFrame) -> pd.DataFrame:
        groups = [g for _, g in df.groupby("qid", sort=False)]
        state = []
        for g in groups:
            docs = [self._doc(r) for _, r in g.iterrows()]
            state.append({"query": self._query(g.iloc[0]), "docs": docs, "wins": [0] * len(g),
                          "played": set(), "flag": [False] * len(g)})
        for _ in range(self.rounds):
            jobs, where = [], []
            for s in state:
                order = sorted(range(len(s["docs"])), key=lambda i: (-s["wins"][i], i))
                pairs, _bye = swiss_pairs(order, s["played"])
                for a, b in pairs:
                    s["played"].add(frozenset((a, b)))
                    jobs.append((s["query"], s["docs"][a], s["docs"][b]))
                    where.append((s, a, b))
            results = self.client.map(self._call(self._compare), jobs, desc=self.component_name)
            for (s, a, b), r in zip(where, results):
                if r is None or isinstance(r, Failed):
                    self.usage.add(unusable=1)
                    s["flag"][a] = s["flag"][b] = True
                elif r in (0, 1):
                    s["wins"][a if r == 0 else b] += 1
        pos = pd.Series(0, index=df.index)
        wins = pd.Series(0, index=df.index)
        flags = pd.Series(False, index=df.index)
        for g, s in zip(groups, state):
            idx = g.index.to_numpy()
            order = sorted(range(len(g)), key=lambda i: (-s["wins"][i], i))
            for new_pos, i in enumerate(order):
                pos[idx[i]] = new_pos
            wins[idx] = s["wins"]
            flags[idx] = s["flag"]
        df["_pos"] = pos
        df["llm_wins"] = wins.astype(int)
        df["llm_unusable"] = flags.astype(bool)
        return df
