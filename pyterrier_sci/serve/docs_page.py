"""The interactive API docs at ``/docs`` without a CDN: FastAPI's Swagger UI page
(``get_swagger_ui_html``) pointed at Swagger UI's files served by the app itself.

The files come from the installed ``fastapi-swagger`` package (MIT; a copy of the ``swagger-ui-dist``
release it is built from), read where its distribution installed them; nothing of Swagger UI lives in this
repository.  They are served at ``/docs/assets/VERSION/NAME``, VERSION being the package's version:

- only the names of :data:`ASSET_TYPES` (a fixed list, looked up in a dict, never joined to a request's
  path), and only under the installed version; anything else is a 404;
- like the search page's static files they hold no data and need no bearer token; ``/docs`` itself, like
  ``/openapi.json`` which it renders, does;
- cached for a year (``immutable``): a new package version is a new URL; ``/docs`` is revalidated each time.

Without the package, ``/docs`` (and an asset URL) answers 503 ``docs_unavailable`` with one line that says
how to install it; the API and ``/openapi.json`` do not need it.
"""
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Dict, Union

from pyterrier_sci.errors import ServeError

__all__ = ["ASSETS_PREFIX", "ASSET_TYPES", "SWAGGER_DISTRIBUTION", "SwaggerAssets", "swagger_assets",
           "add_docs_routes"]

#: the PyPI distribution that ships Swagger UI, and the folder of its files inside it
SWAGGER_DISTRIBUTION = "fastapi-swagger"
SWAGGER_FOLDER = "fastapi_swagger/resources"
#: where the files are served (open like the search page's ``/page/``: see app.OPEN_PREFIXES)
ASSETS_PREFIX = "/docs/assets/"
#: the only files served there, with their media types
ASSET_TYPES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
#: an asset's URL names the package's version, so a browser may keep it
ASSET_CACHE_CONTROL = "public, max-age=31536000, immutable"
#: the page names the assets' URLs: asked again each time (small), so an upgrade shows at once
PAGE_CACHE_CONTROL = "no-cache"
MISSING = ("the interactive API docs (/docs) need the {dist} package, which ships Swagger UI: "
           "pip install \"pyterrier-sci[serve]\" (the API and /openapi.json work without it)")


@dataclass(frozen=True)
class SwaggerAssets:
    """Swagger UI's files as installed: ``version`` (the package's) and ``files`` (name -> path)."""
    version: str
    files: Dict[str, Path]

    def url(self, name: str, root_path: str = "") -> str:
        return f"{root_path}{ASSETS_PREFIX}{self.version}/{name}"


def swagger_assets() -> Union[SwaggerAssets, ServeError]:
    """The installed Swagger UI files, or the :class:`ServeError` (503 ``docs_unavailable``) that says
    what is missing."""
    missing = MISSING.format(dist=SWAGGER_DISTRIBUTION)
    try:
        dist = metadata.distribution(SWAGGER_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return ServeError(missing, 503, "docs_unavailable")
    files = {}
    for name in ASSET_TYPES:
        path = Path(str(dist.locate_file(f"{SWAGGER_FOLDER}/{name}")))
        if not path.is_file():
            return ServeError(f"{missing}; the installed one lacks {name}: reinstall it", 503, "docs_unavailable")
        files[name] = path
    return SwaggerAssets(dist.version, files)


def add_docs_routes(app) -> None:
    """Adds ``GET /docs`` and ``GET /docs/assets/VERSION/NAME`` to the FastAPI ``app`` (created with
    ``docs_url=None``); a :class:`ServeError` raised here is answered by the app's JSON error handler."""
    from fastapi import Request
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import FileResponse

    found = swagger_assets()

    def assets() -> SwaggerAssets:
        if isinstance(found, ServeError):
            raise found
        return found

    @app.api_route("/docs", methods=["GET", "HEAD"], include_in_schema=False)
    async def docs(request: Request):
        a = assets()
        root = request.scope.get("root_path", "").rstrip("/")
        page = get_swagger_ui_html(
            openapi_url=root + app.openapi_url, title=f"{app.title} - Swagger UI",
            swagger_js_url=a.url("swagger-ui-bundle.js", root), swagger_css_url=a.url("swagger-ui.css", root),
            swagger_favicon_url=a.url("favicon-32x32.png", root),
            # no badge that sends the schema to swagger.io's online validator
            swagger_ui_parameters={"validatorUrl": None})
        page.headers["cache-control"] = PAGE_CACHE_CONTROL
        return page

    @app.api_route(ASSETS_PREFIX + "{version}/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def docs_asset(version: str, name: str):
        a = assets()
        path = a.files.get(name) if version == a.version else None
        if path is None:
            raise ServeError(f"no such file under {ASSETS_PREFIX}", 404, "not_found")
        return FileResponse(path, media_type=ASSET_TYPES[name],
                            headers={"cache-control": ASSET_CACHE_CONTROL, "x-content-type-options": "nosniff"})
