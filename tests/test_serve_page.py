"""The search page of pyterrier-sci serve in headless Chromium (as tests/test_report.py renders its HTML),
driven from the keyboard through the DevTools protocol: "/" focuses the query box, typing and Enter
search, Tab and the arrow keys choose a pipeline; the page shows the same results the API gives."""
import json
import shutil
import time

import pytest
from conftest import needs_data
from serve_helpers import LiveServer, csfcube_service, devtools_chromium, request

from pyterrier_sci.serve import SearchAPI

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [needs_data("csfcube"), pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")]
websockets = pytest.importorskip("websockets")

KEYS = {"Enter": ("Enter", 13, "\r"), "Tab": ("Tab", 9, None), "ArrowDown": ("ArrowDown", 40, None),
        "/": ("Slash", 191, "/")}


class Page:
    """One Chromium tab over the DevTools protocol."""

    def __init__(self, ws):
        self.ws, self.n = ws, 0

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.n:
                assert "error" not in msg, msg
                return msg.get("result", {})

    def js(self, expr):
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        return res["result"].get("value")

    def key(self, name, shift=False):
        code, vk, text = KEYS[name]
        ev = dict(key=name, code=code, windowsVirtualKeyCode=vk, nativeVirtualKeyCode=vk, modifiers=8 if shift else 0)
        self.call("Input.dispatchKeyEvent", type="keyDown", **ev, **({"text": text} if text else {}))
        self.call("Input.dispatchKeyEvent", type="keyUp", **ev)

    def type(self, text):
        self.call("Input.insertText", text=text)

    def wait(self, expr, seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.js(expr):
                return
            time.sleep(0.1)
        status = self.js("document.getElementById('status').textContent")
        raise AssertionError(f"timed out waiting for {expr}; status: {status}")

    def results(self):
        return self.js("[...document.querySelectorAll('#results li.result')].map(li => ({docno: li.dataset.docno, "
                       "title: li.querySelector('h2').textContent, "
                       "snippet: li.querySelector('.snippet').textContent}))")


@pytest.fixture(scope="module")
def server():
    svc = csfcube_service(["bm25", "Short=bm25 % 5"]).load()
    with LiveServer(SearchAPI(svc)) as srv:
        yield srv


@pytest.fixture()
def page(server, tmp_path):
    from websockets.sync.client import connect
    with devtools_chromium(CHROMIUM, tmp_path / "profile", server.url + "/", page_url=server.url) as target:
        with connect(target["webSocketDebuggerUrl"], max_size=2 ** 24) as ws:
            p = Page(ws)
            p.wait("document.body.dataset.ready === '1'")
            yield p


def api_results(server, query, pipeline, k=10):
    status, _, body = request(f"{server.url}/v1/search?q={query.replace(' ', '+')}&k={k}&pipeline={pipeline}")
    assert status == 200
    return [{"docno": h["docno"], "title": h["title"], "snippet": h["snippet"]} for h in body["results"]]


def test_search_from_the_keyboard_shows_the_api_results(server, page):
    assert page.js("[...document.querySelectorAll('#pipeline option')].map(o => o.value)") == ["bm25", "Short"]
    page.js("document.activeElement && document.activeElement.blur()")
    page.key("/")                                             # "/" focuses the query box
    assert page.js("document.activeElement.id") == "q"
    page.type("sentiment analysis of movie reviews")
    page.key("Enter")
    page.wait("document.querySelectorAll('#results li.result').length > 0")
    shown = page.results()
    assert shown == api_results(server, "sentiment analysis of movie reviews", "bm25")
    assert len(shown) == 10 and all(r["title"] and r["snippet"] for r in shown)
    assert "10 results" in page.js("document.getElementById('status').textContent")
    # Tab to the pipeline list, ArrowDown picks the next one, Shift+Tab back to the box, Enter searches again
    page.key("Tab")
    assert page.js("document.activeElement.id") == "pipeline"
    page.key("ArrowDown")
    assert page.js("document.getElementById('pipeline').value") == "Short"
    page.key("Tab", shift=True)
    assert page.js("document.activeElement.id") == "q"
    before = page.js("document.body.dataset.searched")
    page.key("Enter")
    page.wait(f"document.body.dataset.searched !== '{before}'")
    assert page.results() == api_results(server, "sentiment analysis of movie reviews", "Short")
    assert len(page.results()) == 5
    # the URL keeps the search
    assert "q=sentiment+analysis+of+movie+reviews" in page.js("location.search")


def test_errors_show_the_servers_message(server, page):
    page.js("document.getElementById('q').focus()")
    page.type("x" * 2001)
    page.js("document.getElementById('q').removeAttribute('maxlength')")
    page.js("document.getElementById('q').value = 'y'.repeat(2001)")
    page.key("Enter")
    page.wait("document.getElementById('status').className === 'error'")
    assert "at most 2,000" in page.js("document.getElementById('status').textContent")
