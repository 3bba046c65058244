"""The pipeline language: PyTerrier's operators (``>>``, ``%``, ``+``, ``*``, ``|``, ``&``, ``**``,
``^``) over registered component names, parsed with :mod:`ast` and checked node by node (never
``eval``), errors underlined in the expression; and pipeline configs (YAML ``dataset``,
``components``, ``pipelines``, ``experiments``, other sections as settings).  See docs/guide.md.
"""
from __future__ import annotations

import ast
import math
import os
import re
import stat
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import pyterrier as pt
import yaml

from pyterrier_sci.local_corpus import as_dataset
from pyterrier_sci.registry import (  # noqa: F401 (re-exported)
    MAX_RESULTS,
    REGISTRY,
    Context,
    ParameterError,
    PipelineError,
    UnknownComponentError,
    describe_value,
)

__all__ = ["PipelineError", "ParameterError", "PipelineConfig", "parse", "pipeline", "load_config", "read_yaml_file"]

#: the longest expression accepted (characters)
MAX_EXPR_CHARS = 100_000
#: the deepest nesting of operators, calls and literals, counting the named pipelines an expression uses
MAX_DEPTH = 100
#: pipeline files: the largest file read, the deepest YAML nesting, the most alias uses and the most
#: nodes the document may have once its aliases are expanded ("billion laughs")
MAX_CONFIG_BYTES = 10 * 2 ** 20
MAX_YAML_DEPTH = 100
MAX_YAML_ALIASES = 1_000
MAX_YAML_NODES = 200_000

_OPS = {ast.RShift: ">>", ast.Mod: "%", ast.Add: "+", ast.Mult: "*", ast.BitOr: "|", ast.BitAnd: "&",
        ast.Pow: "**", ast.BitXor: "^"}


# ---------------------------------------------------------------------------------------------
# parse tree
# ---------------------------------------------------------------------------------------------

@dataclass
class Node:
    span: Tuple[int, int]


@dataclass
class Num(Node):
    value: Union[int, float]


@dataclass
class Ref(Node):
    name: str
    args: List[Node] = field(default_factory=list)
    kwargs: Dict[str, Any] = field(default_factory=dict)
    called: bool = False
    kwarg_spans: Dict[str, Tuple[int, int]] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class BinOp(Node):
    op: str
    left: Node
    right: Node


_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


def _flat(expr: str) -> str:
    """The expression on one line (the parser's line breaks become spaces; offsets are kept)."""
    return _LINE_BREAKS.sub(lambda m: " " * len(m.group()), expr)


