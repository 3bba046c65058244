"""The search service behind ``pyterrier-sci serve``: the named pipelines of a YAML config, built once
(indexes opened, encoders loaded and compiled by a warm-up query), the dataset's documents for titles,
snippets and paper records, and the checks every front end shares (HTTP, MCP, Ray Serve, in-process).

No web framework is imported here: :class:`SearchService` is plain Python, and :mod:`.batching` runs its
pipelines for concurrent callers.
"""
from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import pandas as pd
import pyterrier as pt

from pyterrier_sci.artifacts import no_builds
from pyterrier_sci.errors import (
    BuildRefused,
    SciError,
    ServeError,  # noqa: F401 - defined there, re-exported
    TrainingDeferred,
    UnknownComponentError,
    UntrustedConfigError,
    one_line,
)
from pyterrier_sci.llm.trust import allowed_dirs, check_path, redact
from pyterrier_sci.pipeline import PipelineConfig, build_all, load_config, parse, refs
from pyterrier_sci.registry import PATH, REGISTRY, irds_id
from pyterrier_sci.training import no_training

__all__ = ["ServeError", "ServeLimits", "SearchService", "PipelineSpec", "parse_pipeline_specs", "snippet",
           "DOCNO_PATTERN", "check_text", "request_guards", "expression_paths"]

#: what a docno taken from a request may look like (a key into the docstore, never a path)
DOCNO_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/#@+-]{0,199}$")
#: component settings never shown by name (an API key set in a config)
SECRET_KEY = re.compile(r"key|token|secret|password", re.I)
#: the query of the warm-up call made while loading (opens indexes, compiles encoders)
WARMUP_QUERY = "retrieval of scientific papers"
#: why a request's own pipeline may not build an index or train a model (:func:`request_guards`)
NO_BUILD_WHY = ("a request's own pipeline never builds an index or trains a model (that would run for minutes "
                "inside the request): build it first (pyterrier-sci index, or a run of the pipeline), or ask the "
                "operator to serve a pipeline that uses it")


@contextlib.contextmanager
def request_guards():
    """Around building and running a request's own pipeline (an expression sent with ``--allow-expressions``):
    an artifact that is not built yet is :class:`~pyterrier_sci.errors.BuildRefused`, a model not trained yet
    :class:`~pyterrier_sci.errors.TrainingDeferred`; nothing is written."""
    with no_builds(NO_BUILD_WHY), no_training():
        yield


