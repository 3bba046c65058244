"""Setwise re-ranking (Zhuang et al., "A Setwise Approach for Effective and Highly Efficient Zero-shot
Ranking with Large Language Models", SIGIR 2024), as ``llm-rankers``' ``SetwiseLlmRanker`` does it: the
LLM is shown a set of candidates and names the most relevant one by its label, and a sorting algorithm
built on that comparison finds the top ``k``: heapsort over a heap with ``num_child`` children per node,
or bubble sort with windows of ``num_child + 1`` (the plain passes: llm-rankers' shortcut between
passes is not used, see :func:`_bubblesort`).  See ``docs/llm.md``, "setwise".
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pandas as pd

from pyterrier_sci.llm import LLMBudgetExceeded, LLMError
from pyterrier_sci.llm.text import one_line, render
from pyterrier_sci.registry import Param

from .base import LLMReranker
from .components import build_llm_component, declare_llm_params

__all__ = ["Setwise", "LABELS", "METHODS", "STAND_IN", "setwise_order", "max_calls", "setwise_component"]

#: the labels of a set's candidates (llm-rankers' ``CHARACTERS``): sets of at most 23
LABELS = tuple("ABCDEFGHIJKLMNOPQRSTUVW")
METHODS = ("heapsort", "bubblesort")
#: the answer a dry run's stand-in stands for: the second candidate of the set ("B"), the answer that makes
#: both algorithms ask the most (every heapify goes down to a leaf, every bubble pass starts at the bottom)
STAND_IN = 1
#: the ``finish_reason`` of a dry run's stand-in answer (:mod:`pyterrier_sci.llm.dryrun`)
DRY_RUN = "dry_run"

Compare = Callable[[List[int]], int]


def _heapsort(arr: List[int], num_child: int, k: int, compare: Compare) -> List[int]:
    """llm-rankers' ``heapSort``: a max-heap with ``num_child`` children per node, built bottom-up, then the
    root extracted ``k`` times; each heapify step asks ``compare`` for the best of a parent and its children
    and goes on down where a child won.  Returns the items best first (the top ``k`` sorted)."""
    n = len(arr)

    def heapify(size: int, i: int) -> None:
        while num_child * i + 1 < size:   # while the node has children
            inds = [i, *range(num_child * i + 1, min(num_child * (i + 1) + 1, size))]
            best = compare([arr[j] for j in inds])
            largest = inds[best] if 0 <= best < len(inds) else i
            if largest == i:
                return
            arr[i], arr[largest] = arr[largest], arr[i]
            i = largest

    for i in range(n // num_child, -1, -1):
        heapify(n, i)
    ranked = 0
    for i in range(n - 1, 0, -1):
        arr[0], arr[i] = arr[i], arr[0]
        ranked += 1
        if ranked == k:
            break
        heapify(i, 0)
    return arr[::-1]


def _bubblesort(arr: List[int], num_child: int, k: int, compare: Compare) -> List[int]:
    """Bubble sort as the setwise paper describes it (llm-rankers' plain ``bubblesort`` passes): ``k``
    passes; pass ``i`` slides a window of ``num_child + 1`` items from the bottom of the list up to position
    ``i`` (consecutive windows share one item) and moves the best of each window to its top, so the best of
    positions ``i..n-1`` ends at ``i``.  A window of one item needs no call.  The number of calls does not
    depend on the answers.  Returns the list, its top ``k`` sorted.

    llm-rankers' current ``bubblesort`` starts a pass at the lowest window that changed in the pass before
    (``last_start``); that shortcut can miss the best candidate even when every answer is right (found with
    an oracle in ``tests/test_llm_setwise.py``), so it is not used."""
    n = len(arr)
    for i in range(min(k, n - 1)):
        end = n
        start = max(n - (num_child + 1), i)
        while True:
            window = arr[start:end]
            best = compare(window) if len(window) > 1 else 0
            if 0 < best < len(window):
                arr[start], arr[start + best] = arr[start + best], arr[start]
            if start == i:
                break
            end = start + 1
            start = max(start - num_child, i)
    return arr


def setwise_order(n: int, compare: Compare, num_child: int = 3, k: int = 10, method: str = "heapsort") -> List[int]:
    """The new order (positions into a first-stage ranking of ``n`` items, best first) that setwise
    re-ranking gives when ``compare(items)`` names the best of ``items`` (a list of positions, 0-based)
    by its index in that list: the top ``k`` as the algorithm sorts them, then the others in their
    first-stage order (as llm-rankers)."""
    if method not in METHODS:
        raise ValueError(f"setwise method must be one of {METHODS}, not {method!r}")
    if n <= 1:
        return list(range(n))
    sort = _heapsort if method == "heapsort" else _bubblesort
    top = sort(list(range(n)), num_child, k, compare)[:k]
    chosen = set(top)
    return top + [i for i in range(n) if i not in chosen]


def max_calls(n: int, num_child: int = 3, k: int = 10, method: str = "heapsort") -> int:
    """The most LLM calls setwise re-ranking of ``n`` candidates can make, whatever the answers: the number
    made when every answer is the second candidate (:data:`STAND_IN`), which is what a dry run counts for
    calls the response cache does not hold."""
    calls = [0]

    def stand_in(items: List[int]) -> int:
        calls[0] += 1
        return STAND_IN

    setwise_order(n, stand_in, num_child, k, method)
    return calls[0]


class Setwise(LLMReranker):
    """Setwise re-ranking (Zhuang et al., SIGIR 2024; llm-rankers' ``SetwiseLlmRanker``, generation
    scoring): the LLM is shown a set of candidates labelled ``A``, ``B``, ... and answers the label of the
    most relevant one; heapsort (a heap with ``num_child`` children per node: sets of up to
    ``num_child + 1``) or bubble sort (windows of ``num_child + 1``) built on that comparison finds the top
    ``k``, which come first in the algorithm's order, followed by the other candidates in their first-stage
    order.  The comparisons of one query are sequential; the queries run concurrently.

    Unusable output (no label of the set: empty, prose, a failed call with ``on_error="flag"``): the first
    stage decides, the candidate it ranked highest counts as the best (so a query whose answers are all
    unusable keeps its first-stage order; llm-rankers takes label ``A``, which heapsort's extraction would
    turn into a shuffle); the comparison counts in ``usage.unusable`` and the set's rows are flagged
    ``llm_unusable``.  A budget that refuses a call stops
    the run (:class:`~pyterrier_sci.llm.LLMBudgetExceeded`) also with ``on_error="flag"``.

    Dry runs: a call the response cache does not hold is answered by the stand-in :data:`STAND_IN` (the
    second candidate), which makes the algorithm ask the most it can (:func:`max_calls`); cached calls get
    their answers.  So a dry run on a cold cache counts exactly the largest number of calls a real run can
    make, and once the calls are cached it counts exactly the calls the real run makes.

    Output columns: ``llm_unusable``; ``score`` = n - new position, 0-based ``rank``.

    Args:
        num_child: children per heap node (heapsort) / the window is ``num_child + 1`` (bubble sort);
            llm-rankers' default 3, so sets of 4; at most 22 (23 labels).
        k: how many candidates the algorithm sorts to the top (default 10).
        method: ``heapsort`` (default) or ``bubblesort``.
        template: ``$query`` (also ``$proposal``), ``$passages`` (``Passage A: "title: text"`` blocks),
            ``$labels`` (``A, B, C or D``), ``$num``.
        answer_templates: per client mode, appended instructions (``answer_label_chat`` / ``answer_label``).
        max_doc_tokens: budget per candidate (default 120).
        answer_max_tokens: generation cap of a chat answer (default 16: a label).
        Other arguments as :class:`~.listwise.Listwise`.
    """

    component_name = "setwise"
    owned_columns = ("llm_unusable",)

    def __init__(self, llm=None, *, num_child: int = 3, k: int = 10, method: str = "heapsort",
                 text_field: Union[str, Sequence[str]] = "text", title_field: Optional[str] = "title",
                 query_field: str = "query", template: str = "setwise",
                 answer_templates: Optional[Mapping[str, str]] = None,
                 max_doc_tokens: Optional[int] = 120, max_query_tokens: Optional[int] = 400,
                 answer_max_tokens: Optional[int] = 16, on_error: str = "raise"):
        self.llm = llm
        self.num_child = num_child
        self.k = k
        self.method = method
        self.text_field = text_field
        self.title_field = title_field
        self.query_field = query_field
        self.template = template
        self.answer_templates = answer_templates
        self.max_doc_tokens = max_doc_tokens
        self.max_query_tokens = max_query_tokens
        self.answer_max_tokens = answer_max_tokens
        self.on_error = on_error
        if method not in METHODS:
            raise ValueError(f"setwise method must be one of {METHODS}, not {method!r}")
        if isinstance(num_child, bool) or not isinstance(num_child, int) or not 1 <= num_child < len(LABELS):
            raise ValueError(f"setwise num_child must be a whole number from 1 to {len(LABELS) - 1} (sets of at "
                             f"most {len(LABELS)} candidates, labelled A-W), not {num_child!r}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"setwise k must be a whole number >= 1, not {k!r}")
        self._setup()

    def max_calls(self, n: int) -> int:
        """The most calls re-ranking ``n`` candidates of one query can make (:func:`max_calls`)."""
        return max_calls(n, self.num_child, self.k, self.method)

    # -- one comparison -------------------------------------------------------------------------
    def _prompts(self, query: str, docs: List[Tuple[str, str]]) -> Dict[str, str]:
        labels = LABELS[:len(docs)]
        passages = "\n\n".join(f'Passage {label}: "{(t + ": ") if t else ""}{one_line(x)}"'
                               for label, (t, x) in zip(labels, docs))
        shown = ", ".join(labels[:-1]) + f" or {labels[-1]}"
        body = render(self._template(self.template), query=query, proposal=query, passages=passages,
                      labels=shown, num=len(docs))
        answers = {"chat": "answer_label_chat", "completion": "answer_label"}
        answers.update(self.answer_templates or {})
        return {m: (body.rstrip() + "\n" + render(self._template(t), labels=shown, num=len(docs))).rstrip()
                for m, t in answers.items()}

    def _best(self, query: str, docs: List[Tuple[str, str]]) -> Optional[int]:
        """The index of the set's best candidate; :data:`STAND_IN` for a dry run's stand-in answer;
        ``None`` when the answer is unusable."""
        labels = LABELS[:len(docs)]
        try:
            ch = self.client.choose(self._prompts(query, docs), labels, chat_max_tokens=self.answer_max_tokens)
        except LLMBudgetExceeded:
            raise
        except LLMError:
            if self.on_error == "raise":
                raise
            return None
        if ch.finish_reason == DRY_RUN:
            return STAND_IN
        if ch.usable:
            return labels.index(ch.answer)
        found = re.search(r"\bPassage\s+([A-W])\b", ch.text or "")   # "Passage C", as llm-rankers reads it
        if found and found.group(1) in labels:
            return labels.index(found.group(1))
        return None

    # -- one query ------------------------------------------------------------------------------
    def _rerank_query(self, group: pd.DataFrame) -> Tuple[List[int], List[bool]]:
        query = self._query(group.iloc[0])
        docs = [self._doc(r) for _, r in group.iterrows()]
        flagged = [False] * len(group)

        def compare(items: List[int]) -> int:
            best = self._best(query, [docs[i] for i in items])
            if best is None:   # unusable: the first stage decides (the candidate it ranked highest)
                self.usage.add(unusable=1)
                for i in items:
                    flagged[i] = True
                return items.index(min(items))
            return best

        order = setwise_order(len(group), compare, self.num_child, self.k, self.method)
        return order, flagged

    def _rerank(self, df: pd.DataFrame) -> pd.DataFrame:
        return self.rerank_per_query(df)


@declare_llm_params(Setwise, num_child=Param(int, min=1, max=len(LABELS) - 1),
                    k=Param(int, min=1, max=1_000_000), method=Param(str, choices=METHODS))
def setwise_component(*inputs, context=None, **params):
    """``setwise``: setwise re-ranking (Zhuang et al., SIGIR 2024): heapsort (default) or bubble sort over
    "which of these passages is the most relevant?" comparisons of ``num_child + 1`` candidates, top ``k``."""
    return build_llm_component(Setwise, inputs, context, params)
