"""Hostile and broken LLM input (issue 18, items 13-15): malformed responses, bad usage, slow and
huge bodies, servers that echo the API key, pipelines that try to send the key elsewhere or read
and write files they were not given, and a newcomer's first LLM pipeline.

Every case runs the real ``openai`` client against the loopback server of ``llm_server.py``.
The lists below are the hostile inputs tried; each is asserted to be handled (a flagged row, one
``LLMError``/``PipelineError`` naming the cause, a withheld or redacted key)."""

import json
import math
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from llm_server import Reply, ScriptedServer, yes_no

from pyterrier_sci.llm import LLMClient, LLMError, Usage, settings_from
from pyterrier_sci.llm.client import parse_choice
from pyterrier_sci.llm.text import load_template
from pyterrier_sci.plugins.hlm_cite import HLMAgents
from pyterrier_sci.plugins.llm import Listwise, PairwiseTournament
from pyterrier_sci.plugins.mir import MIRAgent, MIRPointwise

KEY = "sk-test-SECRET-0123456789abcdef"
RERANKERS = [MIRPointwise, MIRAgent, Listwise, PairwiseTournament, HLMAgents]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "PYTERRIER_SCI_LLM_BASE_URL",
        "PYTERRIER_SCI_LLM_TRUSTED_URLS",
        "PYTERRIER_SCI_TRUST_CONFIG",
        "PYTERRIER_SCI_ALLOWED_DIRS",
        "PYTERRIER_SCI_LLM_CACHE",
    ):
        monkeypatch.delenv(var, raising=False)


def cfg(srv, **kw):
    s = {
        "base_url": srv.base_url,
        "model": "m",
        "cache_dir": "",
        "backoff": 0.001,
        "backoff_max": 0.002,
        "max_retries": 1,
        "progress": False,
        "timeout": 5,
        "mode": "completion",
        "concurrency": 2,
    }
    s.update(kw)
    return s


def frame(n=4, qids=("q1",)):
    return pd.DataFrame(
        [
            {
                "qid": q,
                "query": f"proposal {q}",
                "docno": f"d{i}",
                "title": f"T{i}",
                "text": f"paper {i}",
                "score": 10.0 - i,
                "rank": i,
            }
            for q in qids
            for i in range(n)
        ]
    )


def header(srv, name, i=-1):
    return {k.lower(): v for k, v in srv.headers[i].items()}.get(name.lower())


