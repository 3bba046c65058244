"""PRISM's aspect-aware query optimisation (§3, appendix E): the full query paper becomes a
research-question query (f_R), a method query (f_M) and an experiment query (f_E), written to the
columns of :data:`ASPECT_COLUMNS`; with the abstract they form the query set Q."""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_sci.corpus import irds_id
from pyterrier_sci.llm import LLMError, LLMSettings, Usage, extract_json, settings_from
from pyterrier_sci.llm.client import UsesLLM
from pyterrier_sci.llm.text import load_template, render, truncate

TEMPLATE_PACKAGE = "pyterrier_sci.plugins.prism"
ASPECTS = ("research_question", "method", "experiment")
ASPECT_COLUMNS = {a: f"{a}_query" for a in ASPECTS}
ASPECT_NAMES = {"research_question": "research question, motivation and contributions", "method": "methodology",
                "experiment": "experimental setup and results"}
FALLBACK_COLUMN = "aspect_fallback"
PAPER_FIELDS = ("text", "title", "abstract", "full_text", "sections")


def _check_aspects(aspects: Iterable[str]) -> Tuple[str, ...]:
    aspects = tuple(aspects)
    unknown = [a for a in aspects if a not in ASPECTS]
    if unknown or not aspects:
        raise ValueError(f"unknown aspects {unknown}: use some of {', '.join(ASPECTS)}")
    return aspects