def parse(expr: str) -> Node:
    """Parses a pipeline expression into a tree of :class:`Num`, :class:`Ref`, :class:`BinOp`.

    Limits: at most :data:`MAX_EXPR_CHARS` characters and :data:`MAX_DEPTH` levels of nesting."""
    if not isinstance(expr, str):
        raise PipelineError(f"a pipeline expression must be a string, not {describe_value(expr)}")
    if not expr.strip():
        raise PipelineError("empty pipeline expression", expr)
    if len(expr) > MAX_EXPR_CHARS:
        raise PipelineError(f"pipeline expression too long ({len(expr):,} characters; at most {MAX_EXPR_CHARS:,}): "
                            "name its parts in a pipeline file's 'pipelines' section", expr, (0, len(expr)))
    flat = _flat(expr)
    stripped = flat.strip()
    offset = len(flat) - len(flat.lstrip())
    deep = f"the expression nests too deeply (at most {MAX_DEPTH} levels of operators, calls and brackets): " \
           "name its parts in a pipeline file's 'pipelines' section"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings (invalid escapes) are not ours to print
            tree = ast.parse(stripped, mode="eval")
    except SyntaxError as e:
        col = min(max((e.offset or 1) - 1, 0), len(stripped)) + offset
        if e.lineno and e.lineno > 1:  # cannot happen for a flattened expression; point at its end
            col = len(flat)
        msg = deep if "too many nested" in str(e.msg) else f"syntax error: {e.msg}"
        raise PipelineError(msg, flat, (col, col + 1)) from None
    except (RecursionError, MemoryError):
        raise PipelineError(deep, flat, (offset, len(flat))) from None
    except ValueError as e:  # e.g. NUL characters, on Pythons that do not call them syntax errors
        raise PipelineError(f"syntax error: {e}", flat) from None

    if stripped.isascii():
        def char_col(b):
            return b
    else:  # ast's column offsets count UTF-8 bytes
        to_char = []
        for i, ch in enumerate(stripped):
            to_char.extend([i] * len(ch.encode("utf-8")))
        to_char.append(len(stripped))

        def char_col(b):
            return to_char[min(b, len(to_char) - 1)]

    def span(n):
        start = offset + char_col(n.col_offset)
        end = offset + char_col(n.end_col_offset if n.end_col_offset is not None else n.col_offset + 1)
        return start, max(end, start + 1)

    def fail(msg, n):
        raise PipelineError(msg, flat, span(n))

    # bound the nesting before anything recurses over the tree
    stack = [(tree.body, 1)]
    while stack:
        n, d = stack.pop()
        if d > MAX_DEPTH:
            fail(deep, n)
        stack.extend((c, d + 1 if isinstance(c, ast.expr) else d) for c in ast.iter_child_nodes(n))

    def literal(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            v = n.value
            if v is None or isinstance(v, (bool, str)) or (isinstance(v, (int, float)) and not isinstance(v, complex)):
                return v
            fail(f"{describe_value(v)} is not a literal the language takes "
                 "(numbers, strings, True/False/None, lists, dicts)", n)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)) \
                and isinstance(n.operand, ast.Constant) and isinstance(n.operand.value, (int, float)) \
                and not isinstance(n.operand.value, (bool, complex)):
            return -n.operand.value if isinstance(n.op, ast.USub) else n.operand.value
        if isinstance(n, (ast.List, ast.Tuple)):
            return [literal(e) for e in n.elts]
        if isinstance(n, ast.Dict):
            out = {}
            for k, v in zip(n.keys, n.values):
                if k is None:
                    fail("'**' is not allowed in a literal", v)
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                    fail("the keys of a dict literal must be strings", k)
                out[k.value] = literal(v)
            return out
        if isinstance(n, ast.Set):
            fail("set literals are not a parameter kind (write a list: [a, b])", n)
        fail(_NOT_LITERAL, n)

    def conv(n: ast.AST) -> Node:
        if isinstance(n, ast.BinOp):
            op = _OPS.get(type(n.op))
            if op is None:
                fail(f"operator not allowed in a pipeline (allowed: {' '.join(sorted(set(_OPS.values())))})", n)
            return BinOp(span(n), op, conv(n.left), conv(n.right))
        if isinstance(n, ast.Name):
            return Ref(span(n), n.id)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) \
                and not isinstance(n.value, (bool, complex)):
            return Num(span(n), n.value)
        if isinstance(n, ast.Call):
            if not isinstance(n.func, ast.Name):
                fail("only a component name can be called", n.func)
            for a in n.args:
                if isinstance(a, ast.Starred):
                    fail("'*' arguments are not allowed", a)
            args = [conv(a) for a in n.args]
            kwargs, spans = {}, {}
            for kw in n.keywords:
                if kw.arg is None:
                    fail("'**' arguments are not allowed", kw.value)
                try:
                    kwargs[kw.arg] = literal(kw.value)
                except PipelineError as e:
                    if e.message == _NOT_LITERAL and e.span == span(kw.value):
                        fail(f"argument {kw.arg!r} {_NOT_LITERAL}", kw.value)
                    raise
                spans[kw.arg] = span(kw.value)
            return Ref(span(n), n.func.id, args, kwargs, called=True, kwarg_spans=spans)
        kind = type(n).__name__
        fail(f"not allowed in a pipeline expression ({kind}): use component names, numbers, calls and operators", n)

    return conv(tree.body)


_NOT_LITERAL = "must be a literal (number, string, True/False/None, list, dict)"


