"""The component registry: pipeline-language names mapped to factories
``factory(*inputs, context=None, **params) -> pt.Transformer``, filled from the entry-point group
``pyterrier_sci.components`` or with :func:`register` / :func:`component`, and the parameter checks
(:class:`Param`, :func:`params`) run when a pipeline is built.  See docs/guide.md, "The pipeline language".
"""
from __future__ import annotations

import collections.abc
import difflib
import inspect
import json
import math
import os
import re
import reprlib
import typing
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from pyterrier_sci.artifacts import work_dir
from pyterrier_sci.errors import (  # noqa: F401
    SHOW_COLUMNS,
    DeprecatedNameWarning,
    ParameterError,
    PipelineError,
    UnknownComponentError,
    one_line,
    warn_deprecated_name,
)

ENTRY_POINT_GROUP = "pyterrier_sci.components"


def irds_id(dataset: str) -> str:
    """The ir_datasets id of a dataset named either way (``irds:sci/csfcube`` -> ``sci/csfcube``)."""
    return dataset[5:] if dataset.startswith("irds:") else dataset


def pt_dataset_id(dataset: str) -> str:
    """The PyTerrier name of an ir_datasets id (``sci/csfcube`` -> ``irds:sci/csfcube``)."""
    return dataset if dataset.startswith("irds:") else "irds:" + dataset


@dataclass
class Context:
    """What a component may need beyond its parameters; picklable.

    Attributes:
        dataset: the ir_datasets id the pipeline runs on (``irds:`` prefix allowed), if any.
        work_dir: where components keep what they build (indexes); default
            :func:`pyterrier_sci.data.work_dir`.
        settings: free-form sections of the pipeline config (e.g. ``llm:``), by section name.
        trusted: whether the user trusts the pipeline's config: its LLM ``base_url`` may receive the
            API key and its file paths may lie outside the allowed places (docs/llm.md, "Trust").
            Set by the user (``ps.pipeline(..., trusted=True)``, ``--trust-config``), never by a file.

    Example:
        >>> import pyterrier_sci as ps
        >>> ctx = ps.Context(dataset="irds:sci/csfcube", settings={"llm": {"model": "gpt-4o-mini"}})
        >>> ctx.dataset, ctx.trusted
        ('irds:sci/csfcube', False)

        A factory that declares ``context`` receives it (``ps.pipeline(..., context=ctx)`` passes one in);
        ``ctx.workdir()`` is where it keeps what it builds.
    """
    dataset: Optional[str] = None
    work_dir: Optional[Path] = None
    settings: Dict[str, Any] = field(default_factory=dict)
    trusted: bool = False

    def workdir(self) -> Path:
        return Path(self.work_dir) if self.work_dir else work_dir()


# ---------------------------------------------------------------------------------------------
# parameter declarations
# ---------------------------------------------------------------------------------------------

#: the most results per query a component may be asked for (far more than any corpus here holds)
MAX_RESULTS = 1_000_000
#: default bounds of whole-number parameters that declare none (keeps native code from overflowing)
MAX_INT = 2 ** 31 - 1
#: the longest string / list / mapping a parameter may hold unless its declaration says otherwise
MAX_STR = 1_000_000
MAX_ITEMS = 100_000

ANY = object()        # a kind: any value (not checked)
PATH = "path"         # a kind: a file-system path (a non-empty string); existence is the factory's check
DATASET = "dataset"   # a kind: a registered ir_datasets id, ``irds:`` prefix optional

_KIND_NAMES = {bool: "true/false", int: "a whole number", float: "a number", str: "a string",
               list: "a list", dict: "a mapping", PATH: "a path", DATASET: "a dataset id"}


def describe_value(v: Any) -> str:
    """``'abc' (a string)``: a short repr of ``v`` and its kind, for error messages."""
    r = reprlib.Repr()
    r.maxstring, r.maxother, r.maxlist, r.maxdict, r.maxlevel = 40, 40, 4, 4, 2
    kinds = {bool: "true/false", int: "a whole number", float: "a number", str: "a string", list: "a list",
             tuple: "a list", dict: "a mapping", type(None): "None", complex: "a complex number",
             bytes: "bytes", type(...): "Ellipsis", set: "a set", frozenset: "a set"}
    kind = kinds.get(type(v), type(v).__name__)
    if isinstance(v, float) and not math.isfinite(v):
        kind = "not a finite number"
    return f"{r.repr(v)} ({kind})"


