"""The one LLM client of the toolkit: any OpenAI-compatible server through the ``openai`` package -
chat, plain completions and log-probabilities, decisions between fixed answers, concurrent calls -
every call through the response cache and bounded retries (then one :class:`LLMError`, never an
error passed off as output), the API key sent only where :mod:`pyterrier_sci.llm.trust` allows.
"""
from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pyterrier as pt

from pyterrier_sci.protocol import ModelRef

from . import dryrun
from .accounting import Usage
from .budget import LLMBudgetExceeded, ledger_for, price_of
from .cache import ResponseCache, cache_key
from .errors import LLMError, UntrustedConfigError  # noqa: F401 - re-exported
from .settings import LLMSettings, settings_from
from .transport import TooLarge, deadline, guarded_transport, http_libs, proxy_mounts
from .trust import api_key_for, key_withheld, redact, withheld_hint


class _BadResponse(Exception):  # noqa: N818
    pass


@dataclass
class Completion:
    """One model answer.  ``top_logprobs``: per generated position, the alternatives asked for
    (token -> log-probability); empty when the server gave none."""
    text: str
    top_logprobs: List[Dict[str, float]] = field(default_factory=list)
    finish_reason: Optional[str] = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    #: seconds the server took to give this answer (retries included), kept in the cache with it; ``None``
    #: when not known (a cache entry written before answers were timed, a dry run's stand-in)
    seconds: Optional[float] = None

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("cached")
        return d


@dataclass
class Choice:
    """A decision between fixed answers.  ``answer`` is one of the options, or ``None`` when the
    output was unusable; ``confidence`` the probability of ``answer`` (log-probabilities, else a
    ``confidence`` field of a JSON answer, else ``None``); ``probs`` the normalised probability
    of each option where log-probabilities were available."""
    answer: Optional[str]
    confidence: Optional[float] = None
    probs: Dict[str, float] = field(default_factory=dict)
    text: str = ""
    reasoning: str = ""
    mode: str = ""
    #: the ``finish_reason`` of the answer the decision was read from (``"dry_run"``: a dry run's stand-in)
    finish_reason: Optional[str] = None

    @property
    def usable(self) -> bool:
        return self.answer is not None


YES_NO_ALIASES = {
    "Yes": ("yes", "1", "true", "relevant", "y"),
    "No": ("no", "0", "false", "non-relevant", "nonrelevant", "not relevant", "irrelevant", "n"),
}
_ANSWER_KEYS = ("answer", "relevance_score", "relevant", "relevance", "judgement", "judgment",
                "decision", "choice", "winner", "label", "output")


def _norm(token: str) -> str:
    return token.strip().strip(".:,;!*\"'`()[]{}").strip().lower()


def extract_json(text: str) -> Optional[dict]:
    """The first JSON object in ``text`` (also inside a ```json fence), or ``None``."""
    if not text:
        return None
    start = text.find("{")
    while start != -1:
        depth = 0
        in_str = esc = False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = json.loads(text[start:i + 1])
                        if isinstance(obj, dict):
                            return obj
                    except ValueError:
                        pass
                    break
        start = text.find("{", start + 1)
    return None


def _match_option(value: Any, options: Sequence[str], aliases: Mapping[str, Sequence[str]]) -> Optional[str]:
    if isinstance(value, bool):
        value = "true" if value else "false"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(int(value)) if value in (0, 1) else "number"
    if not isinstance(value, str):
        return None
    v = _norm(value)
    for opt in options:
        if v == opt.lower() or v in aliases.get(opt, ()) or v in (f"paper {opt.lower()}", f"option {opt.lower()}"):
            return opt
    return None