def check_text(value: Any, what: str) -> str:
    """``value`` when it is text that can be written out again (UTF-8): a string holding a lone UTF-16
    surrogate (``"\\ud800"`` in JSON) is refused here, before it joins a batch, where it would fail the
    pipeline call of every request batched with it."""
    if not isinstance(value, str):
        raise ServeError(f"the {what} must be a string", 422, f"bad_{what}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ServeError(f"the {what} holds a character that is not Unicode text (a lone surrogate, "
                         f"{ascii(value[e.start])}, at position {e.start})", 422, f"bad_{what}") from None
    if "\x00" in value:
        raise ServeError(f"the {what} holds a NUL character", 422, f"bad_{what}")
    return value


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _looks_like_path(text: str) -> bool:
    """Whether a component could take ``text`` as a file-system path: absolute, home- or dot-relative, or the
    name of something that exists (a model name is a local directory first, a hub id only otherwise)."""
    if text.startswith(("/", "~", ".", "\\")) or os.path.isabs(text):
        return True
    try:
        return os.path.lexists(os.path.expanduser(text))
    except (OSError, ValueError):
        return False


def expression_paths(expression: str, cfg: PipelineConfig) -> List[Tuple[str, str, str]]:
    """``(component, parameter, value)`` of every path an expression's own arguments give: each value of a
    parameter declared a path, and each string argument that looks like one (:func:`_looks_like_path`),
    inside lists and mappings too.  The config's own settings are the operator's and are not listed."""
    out = []
    for ref in refs(parse(expression)):
        if not ref.kwargs:
            continue
        spec = cfg.components.get(ref.name)
        registry_name = str(spec.get("component", spec.get("type", ref.name))) if spec else ref.name
        try:
            decl = REGISTRY.get(REGISTRY.current_name(registry_name)).params
        except (UnknownComponentError, ImportError):
            decl = None   # the build names the unknown component
        for param, value in ref.kwargs.items():
            declared = decl.params.get(param) if decl is not None else None
            is_path = declared is not None and PATH in declared.kinds
            for text in _strings(value):
                if is_path or _looks_like_path(text):
                    out.append((ref.name, str(param), text))
    return out


@dataclass
class ServeLimits:
    """Bounds on what a request may ask."""
    max_k: int = 100                 # results per query
    max_query_chars: int = 2_000     # a query's length
    max_passage_chars: int = 20_000  # a passage given to suggest_citations
    max_batch_queries: int = 64      # queries in one batch request
    snippet_chars: int = 300


@dataclass
class PipelineSpec:
    """A pipeline the operator chose to serve: its name and the expression (a pipeline or component name
    of the config, or an expression over its components)."""
    name: str
    expr: str


def parse_pipeline_specs(items: Optional[Sequence[str]], config: PipelineConfig) -> List[PipelineSpec]:
    """``NAME`` (a pipeline or component of the config) or ``NAME=EXPRESSION`` (the operator's own
    expression over the config's components); default: every pipeline of the config."""
    if not items:
        if not config.pipelines:
            raise ServeError(f"the config {config.path or ''} names no pipelines: pass --pipelines NAME ... "
                             "(a component name such as bm25, or NAME=EXPRESSION)")
        return [PipelineSpec(n, n) for n in config.pipelines]
    out: List[PipelineSpec] = []
    for item in items:
        for part in ([item] if "=" in item else [p for p in item.split(",") if p.strip()]):
            name, sep, expr = part.partition("=")
            name, expr = name.strip(), (expr.strip() or name.strip())
            if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", name):
                raise ServeError(f"pipeline name {name!r} must be 1-64 letters, digits, '_', '.', '+' or '-'")
            if not sep and name not in config.pipelines and name not in config.components:
                known = sorted(set(config.pipelines) | set(config.components))
                raise ServeError(f"{name!r} is neither a pipeline nor a component of {config.path or 'the config'} "
                                 f"(known: {', '.join(known)}); write NAME=EXPRESSION for an expression")
            if any(s.name == name for s in out):
                raise ServeError(f"pipeline {name!r} is given twice")
            out.append(PipelineSpec(name, expr))
    return out


def _sentences(text: str) -> List[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if s]


def snippet(text: str, query: str, chars: int = 300) -> str:
    """The window of ``text`` (at most ``chars`` characters, cut at sentence starts) that holds the most
    distinct query terms; the text's start when none occurs."""
    text = " ".join(str(text or "").split())
    if len(text) <= chars:
        return text
    terms = {t for t in re.findall(r"\w+", query.lower()) if len(t) > 2}
    sents = _sentences(text)
    best, best_score = 0, -1
    for i in range(len(sents)):
        window = " ".join(sents[i:i + 3])[:chars].lower()
        score = len(terms & set(re.findall(r"\w+", window)))
        if score > best_score:
            best, best_score = i, score
    out = " ".join(sents[best:])
    if len(out) > chars:
        cut = out[:chars].rsplit(" ", 1)[0]
        out = cut + "\u2026"
    return ("\u2026" if best > 0 else "") + out


@dataclass
class SearchService:
    """The loaded pipelines of one config and the dataset's documents.

    Args:
        config: the YAML path (or dict / :class:`~pyterrier_sci.pipeline.PipelineConfig`).
        pipelines: which to serve (:func:`parse_pipeline_specs`), or ready transformers by name.
        dataset: the dataset whose documents give titles and snippets (default: the config's).
        limits: request bounds.
        trusted: trust the config (its LLM ``base_url`` gets the API key; docs/llm.md, "Trust").
        allow_expressions: requests may send their own expression over the config's components.
        warmup: run one query through each pipeline while loading (indexes open, encoders compile).
    """
    config: Any = None
    pipelines: Union[None, Sequence[str], Dict[str, pt.Transformer]] = None
    dataset: Optional[str] = None
    limits: ServeLimits = field(default_factory=ServeLimits)
    trusted: bool = False
    allow_expressions: bool = False
    warmup: bool = True

    def __post_init__(self):
        self.cfg: PipelineConfig = load_config(self.config)
        self.dataset = self.dataset or self.cfg.dataset
        self.load_seconds: Optional[float] = None
        self.transformers: Dict[str, pt.Transformer] = {}
        self.specs: Dict[str, PipelineSpec] = {}
        self._store = None
        self._doc_fields: Tuple[str, ...] = ()
        self._expr_lock = threading.Lock()
        self._expr_cache: Dict[str, pt.Transformer] = {}

    # -- loading -------------------------------------------------------------------------------
    def load(self) -> "SearchService":
        """Builds the pipelines (sharing the components they have in common), opens the docstore and
        warms every pipeline up; returns ``self``."""
        start = time.perf_counter()
        if isinstance(self.pipelines, dict):
            self.transformers = dict(self.pipelines)
            self.specs = {n: PipelineSpec(n, repr(t)) for n, t in self.transformers.items()}
        else:
            specs = parse_pipeline_specs(self.pipelines, self.cfg)
            built = build_all(self.cfg, [s.expr for s in specs], dataset=self.dataset, trusted=self.trusted)
            self.transformers = {s.name: built[s.expr] for s in specs}
            self.specs = {s.name: s for s in specs}
        if self.dataset:
            import ir_datasets
            ds = ir_datasets.load(irds_id(self.dataset))
            if ds.has_docs():
                self._store = ds.docs_store()
                self._doc_fields = tuple(ds.docs_cls()._fields)
        if self.warmup:
            for name in self.transformers:
                self.run(name, [WARMUP_QUERY])
        self.load_seconds = time.perf_counter() - start
        return self

    @property
    def ready(self) -> bool:
        return self.load_seconds is not None

    # -- describing -----------------------------------------------------------------------------
    def describe(self) -> List[dict]:
        """The served pipelines: name, expression, and the config's settings of the components it names."""
        out = []
        for name, spec in self.specs.items():
            comps = {c: {k: ("[redacted]" if SECRET_KEY.search(k) else v) for k, v in self.cfg.components[c].items()}
                     for c in self.cfg.components if re.search(rf"\b{re.escape(c)}\b", spec.expr)}
            out.append({"name": name, "expression": spec.expr, "components": comps,
                        "description": _describe(spec.expr, comps)})
        return out

    # -- checks ---------------------------------------------------------------------------------
    def pipeline_for(self, name: Optional[str], expression: Optional[str] = None) -> Tuple[str, pt.Transformer]:
        """The served pipeline ``name`` (default: the first), or, when the operator allows it, a
        request's own ``expression`` over the config's components (:meth:`build_expression`; may take
        seconds the first time: call it off the event loop)."""
        if expression is not None:
            return expression, self.build_expression(expression)
        if name is None:
            name = next(iter(self.transformers))
        name = check_text(name, "pipeline")
        if name not in self.transformers:
            raise ServeError(f"unknown pipeline {str(name)[:80]!r}: this server serves "
                             f"{', '.join(self.transformers)}", 404, "unknown_pipeline")
        return name, self.transformers[name]

    def check_expression(self, expression: Any) -> str:
        """The checks made before an expression is built: allowed, a short string, valid text."""
        if not self.allow_expressions:
            raise ServeError("this server takes no pipeline expressions from requests (the operator may allow "
                             "them with --allow-expressions); choose one of the served pipelines", 403,
                             "expressions_not_allowed")
        if not isinstance(expression, str) or len(expression) > 500:
            raise ServeError("an expression is a string of at most 500 characters", 422, "bad_expression")
        return check_text(expression, "expression")

    def build_expression(self, expression: str) -> pt.Transformer:
        """A request's own expression over the config's components, built once and cached (at most 64).

        Built untrusted (no API key to a ``base_url`` it sets), with every path its arguments give confined
        to the allowed directories (the work directory and ``$PYTERRIER_SCI_ALLOWED_DIRS``: 422
        ``path_not_allowed``), inside :func:`request_guards` (an index it would build or a model it would train:
        422 ``build_refused``), then run once on a warm-up query under the same guards so that what it loads
        on first use is loaded here, and a failure is a 422 naming its cause, never a 500 of a later batch."""
        expression = self.check_expression(expression)
        with self._expr_lock:
            if expression in self._expr_cache:
                return self._expr_cache[expression]
            if len(self._expr_cache) >= 64:
                raise ServeError("too many distinct expressions were asked; ask a served pipeline", 429,
                                 "too_many_expressions")
            try:
                dirs = allowed_dirs()
                for comp, param, value in expression_paths(expression, self.cfg):
                    check_path(value, dirs, f"component '{comp}': parameter '{param}'")
                with request_guards():
                    built = build_all(self.cfg, [expression], dataset=self.dataset, trusted=False)[expression]
                    if self.warmup:
                        self.run(expression, [WARMUP_QUERY], built)
            except ServeError:
                raise
            except UntrustedConfigError as e:
                raise ServeError(f"expression refused: {_oneline(e)}", 422, "path_not_allowed") from None
            except (BuildRefused, TrainingDeferred) as e:
                raise ServeError(f"expression refused: {refused_message(e)}", 422, "build_refused") from None
            except SciError as e:
                raise ServeError(f"expression refused: {_oneline(e)}", 422, "bad_expression") from None
            except Exception as e:  # a component failing in its own way: still the request's expression
                raise ServeError(f"expression refused: building or running it failed: {type(e).__name__}: "
                                 f"{_oneline(e)}", 422, "bad_expression") from None
            self._expr_cache[expression] = built
            return built

    def check_k(self, k: Any) -> int:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.limits.max_k:
            raise ServeError(f"k must be a whole number from 1 to {self.limits.max_k}, not {str(k)[:40]}", 422,
                             "k_out_of_range")
        return k

    def check_query(self, query: Any, limit: Optional[int] = None, what: str = "query") -> str:
        limit = limit or self.limits.max_query_chars
        if not isinstance(query, str) or not query.strip():
            raise ServeError(f"the {what} is empty", 422, f"empty_{what}")
        if len(query) > limit:
            raise ServeError(f"the {what} has {len(query):,} characters; at most {limit:,}", 422,
                             f"{what}_too_long")
        return " ".join(check_text(query, what).split())

    def check_docno(self, docno: Any) -> str:
        if not isinstance(docno, str) or not DOCNO_PATTERN.match(docno) or ".." in docno:
            raise ServeError(f"{str(docno)[:80]!r} is not a docno of this collection", 404, "unknown_docno")
        return docno

    # -- documents -------------------------------------------------------------------------------
    def _doc(self, docno: str):
        if self._store is None:
            return None
        try:
            return self._store.get(docno)
        except KeyError:
            return None

    def paper(self, docno: str) -> dict:
        """The record of a paper (its fields except long per-sentence ones), or a 404 :class:`ServeError`."""
        docno = self.check_docno(docno)
        doc = self._doc(docno)
        if doc is None:
            raise ServeError(f"unknown docno {docno!r}: no such paper in {self.dataset}", 404, "unknown_docno")
        rec = {"docno": docno}
        for f in self._doc_fields:
            if f == "doc_id":
                continue
            v = getattr(doc, f)
            rec[f] = list(v) if isinstance(v, tuple) else v
        return rec

    def paper_text(self, docno: str) -> str:
        """A paper's title and abstract (or its default text), the query of paper-to-paper search."""
        self.paper(docno)  # 404 first
        doc = self._doc(docno)
        parts = [getattr(doc, f, "") or "" for f in ("title", "abstract")]
        text = " ".join(p for p in parts if p) or doc.default_text()
        return " ".join(text.split())

    def _title_text(self, docno: str) -> Tuple[str, str]:
        doc = self._doc(docno)
        if doc is None:
            return "", ""
        title = str(getattr(doc, "title", "") or "")
        text = getattr(doc, "abstract", None) or getattr(doc, "text", None) or doc.default_text()
        return title, str(text or "")

    # -- running --------------------------------------------------------------------------------
    def run(self, name: str, queries: Sequence[str], transformer: Optional[pt.Transformer] = None) -> pd.DataFrame:
        """Runs a pipeline on ``queries`` (qids ``q0``, ``q1`` ...) in this thread: the in-process call
        the server's answers are compared with."""
        t = transformer if transformer is not None else self.transformers[name]
        frame = pd.DataFrame({"qid": [f"q{i}" for i in range(len(queries))], "query": list(queries)})
        if name in self.transformers:
            return t(frame)
        with request_guards():   # a request's own pipeline: it builds nothing, trains nothing
            return t(frame)

    def hits(self, res: pd.DataFrame, query: str, k: int, exclude: Sequence[str] = ()) -> List[dict]:
        """The top ``k`` rows of one query's result frame as ``{docno, score, rank, title, snippet}``
        (rank 0-based, renumbered after ``exclude`` is dropped)."""
        if len(res) == 0:
            return []
        if "rank" in res.columns:
            res = res.sort_values("rank", kind="stable")
        else:
            res = res.sort_values("score", ascending=False, kind="stable")
        out = []
        skip = set(exclude)
        for docno, score in zip(res["docno"].astype(str), res["score"].astype(float)):
            if docno in skip:
                continue
            title, text = self._title_text(docno)
            out.append({"docno": docno, "score": float(score), "rank": len(out), "title": title,
                        "snippet": snippet(text, query, self.limits.snippet_chars)})
            if len(out) == k:
                break
        return out


def _oneline(e: BaseException) -> str:
    return one_line(redact(str(e)), 400)


def refused_message(e: Union[BuildRefused, TrainingDeferred]) -> str:
    """What a request is told when its pipeline would build an artifact or train a model."""
    if isinstance(e, TrainingDeferred):
        return one_line(redact(f"{e.what} is not trained yet ({e.path}) and {NO_BUILD_WHY}"), 600)
    return one_line(redact(str(e)), 600)


def _describe(expr: str, comps: Dict[str, dict]) -> str:
    parts = [f"{c}: {spec.get('component', c)}" + "".join(f", {k}={v}" for k, v in spec.items() if k != "component")
             for c, spec in comps.items()]
    return expr + (f" ({'; '.join(parts)})" if parts else "")
