"""Every user-facing error and warning of the toolkit, under one base (:class:`SciError`) that the command
line catches and shows as one line.  The bottom layer of the core: it imports nothing of the project.

The classes keep the standard exception they always were as a second base (a :class:`MissingDataError`
is a ``FileNotFoundError``, a :class:`PipelineError` a ``ValueError``, an :class:`LLMError` a
``RuntimeError``), so ``except ValueError`` written against earlier versions still catches them, and each
module that raised one still exports it under its old name (``pyterrier_sci.registry.PipelineError``,
``pyterrier_sci.data.MissingDataError``, ...)."""
from __future__ import annotations

import os
import sys
import unicodedata
import warnings
from pathlib import Path
from typing import Any, List, Mapping, Optional, Tuple, Union

__all__ = ["SciError", "PipelineError", "ParameterError", "UnknownComponentError", "PathError", "ManifestError",
           "ScaleError", "MissingDataError", "DamagedDataError", "RunFileError", "ModelNotFoundError",
           "BackendError", "NonFiniteTrainingError", "TrainingDeferred", "LLMError", "UntrustedConfigError",
           "LLMCacheError", "BuildRefused",
           "LLMBudgetExceeded", "TooLarge", "ServerUnavailable", "LinkReplacedWarning", "DamagedFileWarning",
           "ShortRunWarning", "CostWarning", "DeprecatedNameWarning", "warn_deprecated_name", "IndexUpdateError",
           "ReproductionError", "ServeError", "RecordError",
           "OverloadedError", "DeadlineExceededError", "ShuttingDownError", "one_line", "SHOW_COLUMNS"]


class SciError(Exception):
    """The base of the toolkit's errors: its message is written for the user (what failed, which file or
    setting, what to do); the command line prints it as one line and exits with status 2."""


#: how many display columns of an expression an error shows (longer ones are elided around the span)
SHOW_COLUMNS = 100


def _width(ch: str) -> int:
    """Display columns of one character: 2 for East Asian wide/full-width, 0 for combining marks."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _printable(ch: str) -> str:
    return ch if ch.isprintable() or ch == " " else "\ufffd"


def one_line(text: Any, limit: int = 400) -> str:
    """``text`` on one line (line breaks become spaces), at most ``limit`` characters."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[:limit - 1] + "\u2026"