class Param:
    """The declaration of one component parameter.

    Args:
        *kinds: what it takes: ``int``, ``float`` (ints are numbers too, booleans are not), ``str``,
            ``bool``, ``list`` (a list or tuple; ``item`` declares the elements), ``dict`` (string
            keys; ``item`` declares the values), :data:`PATH`, :data:`DATASET` or :data:`ANY`.
        min, max: bounds of a number (inclusive); numbers must be finite (no NaN or infinity).
            Whole numbers default to at most :data:`MAX_INT`.
        choices: the allowed values of a string.
        item: a :class:`Param` (or a kind) for the elements of a list / values of a mapping.
        optional: ``None`` is allowed (the default when the factory's default is ``None``).
        max_len: the longest string / list / mapping (default :data:`MAX_STR` / :data:`MAX_ITEMS`).
        min_len: the shortest (default 0; 1 for paths and dataset ids).
        note: said after what it takes, e.g. why a bound is there.

    Example:
        >>> from pyterrier_sci.registry import Param
        >>> k1 = Param(float, min=0, max=100)
        >>> k1.takes()
        'a number from 0 to 100'
        >>> k1.check(1.2, "parameter 'k1'")
        1.2
        >>> k1.check(-1, "parameter 'k1'")
        Traceback (most recent call last):
        ...
        ValueError: parameter 'k1' got -1 (a whole number): out of range; it takes a number from 0 to 100

        A component declares its parameters with :func:`params`: ``@params(k1=Param(float, min=0))``.
    """

    def __init__(self, *kinds, min: Optional[float] = None, max: Optional[float] = None,
                 choices: Optional[Iterable[Any]] = None, item: Any = None, optional: Optional[bool] = None,
                 max_len: Optional[int] = None, min_len: Optional[int] = None, note: str = ""):
        if not kinds:
            kinds = (ANY,)
        for k in kinds:
            if k not in (ANY, PATH, DATASET, bool, int, float, str, list, dict):
                raise TypeError(f"Param: unsupported kind {k!r}")
        self.kinds = tuple(kinds)
        self.min, self.max = min, max
        self.choices = tuple(choices) if choices is not None else None
        self.item = item if item is None or isinstance(item, Param) else Param(item)
        self.optional = optional
        self.max_len, self.min_len, self.note = max_len, min_len, note

    def __repr__(self) -> str:
        return f"Param({self.takes()})"

    # what it takes, in words
    def takes(self) -> str:
        parts = []
        for k in self.kinds:
            if k is ANY:
                return "any value"
            if k in (int, float):
                if int in self.kinds and float in self.kinds and k is int:
                    continue
                what = _KIND_NAMES[k]
                lo, hi = self.min, self.max
                if k is int and hi is None:
                    hi = MAX_INT
                if lo is not None and hi is not None:
                    what += f" from {_num(lo)} to {_num(hi)}"
                elif lo is not None:
                    what += f" >= {_num(lo)}"
                elif hi is not None:
                    what += f" <= {_num(hi)}"
                parts.append(what)
            elif k is str and self.choices is not None:
                parts.append("one of " + ", ".join(repr(c) for c in self.choices))
            elif k in (list, dict) and self.item is not None and self.item.kinds != (ANY,):
                of = self.item.takes()
                for one, many in _PLURALS:
                    if of.startswith(one):
                        of = many + of[len(one):]
                        break
                parts.append(f"{_KIND_NAMES[k]} of {of}" if k is list else f"a mapping of names to {of}")
            else:
                parts.append(_KIND_NAMES[k])
        text = " or ".join(parts)
        if self.optional:
            text += " or None"
        if self.note:
            text += f" ({self.note})"
        return text

    def check(self, value: Any, where: str) -> Any:
        """The value, normalised (a tuple becomes a list, a whole float a whole number), or a
        :class:`ValueError` whose message says what ``where`` takes."""
        if value is None:
            if self.optional or ANY in self.kinds:
                return None
            raise ValueError(f"{where} got None; it takes {self.takes()}")
        if ANY in self.kinds:
            return value
        errors = []
        for kind in self.kinds:
            ok, out, err = self._check_kind(kind, value, where)
            if ok:
                return out
            if err:
                errors.append(err)
        detail = errors[0] if len(errors) == 1 and errors[0] else ""
        if detail.startswith("did you mean"):
            raise ValueError(f"{where} got {describe_value(value)}; it takes {self.takes()} - {detail}")
        detail = f": {detail}" if detail and detail not in describe_value(value) else ""
        raise ValueError(f"{where} got {describe_value(value)}{detail}; it takes {self.takes()}")

    def _check_kind(self, kind, value, where):
        if kind is bool:
            return (isinstance(value, bool), value, None)
        if kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return False, None, None
            if isinstance(value, float) and not math.isfinite(value):
                return False, None, "not a finite number"
            if kind is int:
                if isinstance(value, float):
                    if not value.is_integer():
                        return False, None, "not a whole number"
                    value = int(value)
                hi = MAX_INT if self.max is None else self.max
                lo = -MAX_INT if self.min is None else self.min
            else:
                hi, lo = self.max, self.min
                if isinstance(value, int) and abs(value) > 1e300:
                    return False, None, "too large"
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                return False, None, "out of range"
            return True, value, None
        if kind in (str, PATH, DATASET):
            if not isinstance(value, str):
                return False, None, None
            limit = self.max_len or MAX_STR
            if len(value) > limit:
                return False, None, f"longer than {limit} characters"
            if len(value) < (self.min_len if self.min_len is not None else (1 if kind is not str else 0)):
                return False, None, "empty"
            if "\x00" in value:
                return False, None, "contains a NUL character"
            if self.choices is not None and kind is str and value not in self.choices:
                close = difflib.get_close_matches(value, [str(c) for c in self.choices], n=1)
                return False, None, f"did you mean {close[0]!r}?" if close else None
            if kind is DATASET:
                check_dataset(value, where=where)
            return True, value, None
        if kind is list:
            if not isinstance(value, (list, tuple)):
                return False, None, None
            limit = self.max_len or MAX_ITEMS
            if len(value) > limit or len(value) < (self.min_len or 0):
                return False, None, f"{len(value)} items"
            if self.item is None:
                return True, list(value), None
            return True, [self.item.check(v, f"{where}[{i}]") for i, v in enumerate(value)], None
        if kind is dict:
            if not isinstance(value, dict):
                return False, None, None
            if len(value) > (self.max_len or MAX_ITEMS):
                return False, None, f"{len(value)} entries"
            bad = [k for k in value if not isinstance(k, str)]
            if bad:
                return False, None, f"key {describe_value(bad[0])} is not a name"
            if self.item is None:
                return True, dict(value), None
            return True, {k: self.item.check(v, f"{where}[{k!r}]") for k, v in value.items()}, None
        return False, None, None


