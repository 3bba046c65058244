"""Who may send the API key where, and which files a pipeline may read and write: a pipeline's
parameters and ``llm:`` section are untrusted unless the user trusts it (the key goes only to base
URLs configured outside the pipeline; its files must lie under the work directory or an allowed
one), and the key is redacted from answers, caches and errors.  See ``docs/llm.md``, "Trust".
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import urlsplit

from pyterrier_sci.data import work_dir

from .budget import share_budget
from .errors import UntrustedConfigError
from .settings import API_KEY_ENV, DEFAULT_BASE_URL, LLMSettings, settings_from

TRUST_ENV = "PYTERRIER_SCI_TRUST_CONFIG"
TRUSTED_URLS_ENV = "PYTERRIER_SCI_LLM_TRUSTED_URLS"
ALLOWED_DIRS_ENV = "PYTERRIER_SCI_ALLOWED_DIRS"
BASE_URL_ENVS = ("OPENAI_BASE_URL", "PYTERRIER_SCI_LLM_BASE_URL")
NO_KEY = "no-key"
REDACTED = "[redacted]"
_HOW_TO_TRUST = (f"mark the pipeline trusted ({TRUST_ENV}=1, or a Context with trusted=True) if you "
                 "trust whoever wrote it")


# -- trust ----------------------------------------------------------------------------------
def _truthy(v: Optional[str]) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


def is_trusted(context: Any = None) -> bool:
    """Whether pipeline-supplied settings are trusted: ``PYTERRIER_SCI_TRUST_CONFIG`` is set, or
    ``context.trusted is True`` (set by the user, never by a pipeline file)."""
    return _truthy(os.environ.get(TRUST_ENV)) or getattr(context, "trusted", False) is True


# -- the key ----------------------------------------------------------------------------------
def _url_parts(url: str) -> Optional[Tuple[str, str, int, str]]:
    try:
        p = urlsplit(url.strip())
        if p.scheme not in ("http", "https") or not p.hostname:
            return None
        port = p.port or (443 if p.scheme == "https" else 80)
    except ValueError:
        return None
    return p.scheme, p.hostname.lower(), port, p.path.rstrip("/")


def user_base_urls() -> List[str]:
    """The base URLs the user configured outside any pipeline (the key may go there)."""
    urls = [DEFAULT_BASE_URL] + [os.environ[v] for v in BASE_URL_ENVS if os.environ.get(v)]
    urls += [u.strip() for u in os.environ.get(TRUSTED_URLS_ENV, "").replace(" ", ",").split(",") if u.strip()]
    return urls


_TRUSTING = threading.Lock()


@contextlib.contextmanager
def trusting_urls(*urls: str) -> Iterator[None]:
    """While inside, the base URLs ``urls`` (given by the user, e.g. ``reproduce --llm URL``) may receive
    the API key, as if they were in :data:`TRUSTED_URLS_ENV` (which is how workers started meanwhile see them);
    nothing else of the pipeline becomes trusted.  The variable is restored on exit."""
    urls = tuple(u.strip() for u in urls if u and u.strip())
    if not urls:
        yield
        return
    with _TRUSTING:
        before = os.environ.get(TRUSTED_URLS_ENV)
        os.environ[TRUSTED_URLS_ENV] = ",".join([*(before.split(",") if before else []), *urls])
    try:
        yield
    finally:
        with _TRUSTING:
            if before is None:
                os.environ.pop(TRUSTED_URLS_ENV, None)
            else:
                os.environ[TRUSTED_URLS_ENV] = before


def url_allowed(base_url: str) -> bool:
    """Whether ``base_url`` is one of :func:`user_base_urls` or below one (same scheme, host and
    port; the path equal or under it)."""
    got = _url_parts(base_url)
    if got is None:
        return False
    for allowed in user_base_urls():
        a = _url_parts(allowed)
        if a is not None and got[:3] == a[:3] and (got[3] == a[3] or got[3].startswith(a[3] + "/")):
            return True
    return False


def key_allowed(settings: LLMSettings) -> bool:
    """Whether requests made with ``settings`` may carry the API key."""
    return settings.sandbox is None or url_allowed(settings.base_url)


def api_key_for(settings: LLMSettings) -> str:
    """The key to send with ``settings``: ``OPENAI_API_KEY``, or a placeholder when there is
    none or it may not go to ``settings.base_url``."""
    key = os.environ.get(API_KEY_ENV)
    return key if key and key_allowed(settings) else NO_KEY


def key_withheld(settings: LLMSettings) -> bool:
    return bool(os.environ.get(API_KEY_ENV)) and not key_allowed(settings)


def withheld_hint(settings: LLMSettings) -> str:
    return (f"the API key was not sent: base_url {settings.base_url!r} comes from a pipeline expression or file, "
            f"not from you; set PYTERRIER_SCI_LLM_BASE_URL to it, add it to {TRUSTED_URLS_ENV}, or {_HOW_TO_TRUST}")


def redact(text: Any) -> Any:
    """``text`` with the API key (when one is set, 8 characters or more) replaced by ``[redacted]``;
    anything that is not a string is returned as it is."""
    key = os.environ.get(API_KEY_ENV)
    if not isinstance(text, str) or not key or len(key) < 8 or key not in text:
        return text
    return text.replace(key, REDACTED)


# -- files ------------------------------------------------------------------------------------
def _real(p: Union[str, os.PathLike]) -> str:
    return os.path.realpath(os.path.expanduser(str(p)))


def allowed_dirs(context: Any = None) -> Tuple[str, ...]:
    """The directories an untrusted pipeline may read and write: the work directory (the
    context's) and those of ``PYTERRIER_SCI_ALLOWED_DIRS``."""
    if context is not None and hasattr(context, "workdir"):
        work = context.workdir()
    else:
        work = work_dir()
    extra = [d for d in os.environ.get(ALLOWED_DIRS_ENV, "").split(os.pathsep) if d.strip()]
    out: List[str] = []
    for d in [work, *extra]:
        r = _real(d)
        if r not in out:
            out.append(r)
    return tuple(out)


def _under(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


def check_path(path: Union[str, os.PathLike], sandbox: Optional[Tuple[str, ...]], what: str,
               extra_dirs: Iterable[str] = ()) -> Path:
    """``path`` (user-expanded) when ``sandbox`` is ``None`` or the path, with every symbolic
    link resolved, lies under one of the sandbox's directories (or ``extra_dirs``); else one
    :class:`UntrustedConfigError` naming the parameter (``what``), the path and what to do."""
    p = Path(os.path.expanduser(str(path)))
    if sandbox is None:
        return p
    dirs = list(sandbox) + [_real(d) for d in extra_dirs]
    if _under(_real(p), dirs):
        return p
    raise UntrustedConfigError(
        f"{what} {str(path)!r} is outside the directories a pipeline may use ({', '.join(dirs)}); "
        f"the pipeline is not trusted: move the file under one of them, add its directory to "
        f"{ALLOWED_DIRS_ENV}, or {_HOW_TO_TRUST}")


def confine(settings: LLMSettings, sandbox: Optional[Tuple[str, ...]], given: Mapping[str, Any]) -> LLMSettings:
    """``settings`` marked as coming from an untrusted pipeline (``sandbox``: its directories;
    ``None`` = trusted); a ``cache_dir`` the pipeline gave (``given``) must lie under them or the
    temporary directory."""
    if sandbox is None:
        return settings
    if given.get("cache_dir") and settings.resolved_cache_dir() is not None:
        check_path(settings.cache_dir, sandbox, "llm setting cache_dir", extra_dirs=[tempfile.gettempdir()])
    return dataclasses.replace(settings, sandbox=tuple(sandbox))


def pipeline_settings(context: Any, params: Optional[Mapping[str, Any]] = None) -> LLMSettings:
    """The settings of an LLM component built by the pipeline language: the ``llm:`` section of
    the config (``context.settings``) updated by the component's own ``llm={...}``, confined
    (:func:`confine`) unless the pipeline is trusted (:func:`is_trusted`)."""
    merged: dict = {}
    if context is not None and getattr(context, "settings", None):
        section = context.settings.get("llm") or {}
        if not isinstance(section, Mapping):
            raise ValueError(f"the llm: section of the pipeline config must be a mapping of settings, not {section!r}")
        merged.update(section)
    own = (params or {}).get("llm") or {}
    if isinstance(own, LLMSettings):
        return own
    if not isinstance(own, Mapping):
        raise ValueError(f"llm= must be a mapping of llm settings, not {own!r}")
    merged.update(own)
    settings = share_budget(settings_from(merged), context)   # one budget ledger per run of the config
    return confine(settings, None if is_trusted(context) else allowed_dirs(context), merged)


def derived_settings(parent: LLMSettings, spec: Union[None, Mapping[str, Any], LLMSettings]) -> LLMSettings:
    """Settings for a second model of a component (e.g. HLM-Cite's ``guider_llm``): as trusted as
    the component's own settings."""
    if spec is None:
        return parent
    if isinstance(spec, LLMSettings):
        spec = spec if parent.sandbox is None or spec.sandbox is not None else confine(spec, parent.sandbox, {})
        return share_budget(spec, parent=parent)
    return share_budget(confine(settings_from(spec), parent.sandbox, spec), parent=parent)