# -- item 13: malformed responses ------------------------------------------------------------
def _ok(kind):
    if kind == "chat":
        return {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    return {
        "choices": [
            {
                "index": 0,
                "text": " Yes",
                "finish_reason": "stop",
                "logprobs": {
                    "tokens": [" Yes"],
                    "token_logprobs": [-0.1],
                    "top_logprobs": [{" Yes": -0.1, " No": -2.5}],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }


def _set(path, value):
    def make(kind):
        body = _ok(kind)
        node = body
        keys = path(kind)
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
        return body

    return make


TEXT = lambda kind: ["choices", 0, "message", "content"] if kind == "chat" else ["choices", 0, "text"]  # noqa: E731
# (name, body for kind, or a raw body string)
MALFORMED = [
    ("choices [null]", lambda k: {"choices": [None]}),
    ("choices ['abc']", lambda k: {"choices": ["abc"]}),
    ("choices 'abc'", lambda k: {"choices": "abc"}),
    ("choices {}", lambda k: {"choices": {"0": _ok(k)["choices"][0]}}),
    ("choices []", lambda k: {"choices": []}),
    ("content 42", _set(TEXT, 42)),
    ("content list", _set(TEXT, [{"type": "text", "text": "Yes"}])),
    ("content dict", _set(TEXT, {"a": 1})),
    ("message 'abc'", lambda k: {"choices": [{"message": "abc", "text": 7}]}),
    ("usage.prompt_tokens 'lots'", _set(lambda k: ["usage", "prompt_tokens"], "lots")),
    ("usage.prompt_tokens -5", _set(lambda k: ["usage", "prompt_tokens"], -5)),
    ("usage.completion_tokens -1", _set(lambda k: ["usage", "completion_tokens"], -1)),
    ("usage.prompt_tokens 1e30", _set(lambda k: ["usage", "prompt_tokens"], 1e30)),
    ("usage.prompt_tokens 2.5", _set(lambda k: ["usage", "prompt_tokens"], 2.5)),
    ("usage.prompt_tokens true", _set(lambda k: ["usage", "prompt_tokens"], True)),
    ("usage 'lots'", _set(lambda k: ["usage"], "lots")),
    ("body []", lambda k: [1, 2]),
    ("body 'hello'", lambda k: "hello"),
    ("body null", lambda k: None),
    ("raw empty", ""),
    ("raw not json", "{not json"),
    ("raw deeply nested", "[" * 200000 + "]" * 200000),
    ("raw NaN usage", '{"choices": [{"text": "x", "message": {"content": "x"}}], "usage": {"prompt_tokens": NaN}}'),
]
MALFORMED_LOGPROBS = [  # completion mode only: the log-probabilities a decision is read from
    ("logprob 'high'", _set(lambda k: ["choices", 0, "logprobs", "top_logprobs"], [{" Yes": "high"}])),
    ("logprob 1000.0", _set(lambda k: ["choices", 0, "logprobs", "top_logprobs"], [{" Yes": 1000.0}])),
    (
        "logprob -1e400 (-inf) is fine, 1e400 is not",
        _set(lambda k: ["choices", 0, "logprobs", "top_logprobs"], [{" Yes": 1e400}]),
    ),
    ("top_logprobs ['a']", _set(lambda k: ["choices", 0, "logprobs", "top_logprobs"], ["a"])),
    ("top_logprobs 'a'", _set(lambda k: ["choices", 0, "logprobs", "top_logprobs"], "a")),
    ("token_logprobs ['x']", _set(lambda k: ["choices", 0, "logprobs", "token_logprobs"], ["x"])),
    ("tokens [1]", _set(lambda k: ["choices", 0, "logprobs", "tokens"], [1])),
    ("logprobs 'abc'", _set(lambda k: ["choices", 0, "logprobs"], "abc")),
]


def _reply(spec):
    if isinstance(spec, str):
        return lambda kind, body: Reply(raw=spec)
    return lambda kind, body: Reply(
        body=spec(kind) if spec(kind) is not None else None, raw="null" if spec(kind) is None else None
    )


MALFORMED_CASES = [(m, n, sp) for m in ("chat", "completion") for n, sp in MALFORMED] + [
    ("completion", n, sp) for n, sp in MALFORMED_LOGPROBS
]


@pytest.mark.parametrize("mode,name,spec", MALFORMED_CASES, ids=[f"{m}: {n}" for m, n, _ in MALFORMED_CASES])
def test_malformed_response_is_retried_then_one_llm_error(mode, name, spec):
    with ScriptedServer(_reply(spec)) as srv:
        c = LLMClient(cfg(srv, mode=mode, max_retries=2))
        call = c.chat if mode == "chat" else (lambda p: c.complete(p, logprobs=5))
        with pytest.raises(LLMError, match="malformed response") as e:
            call("hi")
        assert srv.calls == 3 and "after 3 tries" in str(e.value)  # retried, then one error
        assert c.usage.prompt_tokens == 0 and c.usage.errors == 1 and c.usage.calls == 0


def test_tolerated_oddities_are_not_errors():
    """Shapes that carry a usable answer: no usage, a finish_reason that is no string, -inf logprobs."""
    bodies = [
        {"choices": [{"text": " Yes"}]},
        {"choices": [{"text": " Yes", "finish_reason": 42}], "usage": None},
        {
            "choices": [{"text": " Yes", "logprobs": {"top_logprobs": [{" Yes": -0.1, " No": -1e400}]}}],
            "usage": {"prompt_tokens": 2.0, "completion_tokens": 0},
        },
    ]
    with ScriptedServer() as srv:
        srv.script(*[Reply(body=b) for b in bodies])
        c = LLMClient(cfg(srv))
        outs = [c.complete("x", logprobs=2) for _ in bodies]
    assert [o.text for o in outs] == [" Yes"] * 3 and outs[1].finish_reason is None
    assert outs[2].top_logprobs[0][" No"] == -math.inf and c.usage.prompt_tokens == 2


def test_malformed_then_good_answer_recovers():
    with ScriptedServer(lambda k, b: yes_no(True)) as srv:
        srv.script(Reply(body={"choices": [None]}), Reply(body=_set(TEXT, 42)("completion")))
        c = LLMClient(cfg(srv, max_retries=2))
        assert c.choose("Answer (Yes or No):").answer == "Yes"
        assert srv.calls == 3 and c.usage.retries == 2 and c.usage.errors == 0


@pytest.mark.parametrize("cls", RERANKERS)
@pytest.mark.parametrize(
    "name",
    [
        "choices [null]",
        "choices ['abc']",
        "content 42",
        "usage.prompt_tokens 'lots'",
        "logprob 'high'",
        "logprob 1000.0",
        "usage.prompt_tokens -5",
    ],
)
def test_every_reranker_flags_malformed_responses(cls, name):
    spec = dict(MALFORMED + MALFORMED_LOGPROBS)[name]
    with ScriptedServer(_reply(spec)) as srv:
        t = cls(cfg(srv), on_error="flag")
        out = t(frame())
        assert len(out) == 4 and sorted(out["rank"]) == [0, 1, 2, 3]
        flagged = out[~out.get("llm_fixed", pd.Series(False, index=out.index))]
        assert flagged["llm_unusable"].all()
        assert list(out.sort_values("rank")["docno"]) == ["d0", "d1", "d2", "d3"]  # first-stage order kept
        assert t.usage.prompt_tokens == 0 and t.usage.unusable >= 1
        t2 = cls(cfg(srv), on_error="raise")
        with pytest.raises(LLMError, match="malformed response"):
            t2(frame())


def test_hlm_guider_follows_the_error_policy():
    with ScriptedServer(lambda k, b: Reply(status=500)) as srv:
        t = HLMAgents(cfg(srv, max_retries=0), keep_top=1, on_error="flag")
        out = t(frame())
        assert out.loc[~out["llm_fixed"], "llm_unusable"].all()
        assert out["llm_explanation"].str.contains("the guider failed").sum() == 3
        assert srv.calls == 1  # the guider's one call, no other
        with pytest.raises(LLMError, match="HTTP 500"):
            HLMAgents(cfg(srv, max_retries=0), keep_top=1)(frame())


def test_huge_json_number_in_answer_does_not_crash():
    assert not parse_choice('{"answer": ' + "9" * 400 + "}", ("Yes", "No")).usable
    assert not parse_choice('{"answer": 1e999, "confidence": 1e999}', ("Yes", "No")).usable


def test_usage_rejects_negative_counts_and_prices():
    u = Usage(model="m")
    for bad in (-1, "lots", 2.5, True):
        with pytest.raises(ValueError, match="whole number >= 0"):
            u.add(prompt_tokens=bad)
    u.add(prompt_tokens=10)
    with pytest.raises(ValueError, match=">= 0"):
        u.cost({"m": {"prompt": -1.0}})
    with pytest.raises(ValueError, match="prices"):
        settings_from({"prices": {"m": {"prompt": -3}}})
    assert u.cost({"m": {"prompt": 1e6}}) == 10.0


def test_damaged_cache_entries_are_misses(tmp_path):
    with ScriptedServer(lambda k, b: yes_no(True)) as srv:
        c = LLMClient(cfg(srv, cache_dir=str(tmp_path)))
        c.complete("x")
        db = sqlite3.connect(tmp_path / "responses.sqlite3")
        for value in (
            '{"text": 42}',
            '{"text": "a", "prompt_tokens": -9}',
            "[1]",
            '{"text": "a", "top_logprobs": "abc"}',
            '{"text": "a", "top_logprobs": [{"x": 1000}]}',
        ):
            db.execute("UPDATE responses SET value=?", (value,))
            db.commit()
            c2 = LLMClient(cfg(srv, cache_dir=str(tmp_path)))
            got = c2.complete("x")
            assert got.text == " Yes" and c2.usage.cache_hits == 0 and c2.usage.calls == 1
        db.close()


# -- item 13: timeout is a deadline; bodies have a size limit ---------------------------------
@pytest.mark.parametrize("headers", [False, True], ids=["trickled body", "trickled headers"])
def test_timeout_is_a_deadline_for_the_whole_request(headers):
    with ScriptedServer(lambda k, b: Reply("Yes", trickle=0.05, trickle_headers=headers)) as srv:
        c = LLMClient(cfg(srv, timeout=0.6, max_retries=1))
        t0 = time.monotonic()
        with pytest.raises(LLMError, match="0.6 s deadline"):
            c.complete("x")
        took = time.monotonic() - t0
    assert srv.calls == 2 and took < 2 * 0.6 + 0.6  # two tries of 0.6 s (each body takes > 10 s)


def test_slow_but_complete_answer_within_deadline_is_fine():
    with ScriptedServer(lambda k, b: Reply(raw='{"choices": [{"text": "ok"}]}', trickle=0.002)) as srv:
        assert LLMClient(cfg(srv, timeout=5)).complete("x").text == "ok"


@pytest.mark.parametrize("case", ["content-length over the limit", "gzip bomb", "unsupported encoding"])
def test_response_bodies_have_a_size_limit(case):
    limit = 64 * 1024
    if case == "gzip bomb":
        reply = lambda k, b: Reply("x", pad=8 * 2**20, gzip=True)  # noqa: E731 - 8 MiB inflates from ~8 KiB
    elif case == "unsupported encoding":
        reply = lambda k, b: Reply("x", headers={"content-encoding": "br"})  # noqa: E731
    else:
        reply = lambda k, b: Reply("x", pad=limit * 2)  # noqa: E731
    with ScriptedServer(reply) as srv:
        c = LLMClient(cfg(srv, max_response_bytes=limit))
        with pytest.raises(LLMError, match="malformed response: the body (is larger than max_response_bytes|has an)"):
            c.complete("x")
        assert srv.calls == 2


def test_default_limit_refuses_a_20_mb_answer_and_gzip_within_limit_works():
    with ScriptedServer(lambda k, b: Reply("x", pad=20 * 10**6)) as srv:
        with pytest.raises(LLMError, match="max_response_bytes"):
            LLMClient(cfg(srv, max_retries=0)).complete("x")
    with ScriptedServer(lambda k, b: Reply("fine", pad=1000, gzip=True)) as srv:
        assert LLMClient(cfg(srv)).complete("x").text == "fine"


# -- item 13: settings -------------------------------------------------------------------------
BAD_SETTINGS = [
    {"timeout": -1},
    {"timeout": "abc"},
    {"timeout": float("nan")},
    {"timeout": float("inf")},
    {"concurrency": 0},
    {"concurrency": 2.5},
    {"max_retries": 10**9},
    {"temperature": "hot"},
    {"max_tokens": True},
    {"max_response_bytes": 0},
    {"base_url": 42},
    {"base_url": "file:///etc/passwd"},
    {"base_url": "http://127.0.0.1:8080@evil.example/v1"},
    {"base_url": "http://user:pw@host/v1"},
    {"base_url": "not a url"},
    {"model": ""},
    {"prices": "free"},
    {"prices": {"m": {"prompt": "x"}}},
    {"sandbox": None},
    {"trusted": True},
    {"progress": 3},
]


@pytest.mark.parametrize("bad", BAD_SETTINGS, ids=[repr(b) for b in BAD_SETTINGS])
def test_bad_settings_are_one_clear_error(bad):
    with pytest.raises(ValueError, match="llm setting|unknown llm setting") as e:
        settings_from(bad)
    assert list(bad)[0] in str(e.value)


# -- item 14: the key is redacted ------------------------------------------------------------
def test_echoed_key_is_redacted_from_rows_errors_and_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(lambda k, b: Reply(echo_headers=True)) as srv:
        c = LLMClient(cfg(srv, cache_dir=str(tmp_path)))
        text = c.chat("hi").text
        assert header(srv, "authorization") == f"Bearer {KEY}"  # the user's own server gets the key
        assert KEY not in text and "Bearer [redacted]" in text
        t = MIRPointwise(cfg(srv, mode="chat"), on_error="flag")
        out = t(frame())
        assert out["llm_reasoning"].str.contains(r"\[redacted\]").all()
        assert not out.astype(str).apply(lambda col: col.str.contains(KEY)).any().any()
        for p in tmp_path.iterdir():
            assert KEY.encode() not in p.read_bytes()
        srv.responder = lambda k, b: Reply(status=400, echo_headers=True)
        with pytest.raises(LLMError) as e:
            LLMClient(cfg(srv)).chat("again")
        assert "HTTP 400" in str(e.value) and KEY not in str(e.value) and KEY not in e.value.cause
        t = MIRPointwise(cfg(srv), on_error="flag")
        out = t(frame())
        assert out["llm_unusable"].all() and not out["llm_reasoning"].str.contains(KEY).any()


# -- item 14: the key goes only where the user configured ------------------------------------
def _pipeline(expr, config=None, **kw):
    import pyterrier_sci as ps

    return ps.pipeline(expr, config=config, **kw)


def _auth_after(srv, t):
    t(frame(2))
    return {header(srv, "authorization", i) for i in range(len(srv.headers))}


def test_pipeline_base_url_gets_no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(lambda k, b: yes_no(True)) as srv:
        llm = repr(cfg(srv))
        for t in (
            _pipeline(f"mir_pointwise(llm={llm})"),  # in the expression
            _pipeline("mir_pointwise", config={"llm": cfg(srv)}),  # in the config's llm: section
            _pipeline(
                "judge",
                config={
                    "llm": cfg(srv),
                    "trusted": True,  # a config cannot trust itself
                    "components": {"judge": {"component": "mir_pointwise"}},
                },
            ),
        ):
            srv.reset()
            assert _auth_after(srv, t) == {"Bearer no-key"}
        # the user's own Python argument is trusted
        srv.reset()
        assert _auth_after(srv, MIRPointwise(cfg(srv))) == {f"Bearer {KEY}"}


def test_trusted_argument_lets_the_config_have_the_key(monkeypatch):
    """ps.pipeline(..., trusted=True): the user vouches for the config; the default stays untrusted."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(lambda k, b: yes_no(True)) as srv:
        assert _auth_after(srv, _pipeline("mir_pointwise", config={"llm": cfg(srv)}, trusted=True)) == {f"Bearer {KEY}"}
        srv.reset()
        assert _auth_after(srv, _pipeline("mir_pointwise", config={"llm": cfg(srv)})) == {"Bearer no-key"}


def test_prism_agents_from_a_pipeline_are_confined(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(lambda k, b: "a query") as srv:
        for expr in (f"prism_agents(llm={cfg(srv)!r})", f"prism_single_agent(llm={cfg(srv)!r})"):
            t = _pipeline(expr)
            assert t.settings.sandbox is not None, expr  # confined: no key for its base_url, no outside files
        trusted = _pipeline(f"prism_agents(llm={cfg(srv)!r})", trusted=True)
        assert trusted.settings.sandbox is None


@pytest.mark.parametrize(
    "how",
    [
        "PYTERRIER_SCI_LLM_BASE_URL",
        "OPENAI_BASE_URL",
        "PYTERRIER_SCI_LLM_TRUSTED_URLS",
        "PYTERRIER_SCI_TRUST_CONFIG",
        "context.trusted",
    ],
)
def test_user_can_allow_the_key(monkeypatch, how):
    from pyterrier_sci.registry import Context

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(lambda k, b: yes_no(True)) as srv:
        ctx = None
        if how == "PYTERRIER_SCI_LLM_TRUSTED_URLS":
            monkeypatch.setenv(how, "http://elsewhere.example/v1, " + srv.base_url.rsplit("/", 1)[0])
        elif how == "PYTERRIER_SCI_TRUST_CONFIG":
            monkeypatch.setenv(how, "1")
        elif how == "context.trusted":
            ctx = Context(settings={"llm": cfg(srv)})
            ctx.trusted = True
        else:
            monkeypatch.setenv(how, srv.base_url + "/")
        t = _pipeline("mir_pointwise", config={"llm": cfg(srv)}, context=ctx)
        assert _auth_after(srv, t) == {f"Bearer {KEY}"}


def test_a_lookalike_url_is_not_allowed(monkeypatch):
    from pyterrier_sci.llm.trust import url_allowed

    monkeypatch.setenv("PYTERRIER_SCI_LLM_TRUSTED_URLS", "https://api.example.com/v1")
    assert url_allowed("https://API.example.com:443/v1/") and url_allowed("https://api.example.com/v1/x")
    for bad in (
        "https://api.example.com.evil.org/v1",
        "http://api.example.com/v1",
        "https://api.example.com/v10",
        "https://api.example.com:444/v1",
        "https://evil.org/api.example.com/v1",
        "https://api.example.com/",
    ):
        assert not url_allowed(bad), bad


def test_withheld_key_and_401_says_why(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedServer(lambda k, b: Reply(status=401)) as srv:
        t = _pipeline("mir_pointwise", config={"llm": cfg(srv)})
        with pytest.raises(LLMError, match="the API key was not sent.*PYTERRIER_SCI_LLM_TRUSTED_URLS"):
            t(frame(1))


def test_guider_llm_from_a_pipeline_gets_no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with (
        ScriptedServer(lambda k, b: "Paper 1: x\nRanking: 1, 2") as guider,
        ScriptedServer(lambda k, b: "Ranking: 2, 1") as main,
    ):
        monkeypatch.setenv("PYTERRIER_SCI_LLM_BASE_URL", main.base_url)  # the user's server
        example = _work() / f"hostile-example-{os.getpid()}.txt"
        t = _pipeline(
            f"hlm_agents(keep_top=0, guider_llm={cfg(guider)!r}, example_path={str(example)!r})",
            config={"llm": cfg(main)},
        )
        t(frame(2))
        assert example.is_file() and guider.calls == 2
        example.unlink()
        assert {header(guider, "authorization", i) for i in range(len(guider.headers))} == {"Bearer no-key"}
        assert {header(main, "authorization", i) for i in range(len(main.headers))} == {f"Bearer {KEY}"}


# -- item 14: files ------------------------------------------------------------------------------
@pytest.fixture
def outside():
    """A directory outside the work directory and the temporary directory (beside this file)."""
    d = Path(__file__).resolve().parent / f".hostile-{os.getpid()}"
    d.mkdir(exist_ok=True)
    (d / "secret.txt").write_text("TOP SECRET $proposal")
    (d / "task.json").write_text(json.dumps({"query": "q", "candidates": [{"title": "a"}, {"title": "b"}]}))
    yield d
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def _work():
    from pyterrier_sci.data import work_dir

    return Path(work_dir())


def test_pipeline_cannot_read_or_write_outside_allowed_dirs(outside, tmp_path):
    from pyterrier_sci.pipeline import PipelineError

    secret = str(outside / "secret.txt")
    rel = os.path.relpath(secret, Path(__file__).resolve().parents[1] / "plugins" / "mir" / "templates")
    work = _work()
    (work / "links").mkdir(parents=True, exist_ok=True)
    link = work / "links" / f"to-secret-{os.getpid()}.txt"
    if not link.is_symlink():
        link.symlink_to(secret)
    cases = [
        f"mir_pointwise(template={secret!r})",
        f"mir_pointwise(template={rel!r})",  # ../../ out of the package templates
        f"mir_pointwise(template={'~/' + os.path.relpath(secret, Path.home())!r})",
        f"mir_pointwise(template={str(link)!r})",  # a link inside the work dir to outside
        f"mir_pointwise(template={str(outside / 'missing.txt')!r})",  # refused whether or not it exists
        f"mir_pointwise(answer_templates={{'chat': {secret!r}}})",
        f"mir_agent(proposal_template={secret!r})",
        f"listwise(template={secret!r})",
        f"pairwise_tournament(template={secret!r})",
        f"hlm_agents(analyzer_system={secret!r})",
        f"hlm_agents(example_path={str(outside / 'evil.txt')!r})",
        f"hlm_agents(guider_task={str(outside / 'task.json')!r})",
        f"sciface_label(system_template={secret!r})",
    ]
    if not str(outside).startswith(os.path.realpath(tempfile.gettempdir())):  # a cache may go under /tmp
        cases.append(f"mir_pointwise(llm={{'cache_dir': {str(outside / 'cache')!r}}})")
    for expr in cases:
        with pytest.raises(PipelineError, match="outside the directories a pipeline may use") as e:
            _pipeline(expr, config={"llm": {"cache_dir": ""}})
        assert "PYTERRIER_SCI_ALLOWED_DIRS" in str(e.value) and "trusted" in str(e.value), expr
    assert not (outside / "evil.txt").exists() and not (outside / "cache").exists()
    # the same from a YAML file someone else wrote
    yaml_file = tmp_path / "p.yaml"
    yaml_file.write_text(f"components:\n  j: {{component: mir_pointwise, template: {secret}}}\npipelines:\n  P: j\n")
    with pytest.raises(PipelineError, match="outside the directories"):
        _pipeline("P", config=str(yaml_file))
    link.unlink()


def test_allowed_places_work(outside, tmp_path, monkeypatch):
    work = _work()
    (work / "t").mkdir(parents=True, exist_ok=True)
    mine = work / "t" / "mine.txt"
    mine.write_text("Mine: $proposal / $paper\n")
    with ScriptedServer(lambda k, b: yes_no(True)) as srv:
        t = _pipeline(f"mir_pointwise(template={str(mine)!r})", config={"llm": cfg(srv, cache_dir=str(tmp_path / "c"))})
        t(frame(1))
        assert srv.requests[0][1]["prompt"].startswith("Mine: proposal q1 / paper 0")
        assert (tmp_path / "c" / "responses.sqlite3").exists()  # a cache under the temp dir is allowed
        monkeypatch.setenv("PYTERRIER_SCI_ALLOWED_DIRS", str(outside))
        t = _pipeline(f"mir_pointwise(template={str(outside / 'secret.txt')!r})", config={"llm": cfg(srv)})
        t(frame(1))
        assert srv.requests[-1][1]["prompt"].startswith("TOP SECRET proposal q1")
        monkeypatch.delenv("PYTERRIER_SCI_ALLOWED_DIRS")
        monkeypatch.setenv("PYTERRIER_SCI_TRUST_CONFIG", "1")
        _pipeline(f"hlm_agents(guider_task={str(outside / 'task.json')!r})", config={"llm": cfg(srv)})
    # the user's own Python code reads any file; a template name never leaves the package
    mir = "pyterrier_sci.plugins.mir"
    assert load_template(str(outside / "secret.txt"), mir).startswith("TOP SECRET")
    assert load_template("pointwise", mir) and load_template("Rate $paper / 10", mir) == "Rate $paper / 10"
    with pytest.raises(FileNotFoundError):
        load_template("../../../../../../../../etc/nonexistent-template", mir)


def test_example_path_never_replaces_a_non_regular_file(tmp_path):
    with ScriptedServer(lambda k, b: "Ranking: 1") as srv:
        (tmp_path / "d").mkdir()
        t = HLMAgents(cfg(srv), keep_top=0, example_path=tmp_path / "d")
        with pytest.raises(ValueError, match="not a regular file"):
            t(frame(2))
        assert (tmp_path / "d").is_dir() and srv.calls == 0


def test_pipeline_llm_section_must_be_a_mapping():
    from pyterrier_sci.pipeline import PipelineError

    for bad in ("mir_pointwise(llm='http://evil/v1')", "mir_pointwise(llm=[1])"):
        with pytest.raises(PipelineError, match="llm"):
            _pipeline(bad)


# -- item 15: a newcomer's first LLM pipeline ---------------------------------------------------
def test_pool_text_mir_pointwise_end_to_end_on_csfcube():
    import pyterrier as pt

    try:
        topics = pt.get_dataset("irds:sci/csfcube/method").get_topics().sort_values("qid").head(2)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CSFCube data not available ({e}); set PYTERRIER_SCI_DATA")

    def oracle(kind, body):  # relevant when the abstract mentions "model"
        paper = body["prompt"].rsplit("Candidate paper", 1)[-1]
        return yes_no("model" in paper.lower(), 0.8)

    with ScriptedServer(oracle) as srv:
        pipe = _pipeline(
            "pool % 5 >> text >> mir_pointwise", config={"llm": cfg(srv)}, dataset="irds:sci/csfcube/method"
        )
        out = pipe(topics)
        assert srv.calls == 10 and len(out) == 10 and not out["llm_unusable"].any()
        assert {"title", "abstract", "llm_relevant", "llm_confidence"} <= set(out.columns)
        for (_, body), (_, row) in zip(srv.requests, out.sort_values(["qid", "docno"]).iterrows()):
            assert "Abstract" in body["prompt"]
        prompts = "\n".join(b["prompt"] for _, b in srv.requests)
        for _, row in out.iterrows():  # title and abstract reach the prompt
            assert row["title"].strip()[:40] in prompts and row["abstract"].strip()[:40] in prompts
        for _, g in out.groupby("qid"):  # relevant first, pool order inside
            g = g.sort_values("rank")
            assert list(g["llm_relevant"]) == sorted(g["llm_relevant"], reverse=True)
            assert list(g["llm_relevant"]) == [
                float("model" in f"{t} {a}".lower()) for t, a in zip(g["title"], g["abstract"])
            ]


def test_rerankers_read_abstract_without_text_column():
    with ScriptedServer(lambda k, b: "Ranking: 2, 1") as srv:
        df = frame(2).drop(columns=["text"]).assign(abstract=["alpha abstract", "beta abstract"])
        for cls in (Listwise,):
            out = cls(cfg(srv))(df)
            assert list(out.sort_values("rank")["docno"]) == ["d1", "d0"] and "text" not in out.columns
        assert "alpha abstract" in srv.requests[0][1]["prompt"]
        with pytest.raises(Exception, match="text"):
            Listwise(cfg(srv))(frame(2).drop(columns=["text"]))  # neither text nor abstract


# -- proxies from the environment, as the OpenAI client honours them ----------------------------
class _ForwardProxy:
    """A plain-HTTP forward proxy on loopback: records each request line it is sent and forwards
    the request to its absolute URL; ``stall=True`` accepts and never answers."""

    def __init__(self, stall: bool = False):
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit
        seen = self.seen = []
        release = self.release = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                seen.append(self.requestline)
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if stall:
                    release.wait(30)
                    return
                url = urlsplit(self.path)
                # the proxy resolves the names its clients send: llm.test is its loopback's server
                host = "127.0.0.1" if url.hostname == "llm.test" else url.hostname
                conn = http.client.HTTPConnection(host, url.port, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "host")}
                conn.request("POST", url.path + (f"?{url.query}" if url.query else ""), body, headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy_env(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_requests_go_through_the_environments_proxy(proxy_env):
    """HTTP_PROXY is used as the plain OpenAI client uses it (httpx drops the environment's proxies
    once a client has its own transport; the toolkit's transport carries the deadline)."""
    with ScriptedServer(lambda k, b: Reply("Yes")) as srv, _ForwardProxy() as proxy:
        proxy_env.setenv("HTTP_PROXY", proxy.url)
        # llm.test resolves nowhere here: only the proxy knows it (as its loopback server)
        remote = srv.base_url.replace("127.0.0.1", "llm.test")
        assert LLMClient({**cfg(srv), "base_url": remote}).complete("x").text == "Yes"
        assert srv.calls == 1 and len(proxy.seen) == 1
        assert proxy.seen[0].startswith(f"POST {remote}/completions ")
        # a loopback server is reached directly, proxy or not
        assert LLMClient(cfg(srv)).complete("y").text == "Yes"
        assert srv.calls == 2 and len(proxy.seen) == 1
        # NO_PROXY is honoured: the proxied name now goes straight (and cannot be resolved)
        proxy_env.setenv("NO_PROXY", "llm.test")
        with pytest.raises(LLMError, match="llm.test"):
            LLMClient({**cfg(srv), "base_url": remote, "max_retries": 0}).complete("z")
        assert srv.calls == 2 and len(proxy.seen) == 1


def test_the_deadline_holds_through_a_proxy(proxy_env):
    with ScriptedServer(lambda k, b: Reply("Yes")) as srv, _ForwardProxy(stall=True) as proxy:
        proxy_env.setenv("HTTP_PROXY", proxy.url)
        remote = srv.base_url.replace("127.0.0.1", "llm.test")
        c = LLMClient({**cfg(srv, timeout=0.6, max_retries=0), "base_url": remote})
        t0 = time.monotonic()
        with pytest.raises(LLMError, match="0.6 s deadline"):
            c.complete("x")
        assert time.monotonic() - t0 < 2.0 and len(proxy.seen) == 1 and srv.calls == 0


def test_an_unusable_proxy_is_one_clear_error(proxy_env):
    with ScriptedServer(lambda k, b: Reply("Yes")) as srv:
        proxy_env.setenv("HTTP_PROXY", "ftp://user:secret@127.0.0.1:1")
        with pytest.raises(LLMError, match=r"the proxy 'ftp://\*\*\*@127.0.0.1:1' .*cannot be used") as err:
            LLMClient(cfg(srv)).complete("x")
        assert "secret" not in str(err.value) and srv.calls == 0


# -- issue 31 item 6: a dry run's token counting cannot hang on a slow server ----------------------
def test_dry_run_token_counting_has_a_deadline_against_a_trickling_server(monkeypatch):
    """``POST /tokenize`` answered one byte a second (a 60-byte body): the probe gives up at the
    2 s deadline for the whole request, the server is not asked again, the calls are counted with
    the 4-characters rule, and nothing is sent to the completions endpoint."""
    from pyterrier_sci.llm import dryrun
    monkeypatch.setattr(dryrun, "_local_tokenizer", lambda model: None)   # no transformers import in the timing
    slow = Reply(body={"tokens": list(range(20))}, trickle=1.0)
    with ScriptedServer(lambda k, b: yes_no(True), tokenizer=lambda path, body: slow) as srv:
        c = LLMClient(cfg(srv))
        t0 = time.monotonic()
        with dryrun.dry_run() as run:
            assert c.complete("one prompt of some words").finish_reason == "dry_run"
            c.complete("another prompt")
        took = time.monotonic() - t0
        kinds = [k for k, _ in srv.requests]
    tally = run.tallies[id(c.usage)]
    assert took < dryrun.TOKENIZE_DEADLINE + 2.0, took
    assert kinds == ["tokenize"]   # one probe; no /extras/tokenize, no completion
    assert (tally.calls, tally.tokenizer) == (2, dryrun.FOUR_CHARS) and tally.prompt_tokens > 0


def test_dry_run_token_counting_uses_a_prompt_tokenizer():
    with ScriptedServer(lambda k, b: yes_no(True),
                        tokenizer=lambda path, body: {"tokens": list(range(len(body.get("content", ""))))}) as srv:
        from pyterrier_sci.llm import dryrun
        c = LLMClient(cfg(srv))
        with dryrun.dry_run() as run:
            c.complete("abcdef")
    tally = run.tallies[id(c.usage)]
    assert tally.tokenizer == "the server's /tokenize" and tally.prompt_tokens == 6
    assert [k for k, _ in srv.requests] == ["tokenize", "tokenize"]


# -- issue 31 item 10: a damaged cache file is one error naming it -----------------------------------
@pytest.mark.parametrize("content", [b"this is not a database" * 100, b"SQLite format 3\x00" + b"\xff" * 4000, None],
                         ids=["text", "bad header", "truncated"])
def test_a_damaged_cache_file_is_one_error_naming_it(tmp_path, content):
    from pyterrier_sci.cli import describe_error
    from pyterrier_sci.llm import LLMCacheError, ResponseCache
    db = tmp_path / "responses.sqlite3"
    if content is None:   # a real cache of 200 answers, cut in the middle of its pages
        cache = ResponseCache(tmp_path)
        for i in range(200):
            cache.put(f"k{i}", {"text": "x" * 200})
        cache._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cache._conn().close()
        content = db.read_bytes()[:len(db.read_bytes()) // 2]
        for side in ("-wal", "-shm"):
            (tmp_path / f"responses.sqlite3{side}").unlink(missing_ok=True)
    db.write_bytes(content)
    with ScriptedServer(lambda k, b: yes_no(True)) as srv:
        c = LLMClient(cfg(srv, cache_dir=str(tmp_path)))
        with pytest.raises(LLMCacheError) as err:
            c.complete("x")
        assert srv.calls == 0
    line = describe_error(err.value)
    assert str(tmp_path / "responses.sqlite3") in line and "cannot be used" in line and "delete it" in line, line
    assert "\n" not in line