def parse_choice(text: str, options: Sequence[str], aliases: Optional[Mapping[str, Sequence[str]]] = None) -> Choice:
    """Reads a decision from chat output: a JSON object (keys ``answer``, ``relevance_score``,
    ``relevant``, ``winner``... plus optional ``reasoning`` and ``confidence``), else the first
    word, else an ``Answer: X`` line.  ``answer=None`` when none of these names an option."""
    aliases = aliases or {}
    text = text or ""
    obj = extract_json(text)
    if obj is not None:
        lowered = {str(k).lower(): v for k, v in obj.items()}
        reasoning = str(lowered.get("reasoning") or lowered.get("explanation") or lowered.get("rationale") or "")
        conf = lowered.get("confidence")
        try:
            conf = float(conf)
            conf = conf if 0.0 <= conf <= 1.0 else None
        except (TypeError, ValueError):
            conf = None
        for key in _ANSWER_KEYS:
            if key in lowered:
                ans = _match_option(lowered[key], options, aliases)
                if ans is not None:
                    return Choice(ans, conf, {}, text, reasoning)
        return Choice(None, None, {}, text, reasoning)
    m = re.match(r"\W*([\w-]+(?:\s+relevant)?)", text)
    if m:
        ans = _match_option(m.group(1), options, aliases) or _match_option(m.group(1).split()[0], options, aliases)
        if ans is not None:
            return Choice(ans, None, {}, text, text[m.end():].strip(" .:\n"))
    m = re.search(r"(?:answer|judg[e]?ment|decision|winner)\s*(?:is)?\s*[:=]?\s*\**\s*([\w-]+)", text, re.I)
    if m:
        ans = _match_option(m.group(1), options, aliases)
        if ans is not None:
            return Choice(ans, None, {}, text, text)
    return Choice(None, None, {}, text, text)


def choice_from_logprobs(top_logprobs: List[Dict[str, float]], options: Sequence[str],
                         aliases: Optional[Mapping[str, Sequence[str]]] = None,
                         max_positions: int = 3) -> Optional[Tuple[str, float, Dict[str, float]]]:
    """Decides between ``options`` on the alternatives at the first generated positions that are
    not whitespace: the probability mass of each option (tokens equal to it after stripping
    spaces and punctuation, case-insensitive) is compared; returns (answer, its normalised
    probability, all normalised probabilities), or ``None`` when no option is among them."""
    aliases = aliases or {}
    for pos in top_logprobs[:max_positions]:
        if not pos:
            continue
        mass = {opt: 0.0 for opt in options}
        for tok, lp in pos.items():
            n = _norm(tok)
            for opt in options:
                if n == opt.lower() or (n and n in aliases.get(opt, ()) and len(n) > 1):
                    mass[opt] += math.exp(lp)
        total = sum(mass.values())
        if total > 0:
            probs = {k: v / total for k, v in mass.items()}
            best = max(options, key=lambda o: probs[o])
            return best, probs[best], probs
        best_tok = max(pos.items(), key=lambda kv: kv[1])[0]
        if best_tok.strip():   # a real word that is no option: do not look further
            return None
    return None


