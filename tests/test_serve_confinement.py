"""Expressions from requests (``--allow-expressions``) are confined: every path their arguments give must lie in
the allowed directories (422 ``path_not_allowed``, a link out of them included), a pipeline that would build an
index or derive an index's data is refused with nothing written (422 ``build_refused``; the issue's
``dense(model=...)`` started encoding the whole corpus inside the request), any other failure to build one is
a 422 naming its cause - and an allowed expression still answers as the same pipeline in-process."""
import os

import pytest
from conftest import needs_data
from serve_helpers import LiveServer, csfcube_service, request

from pyterrier_sci.data import work_dir
from pyterrier_sci.serve import SearchAPI

pytestmark = needs_data("csfcube")


@pytest.fixture(scope="module")
def server():
    svc = csfcube_service(["bm25"], allow_expressions=True).load()
    with LiveServer(SearchAPI(svc)) as srv:
        yield srv


def ask(srv, expression, query="dependency parsing"):
    return request(srv.url + "/v1/search", "POST", {"query": query, "k": 3, "expression": expression})


def test_paths_outside_the_allowed_directories_are_refused(server, tmp_path, monkeypatch):
    outside = tmp_path / "outside-model"
    outside.mkdir()
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "link").symlink_to(outside)
    monkeypatch.setenv("PYTERRIER_SCI_ALLOWED_DIRS", str(allowed))
    for expression, shown in ((f"dense(model='{outside}')", str(outside)),            # the case
                              ("bm25(index='/etc')", "/etc"),
                              (f"dense(model='{allowed / 'link'}')", str(allowed / "link")),   # a link out
                              ("bm25(index='../../../../etc')", "../../../../etc"),
                              (f"bm25 % 5 >> dense(model='{outside}', fields=['title'])", str(outside))):
        status, _, got = ask(server, expression)
        assert (status, got["error"]["code"]) == (422, "path_not_allowed"), (expression, got)
        assert repr(shown) in got["error"]["message"] and "PYTERRIER_SCI_ALLOWED_DIRS" in got["error"]["message"]
    # inside an allowed directory a path is taken (and then fails for what it is: no index there)
    status, _, got = ask(server, f"bm25(index='{allowed / 'no-index'}')")
    assert (status, got["error"]["code"]) == (422, "bad_expression") and str(allowed) in got["error"]["message"], got


def test_a_pipeline_that_would_build_is_refused_and_writes_nothing(server):
    pisa = work_dir() / "indexes" / "sci__csfcube" / "pisa"
    dense = work_dir() / "indexes" / "sci__csfcube"
    before = {p.name for p in pisa.iterdir()}, {p.name for p in dense.iterdir()}
    assert not [n for n in before[1] if n.endswith("-abstract+title")], "the index exists: nothing to refuse"
    # PISA's BM25 data for other k1/b is derived on first use: refused
    status, _, got = ask(server, "bm25(k1=1.37, b=0.61)")
    assert (status, got["error"]["code"]) == (422, "build_refused"), got
    assert "k1=1.37" in got["error"]["message"] and "never builds an index" in got["error"]["message"]
    # a dense first stage without an index would encode the whole corpus first: refused before encoding
    status, _, got = ask(server, "dense(model='default', fields=['abstract', 'title'])")
    assert (status, got["error"]["code"]) == (422, "build_refused"), got
    assert {p.name for p in pisa.iterdir()} == before[0] and {p.name for p in dense.iterdir()} == before[1]
    assert not [p for p in work_dir().rglob("*") if ".partial-" in p.name and str(os.getpid()) in p.name]


def test_failures_to_build_are_422_naming_the_cause_and_allowed_expressions_answer(server):
    for expression, code, cause in (("bm25(k1=-1)", "bad_expression", "k1"),
                                    ("nope_component", "bad_expression", "nope_component"),
                                    ("bm25 >> ", "bad_expression", "syntax"),
                                    ("bm25 % 3 \ud800", "bad_expression", "surrogate")):
        status, _, got = ask(server, expression)
        assert (status, got["error"]["code"]) == (422, code) and cause in got["error"]["message"], (expression, got)
    svc = server.api.service
    status, _, got = ask(server, "bm25 % 3")
    assert status == 200 and got["pipeline"] == "bm25 % 3"
    assert got["results"] == svc.hits(svc.run("bm25", ["dependency parsing"]), "dependency parsing", 3)


def test_no_builds_refuses_a_build_before_anything_is_written(tmp_path):
    """The core's guard: inside ``no_builds()`` building an artifact (or taking its lock, which every build,
    growth and derivation does first) is ``BuildRefused`` with nothing created - not the parent directory, not
    the lock file; an artifact built already is used; outside, building works as before."""
    from pyterrier_sci.artifacts import BuildRefused, build_atomically, lock, no_builds

    def build(tmp):
        tmp.mkdir()
        (tmp / "data").write_text("x")
    built = build_atomically(tmp_path / "built", build)
    target = tmp_path / "new" / "index"
    with no_builds("not here"):
        with pytest.raises(BuildRefused, match="not here") as e:
            build_atomically(target, build, what="the test index")
        assert e.value.path == target and e.value.what == "the test index"
        with pytest.raises(BuildRefused):
            with lock(tmp_path / "other"):
                pass
        assert build_atomically(built, build) == built      # built already: used
    assert sorted(p.name for p in tmp_path.iterdir()) == ["built"]
    assert build_atomically(target, build) == target and (target / "data").read_text() == "x"
