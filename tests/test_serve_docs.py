"""The interactive API docs of pyterrier-sci serve (``/docs``) work offline: the page and every file it
loads come from the server itself (Swagger UI from the fastapi-swagger package), Chromium renders the API's
operations with every other host unreachable, the files follow the token rules of the search page's static
files, a path that climbs out of the files' folder is refused, and without the package ``/docs`` says so."""
import http.client
import json
import re
import shutil
import time
import urllib.request
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest
from conftest import needs_data
from serve_helpers import LiveServer, csfcube_service, devtools_chromium, request

from pyterrier_sci.serve import SearchAPI, ServeSettings, docs_page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TOKEN = "docs-test-token-0123456789"
# no skip without fastapi-swagger: the serve and test extras install it, so its absence is a failure
pytestmark = needs_data("csfcube")
#: the operations the rendered page must show (paths of the app's OpenAPI schema)
OPERATIONS = {"/v1/search", "/v1/batch_search", "/v1/papers/{docno}", "/v1/similar", "/v1/suggest_citations"}


def installed() -> docs_page.SwaggerAssets:
    found = docs_page.swagger_assets()
    assert isinstance(found, docs_page.SwaggerAssets), found.message
    return found


@pytest.fixture(scope="module")
def service():
    return csfcube_service(["bm25"]).load()


@pytest.fixture(scope="module")
def server(service):
    with LiveServer(SearchAPI(service)) as srv:
        yield srv


@pytest.fixture(scope="module")
def token_server(service):
    with LiveServer(SearchAPI(service, ServeSettings(token=TOKEN))) as srv:
        yield srv


class References(HTMLParser):
    """The URLs a page loads by itself: ``src`` of scripts and images, ``href`` of stylesheets and icons."""

    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "img", "iframe") and a.get("src"):
            self.urls.append(a["src"])
        if tag == "link" and a.get("href"):
            self.urls.append(a["href"])