def _text(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    return str(v).strip()


# ----------------------------------------------------------------------------------------------
# the query paper's fields, and which of them is the query
# ----------------------------------------------------------------------------------------------

class PaperFields(pt.Transformer):
    """Adds the query paper's fields (``text`` = title and abstract, ``title``, ``abstract``, ``full_text``,
    ``sections``) to a query frame, from
    the dataset's queries by ``qid`` - or, for a qid that is no query of the dataset, from its
    documents (the query paper is a document of the corpus in ``sci/acl-fulltext``).  Columns the
    input already has are kept as they are.  A qid found in neither raises a ``KeyError``."""
    schematic = {"label": "paper fields"}

    def __init__(self, dataset: str, fields: Sequence[str] = PAPER_FIELDS):
        self.dataset = dataset
        self.fields = tuple(fields)
        self._queries: Optional[Dict[str, Any]] = None
        self._store = None

    def _irds(self):
        import ir_datasets
        return ir_datasets.load(irds_id(self.dataset))

    def _lookup(self, qids: Sequence[str]) -> Dict[str, Any]:
        ds = self._irds()
        if self._queries is None:
            self._queries = {str(q.query_id): q for q in ds.queries_iter()} if ds.has_queries() else {}
        found = {q: self._queries[q] for q in qids if q in self._queries}
        missing = [q for q in qids if q not in found]
        if missing and ds.has_docs():
            if self._store is None:
                self._store = ds.docs_store()
            for q in missing:
                try:
                    found[q] = self._store.get(q)
                except KeyError:
                    pass
        missing = [q for q in qids if q not in found]
        if missing:
            raise KeyError(f"no query or document of {self.dataset} with id(s) {missing[:5]}"
                           + (" ..." if len(missing) > 5 else ""))
        return found

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.columns(inp, includes=["qid"])
        add = [f for f in self.fields if f not in inp.columns]
        if not add:
            return inp
        if len(inp) == 0:
            return inp.assign(**{f: pd.Series(dtype=object) for f in add})
        qids = [str(q) for q in inp["qid"].drop_duplicates()]
        found = self._lookup(qids)
        for f in add:
            if not hasattr(next(iter(found.values())), f):
                raise KeyError(f"{self.dataset} has no field {f!r}")
        out = inp.copy()
        for f in add:
            out[f] = [getattr(found[str(q)], f) for q in inp["qid"]]
        return out

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_queries"] = state["_store"] = None
        return state

    def __repr__(self) -> str:
        return f"PaperFields({self.dataset!r})"


PAPER_COLUMNS = PAPER_FIELDS + tuple(ASPECT_COLUMNS.values()) + (FALLBACK_COLUMN,)


class QueryField(pt.Transformer):
    """Makes a column the query: ``query`` = the first non-empty of ``field`` and ``fallback``
    columns (the previous ``query`` moves to ``query_0``, ``pt.model.push_queries``).  A row where
    all of them are empty raises a ``ValueError``.

    The query paper's text columns (``drop``: its fields and aspect queries) are dropped from the
    output: a retriever copies every query column onto each of its result rows - with pandas'
    string dtype a copy of the string per row - and a full paper on thousands of chunk hits per
    query runs into gigabytes.  In PRISM each branch starts with a ``QueryField`` and ``rrf``
    takes the query columns from its own input, so nothing is lost; pass ``drop=()`` to keep them.
    """
    schematic = {"label": "query field"}

    def __init__(self, field: str, fallback: Sequence[str] = (), drop: Sequence[str] = PAPER_COLUMNS):
        self.field = field
        self.fallback = (fallback,) if isinstance(fallback, str) else tuple(fallback)
        self.drop = (drop,) if isinstance(drop, str) else tuple(drop)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.columns(inp, includes=["qid", self.field])
        out = pt.model.push_queries(inp, inplace=False) if "query" in inp.columns else inp.copy()
        if len(out) == 0:
            out["query"] = pd.Series(dtype=object)
            return out.drop(columns=[c for c in self.drop if c in out.columns])
        values = [_text(v) for v in out[self.field]]
        for col in self.fallback:
            if col in out.columns:
                values = [v or _text(w) for v, w in zip(values, out[col])]
        empty = [q for q, v in zip(out["qid"], values) if not v]
        if empty:
            raise ValueError(f"empty query field {self.field!r} (fallback: {list(self.fallback)}) "
                             f"for qid(s) {empty[:5]}")
        out["query"] = values
        return out.drop(columns=[c for c in self.drop if c in out.columns])

    def __repr__(self) -> str:
        return f"QueryField({self.field!r})"


# ----------------------------------------------------------------------------------------------
# the LLM-free optimiser: the paper's own sections
# ----------------------------------------------------------------------------------------------

_RESEARCH = re.compile(r"introduc|motivat|background|overview|problem|conclu|future work|summary|related work|"
                       r"previous work|prior work|related research|contribution", re.I)
_EXPERIMENT = re.compile(r"experiment|evaluat|result|setup|set-up|data ?sets?\b|\bdata\b|corpus|corpora|baseline|"
                         r"analys[ie]s|performance|comparison|discussion|error|ablation|\btests?\b|benchmark", re.I)
_METHOD = re.compile(r"method|approach|model|framework|architecture|algorithm|system|formali[sz]|formulation|"
                     r"propos|feature|representation|training|learning|inference|decoding|definition|notation|"
                     r"preliminar|grammar|objective|\bour\b|technique|procedure", re.I)


def normalise_sections(sections: Any) -> List[Tuple[str, str]]:
    """``[(heading, text)]`` from Section tuples, ``(heading, text)`` pairs or dicts
    (``heading``/``title``/``header``/``section`` and ``text``/``content``/``body``); ``None`` -> ``[]``."""
    if sections is None or (isinstance(sections, float) and sections != sections):
        return []
    if isinstance(sections, str):
        raise TypeError("sections must be a list of (heading, text) pairs or dicts, not a string")
    out = []
    for s in sections:
        if isinstance(s, Mapping):
            head = next((s[k] for k in ("heading", "title", "header", "section") if k in s), "")
            text = next((s[k] for k in ("text", "content", "body", "contents") if k in s), "")
            if isinstance(text, (list, tuple)):
                text = " ".join(map(str, text))
        else:
            head, text = s[0], s[1]
        out.append((_text(head), _text(text)))
    return [(h, t) for h, t in out if t]


def classify_sections(headings: Sequence[str]) -> List[Optional[str]]:
    """The aspect of each section, from its heading (see :class:`SectionAspectQueries`)."""
    n = len(headings)
    labels: List[Optional[str]] = []
    for h in headings:
        if _RESEARCH.search(h):
            labels.append("research_question")
        elif _EXPERIMENT.search(h):
            labels.append("experiment")
        elif _METHOD.search(h):
            labels.append("method")
        else:
            labels.append(None)
    first_exp = next((i for i, label in enumerate(labels) if label == "experiment"), None)
    for i, label in enumerate(labels):
        if label is not None:
            continue
        if i == 0:
            labels[i] = "research_question"  # the opening section is the introduction
        elif first_exp is not None:
            labels[i] = "experiment" if i > first_exp else "method"
        else:
            labels[i] = "experiment" if (i + 0.5) / n >= 0.6 else "method"
    return labels


def _take_words(texts: Sequence[str], max_words: Optional[int]) -> str:
    """Joins ``texts`` keeping at most ``max_words`` words, shared evenly among them (a short
    text leaves its share to the others): every mapped section contributes its opening."""
    words = [t.split() for t in texts]
    if not max_words or sum(map(len, words)) <= max_words:
        return " ".join(" ".join(w) for w in words if w)
    quota = [0] * len(words)
    left, open_ = max_words, [i for i, w in enumerate(words) if w]
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for i in list(open_):
            take = min(share, len(words[i]) - quota[i], left)
            quota[i] += take
            left -= take
            if quota[i] >= len(words[i]):
                open_.remove(i)
            if left == 0:
                break
    return " ".join(" ".join(w[:q]) for w, q in zip(words, quota) if q)


CONSUMED = ("full_text", "sections")


class AspectOptimiser(pt.Transformer):
    """Base of the query optimisers: adds one column per aspect (:data:`ASPECT_COLUMNS`) and
    ``aspect_fallback`` (the aspects, comma-separated, whose query fell back; ``""`` if none).

    The full paper they read (``drop``: ``full_text`` and ``sections``) is not passed on: what
    follows retrieves, and retrievers and ``rrf`` copy every query column onto each result row
    (with pandas' string dtype a copy of the string per row: a full paper on a thousand results
    per query runs into gigabytes).  ``drop=()`` keeps them."""
    drop: Tuple[str, ...] = CONSUMED

    def _out_columns(self) -> List[str]:
        return [ASPECT_COLUMNS[a] for a in self.aspects] + [FALLBACK_COLUMN]

    def _output(self, inp: pd.DataFrame, columns: Dict[str, Any]) -> pd.DataFrame:
        out = inp.assign(**columns)
        return out.drop(columns=[c for c in self.drop if c in out.columns])

    def _empty(self, inp: pd.DataFrame) -> pd.DataFrame:
        return self._output(inp, {c: pd.Series(dtype=object) for c in self._out_columns()})


class SectionAspectQueries(AspectOptimiser):
    """The LLM-free aspect optimiser: each aspect query is made of the query paper's own sections,
    chosen by their headings.

    Headings name the aspect (checked in this order): *research question* - introduction,
    motivation, background, overview, problem, related/previous work, contributions, conclusion,
    future work, summary; *experiment* - experiments, evaluation, results, setup, data(sets),
    corpus, baselines, analysis, performance, comparison, discussion, errors, ablation, tests;
    *method* - method, approach, model, framework, architecture, algorithm, system, formulation,
    proposed, features, representation, training, learning, inference, decoding, definitions,
    preliminaries, grammar, objective, technique.  A heading that names none (PDF conversion
    often leaves only a number, or a topical title) is placed by position: the first section is
    the introduction; a section after the first experiment section is an experiment section and
    one before it a method section; without experiment headings, the last 40% of the paper counts
    as experiments.

    Each query joins its sections' texts up to ``max_words`` words shared evenly among the
    sections (so the introduction and the conclusion both speak for the research question).  An
    aspect with no section (a paper without sections) falls back to the first of ``fallback``
    that is not empty (default: the abstract, then the title and abstract) and is named in
    ``aspect_fallback``.
    """
    schematic = {"label": "section queries"}

    def __init__(self, aspects: Sequence[str] = ASPECTS, max_words: Optional[int] = 256,
                 sections_field: str = "sections", fallback: Sequence[str] = ("abstract", "text", "title"),
                 drop: Sequence[str] = CONSUMED):
        self.aspects = _check_aspects(aspects)
        self.drop = tuple(drop)
        self.max_words = max_words
        self.sections_field = sections_field
        self.fallback = (fallback,) if isinstance(fallback, str) else tuple(fallback)

    def queries_for(self, sections: Any) -> Dict[str, str]:
        """``{aspect: query}`` for one paper's sections (aspects without a section are left out)."""
        secs = normalise_sections(sections)
        labels = classify_sections([h for h, _ in secs])
        out = {}
        for a in self.aspects:
            texts = [t for (_, t), label in zip(secs, labels) if label == a]
            if texts:
                out[a] = _take_words(texts, self.max_words)
        return out

    def _fallback(self, row) -> str:
        for col in self.fallback:
            v = _text(row.get(col)) if hasattr(row, "get") else ""
            if v:
                return _take_words([v], self.max_words)
        return ""

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.columns(inp, includes=["qid", self.sections_field])
        if len(inp) == 0:
            return self._empty(inp)
        rows = {c: [] for c in self._out_columns()}
        for row in inp.to_dict("records"):
            qs = self.queries_for(row[self.sections_field])
            fell = []
            for a in self.aspects:
                q = qs.get(a)
                if not q:
                    q = self._fallback(row)
                    fell.append(a)
                rows[ASPECT_COLUMNS[a]].append(q)
            rows[FALLBACK_COLUMN].append(",".join(fell))
        return self._output(inp, rows)

    def __repr__(self) -> str:
        return f"SectionAspectQueries(aspects={list(self.aspects)}, max_words={self.max_words})"


# ----------------------------------------------------------------------------------------------
# the LLM agents
# ----------------------------------------------------------------------------------------------

class _LLMOptimiser(UsesLLM, AspectOptimiser):
    """What the LLM optimisers share: settings, usage, the paper text given to the model, and the
    fallback of an unusable answer to the section-based query."""

    def __init__(self, llm, *, aspects: Sequence[str], template: str, paper_field: str, title_field: Optional[str],
                 max_paper_tokens: Optional[int], max_tokens: int, fallback_words: int, on_error: str,
                 drop: Sequence[str]):
        if on_error not in ("raise", "flag"):
            raise ValueError(f"on_error must be 'raise' or 'flag', not {on_error!r}")
        self.llm = llm
        self.drop = tuple(drop)
        self.aspects = _check_aspects(aspects)
        self.template = template
        self.paper_field = paper_field
        self.title_field = title_field
        self.max_paper_tokens = max_paper_tokens
        self.max_tokens = max_tokens
        self.fallback_words = fallback_words
        self.on_error = on_error
        self.settings: LLMSettings = llm if isinstance(llm, LLMSettings) else settings_from(llm)
        self.usage = Usage(model=self.settings.model)
        self._client = None
        self._templates: Dict[str, str] = {}
        self._sections = SectionAspectQueries(self.aspects, max_words=fallback_words)

    def _template(self, spec: str) -> str:
        """The template's text, read once (it is asked for on every call)."""
        if spec not in self._templates:
            self._templates[spec] = load_template(spec, package=TEMPLATE_PACKAGE, sandbox=self.settings.sandbox)
        return self._templates[spec]

    def _paper(self, row) -> Tuple[str, str]:
        title = _text(row.get(self.title_field)) if self.title_field else ""
        text = _text(row.get(self.paper_field))
        if not text:
            text = _text(row.get("abstract")) or _text(row.get("text"))
        return title, truncate(text, self.max_paper_tokens)

    def _validate(self, inp: pd.DataFrame) -> None:
        pta.validate.columns(inp, includes=["qid", self.paper_field])

    def _finish(self, inp: pd.DataFrame, answers: List[Dict[str, str]]) -> pd.DataFrame:
        rows = {c: [] for c in self._out_columns()}
        need_sections = "sections" in inp.columns
        for row, ans in zip(inp.to_dict("records"), answers):
            fell = [a for a in self.aspects if not ans.get(a)]
            if fell:
                fb = self._sections.queries_for(row["sections"]) if need_sections else {}
                for a in fell:
                    ans[a] = fb.get(a) or self._sections._fallback(row)
            for a in self.aspects:
                rows[ASPECT_COLUMNS[a]].append(ans[a])
            rows[FALLBACK_COLUMN].append(",".join(fell))
        return self._output(inp, rows)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.settings.model!r}, aspects={list(self.aspects)})"


