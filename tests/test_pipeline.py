import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.pipeline import BinOp, Num, PipelineError, Ref, parse
from pyterrier_sci.registry import REGISTRY


class Const(pt.Transformer):
    """A ranker with fixed scores per document, for checking operator semantics."""

    def __init__(self, scores, tag=""):
        self.scores = dict(scores)
        self.tag = tag

    def transform(self, inp):
        rows = [(qid, q, d, s) for qid, q in zip(inp["qid"], inp["query"]) for d, s in self.scores.items()]
        out = pd.DataFrame(rows, columns=["qid", "query", "docno", "score"])
        return pt.model.add_ranks(out)


@pytest.fixture(scope="module", autouse=True)
def toy_components():
    ps.register("ra", lambda: _count(Const({"d1": 3.0, "d2": 2.0, "d3": 1.0})), replace=True)
    ps.register("rb", lambda: Const({"d3": 3.0, "d4": 2.0}), replace=True)

    @ps.component("needs_ctx", replace=True)
    def needs_ctx(*inputs, context=None, scale=1.0):
        assert context is not None
        return Const({context.dataset or "none": scale})

    yield


BUILT = []


def _count(t):
    BUILT.append(t)
    return t


TOPICS = pd.DataFrame([["q1", "some query"]], columns=["qid", "query"])


def _docs(res):
    return list(res.sort_values("rank")["docno"])


# ------------------------------------------------------------------ parsing

def test_parse_tree_follows_python_precedence():
    node = parse("bm25 >> dense % 10 + 0.5 * x")
    assert isinstance(node, BinOp) and node.op == ">>"
    assert isinstance(node.right, BinOp) and node.right.op == "+"
    assert node.right.left.op == "%" and isinstance(node.right.left.right, Num)
    call = parse("bm25(k1=0.9, b=0.4, fields=['title', 'abstract'])")
    assert isinstance(call, Ref) and call.kwargs == {"k1": 0.9, "b": 0.4, "fields": ["title", "abstract"]}
    assert parse("rrf(a, b % 5, k=60)").args[1].op == "%"


@pytest.mark.parametrize("expr, bad", [
    ("__import__('os').system('true')", "__import__('os').system"),
    ("bm25.index", "bm25.index"),
    ("bm25[0]", "bm25[0]"),
    ("lambda: 1", "lambda: 1"),
    ("bm25 >> dense(k=open('x'))", "open('x')"),
    ("bm25 - dense", "bm25 - dense"),
    ("bm25(**{'k1': 1})", "{'k1': 1}"),
    ("[x for x in y]", "[x for x in y]"),
    ("bm25 >> 'text'", "'text'"),
])
def test_anything_but_the_language_is_rejected_with_a_pointer(expr, bad):
    with pytest.raises(PipelineError) as e:
        ps.pipeline(expr)
    err = e.value
    assert err.span is not None
    assert err.expr[err.span[0]:err.span[1]] == bad
    lines = str(err).splitlines()
    assert lines[-1].strip() == "^" * len(bad)


def test_syntax_error_points_at_the_column():
    with pytest.raises(PipelineError, match="syntax error") as e:
        ps.pipeline("bm25 >> >> dense")
    assert e.value.span[0] == 8


def test_unknown_component_suggests_a_name():
    with pytest.raises(PipelineError, match=r"unknown component 'bm52'; did you mean bm25") as e:
        ps.pipeline("ra >> bm52")
    assert e.value.expr[slice(*e.value.span)] == "bm52"


def test_rank_cutoff_needs_a_positive_int():
    for expr in ("ra % 2.5", "ra % rb", "ra % 0"):
        with pytest.raises(PipelineError, match="'%' needs a positive whole number"):
            ps.pipeline(expr)
    with pytest.raises(PipelineError, match="multiplies"):
        ps.pipeline("ra * rb")
    with pytest.raises(PipelineError, match="number cannot stand"):
        ps.pipeline("ra >> 3")


def test_bad_parameters_name_the_component():
    with pytest.raises(PipelineError, match="cannot build component 'needs_ctx' with parameters nope=1"):
        ps.pipeline("needs_ctx(nope=1)")


# ------------------------------------------------------------------ semantics = PyTerrier's operators