def depth(node: Node, named: Optional[Dict[str, int]] = None) -> int:
    """Nesting levels of a parse tree; a reference to a named pipeline adds that pipeline's
    levels (``named``)."""
    named = named or {}
    best, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        if isinstance(n, Ref) and n.name in named and not n.called:
            d += named[n.name] - 1  # the named pipeline's tree stands where its name is
        best = max(best, d)
        if isinstance(n, BinOp):
            stack += [(n.left, d + 1), (n.right, d + 1)]
        elif isinstance(n, Ref):
            stack += [(a, d + 1) for a in n.args]
    return best


def refs(node: Node) -> List[Ref]:
    """Every :class:`Ref` of a parse tree, left to right."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, BinOp):
            stack += [n.right, n.left]
        elif isinstance(n, Ref):
            out.append(n)
            stack += list(reversed(n.args))
    return out


# ---------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------

@dataclass
class PipelineConfig:
    """The parsed contents of a pipeline YAML file: named components (a registered component and its
    parameters), named pipelines (expressions over them), experiments, the dataset, and the other sections
    (``llm:``, ...) as ``settings``.  :func:`load_config` reads one from a file or a dict.

    Example:
        >>> import pyterrier_sci as ps
        >>> cfg = ps.PipelineConfig.from_dict({
        ...     "dataset": "irds:sci/csfcube",
        ...     "components": {"bm25_tuned": {"component": "bm25", "k1": 1.2}},
        ...     "pipelines": {"BM25": "pool >> bm25_tuned % 100"}})
        >>> cfg.pipelines["BM25"], cfg.components["bm25_tuned"]["k1"]
        ('pool >> bm25_tuned % 100', 1.2)

        ``ps.pipeline("BM25", config=cfg)`` then builds the pipeline the config names.
    """
    components: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    pipelines: Dict[str, str] = field(default_factory=dict)
    experiments: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    dataset: Optional[str] = None
    settings: Dict[str, Any] = field(default_factory=dict)
    path: Optional[Path] = None

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]], path: Optional[Path] = None) -> "PipelineConfig":
        d = dict(d or {})
        where = str(path) if path else "config"
        for section in ("components", "pipelines", "experiments"):
            if not isinstance(d.get(section) or {}, dict):
                raise PipelineError(f"section '{section}' must be a mapping of names", where=where)
        comps = {}
        for name, spec in (d.pop("components", None) or {}).items():
            if spec is None:
                spec = {}
            if not isinstance(spec, dict):
                raise PipelineError(f"component '{name}' must be a mapping of parameters", where=where)
            if not str(name).isidentifier():
                raise PipelineError(f"component name '{name}' is not an identifier", where=where)
            bad = [k for k in spec if not isinstance(k, str)]
            if bad:
                raise PipelineError(f"component '{name}': parameter names must be strings, "
                                    f"not {describe_value(bad[0])}", where=where)
            kind = spec.get("component", spec.get("type", name))
            if not isinstance(kind, str) or not kind.isidentifier():
                raise PipelineError(f"component '{name}': 'component' must name a registered component, "
                                    f"not {describe_value(kind)}", where=where)
            comps[str(name)] = dict(spec)
        pipes = {}
        for name, expr in (d.pop("pipelines", None) or {}).items():
            if not isinstance(expr, str):
                raise PipelineError(f"pipeline '{name}' must be an expression string", where=where)
            pipes[str(name)] = expr
        exps = d.pop("experiments", None) or {}
        dataset = d.pop("dataset", None)
        if dataset is not None and not isinstance(dataset, str):
            raise PipelineError(f"'dataset' must be an ir_datasets id, not {describe_value(dataset)}", where=where)
        return cls(comps, pipes, exps, dataset, d, path)


def _package_pipelines_dir() -> Path:
    """The shipped pipeline files' folder (``pipelines/``, package data installed as ``pyterrier_sci.pipelines``)."""
    return Path(str(resources.files("pyterrier_sci.pipelines")))