_PLURALS = [("a whole number", "whole numbers"), ("a number", "numbers"), ("a string", "strings"), ("a list", "lists"),
            ("a mapping", "mappings"), ("a path", "paths"), ("a dataset id", "dataset ids"),
            ("true/false", "true/false values"), ("one of", "values among")]


def _num(x: float) -> str:
    return f"{x:,}".replace(",", "_") if isinstance(x, int) and abs(x) >= 100_000 else f"{x:g}"


def _param_from_hint(hint: Any, default: Any) -> Param:
    """A :class:`Param` from a type annotation (types only; ranges are declared explicitly)."""
    optional = default is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:
        opts = [a for a in args if a is not type(None)]
        optional = optional or len(opts) < len(args)
        subs = [_param_from_hint(a, inspect.Parameter.empty) for a in opts]
        if any(ANY in s.kinds for s in subs):
            return Param(ANY)
        kinds, item = [], None
        for s in subs:
            kinds += [k for k in s.kinds if k not in kinds]
            item = item or s.item
        return Param(*kinds, item=item, optional=optional)
    if hint in (bool, int, float, str):
        return Param(hint, optional=optional)
    if hint in (Path, os.PathLike):
        return Param(PATH, optional=optional)
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection):
        item = _param_from_hint(args[0], inspect.Parameter.empty) if args and args[0] is not Ellipsis else None
        return Param(list, item=item, optional=optional)
    if hint in (list, tuple):
        return Param(list, optional=optional)
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping) or hint is dict:
        item = _param_from_hint(args[1], inspect.Parameter.empty) if len(args) == 2 else None
        if item is not None and ANY in item.kinds:
            item = None
        return Param(dict, item=item, optional=optional)
    return Param(ANY)