def clean_answer(text: str) -> str:
    """The model's explanation as one paragraph (markdown emphasis and a leading label removed)."""
    text = re.sub(r"[*#`]+", "", text or "")
    text = re.sub(r"^\s*(explanation|answer|query)\s*:\s*", "", text.strip(), flags=re.I)
    return " ".join(text.split())


class AspectAgents(_LLMOptimiser):
    """PRISM's multi-agent query optimiser: one LLM agent per aspect - f_R (research question,
    motivation, contributions), f_M (method), f_E (experiments) - each with its own system prompt
    (PRISM appendix E, Figures 5-7: ``templates/prism_<aspect>_system.txt``) reading the full
    paper (``templates/prism_aspect.txt``, ``$title``, ``$paper``, ``$aspect``) and writing one
    paragraph used as that aspect's query.

    Every (paper, aspect) is one call, run concurrently up to ``llm.concurrency``.  Generation:
    temperature from the settings (0 by default, as PRISM), ``max_tokens`` (PRISM: 2,000).
    An empty answer - or, with ``on_error="flag"``, a failed call - falls back to the section-based
    query of that aspect (:class:`SectionAspectQueries`) and is named in ``aspect_fallback``;
    with ``on_error="raise"`` a failed call raises :class:`~pyterrier_sci.llm.LLMError`.

    Args:
        llm: LLM settings (dict or :class:`LLMSettings`; the ``llm:`` config section).
        aspects: which agents run (PRISM Figure 2 varies their number).
        system_templates: ``{aspect: template}`` overriding the system prompts.
        template: the user prompt.
        paper_field, title_field: the columns holding the full paper text and the title.
        max_paper_tokens: the paper is cut to about this many tokens (the model's context).
        max_tokens: generation budget per answer.
        fallback_words: length of the section-based fallback queries.
    """
    schematic = {"label": "aspect agents"}

    def __init__(self, llm=None, *, aspects: Sequence[str] = ASPECTS,
                 system_templates: Optional[Mapping[str, str]] = None, template: str = "prism_aspect",
                 paper_field: str = "full_text", title_field: Optional[str] = "title",
                 max_paper_tokens: Optional[int] = 6000, max_tokens: int = 2000, fallback_words: int = 256,
                 on_error: str = "raise", drop: Sequence[str] = CONSUMED):
        self.system_templates = dict(system_templates or {})
        super().__init__(llm, aspects=aspects, template=template, paper_field=paper_field, title_field=title_field,
                         max_paper_tokens=max_paper_tokens, max_tokens=max_tokens, fallback_words=fallback_words,
                         on_error=on_error, drop=drop)

    def _system(self, aspect: str) -> str:
        return self._template(self.system_templates.get(aspect, f"prism_{aspect}_system"))

    def _ask(self, item) -> str:
        row, aspect = item
        title, paper = self._paper(row)
        prompt = render(self._template(self.template), title=title, paper=paper, aspect=ASPECT_NAMES[aspect])
        try:
            answer = self.client.generate(prompt, system=self._system(aspect), max_tokens=self.max_tokens)
            return clean_answer(answer.text)
        except LLMError:
            if self.on_error == "raise":
                raise
            return ""

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self._validate(inp)
        if len(inp) == 0:
            return self._empty(inp)
        records = inp.to_dict("records")
        items = [(r, a) for r in records for a in self.aspects]
        texts = self.client.map(self._ask, items, desc="PRISM aspect agents")
        n = len(self.aspects)
        answers = [dict(zip(self.aspects, texts[i * n:(i + 1) * n])) for i in range(len(records))]
        return self._finish(inp, answers)