def raw_get(base, target, headers=None):
    """``(status, body)`` of ``GET target`` sent exactly as written (no client normalises its dots)."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("GET", target, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_docs_and_every_file_it_loads_come_from_the_server(server):
    status, headers, page = request(server.url + "/docs")
    assert status == 200 and headers["content-type"].startswith("text/html"), (status, page)
    assert headers["cache-control"] == "no-cache"
    assert request(server.url + "/docs", method="HEAD")[0] == 200
    assert not re.search(r"(?:https?:)?//", page), "the page names another host"
    refs = References()
    refs.feed(page)
    # the schema Swagger UI fetches is named in its script, the rest in tags
    schema = re.search(r"url: '([^']+)'", page).group(1)
    assert schema == "/openapi.json"
    assert len(refs.urls) == 3, refs.urls
    want = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "application/json"}
    here = urlsplit(server.url)
    version = installed().version
    for ref in refs.urls + [schema]:
        url = urljoin(server.url + "/docs", ref)
        assert urlsplit(url)[:2] == here[:2], f"{ref} is not on the server"
        with urllib.request.urlopen(url, timeout=30) as r:
            body, ctype, cache = r.read(), r.headers["content-type"], r.headers.get("cache-control", "")
        assert r.status == 200 and body, url
        kind = next(v for k, v in want.items() if urlsplit(url).path.endswith(k))
        assert kind in ctype, (url, ctype)
        if ref != schema:
            assert ref.startswith(f"/docs/assets/{version}/")
            assert "immutable" in cache and r.headers["x-content-type-options"] == "nosniff"
            # the file the package ships, byte for byte
            assert body == installed().files[ref.rsplit("/", 1)[1]].read_bytes()
    # the stylesheet loads nothing from elsewhere either (its images are data: URLs)
    css = request(server.url + refs.urls[[u.endswith(".css") for u in refs.urls].index(True)])[2]
    assert all(u.strip("'\" ").startswith("data:") for u in re.findall(r"url\(([^)]*)\)", css))


def chromium_session(url, profile):
    """Opens ``url`` in headless Chromium with every host but 127.0.0.1 unresolvable; returns the DOM
    once Swagger UI shows operations (or after 60 s) and every URL the page requested."""
    from websockets.sync.client import connect
    with devtools_chromium(CHROMIUM, profile, extra_args=["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
                           ) as page:
        requested, n = [], [0]
        with connect(page["webSocketDebuggerUrl"], max_size=2 ** 26) as ws:
            def call(method, **params):
                n[0] += 1
                ws.send(json.dumps({"id": n[0], "method": method, "params": params}))
                while True:
                    msg = json.loads(ws.recv(timeout=60))
                    if msg.get("method") == "Network.requestWillBeSent":
                        requested.append(msg["params"]["request"]["url"])
                    if msg.get("id") == n[0]:
                        assert "error" not in msg, msg
                        return msg.get("result", {})

            def js(expr):
                return call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

            call("Network.enable")
            call("Page.navigate", url=url)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not js(
                    "document.querySelectorAll('.swagger-ui .opblock-summary-path').length > 0"
                    " || !!document.querySelector('.swagger-ui .errors-wrapper')"):
                time.sleep(0.2)
            time.sleep(0.5)  # a late request (a font, a validator badge) would show here
            dom = js("document.documentElement.outerHTML")
            js("0")          # collects the events sent meanwhile
        return dom, requested


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_chromium_renders_the_docs_with_other_hosts_unreachable(server, tmp_path):
    pytest.importorskip("websockets")
    dom, requested = chromium_session(server.url + "/docs", tmp_path / "profile")
    # every request of the page went to the server
    assert requested and all(u.startswith(server.url + "/") or u.startswith("data:") for u in requested), requested
    assert server.url + "/openapi.json" in requested
    # the rendered Swagger UI: its root element holding the API's operations, and no error box
    assert 'class="swagger-ui"' in dom
    ui = dom[dom.index('class="swagger-ui"'):]
    shown = set(re.findall(r'class="opblock-summary-path" data-path="([^"]+)"', ui))
    assert OPERATIONS <= shown, shown
    assert "errors-wrapper" not in ui and "Failed to load API definition" not in ui
    assert "pyterrier-sci search API" in ui


UP = 24  # more levels than any install's folder has: the file system's root
TRAVERSALS = [
    "{a}" + "../" * UP + "etc/passwd",
    "{a}" + "%2e%2e/" * UP + "etc/passwd",
    "{a}" + "..%2f" * UP + "etc%2fpasswd",
    "{a}%2e%2e%2f__init__.py",
    "{a}..%5c..%5c__init__.py",
    "{a}__init__.py",                   # in the package's folder, but not one of the files served
    "{a}%2e%2e",
    "{a}.",
    "{a}/etc/passwd",
    "{prefix}..%2f{version}/swagger-ui.css",
    "{prefix}0.0.0/swagger-ui.css",     # another version than the installed one
    "{prefix}%2e%2e/%2e%2e/pyproject.toml",
]


def test_a_path_out_of_the_files_folder_is_refused(server):
    version = installed().version
    prefix = docs_page.ASSETS_PREFIX
    a = f"{prefix}{version}/"
    assert raw_get(server.url, a + "swagger-ui.css")[0] == 200
    for t in TRAVERSALS:
        target = t.format(a=a, prefix=prefix, version=version)
        status, body = raw_get(server.url, target)
        assert status in (400, 404), (target, status, body[:200])
        assert b"root:" not in body and b"import" not in body and b"[metadata]" not in body, target


def test_the_files_need_no_token_and_open_nothing_else(token_server):
    url, auth = token_server.url, {"Authorization": f"Bearer {TOKEN}"}
    # /docs and the schema it renders need the token, as before; the files hold no data and do not
    assert request(url + "/docs")[0] == 401 and request(url + "/openapi.json")[0] == 401
    status, _, page = request(url + "/docs", headers=auth)
    assert status == 200
    refs = References()
    refs.feed(page)
    for ref in refs.urls:
        assert raw_get(url, ref)[0] == 200, ref
    # the files' open prefix does not open another route
    for target in ["/docs/assets/../openapi.json", "/docs/assets/%2e%2e/%2e%2e/v1/stats",
                   "/docs/assets/..%2f..%2fv1%2fpipelines", "/docs/assets/x/../../../docs"]:
        status, body = raw_get(url, target)
        assert status in (400, 401, 404) and b"paths" not in body and b"batching" not in body, (target, status)


def test_without_the_package_docs_says_so_in_one_line(service, monkeypatch):
    monkeypatch.setattr(docs_page, "SWAGGER_DISTRIBUTION", "pyterrier-sci-no-such-swagger-package")
    with LiveServer(SearchAPI(service)) as srv:
        status, headers, body = request(srv.url + "/docs")
        assert status == 503 and headers["content-type"] == "application/json", body
        message = body["error"]["message"]
        assert body["error"]["code"] == "docs_unavailable" and "\n" not in message
        assert "pyterrier-sci-no-such-swagger-package" in message and "pip install" in message
        assert request(srv.url + "/docs/assets/1/swagger-ui.css")[0] == 503
        # the API does not need it
        assert request(srv.url + "/openapi.json")[0] == 200
    # a package that has moved or lost a file is named the same way
    monkeypatch.setattr(docs_page, "SWAGGER_DISTRIBUTION", "fastapi-swagger")
    monkeypatch.setattr(docs_page, "SWAGGER_FOLDER", "fastapi_swagger/moved")
    found = docs_page.swagger_assets()
    assert isinstance(found, docs_page.ServeError) and found.code == "docs_unavailable"
    assert "fastapi-swagger" in found.message and "reinstall" in found.message