def _signature(fn: Callable) -> Optional[inspect.Signature]:
    """The signature of ``fn`` (a class: its ``__init__``), None when it has none to read."""
    try:
        return inspect.signature(fn.__init__ if inspect.isclass(fn) else fn)
    except (TypeError, ValueError):
        return None


def _signature_params(fn: Callable) -> Dict[str, Param]:
    """Declarations derived from the keyword parameters of ``fn`` (a function or a class)."""
    target = fn.__init__ if inspect.isclass(fn) else fn
    sig = _signature(fn)
    if sig is None:
        return {}
    hints = {}
    for owner in ((target, fn) if inspect.isclass(fn) else (target,)):  # a dataclass's own annotations too
        try:
            hints = typing.get_type_hints(owner)
        except Exception:
            continue
        if hints:
            break
    out = {}
    for name, p in sig.parameters.items():
        if name in ("self", "context") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            continue
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty:
            continue  # a required positional argument (an input pipeline, an LLM client) is not a parameter
        out[name] = _param_from_hint(hints.get(name, Any), p.default)
    return out


def _signature_defaults(fn: Callable) -> Dict[str, Any]:
    """The defaults of the keyword parameters of ``fn`` (a function or a class) that have one."""
    sig = _signature(fn)
    return {} if sig is None else {n: p.default for n, p in sig.parameters.items() if p.default is not p.empty}


@dataclass
class ParamSet:
    """The parameters a component accepts (attached to its factory by :func:`params`), and the defaults the
    factory (or the classes and functions it passes them on to) gives them."""
    params: Dict[str, Param]
    defaults: Dict[str, Any] = field(default_factory=dict)

    def describe(self) -> List[Tuple[str, str, str]]:
        """``(name, what it takes, its default)`` of each parameter, sorted by name: what ``pyterrier-sci
        components NAME`` prints (what a default of ``None`` means is the declaration's note, in what it takes)."""
        return [(name, self.params[name].takes(), repr(self.defaults[name]) if name in self.defaults else "-")
                for name in sorted(self.params)]

    def check(self, component: str, values: Dict[str, Any]) -> Dict[str, Any]:
        out = {}
        for name, value in values.items():
            decl = self.params.get(name)
            if decl is None:
                close = difflib.get_close_matches(str(name), list(self.params), n=3, cutoff=0.5)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise ParameterError(f"component '{component}' has no parameter {str(name)!r}{hint} "
                                     f"(it takes: {', '.join(sorted(self.params)) or 'no parameters'})",
                                     component=component, param=str(name))
            try:
                out[name] = decl.check(value, f"parameter '{name}'")
            except ParameterError as e:
                raise ParameterError(f"component '{component}': {e.message}", component=component, param=name) from None
            except ValueError as e:
                raise ParameterError(f"component '{component}': {e}", component=component, param=name) from None
        return out


def params(*sources: Callable, **declared: Union[Param, Any]):
    """Declares a factory's parameters: ``@params(k1=Param(float, min=0), ...)``.

    The factory's own keyword parameters are derived from its annotations; ``sources`` (classes or
    functions whose keyword parameters the factory passes on through ``**params``) add theirs;
    explicit declarations (a :class:`Param`, or a kind such as ``int``) override both.  The
    component then accepts exactly these names.

    Example:
        ::

            import pyterrier as pt
            import pyterrier_sci as ps
            from pyterrier_sci.registry import Param, params

            @ps.component("first_k")
            @params(k=Param(int, min=1, max=1000))
            def first_k(k: int = 10, context=None):
                return pt.apply.generic(lambda res: res.groupby("qid").head(k))

            ps.pipeline("pool >> bm25 >> first_k(k=5)", dataset="irds:sci/csfcube")
            ps.pipeline("first_k(k=0)")   # PipelineError: 'k' takes a whole number from 1 to 1000
    """
    def deco(fn):
        specs: Dict[str, Param] = {}
        defaults: Dict[str, Any] = {}
        for src in sources:
            specs.update(_signature_params(src))
            defaults.update(_signature_defaults(src))
        specs.update(_signature_params(fn))
        defaults.update(_signature_defaults(fn))
        for name, p in declared.items():
            specs[name] = p if isinstance(p, Param) else Param(p)
        fn.__pyterrier_sci_params__ = ParamSet(specs, {k: v for k, v in defaults.items() if k in specs})
        return fn
    return deco


