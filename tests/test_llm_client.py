"""The LLM client against a scripted OpenAI-compatible server on loopback (real ``openai`` client)."""

import pickle
import subprocess
import sys
import textwrap
import time

import pytest
from llm_server import Reply, ScriptedServer, yes_no

from pyterrier_sci.llm import (
    LLMClient,
    LLMError,
    ResponseCache,
    settings_from,
    truncate,
)


@pytest.fixture
def server():
    with ScriptedServer() as srv:
        yield srv


def client_for(srv, tmp_path=None, **kw):
    cfg = {
        "base_url": srv.base_url,
        "model": "test-model",
        "cache_dir": str(tmp_path / "cache") if tmp_path else "",
        "backoff": 0.01,
        "backoff_max": 0.05,
        "max_retries": 3,
        "progress": False,
        "timeout": 5,
    }
    cfg.update(kw)
    return LLMClient(cfg)


# -- settings -----------------------------------------------------------------------------
def test_settings_env_and_config(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://a/v1")
    monkeypatch.setenv("PYTERRIER_SCI_LLM_MODEL", "m-env")
    monkeypatch.setenv("PYTERRIER_SCI_LLM_CONCURRENCY", "7")
    s = settings_from({"temperature": 0.5})
    assert (s.base_url, s.model, s.concurrency, s.temperature) == ("http://a/v1", "m-env", 7, 0.5)
    monkeypatch.setenv("PYTERRIER_SCI_LLM_BASE_URL", "http://b/v1")
    assert settings_from().base_url == "http://b/v1"
    assert settings_from({"base_url": "http://c/v1"}).base_url == "http://c/v1"  # config wins


def test_api_key_never_a_setting(monkeypatch):
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        settings_from({"api_key": "sk-secret"})
    with pytest.raises(ValueError, match="unknown llm setting"):
        settings_from({"modle": "x"})
    with pytest.raises(ValueError):
        settings_from({"mode": "telepathy"})


def test_api_key_not_in_cache_or_pickle(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-123")
    server.responder = lambda k, b: "hello"
    c = client_for(server, tmp_path)
    assert c.chat("hi").text == "hello"
    blob = pickle.dumps(c)
    assert b"sk-very-secret" not in blob
    db = (tmp_path / "cache" / "responses.sqlite3").read_bytes()
    wal = tmp_path / "cache" / "responses.sqlite3-wal"
    assert b"sk-very-secret" not in db and (not wal.exists() or b"sk-very-secret" not in wal.read_bytes())
    assert "sk-very-secret" not in repr(c.settings.public_dict())


# -- calls, logprobs, decisions -------------------------------------------------------------
def test_chat_and_completion_with_logprobs(server):
    server.script(Reply("hi there"), yes_no(True, 0.8))
    c = client_for(server)
    assert c.chat([{"role": "user", "content": "hello"}]).text == "hi there"
    comp = c.complete("Is it? Answer (Yes or No):", max_tokens=2, logprobs=5)
    assert comp.text == " Yes"
    assert comp.top_logprobs[0][" Yes"] == pytest.approx(-0.2231, abs=1e-3)
    kinds = [k for k, _ in server.requests]
    assert kinds == ["chat", "completion"]
    assert server.requests[1][1]["logprobs"] == 5
    assert c.usage.calls == 2 and c.usage.prompt_tokens == 1 + 6 and c.usage.completion_tokens == 2 + 1


def test_choose_completion_mode_uses_logprobs(server):
    server.script(yes_no(False, 0.7))
    c = client_for(server, mode="completion")
    ch = c.choose("Answer (Yes or No):")
    assert ch.answer == "No" and ch.confidence == pytest.approx(0.7, abs=1e-6)
    assert ch.probs["Yes"] == pytest.approx(0.3, abs=1e-6)


def test_choose_chat_json_and_plain(server):
    server.script(
        Reply('```json\n{"reasoning": "shares the method", "confidence": 0.8, "relevant": 1}\n```'),
        Reply("No. The domains are unrelated."),
        Reply('{"reasoning": "x", "relevant": "maybe"}'),
    )
    c = client_for(server, mode="chat")
    a = c.choose("q")
    assert (a.answer, a.confidence, a.reasoning) == ("Yes", 0.8, "shares the method")
    b = c.choose("q")
    assert b.answer == "No" and "unrelated" in b.reasoning
    bad = c.choose("q")
    assert bad.answer is None and not bad.usable


def test_auto_mode_falls_back_to_completion_when_chat_is_empty(server):
    server.script(Reply(""), yes_no(True, 0.9), yes_no(False, 0.9))
    c = client_for(server, mode="auto")
    assert c.choose({"chat": "chat form", "completion": "completion form"}).answer == "Yes"
    assert c.mode == "completion"
    assert c.choose({"chat": "chat form", "completion": "completion form 2"}).answer == "No"
    assert [k for k, _ in server.requests] == ["chat", "completion", "completion"]
    assert server.requests[1][1]["prompt"] == "completion form"


def test_auto_mode_falls_back_when_chat_answer_is_unreadable(server):
    server.script(Reply("Well, it depends on many things"), yes_no(True, 0.9), Reply('{"relevant": 0}'))
    c = client_for(server, mode="auto")
    ch = c.choose({"chat": "c", "completion": "p"})
    assert ch.answer == "Yes" and ch.mode == "completion" and c.mode == "completion"
    assert [k for k, _ in server.requests] == ["chat", "completion"]


# -- retries and errors --------------------------------------------------------------------
def test_retry_429_then_success(server):
    server.script(Reply(status=429), Reply(status=429), Reply("ok"))
    c = client_for(server)
    t0 = time.time()
    assert c.chat("x").text == "ok"
    assert server.calls == 3
    assert (c.usage.requests, c.usage.retries, c.usage.calls, c.usage.errors) == (3, 2, 1, 0)
    assert time.time() - t0 < 2


def test_retry_500_and_malformed_body(server):
    server.script(Reply(status=500), Reply(raw="{not json", status=200), Reply("fine"))
    c = client_for(server)
    assert c.complete("x").text == "fine"
    assert server.calls == 3


def test_final_error_names_endpoint_and_cause(server):
    server.responder = lambda k, b: Reply(status=503)
    c = client_for(server, max_retries=2)
    with pytest.raises(LLMError) as e:
        c.chat("x")
    msg = str(e.value)
    assert server.base_url in msg and "503" in msg and "3 tries" in msg
    assert server.calls == 3 and c.usage.errors == 1 and c.usage.calls == 0


def test_non_retryable_error_is_immediate(server):
    server.responder = lambda k, b: Reply(status=400)
    c = client_for(server)
    with pytest.raises(LLMError, match="HTTP 400"):
        c.chat("x")
    assert server.calls == 1


def test_timeout_is_retried(server):
    server.script(Reply("late", delay=1.5), Reply("on time"))
    c = client_for(server, timeout=0.5)
    assert c.chat("x").text == "on time"
    assert server.calls == 2


def test_connection_refused_clear_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = LLMClient(
        {
            "base_url": f"http://127.0.0.1:{port}/v1",
            "cache_dir": "",
            "max_retries": 1,
            "backoff": 0.01,
            "progress": False,
        }
    )
    with pytest.raises(LLMError, match=f"127.0.0.1:{port}.*connection error"):
        c.complete("x")


def test_backoff_grows_and_honours_retry_after(server):
    c = client_for(server, backoff=1.0, backoff_max=30)
    d = [c._delay(i, None) for i in range(4)]
    for i, x in enumerate(d):
        assert 0.5 * 2**i <= x < 1.5 * 2**i
    assert c._delay(0, 7.0) == 7.0
    assert client_for(server, backoff=1.0, backoff_max=3)._delay(5, None) == 3


# -- cache -------------------------------------------------------------------------------------
def test_cache_hit_on_rerun(server, tmp_path):
    server.responder = lambda k, b: "answer"
    c = client_for(server, tmp_path)
    for _ in range(2):
        assert c.chat("same prompt").text == "answer"
    assert server.calls == 1 and c.usage.cache_hits == 1
    c2 = client_for(server, tmp_path)  # a new process-like client, same cache dir
    assert c2.chat("same prompt").text == "answer" and server.calls == 1
    c2.chat("same prompt", temperature=0.7)  # other generation parameters: a new key
    client_for(server, tmp_path, model="other").chat("same prompt")  # other model: a new key
    assert server.calls == 3


def test_errors_are_not_cached(server, tmp_path):
    server.script(Reply(status=500), Reply(status=500))
    c = client_for(server, tmp_path, max_retries=1)
    with pytest.raises(LLMError):
        c.chat("p")
    server.responder = lambda k, b: "good"
    assert c.chat("p").text == "good"
    assert c.usage.cache_hits == 0


def test_cache_concurrent_writers_threads_and_processes(tmp_path):
    cache = ResponseCache(tmp_path)
    code = textwrap.dedent(f"""
        import sys
        from pyterrier_sci.llm.cache import ResponseCache
        c = ResponseCache({str(tmp_path)!r})
        for i in range(200):
            c.put(f"k{{i % 50}}-{{sys.argv[1]}}", {{"text": "v" * 100, "i": i}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p)]) for p in range(3)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: cache.put(f"t{i % 40}", {"text": str(i)}), range(400)))
    assert all(p.wait(60) == 0 for p in procs)
    assert len(cache) == 40 + 3 * 50
    assert cache.get("k49-2")["i"] == 199


def test_cache_survives_kill_9(tmp_path):
    """A run killed with SIGKILL mid-way keeps its finished calls; the rerun repeats none."""
    with ScriptedServer(lambda k, b: "answer " + b["prompt"], latency=0.05) as srv:
        cache_dir = tmp_path / "cache"
        code = textwrap.dedent(f"""
            from pyterrier_sci.llm import LLMClient
            c = LLMClient({{"base_url": {srv.base_url!r}, "cache_dir": {str(cache_dir)!r}, "progress": False, "model": "test-model"}})
            for i in range(1000):
                c.complete(f"prompt {{i}}")
        """)  # noqa: E501
        proc = subprocess.Popen([sys.executable, "-c", code])
        deadline = time.time() + 60
        while srv.calls < 12 and time.time() < deadline:
            time.sleep(0.02)
        proc.kill()
        proc.wait()
        sent = srv.calls
        assert 12 <= sent < 1000
        srv.reset()
        c = client_for(srv, tmp_path)
        for i in range(sent + 5):
            assert c.complete(f"prompt {i}").text == f"answer prompt {i}"
        # at most the one request in flight at the kill is asked again, plus the 5 new ones
        assert srv.calls <= 6 and c.usage.cache_hits >= sent - 1


# -- concurrency and accounting --------------------------------------------------------------
def test_concurrency_speedup(server):
    server.latency = 0.2
    server.responder = lambda k, b: "x"
    c = client_for(server, concurrency=8)
    c.complete("warm-up")  # imports openai and opens the client outside the timing
    t0 = time.time()
    out = c.map(lambda i: c.complete(f"p{i}").text, range(8))
    took = time.time() - t0
    assert out == ["x"] * 8
    assert took < 0.8, took  # sequential would take 8 x 0.2 = 1.6 s
    c1 = client_for(server, concurrency=1)
    c1.complete("warm-up")
    t0 = time.time()
    c1.map(lambda i: c1.complete(f"q{i}").text, range(4))
    assert time.time() - t0 >= 0.8


def test_map_keeps_order_and_raises_first_error(server):
    server.responder = lambda k, b: b["prompt"].upper()
    c = client_for(server, concurrency=4)
    assert c.map(lambda s: c.complete(s).text, list("abcdefgh")) == list("ABCDEFGH")

    def boom(i):
        if i == 3:
            raise LLMError("down")
        return i

    with pytest.raises(LLMError):
        c.map(boom, range(10))


def test_usage_accounting_and_prices(server, tmp_path):
    server.responder = lambda k, b: "two words"
    c = client_for(server, tmp_path, prices={"test-model": {"prompt": 1.0, "completion": 2.0}})
    c.complete("one two three")
    c.complete("one two three")
    u = c.usage
    assert (u.calls, u.cache_hits, u.prompt_tokens, u.completion_tokens) == (1, 1, 3, 2)
    assert u.cost(c.settings.prices) == pytest.approx((3 * 1.0 + 2 * 2.0) / 1e6)
    u2 = pickle.loads(pickle.dumps(u))
    assert u2.as_dict() == u.as_dict()


def test_truncate_budget():
    text = " ".join(["word"] * 1000)
    t = truncate(text, 50)
    assert len(t) <= 50 * 4 + 4 and t.endswith("...")
    assert truncate("short", 50) == "short"
