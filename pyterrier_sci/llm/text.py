"""Prompt text helpers: templates kept as editable files, and truncation to a token budget."""
from __future__ import annotations

import re
import string
from importlib import resources
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union

from .errors import UntrustedConfigError
from .trust import check_path

CHARS_PER_TOKEN = 4


def load_template(spec: Union[str, Path], package: Union[str, Sequence[str]],
                  sandbox: Optional[Tuple[str, ...]] = None, what: str = "prompt template") -> str:
    """The text of a prompt template.

    ``package``: the caller's package (or several, searched in order), whose ``templates/`` folder
    holds its shipped templates.  ``spec`` is (tried in this order) the name of a template shipped
    in a ``package``'s ``templates/`` folder (``"pointwise"`` or ``"pointwise.txt"``; a plain file name, no folders),
    a path to a file, or the template text itself (anything containing a newline or a ``$``
    placeholder).  Templates use :class:`string.Template` syntax: ``$name`` / ``${name}``; ``$$``
    is a dollar.

    ``sandbox``: the settings' sandbox of a component configured by an untrusted pipeline
    (:mod:`pyterrier_sci.llm.trust`): a file outside its directories is refused with
    :class:`~pyterrier_sci.llm.UntrustedConfigError`, whether it exists or not.
    """
    packages = (package,) if isinstance(package, str) else tuple(package)
    if isinstance(spec, Path):
        return check_path(spec, sandbox, what).read_text(encoding="utf8")
    if not isinstance(spec, str):
        raise ValueError(f"{what} must be a template name, a file path or the template text, not {spec!r}")
    if "\n" not in spec and len(spec) < 200:
        name = spec if spec.endswith(".txt") else spec + ".txt"
        if re.fullmatch(r"[\w][\w.-]*", name) and ".." not in name:
            for one in packages:
                res = resources.files(one).joinpath("templates", name)
                if res.is_file():
                    return res.read_text(encoding="utf8")
        p = Path(spec).expanduser()
        if sandbox is not None and not _inside(p, sandbox):
            # outside the sandbox: refused without looking whether it exists
            if "$" not in spec and (any(c in spec for c in "/\\") or spec.startswith(("~", "."))):
                check_path(spec, sandbox, what)
        elif p.is_file():
            return p.read_text(encoding="utf8")
    if "\n" in spec or "$" in spec:
        return spec
    raise FileNotFoundError(f"{what} {spec!r} is neither a template of {' or '.join(packages)} "
                            f"(templates/*.txt), nor a file, nor template text")


def template_or_text(spec: Optional[str], default: str, package: Union[str, Sequence[str]], sandbox=None) -> str:
    """A prompt template that may be given loosely: ``None`` -> the shipped ``default``; else
    :func:`load_template`'s lookup, and any other string is taken as the template text itself."""
    try:
        return load_template(default if spec is None else spec, package, sandbox=sandbox)
    except FileNotFoundError:
        return spec


def _inside(p: Path, sandbox) -> bool:
    try:
        check_path(p, sandbox, "")
        return True
    except UntrustedConfigError:
        return False


def render(template: str, **values: Any) -> str:
    """Fills ``$placeholders``; unknown placeholders are left as they are (``safe_substitute``)."""
    return string.Template(template).safe_substitute({k: "" if v is None else str(v) for k, v in values.items()})


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: one token per 4 characters (English text, BPE vocabularies)."""
    return (len(text or "") + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def truncate(text: Optional[str], max_tokens: Optional[int]) -> str:
    """Cuts ``text`` to about ``max_tokens`` tokens (:func:`estimate_tokens`), at a word boundary,
    marking the cut with `` ...``.  ``None``/``0`` = no limit."""
    text = "" if text is None else str(text)
    if not max_tokens or estimate_tokens(text) <= max_tokens:
        return text
    cut = text[: max_tokens * CHARS_PER_TOKEN]
    space = cut.rfind(" ")
    if space > len(cut) // 2:
        cut = cut[:space]
    return cut.rstrip() + " ..."


def join_fields(row: Any, fields: Union[str, Sequence[str]]) -> str:
    """The text of one row from one column or several (joined by a blank line, empty ones left out)."""
    if isinstance(fields, str):
        fields = [fields]
    parts = []
    for f in fields:
        v = row.get(f) if hasattr(row, "get") else getattr(row, f, None)
        if v is None or (isinstance(v, float) and v != v):
            continue
        v = str(v).strip()
        if v:
            parts.append(v)
    return "\n\n".join(parts)


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text or "").strip()