def declared_params(factory: Callable) -> Optional[ParamSet]:
    """The :class:`ParamSet` of a factory, or ``None`` for one that declares nothing."""
    return getattr(factory, "__pyterrier_sci_params__", None)


# ---------------------------------------------------------------------------------------------
# checks factories call on what only they can know
# ---------------------------------------------------------------------------------------------

def check_dataset(dataset: str, where: str = "dataset") -> str:
    """``dataset`` if it is a registered ir_datasets id (``irds:`` prefix optional), else a
    :class:`PipelineError` - before anything is downloaded."""
    import ir_datasets

    ds_id = irds_id(dataset)
    reg = ir_datasets.registry
    known = getattr(reg, "_registered", None)
    if known is not None and ds_id in known:
        return dataset
    if known is None:
        try:
            reg[ds_id]
            return dataset
        except KeyError:
            pass
    names = sorted(known) if known is not None else []
    close = difflib.get_close_matches(ds_id, names, n=3)
    hint = f"; did you mean {', '.join('irds:' + c for c in close)}?" if close else \
        " (`pyterrier-sci datasets` lists the sci/ ids)"
    raise PipelineError(f"{where}: unknown dataset {dataset!r}{hint}")


def check_fields(dataset: str, fields: Optional[Sequence[str]], component: str, param: str = "fields") -> None:
    """Every name of ``fields`` must be a field of the dataset's document type (ir_datasets'
    ``docs_cls()``); a :class:`ParameterError` lists the valid ones."""
    if not fields or not dataset:
        return
    import ir_datasets

    check_dataset(dataset, where=f"component '{component}'")
    ds = ir_datasets.load(irds_id(dataset))
    valid: List[str] = []
    if ds.has_docs():
        cls = ds.docs_cls()
        valid = list(getattr(cls, "_fields", None) or getattr(cls, "__annotations__", {}) or [])
    valid = [f for f in valid if not f.startswith("_")]
    for f in fields:
        if not isinstance(f, str) or f.startswith("_") or (valid and f not in valid):
            close = difflib.get_close_matches(str(f), valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ParameterError(f"component '{component}': parameter '{param}' names {f!r}, which is not a field "
                                 f"of {dataset}'s documents{hint} (fields: {', '.join(valid) or 'none known'})",
                                 component=component, param=param)


def check_artifact(path: Union[str, os.PathLike], types: Dict[str, Optional[Sequence[str]]], component: str,
                   param: str = "index", must_exist: bool = True) -> Optional[Dict[str, Any]]:
    """``path`` must be a directory holding a ``pt_meta.json`` whose ``type`` is a key of ``types``
    (and whose ``format`` is in that key's list, when one is given).  Returns the metadata; ``None``
    when the path does not exist and ``must_exist`` is false (the factory will build it there)."""

    def fail(why):
        want = "; ".join(f"type {t}" + (f" ({', '.join(fs)})" if fs else "") for t, fs in types.items())
        raise ParameterError(f"component '{component}': parameter '{param}' = {str(path)!r} {why}; it takes "
                             f"an artifact directory of {want}", component=component, param=param)

    p = Path(path).expanduser()
    if not p.exists():
        if must_exist:
            fail("does not exist")
        return None
    if not p.is_dir():
        fail("is not a directory")
    meta = p / "pt_meta.json"
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except FileNotFoundError:
        fail("has no pt_meta.json (not a PyTerrier artifact)")
    except (OSError, ValueError) as e:
        what = ("is empty" if meta.is_file() and meta.stat().st_size == 0
                else "is not JSON" if isinstance(e, ValueError) else "cannot be read")
        fail(f"has an unreadable pt_meta.json: {meta} {what} ({one_line(e, 120)})")
    if not isinstance(data, dict) or data.get("type") not in types:
        fail(f"is an artifact of type {data.get('type') if isinstance(data, dict) else None!r}")
    formats = types[data["type"]]
    if formats and data.get("format") not in formats:
        fail(f"is an artifact of format {data.get('format')!r}")
    return data


def first_sentence(doc: str) -> str:
    """The first sentence of ``doc``'s first paragraph, on one line: up to a full stop followed by a
    space and a capital letter or a backtick (not ``e.g.``, ``i.e.``, a number or a name in code);
    the whole paragraph when none ends sooner."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    m = re.search(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)\.(?=\s+[A-Z`(])", para)
    return para[:m.end()] if m else para


def plain_markup(text: str) -> str:
    """A docstring's reStructuredText inline markup as a terminal or a Markdown reader shows it: double
    backquotes and roles (``:class:``, ``:func:``, ...) become single backquotes around the text, and a
    role's target that starts with ``~`` is cut to its last name, as Sphinx shows it."""
    roles = re.sub(r":[a-z]+:`(~?)([^`]+)`", lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)
    return re.sub(r"``(.+?)``", r"`\1`", roles)


@dataclass
class ComponentSpec:
    name: str
    factory: Callable[..., Any]
    source: str = "runtime"      # "runtime" or the entry point's "module:attr"

    @property
    def description(self) -> str:
        """The first sentence of the factory's docstring (its first paragraph when no sentence ends
        there), on one line, as :func:`plain_markup` writes it, without a leading ``name``: (the
        component's own name; a call such as ``rrf(a, b, ...)``: is kept)."""
        text = plain_markup(first_sentence(inspect.getdoc(self.factory) or ""))
        own = f"`{self.name}`: "
        return text[len(own):] if text.startswith(own) else text

    @property
    def params(self) -> Optional[ParamSet]:
        """The declared parameters (``None``: the factory declares none and is not checked)."""
        return declared_params(self.factory)

    def build(self, *inputs, context: Optional[Context] = None, **params):
        """Checks ``params`` against the factory's declarations (a :class:`ParameterError` names the
        parameter, what it got and what it takes), then calls the factory."""
        decl = declared_params(self.factory)
        if decl is not None:
            params = decl.check(self.name, params)
        accepts_context = _accepts_kwarg(self.factory, "context")
        if accepts_context:
            return self.factory(*inputs, context=context, **params)
        return self.factory(*inputs, **params)


def _accepts_kwarg(fn: Callable, name: str) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return name in sig.parameters or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


class Registry:
    """The component names of the pipeline language: entry points of ``pyterrier_sci.components``,
    runtime :func:`register` calls, and deprecated aliases (entry points of
    ``pyterrier_sci.component_aliases`` whose value is the same factory as a current name's, or
    :meth:`alias` calls): an alias builds the current component and warns once per name with a
    :class:`DeprecatedNameWarning` naming it."""

    def __init__(self):
        self._specs: Dict[str, ComponentSpec] = {}
        self._aliases: Dict[str, str] = {}
        self._warned: set = set()
        self._entry_points_loaded = False

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name not in self._specs:
                self._specs[ep.name] = _LazySpec(ep.name, ep)
        by_factory = {spec.source: name for name, spec in self._specs.items()}
        for ep in entry_points(group=ALIASES_GROUP):
            if ep.name not in self._specs and ep.name not in self._aliases:
                if ep.value not in by_factory:
                    raise ImportError(f"{ALIASES_GROUP} entry point {ep.name!r} ({ep.value}) is the factory of no "
                                      f"component of {ENTRY_POINT_GROUP}")
                self._aliases[ep.name] = by_factory[ep.value]

    def alias(self, old: str, new: str) -> None:
        """Makes ``old`` a deprecated name of the component ``new``."""
        self._load_entry_points()
        if new not in self._specs:
            raise UnknownComponentError(f"cannot alias {old!r} to {new!r}: no component is called {new!r}")
        if old in self._specs:
            raise ValueError(f"component {old!r} is registered; an alias cannot replace it")
        self._aliases[old] = new

    def aliases(self) -> Dict[str, str]:
        """``{deprecated name: current name}``."""
        self._load_entry_points()
        return dict(sorted(self._aliases.items()))

    def current_name(self, name: str) -> str:
        """``name``, or the current name when ``name`` is a deprecated alias (warning once per name)."""
        self._load_entry_points()
        if name in self._specs or name not in self._aliases:
            return name
        new = self._aliases[name]
        if name not in self._warned:
            self._warned.add(name)
            warn_deprecated_name("component", name, new)
        return new

    def register(self, name: str, factory: Callable[..., Any], *, replace: bool = False) -> None:
        if not name.isidentifier():
            raise ValueError(f"component name {name!r} must be a Python identifier")
        self._load_entry_points()
        if name in self._specs and not replace:
            raise ValueError(f"component {name!r} is already registered ({self._specs[name].source}); "
                             "pass replace=True")
        self._specs[name] = ComponentSpec(name, factory)

    def get(self, name: str) -> ComponentSpec:
        name = self.current_name(name)
        if name not in self._specs:
            close = difflib.get_close_matches(name, self._specs, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownComponentError(f"unknown component {name!r}{hint} (known: {', '.join(sorted(self._specs))})")
        spec = self._specs[name]
        if isinstance(spec, _LazySpec):
            spec = self._specs[name] = spec.resolve()
        return spec

    def names(self) -> List[str]:
        self._load_entry_points()
        return sorted(self._specs)

    def __contains__(self, name: str) -> bool:
        self._load_entry_points()
        return name in self._specs or name in self._aliases


class _LazySpec(ComponentSpec):
    def __init__(self, name, ep):
        super().__init__(name, factory=None, source=ep.value)
        self._ep = ep

    def resolve(self) -> ComponentSpec:
        try:
            factory = self._ep.load()
        except Exception as e:
            raise ImportError(f"component {self.name!r} ({self._ep.value}) could not be loaded: {e}") from e
        return ComponentSpec(self.name, factory, self._ep.value)

    @property
    def description(self) -> str:
        return f"(from {self._ep.value})"


REGISTRY = Registry()

#: the entry-point groups through which plugins reach the core (the core imports no plugin):
#: components (``pyterrier_sci.components``), benchmark modules registering ir_datasets ids,
#: functions registering measures, and functions adding CLI subcommands
DATASETS_GROUP = "pyterrier_sci.datasets"
MEASURES_GROUP = "pyterrier_sci.measures"
CLI_GROUP = "pyterrier_sci.cli"
#: deprecated component names: ``old = <the same module:factory as the current name's entry point>``
ALIASES_GROUP = "pyterrier_sci.component_aliases"
_LOADED_GROUPS: Dict[str, Dict[str, Any]] = {}


def load_group(group: str) -> Dict[str, Any]:
    """Loads every entry point of ``group`` once (in name order) and returns ``{name: object}``.
    An entry point that cannot be loaded is one :class:`ImportError` naming it."""
    if group not in _LOADED_GROUPS:
        loaded: Dict[str, Any] = {}
        for ep in sorted(entry_points(group=group), key=lambda e: e.name):
            try:
                loaded[ep.name] = ep.load()
            except Exception as e:
                raise ImportError(f"{group} entry point {ep.name!r} ({ep.value}) could not be loaded: {e}") from e
        _LOADED_GROUPS[group] = loaded
    return _LOADED_GROUPS[group]


def register(name: str, factory: Callable[..., Any], *, replace: bool = False) -> None:
    """Registers a component factory under ``name`` for the pipeline language.

    Example:
        ::

            import pyterrier as pt
            import pyterrier_sci as ps
            ps.register("title_only", lambda context=None: pt.apply.query(lambda q: q["query"].split(".")[0]))
            ps.pipeline("title_only >> pool >> bm25", dataset="irds:sci/csfcube")

        A package registers its components for every program through the ``pyterrier_sci.components`` entry
        point group instead (docs/architecture.md).
    """
    REGISTRY.register(name, factory, replace=replace)


def component(name: Optional[str] = None, *, replace: bool = False):
    """Decorator form of :func:`register`; the name defaults to the function's (:func:`params` shows one)."""
    def deco(fn):
        register(name or fn.__name__, fn, replace=replace)
        return fn
    return deco


def get(name: str) -> ComponentSpec:
    return REGISTRY.get(name)


def names() -> List[str]:
    return REGISTRY.names()