SINGLE_AGENT_KEYS = {"research_question": "research_question_query", "method": "method_query",
                     "experiment": "experiment_query"}


def parse_single_agent(text: str, aspects: Sequence[str] = ASPECTS) -> Dict[str, str]:
    """The aspect queries of a single agent's JSON answer (keys ``research_question_query``,
    ``method_query``, ``experiment_query``; a value that is a list is joined); aspects without a
    usable value are left out."""
    obj = extract_json(text or "") or {}
    lowered = {str(k).lower().strip(): v for k, v in obj.items()}
    out = {}
    for a in aspects:
        v = lowered.get(SINGLE_AGENT_KEYS[a])
        if v is None:  # "research question query", "Method-Specific Queries", ...
            v = next((val for k, val in lowered.items() if k.replace("-", "_").replace(" ", "_").startswith(a)), None)
        if isinstance(v, (list, tuple)):
            v = " ".join(map(str, v))
        v = clean_answer(v) if isinstance(v, str) else ""
        if v:
            out[a] = v
    return out


class SingleAgent(_LLMOptimiser):
    """PRISM's single-agent variant (Table 2): one LLM call per paper writes all three aspect
    queries as one JSON object (``templates/prism_single_system.txt``, PRISM Figure 8; keys
    ``research_question_query``, ``method_query``, ``experiment_query``).  An aspect missing from
    the answer (unreadable JSON, an empty value) falls back to its section-based query and is named
    in ``aspect_fallback``.  Arguments as :class:`AspectAgents` (``system_template`` one prompt)."""
    schematic = {"label": "single agent"}

    def __init__(self, llm=None, *, aspects: Sequence[str] = ASPECTS, system_template: str = "prism_single_system",
                 template: str = "prism_single", paper_field: str = "full_text", title_field: Optional[str] = "title",
                 max_paper_tokens: Optional[int] = 6000, max_tokens: int = 2000, fallback_words: int = 256,
                 on_error: str = "raise", drop: Sequence[str] = CONSUMED):
        self.system_template = system_template
        super().__init__(llm, aspects=aspects, template=template, paper_field=paper_field, title_field=title_field,
                         max_paper_tokens=max_paper_tokens, max_tokens=max_tokens, fallback_words=fallback_words,
                         on_error=on_error, drop=drop)

    def _ask(self, row) -> Dict[str, str]:
        title, paper = self._paper(row)
        prompt = render(self._template(self.template), title=title, paper=paper)
        try:
            text = self.client.generate(prompt, system=self._template(self.system_template),
                                        max_tokens=self.max_tokens).text
        except LLMError:
            if self.on_error == "raise":
                raise
            return {}
        return parse_single_agent(text, self.aspects)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self._validate(inp)
        if len(inp) == 0:
            return self._empty(inp)
        answers = self.client.map(self._ask, inp.to_dict("records"), desc="PRISM single agent")
        return self._finish(inp, answers)