def _read_config_text(path: Path, shown: str) -> str:
    """The text of a pipeline file: a regular file of at most :data:`MAX_CONFIG_BYTES`, UTF-8."""
    def fail(why):
        raise PipelineError(why, where=shown)

    try:
        st = path.stat()
    except FileNotFoundError:
        raise PipelineError(f"config file not found: {shown}") from None
    except OSError as e:
        fail(f"cannot read the config file: {e.strerror or e}")
    if stat.S_ISDIR(st.st_mode):
        fail("is a directory, not a pipeline file")
    if not stat.S_ISREG(st.st_mode):
        fail("is not a regular file (a device, a pipe or a socket); pass a YAML file")
    if st.st_size > MAX_CONFIG_BYTES:
        fail(f"is {st.st_size:,} bytes; a pipeline file may have at most {MAX_CONFIG_BYTES:,}")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        fail(f"cannot read the config file: {e.strerror or e}")
    if len(raw) > MAX_CONFIG_BYTES:
        fail(f"has more than {MAX_CONFIG_BYTES:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        fail(f"is not UTF-8 text (line {line}, byte {e.start}): save it as UTF-8")


def _yaml_load(text: str, shown: str) -> Any:
    """``yaml.safe_load`` with bounds: nesting depth, alias uses and the size of the document once
    its aliases are expanded (a "billion laughs" file is refused in milliseconds)."""

    class Limit(Exception):  # noqa: N818
        def __init__(self, why, mark=None):
            self.why, self.mark = why, mark

    class BoundedLoader(yaml.SafeLoader):
        def __init__(self, stream):
            super().__init__(stream)
            self._depth, self._aliases = 0, 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self._aliases += 1
                if self._aliases > MAX_YAML_ALIASES:
                    raise Limit(f"more than {MAX_YAML_ALIASES:,} aliases (*name)", self.peek_event().start_mark)
            self._depth += 1
            try:
                if self._depth > MAX_YAML_DEPTH:
                    raise Limit(f"nesting deeper than {MAX_YAML_DEPTH} levels", self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    def expanded_size(root) -> int:
        sizes: Dict[int, int] = {}
        on_path = set()
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            if done:
                on_path.discard(key)
                kids = _yaml_children(node)
                sizes[key] = 1 + sum(sizes[id(k)] for k in kids)
                if sizes[key] > MAX_YAML_NODES:
                    raise Limit(f"more than {MAX_YAML_NODES:,} values once its aliases are expanded", node.start_mark)
                continue
            if key in sizes:
                continue
            if key in on_path:
                raise Limit("an alias inside the node it names (a recursive alias)", node.start_mark)
            on_path.add(key)
            stack.append((node, True))
            stack.extend((k, False) for k in _yaml_children(node) if id(k) not in sizes)
        return sizes[id(root)]

    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node)
        return loader.construct_document(node)
    except Limit as e:
        where = f", line {e.mark.line + 1}" if e.mark is not None else ""
        raise PipelineError(f"refused: the YAML has {e.why}{where}", where=shown) from None
    except yaml.YAMLError as e:
        raise PipelineError(f"invalid YAML: {e}", where=shown) from None
    except RecursionError:
        raise PipelineError(f"invalid YAML: nesting too deep (at most {MAX_YAML_DEPTH} levels)", where=shown) from None
    finally:
        loader.dispose()


def read_yaml_file(path: Union[str, os.PathLike], shown: Optional[str] = None) -> Any:
    """A YAML file read under the pipeline files' limits (:data:`MAX_CONFIG_BYTES`, :data:`MAX_YAML_DEPTH`,
    :data:`MAX_YAML_ALIASES`, :data:`MAX_YAML_NODES`): what an untrusted file (a pipeline file, a paper's
    reproduction file) may be; one :class:`PipelineError` naming ``shown`` (default the path) otherwise."""
    shown = str(path) if shown is None else shown
    return _yaml_load(_read_config_text(Path(path), shown), shown)


def _yaml_children(node) -> List[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    return []


def load_config(config: Union[None, str, os.PathLike, Dict[str, Any], PipelineConfig]) -> PipelineConfig:
    """Loads a config: a :class:`PipelineConfig`, a dict, or a YAML path.  A relative path that does
    not exist is looked up among the package's own ``pipelines/`` files (``"pipelines/csfcube.yaml"``
    or ``"csfcube.yaml"``).

    A YAML file must be a regular UTF-8 file of at most :data:`MAX_CONFIG_BYTES` bytes, nest at most
    :data:`MAX_YAML_DEPTH` levels, use at most :data:`MAX_YAML_ALIASES` aliases and expand to at
    most :data:`MAX_YAML_NODES` values.

    Example:
        >>> import pyterrier_sci as ps
        >>> cfg = ps.load_config("csfcube.yaml")        # the package's pipelines/csfcube.yaml
        >>> cfg.dataset
        'irds:sci/csfcube'
    """
    if config is None:
        return PipelineConfig()
    if isinstance(config, PipelineConfig):
        return config
    if isinstance(config, dict):
        return PipelineConfig.from_dict(config)
    if not isinstance(config, (str, os.PathLike)):
        raise PipelineError(f"config must be a YAML path, a dict or a PipelineConfig, not {describe_value(config)}")
    if isinstance(config, str) and ("\x00" in config or not config.strip()):
        raise PipelineError(f"config file not found: {config!r}")
    path = Path(config).expanduser()
    if not path.exists() and not path.is_absolute():
        candidate = _package_pipelines_dir() / path.name
        if candidate.exists():
            path = candidate
    data = _yaml_load(_read_config_text(path, str(config)), str(path))
    if data is not None and not isinstance(data, dict):
        raise PipelineError("the top level must be a mapping", where=str(path))
    return PipelineConfig.from_dict(data, path)


# ---------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------

class _Builder:
    def __init__(self, config: PipelineConfig, context: Context):
        self.config = config
        self.context = context
        self.memo: Dict[Any, pt.Transformer] = {}
        self.depths: Dict[str, int] = {}      # nesting levels of the named pipelines built so far
        self.parsed: Dict[str, Tuple[Node, str]] = {}

    def _parse(self, expr: str, where: Optional[str]) -> Tuple[Node, str]:
        if expr not in self.parsed:
            if expr in self.config.pipelines and not expr.isidentifier():
                # a display name such as "HLM-Cite": buildable by name, not referable inside expressions
                self.parsed[expr] = (Ref(name=expr, span=(0, len(expr))), expr)
            else:
                try:
                    self.parsed[expr] = (parse(expr), _flat(expr) if isinstance(expr, str) else repr(expr))
                except PipelineError as e:
                    raise PipelineError(e.message, e.expr, e.span, where) from None
        return self.parsed[expr]

    def _named(self, node: Node) -> List[Ref]:
        return [r for r in refs(node) if r.name in self.config.pipelines and not r.called]

    def build_expr(self, expr: str, where: Optional[str] = None) -> pt.Transformer:
        if not isinstance(expr, str):
            raise PipelineError(f"a pipeline expression must be a string, not {describe_value(expr)}", where=where)
        node, flat = self._parse(expr, where)
        for r in self._named(node):
            if ("pipeline", r.name) not in self.memo:
                self._build_named(r.name)
        levels = depth(node, self.depths)
        if levels > MAX_DEPTH:
            raise PipelineError(f"the pipeline nests too deeply: {levels} levels of operators and calls counting the "
                                f"named pipelines it uses (at most {MAX_DEPTH})", flat, node.span, where)
        return self.build(node, flat, where)

    def _build_named(self, name: str) -> None:
        """Builds a named pipeline after the named pipelines it uses, without recursion (a chain of
        hundreds of named pipelines is fine); a cycle is an error naming it."""
        order: List[str] = []
        visiting: List[str] = []
        seen = set()
        stack: List[Tuple[str, List[Ref]]] = []

        def enter(n):
            where = f"pipeline '{n}'"
            node, _ = self._parse(self.config.pipelines[n], where)
            visiting.append(n)
            seen.add(n)
            stack.append((n, list(reversed(self._named(node)))))

        enter(name)
        while stack:
            n, todo = stack[-1]
            if not todo:
                stack.pop()
                visiting.pop()
                order.append(n)
                continue
            r = todo.pop()
            if r.name in visiting:
                flat = self._parse(self.config.pipelines[n], None)[1]
                cycle = visiting[visiting.index(r.name):] + [r.name]
                raise PipelineError(f"pipeline '{r.name}' refers to itself ({' -> '.join(cycle)})", flat, r.span,
                                    f"pipeline '{n}'")
            if r.name in seen or ("pipeline", r.name) in self.memo:
                continue
            enter(r.name)
        for n in order:
            where = f"pipeline '{n}'"
            node, flat = self._parse(self.config.pipelines[n], where)
            levels = depth(node, self.depths)
            if levels > MAX_DEPTH:
                raise PipelineError(f"the pipeline nests too deeply: {levels} levels of operators and calls counting "
                                    f"the named pipelines it uses (at most {MAX_DEPTH})", flat, node.span, where)
            self.depths[n] = levels
            if isinstance(node, Ref) and node.name == n:  # a display name standing for itself
                raise PipelineError(f"pipeline '{n}' refers to itself ({n} -> {n})", flat, node.span, where)
            self.memo[("pipeline", n)] = self.build(node, flat, where)

    def build(self, node: Node, expr: str, where: Optional[str]) -> Any:
        def fail(msg, n=node):
            raise PipelineError(msg, expr, n.span, where)

        if isinstance(node, Num):
            fail("a number cannot stand for a pipeline here (use it after '%' or with '*')")
        if isinstance(node, BinOp):
            if node.op == "%":
                left = self.build(node.left, expr, where)
                if not isinstance(node.right, Num) or not isinstance(node.right.value, int) or node.right.value <= 0:
                    fail("'%' needs a positive whole number of results on its right", node.right)
                if node.right.value > MAX_RESULTS:
                    fail(f"'%' cuts at most {MAX_RESULTS:,} results", node.right)
                return left % node.right.value
            if node.op == "*":
                if isinstance(node.left, Num) == isinstance(node.right, Num):
                    fail("'*' multiplies a pipeline's scores by a number: write 0.5 * name")
                num, other = (node.left, node.right) if isinstance(node.left, Num) else (node.right, node.left)
                if not math.isfinite(num.value) or abs(num.value) > 1e12:
                    fail("'*' needs a finite weight (at most 1e12 in size)", num)
                return num.value * self.build(other, expr, where)
            left = self.build(node.left, expr, where)
            right = self.build(node.right, expr, where)
            ops = {">>": lambda a, b: a >> b, "+": lambda a, b: a + b, "|": lambda a, b: a | b,
                   "&": lambda a, b: a & b, "**": lambda a, b: a ** b, "^": lambda a, b: a ^ b}
            return ops[node.op](left, right)
        assert isinstance(node, Ref)
        return self.build_ref(node, expr, where)

    def build_ref(self, node: Ref, expr: str, where: Optional[str]) -> pt.Transformer:
        def fail(msg):
            raise PipelineError(msg, expr, node.span, where)

        name = node.name
        if name in self.config.pipelines:
            if node.called:
                fail(f"'{name}' is a named pipeline and takes no arguments")
            if ("pipeline", name) not in self.memo:
                self._build_named(name)
            return self.memo[("pipeline", name)]

        params: Dict[str, Any] = {}
        registry_name = name
        from_config: set = set()
        if name in self.config.components:
            spec = dict(self.config.components[name])
            registry_name = str(spec.pop("component", spec.pop("type", name)))
            params.update(spec)
            from_config = set(spec) - set(node.kwargs)
        params.update(node.kwargs)
        inputs = [self.build(a, expr, where) for a in node.args]
        registry_name = REGISTRY.current_name(registry_name)  # a deprecated alias warns and means its new name
        try:
            comp = REGISTRY.get(registry_name)
        except UnknownComponentError as e:
            fail(str(e))
        except ImportError as e:
            fail(str(e))
        decl = comp.params
        try:
            if decl is not None:  # checked here so that the memo key is made of checked values
                params = decl.check(registry_name, params)
            key = ("component", registry_name, tuple(id(i) for i in inputs), _freeze(params))
            if key in self.memo:
                return self.memo[key]
            transformer = comp.build(*inputs, context=self.context, **params)
        except ParameterError as e:
            if e.expr is not None:
                raise
            span = node.kwarg_spans.get(e.param, node.span)
            msg = e.message + (f" (set in the config's component '{name}')" if e.param in from_config else "")
            raise ParameterError(msg, component=e.component, param=e.param, expr=expr, span=span, where=where) from None
        except PipelineError as e:
            if e.expr is not None:
                raise
            raise PipelineError(e.message, expr, node.span, where or e.where) from None
        except TypeError as e:
            fail(f"cannot build component '{registry_name}' with {_describe(inputs, params)}: {e}")
        except (ValueError, OSError, ImportError, KeyError, RuntimeError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else e
            fail(f"component '{registry_name}' failed: {msg}")
        if not isinstance(transformer, pt.Transformer):
            fail(f"component '{registry_name}' returned {type(transformer).__name__}, not a pt.Transformer")
        self.memo[key] = transformer
        return transformer


def _freeze(x: Any) -> Any:
    """A hashable key for a parameter value (dicts with keys of mixed types, sets, unhashable objects)."""
    if isinstance(x, dict):
        return ("dict", tuple(sorted(((repr(k), _freeze(v)) for k, v in x.items()), key=lambda kv: kv[0])))
    if isinstance(x, (list, tuple)):
        return ("list", tuple(_freeze(v) for v in x))
    if isinstance(x, (set, frozenset)):
        return ("set", tuple(sorted(repr(_freeze(v)) for v in x)))
    try:
        hash(x)
    except TypeError:
        return ("repr", type(x).__name__, repr(x))
    return x


def _describe(inputs, params) -> str:
    parts = []
    if inputs:
        parts.append(f"{len(inputs)} input pipeline(s)")
    if params:
        parts.append("parameters " + ", ".join(f"{k}={v!r}" for k, v in params.items()))
    return " and ".join(parts) or "no arguments"


def make_context(config: PipelineConfig, dataset: Optional[str] = None, context: Optional[Context] = None,
                 trusted: bool = False) -> Context:
    dataset = as_dataset(dataset)   # a DataFrame or file of papers: registered as a local corpus first
    if context is not None:
        if dataset and not context.dataset:
            context.dataset = dataset
        if trusted:
            context.trusted = True
        return context
    return Context(dataset=dataset or config.dataset, settings=dict(config.settings), trusted=trusted is True)


def pipeline(expr: str, config: Union[None, str, os.PathLike, Dict[str, Any], PipelineConfig] = None,
             dataset: Optional[str] = None, context: Optional[Context] = None, trusted: bool = False) -> pt.Transformer:
    """Builds the ``pt.Transformer`` an expression describes.

    Args:
        expr: the expression, e.g. ``"pool >> bm25(k1=0.9) % 10"``, or the name of a pipeline of the config.
        config: a YAML path, a dict or a :class:`PipelineConfig` naming components and pipelines.
        dataset: the dataset for components that need a corpus (overrides the config's ``dataset``): an id, or a
            DataFrame, file or folder of your own papers (registered first as ``sci/local/...``: docs/corpora.md).
        context: a full :class:`~pyterrier_sci.registry.Context` (overrides ``dataset``'s default).
        trusted: trust the expression and the config: an LLM ``base_url`` they set receives the API key,
            their file paths may lie anywhere (docs/llm.md, "Trust"). Only for configs you wrote.

    Example:
        BM25 over CSFCube's pools, and MiniLM re-ranking its top 50, fused::

            import pyterrier_sci as ps
            bm25 = ps.pipeline("pool >> bm25(k1=0.9, b=0.4)", dataset="irds:sci/csfcube")
            rrf = ps.pipeline("rrf(pool >> bm25, pool >> bm25 % 50 >> dense, k=60)", dataset="irds:sci/csfcube")
            hybrid = ps.pipeline("RRF", config="pipelines/csfcube.yaml")   # a pipeline the file names
    """
    cfg = load_config(config)
    builder = _Builder(cfg, make_context(cfg, dataset, context, trusted))
    return builder.build_expr(expr)


def build_all(config, names: Optional[List[str]] = None, dataset: Optional[str] = None,
              context: Optional[Context] = None, trusted: bool = False) -> Dict[str, pt.Transformer]:
    """Builds several named pipelines of one config, sharing the components they have in common."""
    cfg = load_config(config)
    builder = _Builder(cfg, make_context(cfg, dataset, context, trusted))
    names = list(cfg.pipelines) if names is None else names
    out = {}
    for n in names:
        out[n] = builder.build_expr(n)  # a named pipeline, or an expression
    return out