class LLMClient:
    """Client for one endpoint and model; picklable (the connection is rebuilt lazily).

    Args:
        settings: :class:`LLMSettings`, a dict of settings (see :func:`settings_from`) or ``None``
            (defaults and environment).
        usage: the :class:`Usage` to add counts to (a component passes its own).
    """

    def __init__(self, settings: Union[None, dict, LLMSettings] = None, usage: Optional[Usage] = None):
        self.settings = settings if isinstance(settings, LLMSettings) else settings_from(settings)
        self.usage = usage if usage is not None else Usage()
        if not self.usage.model:
            self.usage.model = self.settings.model
        self._openai = None
        self._cache = None
        self._lock = threading.Lock()
        self._auto_completion = False
        self._ledger = ledger_for(self.settings)   # the run's budget, shared with the other components

    def __getstate__(self):
        return {"settings": self.settings, "usage": self.usage}

    def __setstate__(self, state):
        self.__init__(state["settings"], state["usage"])

    def __repr__(self) -> str:
        return f"LLMClient(base_url={self.settings.base_url!r}, model={self.settings.model!r})"

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def openai(self):
        if self._openai is None:
            with self._lock:
                if self._openai is None:
                    import openai
                    s = self.settings
                    make = getattr(openai, "DefaultHttpxClient", None) or http_libs()[0].Client
                    http = make(transport=guarded_transport(s.max_response_bytes),
                                mounts=proxy_mounts(s.max_response_bytes))
                    self._openai = openai.OpenAI(
                        api_key=api_key_for(s), base_url=s.base_url, timeout=s.timeout, max_retries=0,
                        http_client=http, default_headers={"Accept-Encoding": "identity"})
        return self._openai

    @property
    def cache(self) -> Optional[ResponseCache]:
        if self._cache is None:
            d = self.settings.resolved_cache_dir()
            if d is None:
                return None
            with self._lock:
                if self._cache is None:
                    self._cache = ResponseCache(d)
        return self._cache

    @property
    def mode(self) -> str:
        """The mode calls use now: ``chat`` or ``completion`` (``auto`` resolves on the fly)."""
        if self.settings.mode == "auto":
            return "completion" if self._auto_completion else "chat"
        return self.settings.mode

    def _delay(self, attempt: int, retry_after: Optional[float]) -> float:
        s = self.settings
        d = min(s.backoff * (2 ** attempt) * random.uniform(0.5, 1.5), s.backoff_max)
        if retry_after is not None:
            d = min(max(d, retry_after), s.backoff_max)
        return d

    def _send(self, kind: str, payload: dict) -> "Completion":
        """Sends one request (with retries) and returns its validated :class:`Completion`."""
        import openai
        s = self.settings
        endpoint = f"{s.base_url.rstrip('/')}/{'chat/completions' if kind == 'chat' else 'completions'}"
        cause = ""
        for attempt in range(s.max_retries + 1):
            retry_after = None
            self.usage.add(requests=1)
            deadline.value = time.monotonic() + s.timeout
            try:
                if kind == "chat":
                    resp = self.openai.chat.completions.create(**payload)
                else:
                    resp = self.openai.completions.create(**payload)
                return _parse_response(kind, resp)
            except openai.APIStatusError as e:
                status = e.status_code
                cause = f"HTTP {status}: {_short(e)}"
                if not (status in (408, 409, 429) or status >= 500):
                    self.usage.add(errors=1)
                    if status in (401, 403) and key_withheld(s):
                        cause += f" ({withheld_hint(s)})"
                    raise LLMError(redact(f"LLM request to {endpoint} (model {s.model!r}) failed: {cause}"),
                                   endpoint, redact(cause)) from None
                try:
                    retry_after = float(e.response.headers.get("retry-after"))
                    retry_after = retry_after if math.isfinite(retry_after) else None
                except (TypeError, ValueError, AttributeError):
                    retry_after = None
            except openai.APITimeoutError:
                cause = f"no complete answer within the {s.timeout:g} s deadline"
            except openai.APIConnectionError as e:
                inner = e.__cause__
                if isinstance(inner, TooLarge):
                    cause = f"malformed response: {inner}"
                else:
                    cause = f"connection error: {_short(inner or e)}"
            except (_BadResponse, TooLarge, openai.APIResponseValidationError, ValueError, RecursionError) as e:
                cause = f"malformed response: {_short(e)}"
            finally:
                deadline.value = None
            if attempt < s.max_retries:
                self.usage.add(retries=1)
                time.sleep(self._delay(attempt, retry_after))
        self.usage.add(errors=1)
        raise LLMError(redact(f"LLM request to {endpoint} (model {s.model!r}) failed after "
                              f"{s.max_retries + 1} tries: {cause}"), endpoint, redact(cause))

    def _call(self, kind: str, payload: dict) -> Completion:
        payload = {k: v for k, v in payload.items() if v is not None}
        cache = self.cache
        dry = dryrun.active()
        key = cache_key({"kind": kind, **payload}) if cache is not None else None
        if cache is not None:
            hit = _from_cache(cache.get(key))
            if hit is not None:
                if dry is not None:
                    dry.record(self, kind, payload, cached=True)
                else:
                    self.usage.add(cache_hits=1)
                    self.usage.answered(hit.prompt_tokens, hit.completion_tokens, hit.seconds)
                return hit   # free: a cache hit never counts against the budget
        if dry is not None:   # a dry run: count the call, send nothing, answer with a neutral stand-in
            dry.record(self, kind, payload, cached=False, key=key)
            return Completion(text="", finish_reason="dry_run")
        ledger, price = self._ledger, None
        started = time.monotonic()
        if ledger is not None:   # reserve before sending: the budget is never passed, even by concurrent calls
            price = price_of(self.settings)
            reservation = ledger.reserve(dryrun.estimate_prompt_tokens(kind, payload),
                                         int(payload.get("max_tokens") or self.settings.max_tokens), price)
            try:
                comp = self._send(kind, payload)
            except BaseException:
                ledger.release(reservation)
                raise
        else:
            comp = self._send(kind, payload)
        comp.seconds = time.monotonic() - started
        if cache is not None:
            cache.put(key, comp.to_json(), model=self.settings.model)
        self.usage.add(calls=1, prompt_tokens=comp.prompt_tokens, completion_tokens=comp.completion_tokens)
        self.usage.answered(comp.prompt_tokens, comp.completion_tokens, comp.seconds)
        if ledger is not None:
            used_prompt, used_completion = comp.prompt_tokens, comp.completion_tokens
            if not used_prompt and not used_completion:   # a server that reports no usage: our estimates
                used_prompt = dryrun.estimate_prompt_tokens(kind, payload)
                used_completion = dryrun.estimate_tokens(comp.text)
            ledger.settle(reservation, used_prompt, used_completion, price)
        return comp

    # -- public calls -----------------------------------------------------------------------
    def chat(self, messages: Union[str, List[dict]], *, max_tokens: Optional[int] = None,
             temperature: Optional[float] = None, logprobs: bool = False,
             top_logprobs: Optional[int] = None, stop: Optional[List[str]] = None) -> Completion:
        """A chat completion; ``messages`` may be a plain string (one user message)."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        s = self.settings
        return self._call("chat", {
            "model": s.model, "messages": messages,
            "max_tokens": max_tokens or s.max_tokens,
            "temperature": s.temperature if temperature is None else temperature,
            "logprobs": True if logprobs else None,
            "top_logprobs": (top_logprobs or s.top_logprobs) if logprobs else None,
            "stop": stop})

    def complete(self, prompt: str, *, max_tokens: Optional[int] = None, temperature: Optional[float] = None,
                 logprobs: Optional[int] = None, stop: Optional[List[str]] = None) -> Completion:
        """A plain completion; ``logprobs=N`` asks for the top-N alternatives at each position."""
        s = self.settings
        return self._call("completion", {
            "model": s.model, "prompt": prompt,
            "max_tokens": max_tokens or s.max_tokens,
            "temperature": s.temperature if temperature is None else temperature,
            "logprobs": logprobs, "stop": stop})

    def generate(self, prompt: str, *, system: Optional[str] = None, max_tokens: Optional[int] = None,
                 stop: Optional[List[str]] = None) -> Completion:
        """Free text in the current mode.  In completion mode ``system`` is put before the prompt.
        In ``auto`` mode an empty chat answer switches this client to completions (and the
        prompt is asked again as a completion)."""
        if self.mode == "chat":
            msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
            comp = self.chat(msgs, max_tokens=max_tokens, stop=stop)
            if comp.text.strip() or self.settings.mode != "auto" or comp.finish_reason == "dry_run":
                return comp
            self._auto_completion = True
        full = f"{system.strip()}\n\n{prompt}" if system else prompt
        return self.complete(full, max_tokens=max_tokens, stop=stop)

    def choose(self, prompt: Union[str, Mapping[str, str]], options: Sequence[str] = ("Yes", "No"), *,
               system: Optional[str] = None, aliases: Optional[Mapping[str, Sequence[str]]] = None,
               chat_max_tokens: Optional[int] = None, completion_max_tokens: int = 3) -> Choice:
        """Decides between ``options``.

        ``prompt`` is one string, or ``{"chat": ..., "completion": ...}``: the chat form asks for
        a JSON object or a one-word answer; the completion form ends in an answer cue such as
        ``Answer (Yes or No):``.  In completion mode the answer is read from the top
        log-probabilities of the first non-blank generated position (the option with more
        probability mass wins; ``confidence`` is its normalised probability), falling back to the
        generated text.  In chat mode the text is parsed by :func:`parse_choice`.
        """
        if aliases is None and tuple(options) == ("Yes", "No"):
            aliases = YES_NO_ALIASES
        prompts = dict(prompt) if isinstance(prompt, Mapping) else {"chat": prompt, "completion": prompt}
        if self.mode == "chat":
            msgs = (([{"role": "system", "content": system}] if system else [])
                    + [{"role": "user", "content": prompts["chat"]}])
            comp = self.chat(msgs, max_tokens=chat_max_tokens)
            ch = parse_choice(comp.text, options, aliases)
            ch.mode, ch.finish_reason = "chat", comp.finish_reason
            if ch.usable or self.settings.mode != "auto" or comp.finish_reason == "dry_run":
                return ch   # a dry run assumes chat answers are usable: no probe as a completion
            # auto: an empty or unreadable chat answer -> ask as a completion; if that one is
            # usable, the rest of the run uses completions (a base model behind a chat endpoint)
            auto_probe = True
        else:
            auto_probe = False
        full = f"{system.strip()}\n\n{prompts['completion']}" if system else prompts["completion"]
        comp = self.complete(full, max_tokens=completion_max_tokens,
                             logprobs=self.settings.top_logprobs)
        decided = choice_from_logprobs(comp.top_logprobs, options, aliases)
        if decided is not None:
            ans, conf, probs = decided
            ch = Choice(ans, conf, probs, comp.text, "", "completion")
        else:
            ch = parse_choice(comp.text, options, aliases)
            ch.mode = "completion"
        ch.finish_reason = comp.finish_reason
        if auto_probe and ch.usable:
            self._auto_completion = True
        return ch

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], desc: Optional[str] = None) -> List[Any]:
        """``[fn(x) for x in items]`` with up to ``settings.concurrency`` calls in flight, in input
        order.  The first exception stops the work not yet started and is raised (finished calls
        are already in the cache).  Once the run's budget refused a call, :class:`LLMBudgetExceeded`
        is raised after the calls in flight have finished, also where ``fn`` turned the refusal
        into a flagged result (``on_error="flag"``): a budget stops the run."""
        items = list(items)
        if not items:
            return []
        self._check_budget()
        bar = pt.tqdm(total=len(items), desc=desc or "llm", unit="call", leave=False,
                      disable=not self.settings.progress or len(items) < 2)
        try:
            n = min(int(self.settings.concurrency), len(items))
            if n <= 1:
                out = []
                for x in items:
                    try:
                        out.append(fn(x))
                    except LLMBudgetExceeded:
                        self._check_budget()
                        raise
                    bar.update(1)
                    self._check_budget()
                return out
            results: List[Any] = [None] * len(items)
            error: Optional[BaseException] = None
            with ThreadPoolExecutor(max_workers=n, thread_name_prefix="pyterrier-sci-llm") as pool:
                futures = {pool.submit(fn, x): i for i, x in enumerate(items)}
                pending = set(futures)
                while pending and error is None:
                    done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for f in done:
                        if f.exception() is not None:
                            error = error or f.exception()
                            continue
                        results[futures[f]] = f.result()
                        bar.update(1)
                    if error is None and self._ledger is not None and self._ledger.tripped:
                        error = self._ledger.error()
                    if error is not None:
                        for p in pending:
                            p.cancel()
            # the pool has waited for the calls in flight: a budget error now reports their spending too
            if error is not None:
                if isinstance(error, LLMBudgetExceeded):
                    self._check_budget()
                raise error
            return results
        finally:
            bar.close()

    def _check_budget(self) -> None:
        """Raises :class:`LLMBudgetExceeded` (with what was spent by now) once the budget refused a call."""
        if self._ledger is not None and self._ledger.tripped and dryrun.active() is None:
            raise self._ledger.error()


def _short(e: BaseException) -> str:
    msg = str(e) or type(e).__name__
    return msg if len(msg) < 300 else msg[:300] + "..."


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _is_object(obj: Any) -> bool:
    return isinstance(obj, dict) or (obj is not None and hasattr(obj, "__dict__"))


def _text(v: Any, what: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise _BadResponse(f"{what} is {type(v).__name__} {str(v)[:60]!r}, not text")
    return redact(v)


def _logprob(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _BadResponse(f"{what} {str(v)[:40]!r} is not a number")
    v = float(v)
    if v != v or v > 1e-6:
        raise _BadResponse(f"{what} {v!r} is not a log-probability (a number <= 0)")
    return v


def _list(v: Any, what: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _BadResponse(f"{what} is {type(v).__name__}, not a list")
    return v


MAX_TOKEN_COUNT = 10 ** 9


def _count(v: Any, what: str) -> int:
    if v is None:
        return 0
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v))
            or v != int(v) or not 0 <= v <= MAX_TOKEN_COUNT):
        raise _BadResponse(f"usage {what} is {str(v)[:40]!r}, not a whole number from 0 to {MAX_TOKEN_COUNT}")
    return int(v)


def _parse_response(kind: str, resp) -> Completion:
    """A validated :class:`Completion` from an openai response object (or the dicts an
    unvalidated one holds); :class:`_BadResponse` names what is wrong."""
    try:
        return _parse_checked(kind, resp)
    except _BadResponse:
        raise
    except Exception as e:  # noqa: BLE001 - any other shape a server invents is malformed too
        raise _BadResponse(f"{type(e).__name__}: {e}") from None


def _parse_checked(kind: str, resp) -> Completion:
    if isinstance(resp, (str, bytes)) or not _is_object(resp):
        raise _BadResponse("the body is not a JSON object: " + str(resp)[:200])
    choices = _get(resp, "choices")
    if not isinstance(choices, list) or not choices:
        raise _BadResponse("the response has no choices: " + str(resp)[:200])
    choice = choices[0]
    if not _is_object(choice):
        raise _BadResponse(f"choices[0] is {type(choice).__name__} {str(choice)[:60]!r}, not an object")
    tops: List[Dict[str, float]] = []
    lp = _get(choice, "logprobs")
    if lp is not None and not _is_object(lp):
        raise _BadResponse(f"logprobs is {type(lp).__name__}, not an object")
    if kind == "chat":
        message = _get(choice, "message")
        if message is not None and not _is_object(message):
            raise _BadResponse(f"message is {type(message).__name__}, not an object")
        text = _text(_get(message, "content") if message is not None else None, "message content")
        for tok in _list(_get(lp, "content") if lp is not None else None, "logprobs.content"):
            if not _is_object(tok):
                raise _BadResponse("a logprobs.content entry is not an object")
            alts = {}
            for a in _list(_get(tok, "top_logprobs"), "top_logprobs"):
                if not _is_object(a):
                    raise _BadResponse("a top_logprobs entry is not an object")
                alts[_text(_get(a, "token"), "token")] = _logprob(_get(a, "logprob"), "logprob")
            alts.setdefault(_text(_get(tok, "token"), "token"), _logprob(_get(tok, "logprob"), "logprob"))
            tops.append(alts)
    else:
        text = _text(_get(choice, "text"), "text")
        if lp is not None:
            top = _list(_get(lp, "top_logprobs"), "top_logprobs")
            toks = _list(_get(lp, "tokens"), "tokens")
            tlps = _list(_get(lp, "token_logprobs"), "token_logprobs")
            for i, alts in enumerate(top):
                if alts is not None and not isinstance(alts, dict):
                    raise _BadResponse(f"top_logprobs[{i}] is {type(alts).__name__}, not an object")
                d = {redact(str(k)): _logprob(v, "logprob") for k, v in (alts or {}).items() if v is not None}
                if i < len(toks) and i < len(tlps) and tlps[i] is not None:
                    d.setdefault(_text(toks[i], "token"), _logprob(tlps[i], "logprob"))
                tops.append(d)
    usage = _get(resp, "usage")
    if usage is not None and not _is_object(usage):
        raise _BadResponse(f"usage is {type(usage).__name__}, not an object")
    finish = _get(choice, "finish_reason")
    return Completion(text=text, top_logprobs=tops, finish_reason=finish if isinstance(finish, str) else None,
                      prompt_tokens=_count(_get(usage, "prompt_tokens"), "prompt_tokens") if usage is not None else 0,
                      completion_tokens=_count(_get(usage, "completion_tokens"), "completion_tokens")
                      if usage is not None else 0)


def _from_cache(hit: Optional[dict]) -> Optional[Completion]:
    """A cache entry as a :class:`Completion`, or ``None`` (a miss) when it is damaged or odd."""
    if not isinstance(hit, dict):
        return None
    try:
        tops = [{str(k): _logprob(v, "logprob") for k, v in pos.items()} for pos in _list(hit.get("top_logprobs"), "")]
        finish = hit.get("finish_reason")
        seconds = hit.get("seconds")
        timed = (isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds)
                 and seconds >= 0)
        return Completion(text=_text(hit.get("text"), "text"), top_logprobs=tops,
                          finish_reason=finish if isinstance(finish, str) else None,
                          prompt_tokens=_count(hit.get("prompt_tokens"), "prompt_tokens"),
                          completion_tokens=_count(hit.get("completion_tokens"), "completion_tokens"), cached=True,
                          seconds=float(seconds) if timed else None)
    except (_BadResponse, AttributeError, TypeError, ValueError):
        return None


class UsesLLM:
    """Mixin of the toolkit's LLM components: ``self.settings`` and ``self.usage`` are set by the
    component; :attr:`client` is built on first use and rebuilt where the component is unpickled
    (the client holds connections and thread pools, never pickled)."""
    _client: Optional["LLMClient"] = None

    @property
    def client(self) -> "LLMClient":
        if self._client is None:
            self._client = LLMClient(self.settings, usage=self.usage)
        return self._client

    # the component protocol (pyterrier_sci.protocol) --------------------------------------------
    def sci_usage(self) -> Usage:
        return self.usage

    def sci_llm_settings(self) -> LLMSettings:
        return self.settings

    def sci_models(self) -> List[ModelRef]:
        model = self.settings.model
        return [ModelRef(model, "llm", None, "served by an OpenAI-compatible endpoint")] if model else []

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_client"] = None
        return state