class PipelineError(SciError, ValueError):
    """A pipeline expression or config that cannot be built; the message points at the offending part.

    ``str(e)`` is the message on one line, then - when there is an expression - the expression
    (elided around the offending part when longer than :data:`SHOW_COLUMNS` columns) and a caret
    line under the offending part, aligned by display width (wide CJK characters count two columns,
    combining marks none).

    Example:
        >>> import pyterrier_sci as ps
        >>> try:
        ...     ps.pipeline("bm25(k1=-1)")
        ... except ps.PipelineError as e:
        ...     print(e)
        component 'bm25': parameter 'k1' got -1 (a whole number): out of range; it takes a number from 0 to 100
          bm25(k1=-1)
                  ^^
    """

    def __init__(self, message: str, expr: Optional[str] = None, span: Optional[Tuple[int, int]] = None,
                 where: Optional[str] = None):
        self.message, self.expr, self.span, self.where = message, expr, span, where
        super().__init__(self.render())

    @property
    def headline(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else str(self.message)
        return one_line(text, 2000)

    def picture(self, columns: int = SHOW_COLUMNS) -> List[str]:
        """The expression line and the caret line (empty without an expression)."""
        if self.expr is None:
            return []
        expr = "".join(_printable(c) for c in str(self.expr))
        start, end = self.span if self.span is not None else (0, 0)
        start = max(0, min(start, len(expr)))
        end = max(start + 1, min(end, len(expr))) if self.span is not None else start
        widths = [_width(c) for c in expr]
        if sum(widths) > columns:  # a window around the span
            lo, hi = start, min(end, len(expr))
            budget = columns - 2
            used = sum(widths[lo:hi])
            if used > budget:  # the span itself is too long: show its beginning
                hi = lo
                used = 0
                while hi < len(expr) and used + widths[hi] <= budget:
                    used += widths[hi]
                    hi += 1
            while True:  # grow both ways
                grown = False
                if lo > 0 and used + widths[lo - 1] <= budget:
                    lo -= 1
                    used += widths[lo]
                    grown = True
                if hi < len(expr) and used + widths[hi] <= budget:
                    used += widths[hi]
                    hi += 1
                    grown = True
                if not grown:
                    break
            prefix = "\u2026" if lo > 0 else ""
            suffix = "\u2026" if hi < len(expr) else ""
            shown = prefix + expr[lo:hi] + suffix
            caret_at = len(prefix) + sum(widths[lo:start])
            caret_len = sum(widths[start:min(end, hi)])
        else:
            shown = expr
            caret_at = sum(widths[:start])
            caret_len = sum(widths[start:end])
        lines = [f"  {shown}"]
        if self.span is not None:
            lines.append("  " + " " * caret_at + "^" * max(1, caret_len))
        return lines

    def render(self, columns: int = SHOW_COLUMNS) -> str:
        return "\n".join([self.headline] + self.picture(columns))


class ParameterError(PipelineError):
    """A component parameter with a wrong name, type or value (raised when the pipeline is built)."""

    def __init__(self, message: str, component: Optional[str] = None, param: Optional[str] = None, **kw):
        self.component, self.param = component, param
        super().__init__(message, **kw)


class UnknownComponentError(SciError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class PathError(PipelineError):
    """A path the toolkit was asked to write (``--output``, ``save_dir``, ``$PYTERRIER_SCI_HOME``, an
    index) that it cannot or must not write: a directory, a device, a FIFO, a socket, or a path under a
    regular file."""


class LinkReplacedWarning(UserWarning):
    """A file the toolkit writes was a symbolic link: the link itself was replaced, its target left alone."""


class DamagedFileWarning(UserWarning):
    """A saved or derived file did not match its checksum (or could not be read) and is rebuilt."""


class MissingDataError(SciError, FileNotFoundError):
    """A benchmark file is not in the data directory (and could not be downloaded).  Its message names the file,
    where it was looked for and where to get it; ``pyterrier-sci datasets`` lists what is present.

    Example:
        ::

            import pyterrier as pt
            import pyterrier_sci as ps
            try:
                topics = pt.get_dataset("irds:sci/doris-mae").get_topics()
            except ps.MissingDataError as e:
                print(e)   # which file is missing, and from where to fetch it into ps.data_dir()
    """


class DamagedDataError(SciError, ValueError):
    """A data file is present but damaged: truncated, not UTF-8, malformed, or inconsistent with
    the release (checksum, counts, cross-references).  The message names the file, the line when
    there is one, what was expected and what to do."""

    def __init__(self, path: Union[str, Path], problem: str, line: Optional[int] = None, remedy: str = ""):
        self.path, self.problem, self.line = str(path), problem, line
        where = f"{path}, line {line}" if line else f"{path}"
        remedy = remedy or "restore it from the benchmark's release"
        super().__init__(f"damaged data file {where}: {problem}. {remedy[0].upper()}{remedy[1:]}")


class RecordError(SciError, ValueError):
    """A paper collection the researcher gave (a JSONL, CSV, TSV, BibTeX, CSL-JSON or PDF file, a directory of
    PDFs, a DataFrame) that cannot be read as paper records: bytes that are not text in the encoding, a line that
    is not JSON, a record without a docno or without any text, a date that is not one, a docno given twice, no
    record at all, a damaged or encrypted PDF.  ``path`` names the file (``"the DataFrame"`` for one), ``where``
    the line, entry or row (``""`` for the whole file), ``problem`` what is wrong and what to do."""

    def __init__(self, path: Union[str, Path], problem: str, where: str = ""):
        self.path, self.problem, self.where = str(path), problem, where
        super().__init__(f"{path}, {where}: {problem}" if where else f"{path}: {problem}")

    def __reduce__(self):
        return (type(self), (self.path, self.problem, self.where))


class RunFileError(SciError, ValueError):
    """A run file that cannot be read as a TREC run; the message names the file and what is wrong."""


class ManifestError(PipelineError):
    """A manifest that cannot be read, or one that belongs to another experiment."""


class ShortRunWarning(UserWarning):
    """A measure defined over the whole ranked pool met a run that ranks only part of the pool."""


class CostWarning(UserWarning):
    """A run asked for cost measures carries no costs (it was not metered), so they are NaN."""


class DeprecatedNameWarning(FutureWarning):
    """A component or measure was named by an old name that still works as an alias: the message gives
    the new name (a ``FutureWarning``, so users see it by default; filter it by this class)."""


def warn_deprecated_name(kind: str, old: str, new: str) -> None:
    """One :class:`DeprecatedNameWarning`, attributed to the first caller outside this package."""
    here = Path(__file__).resolve().parent   # the package, and (editable installs) the folders mapped into it
    ours = tuple(str(d) + os.sep for d in (here, here.parent / "plugins", here.parent / "datasets"))
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(ours):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"{kind} {old!r} is now called {new!r}; the old name still works but will be removed",
                  DeprecatedNameWarning, stacklevel=level)


class ModelNotFoundError(SciError, FileNotFoundError):
    """A model is neither a local directory nor reachable on the hub."""


class BackendError(SciError, ValueError):
    """An encoder backend or precision that does not exist, cannot run here, or fails its quality check."""


class ScaleError(PipelineError):
    """Ray is missing, an address cannot be reached, or a distributed job cannot run as asked."""


class TrainingDeferred(SciError):  # noqa: N818 - what happened, not a failure (no builder wraps it)
    """What a component that trains a model on first use raises instead of training, inside
    :func:`pyterrier_sci.training.no_training` (a dry run: nothing that needs the model can be run or counted
    yet)."""

    def __init__(self, path, what: str):
        self.path, self.what = Path(path), what
        super().__init__(f"{what} is not trained or built yet ({path}): a run makes it once, a dry run does not")


class BuildRefused(SciError):  # noqa: N818 - what happened, named as TrainingDeferred is
    """What building, growing or deriving an artifact raises instead, inside
    :func:`pyterrier_sci.artifacts.no_builds` (a served request's own pipeline: minutes of indexing never run
    inside a request).  ``path``: the artifact; ``what``: what it is; ``why``: why building is refused there."""

    def __init__(self, path, what: Optional[str], why: str):
        self.path, self.what, self.why = Path(path), what or str(path), why
        super().__init__(f"{what} is not built ({path}) and {why}" if what else f"{path} is not built and {why}")


class NonFiniteTrainingError(SciError, RuntimeError):
    """Training produced a NaN or infinite loss or parameter; nothing was saved."""


class LLMError(SciError, RuntimeError):
    """A call failed for good (after the retries, or with a non-retryable status), or an LLM
    setting cannot be honoured.  ``endpoint`` and ``cause`` name where and why."""

    def __init__(self, message: str, endpoint: str = "", cause: str = ""):
        super().__init__(message)
        self.endpoint = endpoint
        self.cause = cause


class UntrustedConfigError(LLMError):
    """A pipeline expression or pipeline file that the user did not mark trusted asked for
    something only the user may allow: a file outside the allowed directories (a template, an
    example file, a cache directory).  See ``docs/llm.md``, "Trust"."""


class LLMRunStopped(LLMError):  # noqa: N818 - named for what happened
    """A distributed run is stopping (another worker failed): no new call is sent, the calls in flight finish
    and their answers are kept in the response cache."""


class LLMCacheError(LLMError):
    """The response cache's SQLite file cannot be used (damaged, not a database, a full disk); the
    message names the file and what to do."""


class LLMBudgetExceeded(LLMError):  # noqa: N818 - named for what happened, like StopIteration
    """The next LLM call would pass the run's budget (``llm: {budget: ...}``); the run stops there.

    Attributes:
        limits: the budget (``calls``, ``tokens``, ``dollars``; only those given).
        spent: what the run spent: ``calls``, ``tokens`` (prompt + completion, as the server
            reported them) and ``dollars`` (``None`` when no price is known for a model).
        remaining: what is left of each limit.
        reason: which limit the refused call would have passed, and by how much.
    """

    def __init__(self, message: str, limits: Mapping[str, float], spent: Mapping[str, Any],
                 remaining: Mapping[str, Any], reason: str):
        super().__init__(message, cause=reason)
        self.limits = dict(limits)
        self.spent = dict(spent)
        self.remaining = dict(remaining)
        self.reason = reason

    def __reduce__(self):
        return (type(self), (str(self), self.limits, self.spent, self.remaining, self.reason))


class TooLarge(SciError):  # noqa: N818
    """An LLM server's response body over the size limit, or in an encoding that cannot be bounded (the
    client turns it into an :class:`LLMError` naming the endpoint)."""


class ServerUnavailable(SciError, RuntimeError):  # noqa: N818
    """The local server cannot be started (a package is missing, or it did not come up)."""


class IndexUpdateError(SciError, ValueError):
    """An append or a retraction that cannot be done as asked (a docno already held or not held, an index
    that cannot grow, a change that would leave it empty); nothing was changed."""


class ReproductionError(PipelineError):
    """A reproduction file that cannot be used (its schema, a name it uses), or a table that cannot run."""


class ServeError(SciError, ValueError):
    """A request the service refuses: ``status`` is the HTTP status (4xx), ``code`` a short name of the
    cause (``unknown_pipeline``, ``k_out_of_range``, ``query_too_long``, ``unknown_docno`` ...)."""

    def __init__(self, message: str, status: int = 400, code: str = "bad_request"):
        super().__init__(message)
        self.message, self.status, self.code = message, status, code


class OverloadedError(SciError, RuntimeError):
    """The server's queue is full; ``retry_after`` seconds is when to try again (HTTP 503)."""

    def __init__(self, retry_after: int):
        super().__init__(f"the server is busy (queue full); retry after {retry_after} s")
        self.retry_after = retry_after


class DeadlineExceededError(SciError, RuntimeError):
    """A request's deadline passed before its results were ready (HTTP 504)."""


class ShuttingDownError(SciError, RuntimeError):
    """The server is shutting down and takes no new work (HTTP 503)."""