@pytest.mark.parametrize("expr, direct", [
    ("ra % 2", lambda a, b: a % 2),
    ("ra + rb", lambda a, b: a + b),
    ("0.5 * ra", lambda a, b: 0.5 * a),
    ("ra | rb", lambda a, b: a | b),
    ("ra & rb", lambda a, b: a & b),
    ("(ra + rb) % 2", lambda a, b: (a + b) % 2),
])
def test_operators_mean_what_they_mean_in_pyterrier(expr, direct):
    built = ps.pipeline(expr)
    a, b = Const({"d1": 3.0, "d2": 2.0, "d3": 1.0}), Const({"d3": 3.0, "d4": 2.0})
    got, want = built(TOPICS), direct(a, b)(TOPICS)
    cols = [c for c in ("qid", "docno", "score") if c in want.columns]
    pd.testing.assert_frame_equal(got.sort_values("docno")[cols].reset_index(drop=True),
                                  want.sort_values("docno")[cols].reset_index(drop=True))


@pytest.mark.parametrize("expr, direct", [("ra ** rb", lambda a, b: a ** b), ("ra ^ rb", lambda a, b: a ^ b)])
def test_feature_union_and_concatenate_build_pyterrier_operators(expr, direct):
    built, want = ps.pipeline(expr), direct(Const({}), Const({}))
    assert type(built) is type(want)
    subs = pt.inspect.subtransformers(built)   # {"transformers": [...]} or {"left": a, "right": b}
    parts = [t for v in subs.values() for t in (v if isinstance(v, list) else [v])]
    assert [type(t) for t in parts] == [Const, Const]


def test_cutoff_result():
    assert _docs(ps.pipeline("ra % 2")(TOPICS)) == ["d1", "d2"]
    assert sorted(ps.pipeline("ra & rb")(TOPICS)["docno"]) == ["d3"]


def test_keyword_arguments_and_context_reach_the_factory():
    res = ps.pipeline("needs_ctx(scale=2.5)", dataset="irds:sci/x")(TOPICS)
    assert list(res["docno"]) == ["irds:sci/x"] and res["score"].iloc[0] == 2.5


# ------------------------------------------------------------------ configs

CONFIG = {
    "dataset": "irds:sci/from-config",
    "components": {"scaled": {"component": "needs_ctx", "scale": 4.0}},
    "pipelines": {"top2": "ra % 2", "both": "top2 | rb", "loop": "loop2 >> ra", "loop2": "loop"},
    "llm": {"model": "m"},
}


def test_config_names_components_and_pipelines():
    assert sorted(ps.pipeline("both", config=CONFIG)(TOPICS)["docno"]) == ["d1", "d2", "d3", "d4"]
    res = ps.pipeline("scaled", config=CONFIG)(TOPICS)
    assert res["docno"].iloc[0] == "irds:sci/from-config" and res["score"].iloc[0] == 4.0
    # call arguments override the config's parameters
    assert ps.pipeline("scaled(scale=1.5)", config=CONFIG)(TOPICS)["score"].iloc[0] == 1.5


def test_config_cycles_are_reported():
    with pytest.raises(PipelineError, match="refers to itself"):
        ps.pipeline("loop", config=CONFIG)


def test_settings_sections_reach_components():
    cfg = ps.load_config(CONFIG)
    assert cfg.settings == {"llm": {"model": "m"}}


def test_yaml_file_and_package_lookup(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("pipelines:\n  top1: ra % 1\n")
    assert _docs(ps.pipeline("top1", config=f)(TOPICS)) == ["d1"]
    cfg = ps.load_config("pipelines/csfcube.yaml")  # shipped with the package
    assert {"BM25", "MiniLM", "RRF"} <= set(cfg.pipelines)
    bad = tmp_path / "bad.yaml"
    bad.write_text("components: [1, 2]\n")
    with pytest.raises(PipelineError, match="'components' must be a mapping"):
        ps.load_config(bad)
    with pytest.raises(PipelineError, match="config file not found"):
        ps.load_config(tmp_path / "missing.yaml")


def test_builtin_components_come_from_entry_points():
    names = REGISTRY.names()
    for n in ("bm25", "dense", "rrf", "pool"):
        assert n in names
        assert REGISTRY.get(n).source.startswith("pyterrier_sci.")


def test_registering_twice_needs_replace():
    with pytest.raises(ValueError, match="already registered"):
        ps.register("ra", lambda: None)
    with pytest.raises(ValueError, match="identifier"):
        ps.register("not a name", lambda: None)


def test_shared_components_are_built_once():
    from pyterrier_sci.pipeline import build_all
    before = len(BUILT)
    build_all({"pipelines": {"x": "ra % 1", "y": "ra % 2 >> ra", "z": "x | y"}})
    assert len(BUILT) - before == 1
