"""Reaching Ray (the ``scale`` extra) and running any transformer on it.

:func:`ray_session` / :func:`init_ray` start a local Ray instance with this machine's cores and no
dashboard, or connect to an existing cluster given by ``address`` or ``$RAY_ADDRESS``; an
unreachable address is one :class:`ScaleError` naming it, within seconds.  :func:`on_ray` runs a
transformer (an LLM re-ranker, an agent, a whole pipeline) over a large query set on Ray actors,
batches of queries at a time, with the same results, row order and usage counts as one process;
LLM responses go through one cache service (``pyterrier_sci.llm.cache.CacheService``).  The
pipeline language's ``on_ray(...)`` component is the same.  See ``docs/scale.md``.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence

import pandas as pd
import pyterrier as pt

from pyterrier_sci.errors import ScaleError  # noqa: F401 - defined there, re-exported
from pyterrier_sci.llm import budget, cache
from pyterrier_sci.llm.accounting import llm_components
from pyterrier_sci.llm.budget import ledger_for, ledger_key
from pyterrier_sci.llm.cache import CacheService
from pyterrier_sci.quiet import quiet_native
from pyterrier_sci.registry import Param, PipelineError, params
from pyterrier_sci.signals import keep_native_handlers

__all__ = ["ScaleError", "require_ray", "init_ray", "ray_session", "RAY_ADDRESS_ENV", "check_reachable",
           "check_ray_client", "on_ray", "RayTransformer", "on_ray_component"]

#: seconds a connection to a Ray address may take before it is called unreachable
CONNECT_TIMEOUT = 5.0

RAY_ADDRESS_ENV = "RAY_ADDRESS"
#: seconds a failed distributed run waits at least for the other workers' calls in flight (their answers are
#: committed to the response cache) before it ends the workers; an LLM stage waits as long as its slowest
#: component's calls may take (its timeout times its tries)
BUDGET_SETTLE_TIMEOUT = 60.0


def require_ray():
    """The ``ray`` module, or one error saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ScaleError(f"scale-out needs Ray: pip install 'pyterrier-sci[scale]' ({e})") from None
    return ray


def init_ray(address: Optional[str] = None, num_cpus: Optional[int] = None) -> bool:
    """Makes sure Ray is initialised; returns True when this call started it (so the caller
    shuts it down again), False when it was running already.

    ``address`` (else ``$RAY_ADDRESS``): an existing cluster (``ray://host:10001``, ``host:6379`` or
    ``auto``); none: a local instance with ``num_cpus`` (default: this machine's cores), no dashboard.
    A ``host:port`` address is first checked with a TCP connection (:func:`check_reachable`), so an
    unreachable one fails in seconds instead of Ray's minute of retries.
    """
    ray = require_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get(RAY_ADDRESS_ENV) or None
    if address:
        address = ray_client_address(address)
        if address.strip().startswith("ray://"):
            check_ray_client(address)
        else:
            check_reachable(address)
    kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False,
                  ignore_reinit_error=True)
    # ray.init enables Python's faulthandler over a JVM's SIGSEGV handler (Lucene in this process); the
    # handlers in place before it come back (pyterrier_sci.signals; Ray's own failure handler is off:
    # pyterrier_sci/__init__.py)
    try:
        with quiet_native(), keep_native_handlers():   # quiet: Ray's notices at start; errors still raise
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=num_cpus or os.cpu_count() or 1, **kwargs)
    except Exception as e:  # ConnectionError, TimeoutError, ValueError (bad address), RuntimeError
        where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
        raise ScaleError(f"cannot reach {where}: {type(e).__name__}: {e}") from None
    return True


#: the port a Ray Client server listens on unless told otherwise (``ray start --head --ray-client-server-port``)
RAY_CLIENT_PORT = 10001


def ray_client_address(address: str) -> str:
    """``address`` unchanged, unless it is a ``ray://`` address that names no host or no port (which Ray would
    try for half a minute): then one :class:`ScaleError` naming it and what to give."""
    a = address.strip()
    if not a.lower().startswith("ray://"):
        return address
    rest = a[len("ray://"):].rstrip("/")
    m = re.fullmatch(r"(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:/\[\]]*))(?::(?P<port>\d*))?", rest)
    if m is not None and not ((m.group("v6") or m.group("host")) and m.group("port")):
        what = "no host" if not (m.group("v6") or m.group("host")) else "no port"
        raise ScaleError(f"cannot reach the Ray cluster at {address!r}: the address names {what} (give "
                         f"ray://HOST:PORT, the head node's Ray Client port, {RAY_CLIENT_PORT} unless it was set)")
    return address


def _resolve(host: str, port: int, timeout: float) -> None:
    """Looks ``host`` up within ``timeout`` seconds (a lookup knows no timeout of its own): an OSError when it
    has no address, a ``socket.timeout`` when the lookup does not answer."""
    out: List[BaseException] = []

    def look() -> None:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            out.append(e)
    t = threading.Thread(target=look, name="ray-address-lookup", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise socket.timeout(f"looking up {host} took more than {timeout:g} s")
    if out:
        raise out[0]


_HOST_PORT = re.compile(r"^(?:ray://)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:/\[\]]+)):(?P<port>\d{1,5})/?$")


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Raises one :class:`ScaleError` naming ``address`` when nothing accepts a TCP connection at
    its host and port within ``timeout`` seconds, or when what answers there speaks HTTP/1 (a web
    server or an LLM endpoint, not Ray's gRPC).  ``auto``, ``local`` and other forms Ray resolves
    itself are left to Ray."""
    m = _HOST_PORT.match(address.strip())
    if not m:
        return
    host, port = m.group("v6") or m.group("host"), int(m.group("port"))
    where = f"the Ray cluster at {address!r}"
    if not 0 < port < 65536:
        raise ScaleError(f"cannot reach {where}: port {port} is not a TCP port (1-65535)")
    try:
        _resolve(host, port, timeout)
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as e:
        raise ScaleError(f"cannot reach {where}: the host {host!r} has no address ({e.strerror or e})") from None
    except socket.timeout:
        raise ScaleError(f"cannot reach {where}: no answer from {host}:{port} within {timeout:g} s "
                         "(is the cluster up, and is the port open from here?)") from None
    except OSError as e:
        raise ScaleError(f"cannot reach {where}: {e.strerror or e} "
                         f"(start one with 'ray start --head', or check the address)") from None
    head = b""
    if os.environ.get("RAY_USE_TLS", "").strip() not in ("1", "true", "True"):
        try:
            # an HTTP/2 client preface and an empty SETTINGS frame: Ray's gRPC servers answer with a
            # SETTINGS frame (type 4 in byte 3); a web server or an LLM endpoint with HTTP/1 text
            sock.settimeout(min(timeout, 2.0))
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            while len(head) < 4:
                more = sock.recv(16)
                if not more:
                    break
                head += more
        except OSError:
            pass
    sock.close()
    if head and not (len(head) >= 4 and head[3] == 0x04):
        shown = head[:12].decode("ascii", "replace").splitlines()[0] if head[:1].isascii() else repr(head[:12])
        raise ScaleError(f"cannot reach {where}: {host}:{port} answers, but not as Ray does (it sent {shown!r}: "
                         "a web server or an LLM endpoint?); a Ray address is the head node's GCS port "
                         "(host:6379) or its client server (ray://host:10001)")


def check_ray_client(address: str, timeout: Optional[float] = None) -> None:
    """For a ``ray://host:port`` address (Ray Client): Ray Client's packages are installed (the
    ``scale`` extra installs ``ray[client]``), the address is reachable (:func:`check_reachable`),
    and a Ray Client server answers a ping there within ``timeout`` seconds (default
    :data:`CONNECT_TIMEOUT`); otherwise one
    :class:`ScaleError` naming the address.  Without the ping, Ray waits without end for a server
    that accepts the connection but does not answer."""
    where = f"the Ray cluster at {address!r}"
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    try:
        import grpc
        from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc
    except ImportError as e:
        raise ScaleError(f"cannot reach {where}: ray:// addresses (Ray Client) need Ray's client packages, which "
                         f"are not installed ({e}): pip install 'pyterrier-sci[scale]' (it installs "
                         "'ray[client]')") from None
    check_reachable(address, timeout)
    m = _HOST_PORT.match(address.strip())
    if not m or os.environ.get("RAY_USE_TLS", "").strip() in ("1", "true", "True"):
        return   # a form Ray resolves itself, or TLS: left to Ray
    host = m.group("v6") and f"[{m.group('v6')}]" or m.group("host")
    channel = grpc.insecure_channel(f"{host}:{m.group('port')}")
    try:
        req = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
        ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(req, timeout=timeout)
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else None
        why = (f"no Ray Client server answered within {timeout:g} s" if code == grpc.StatusCode.DEADLINE_EXCEEDED
               else f"what answers is not a Ray Client server ({getattr(code, 'name', code)}: "
                    f"{' '.join(str(e.details() if hasattr(e, 'details') else e).split())[:160]})")
        raise ScaleError(f"cannot reach {where}: {why}; a ray:// address is the head node's Ray Client port "
                         "(ray://host:10001, started by 'ray start --head')") from None
    finally:
        channel.close()


@contextlib.contextmanager
def ray_session(address: Optional[str] = None, num_cpus: Optional[int] = None) -> Iterator[None]:
    """``with ray_session(...):`` Ray is up inside; shut down on exit if this call started it."""
    started = init_ray(address, num_cpus)
    try:
        yield
    finally:
        if started:
            import ray
            ray.shutdown()


# ---------------------------------------------------------------------------------------------
# any transformer on Ray: batches of queries on actors, one cache service
# ---------------------------------------------------------------------------------------------

#: seconds on_ray waits for its workers to start (Ray waits for free CPUs; a runtime_env may install)
START_TIMEOUT = 300.0

#: how on_ray orders the queries of its output (see :func:`_merge`)
ORDERS = ("auto", "qid", "input")

#: environment variables passed on to the workers of a cluster that is not local (secrets are not:
#: API keys must be set on the cluster, or given in ``runtime_env``)
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.I)


def _env_for_workers() -> Dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if (k.startswith("PYTERRIER_") or k == "OPENAI_BASE_URL") and not _SECRET.search(k)}


def _usages(transformer: Any) -> List[Any]:
    """The distinct :class:`~pyterrier_sci.llm.Usage` objects inside ``transformer``, in pipeline
    order (two components sharing one are counted once)."""
    out, seen = [], set()
    for comp in llm_components(transformer):
        usage = comp.sci_usage()
        if id(usage) not in seen:
            seen.add(id(usage))
            out.append(usage)
    return out


def _budget_ledgers(transformer: Any) -> Dict[Any, Any]:
    """The driver's budget ledgers of the LLM components inside ``transformer``, by ledger key
    (components of one run share one)."""
    out = {}
    for comp in llm_components(transformer):
        settings = comp.sci_llm_settings()
        key = ledger_key(settings)
        if key is not None and key not in out:
            out[key] = ledger_for(settings)
    return out


def _settle_seconds(transformer: Any) -> float:
    """How long the calls in flight of ``transformer``'s LLM components may take (0 without any)."""
    out = 0.0
    for comp in llm_components(transformer):
        s = comp.sci_llm_settings()
        out = max(out, float(s.timeout or 0) * (int(s.max_retries or 0) + 1) + float(s.backoff_max or 0) *
                  int(s.max_retries or 0))
    return out


class _RemoteLedgers:
    """What a worker's budget ledgers call (:func:`pyterrier_sci.llm.budget.use_ledger_service`):
    the run's ledgers in the cache service actor, so that all workers spend one budget."""

    def __init__(self, service):
        self.service = service

    def reserve(self, key, prompt_tokens, max_tokens, price):
        import ray
        return ray.get(self.service.ledger_reserve.remote(key, prompt_tokens, max_tokens, price))

    def settle(self, key, reservation, prompt_tokens, completion_tokens, price):
        import ray
        ray.get(self.service.ledger_settle.remote(key, reservation, prompt_tokens, completion_tokens, price))

    def release(self, key, reservation):
        import ray
        ray.get(self.service.ledger_release.remote(key, reservation))

    def state(self, key):
        import ray
        return ray.get(self.service.ledger_state.remote(key))


class _RemoteCache:
    """What a worker's :class:`~pyterrier_sci.llm.cache.ResponseCache` objects call: the cache
    service actor, each call waited for (a put returns once the response is committed)."""

    def __init__(self, service):
        self.service = service

    def get(self, directory, key):
        import ray
        return ray.get(self.service.get.remote(os.path.abspath(directory), key))

    def put(self, directory, key, value, model=""):
        import ray
        ray.get(self.service.put.remote(os.path.abspath(directory), key, value, model))

    def count(self, directory):
        import ray
        return ray.get(self.service.count.remote(os.path.abspath(directory)))

    def clear(self, directory):
        import ray
        ray.get(self.service.clear.remote(os.path.abspath(directory)))


class _Worker:
    """One Ray actor: routes its response caches through the service; each run it unpickles the
    transformer once (its own LLM clients and HTTP connections), then transforms batches and
    reports the usage counts of each batch."""

    def __init__(self, service, cwd: str):
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)   # relative paths (caches, templates) mean what they mean on the driver
        cache.use_service(_RemoteCache(service) if service is not None else None)
        budget.use_ledger_service(_RemoteLedgers(service) if service is not None else None)
        self.transformer = None
        self.usages: List[Any] = []

    def load(self, transformer) -> int:
        self.transformer = transformer
        self.usages = _usages(transformer)
        for u in self.usages:   # the copy carries the driver's counts: count only this worker's work
            u.reset()
        return len(self.usages)

    def transform(self, frame: pd.DataFrame):
        try:
            out = self.transformer.transform(frame)
        finally:
            counts = [u.as_dict() for u in self.usages]
            for u in self.usages:
                u.reset()
        return out, counts


def _split(inp: pd.DataFrame, batch_queries: int) -> List[pd.DataFrame]:
    """Consecutive batches of whole queries, queries in order of first appearance."""
    qids = pd.unique(inp["qid"])
    groups = inp.groupby("qid", sort=False).indices
    out = []
    for i in range(0, len(qids), batch_queries):
        idx = sorted(j for q in qids[i:i + batch_queries] for j in groups[q])
        out.append(inp.iloc[idx])
    return out


def _qid_order(df: pd.DataFrame) -> List[Any]:
    return list(pd.unique(df["qid"])) if "qid" in df.columns else []


def _merge(parts: Sequence[pd.DataFrame], batches: Sequence[pd.DataFrame], order: str = "auto") -> pd.DataFrame:
    """The batches' outputs as the one-process run gives them.  Rows of one query keep their
    order; the queries are ordered by ``qid`` (``order="qid"``), in input order (``"input"``), or
    (``"auto"``) as the batches show: when a batch whose input queries were not in sorted order
    came back sorted, the transformer sorts by ``qid`` (as the LLM re-rankers do) and so does the
    merge; otherwise queries keep their input order."""
    full = [p for p in parts if len(p)]
    if not full:
        return parts[0].iloc[0:0] if parts else pd.DataFrame()
    out = pd.concat(full, ignore_index=True) if len(full) > 1 else full[0].reset_index(drop=True)
    if "qid" not in out.columns or (order != "input" and out["qid"].is_monotonic_increasing):
        return out
    if order == "auto":
        sorts = keeps = 0
        for got, given in zip(parts, batches):
            given_order, got_order = _qid_order(given), _qid_order(got)
            if len(got_order) < 2 or given_order == sorted(given_order):
                continue   # says nothing: one query, or already sorted
            sorts += got_order == sorted(got_order)
            keeps += got_order == [q for q in given_order if q in set(got_order)]
        order = "qid" if sorts and not keeps else "input"
    if order == "qid":
        return out.sort_values("qid", kind="stable").reset_index(drop=True)
    position = {q: i for i, q in enumerate(q for b in batches for q in _qid_order(b))}
    key = out["qid"].map(position).fillna(len(position))
    return out.iloc[key.argsort(kind="stable")].reset_index(drop=True)


class _Pool:
    """The actors of one Ray session (slots only: not walked by ``llm_components``)."""
    __slots__ = ("session", "service", "actors")

    def __init__(self, session, service):
        self.session, self.service, self.actors = session, service, []


class RayTransformer(pt.Transformer):
    """Runs ``transformer`` on ``workers`` Ray actors: the input is split by ``qid`` into batches of
    ``batch_queries`` queries, each actor holds one unpickled copy of the transformer (its own
    LLM client and HTTP connections), and the output equals the one-process run's, rows in the
    same order.  The usage counters of the LLM components (calls, cache hits, tokens) of the
    workers are added to the components of ``transformer`` here, so usage reports stay right.

    LLM responses: every worker's response cache goes through one cache service, a Ray actor on
    this (the driver's) node that owns the SQLite file and commits each response as it arrives:
    a rerun makes no calls, and an interrupted run keeps every finished response.

    Args:
        transformer: any ``pt.Transformer`` (picklable).
        workers: the number of actors.
        batch_queries: queries per batch (default: about four batches per worker).
        address: a Ray cluster (else ``$RAY_ADDRESS``, else a local instance started here and
            shut down after each call).
        num_cpus: CPUs Ray reserves per worker (LLM stages wait on the server: fractions such as
            0.25 put several workers on one core).
        runtime_env: Ray's ``runtime_env`` for the workers (e.g. ``{"env_vars": {"OPENAI_API_KEY": ...}}``
            on a cluster whose nodes lack the key).
        order: the order of the queries in the output: ``"auto"`` (the one the batches show: sorted
            by ``qid`` when batches come back sorted though their input was not, as from the LLM
            re-rankers; else the input order), ``"qid"`` or ``"input"``.  Rows of one query always
            keep the transformer's order.
    """

    def __init__(self, transformer: pt.Transformer, workers: int = 2, batch_queries: Optional[int] = None,
                 address: Optional[str] = None, num_cpus: float = 1.0, runtime_env: Optional[dict] = None,
                 order: str = "auto"):
        if not isinstance(transformer, pt.Transformer):
            raise ScaleError(f"on_ray runs a pt.Transformer, not {type(transformer).__name__}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ScaleError(f"workers must be a whole number >= 1, not {workers!r}")
        if batch_queries is not None and (isinstance(batch_queries, bool) or not isinstance(batch_queries, int)
                                          or batch_queries < 1):
            raise ScaleError(f"batch_queries must be a whole number >= 1, not {batch_queries!r}")
        if not (isinstance(num_cpus, (int, float)) and not isinstance(num_cpus, bool) and 0 <= num_cpus <= 1024):
            raise ScaleError(f"num_cpus must be a number from 0 to 1024, not {num_cpus!r}")
        if order not in ORDERS:
            raise ScaleError(f"order must be one of {ORDERS}, not {order!r}")
        self.transformer = transformer
        self.order = order
        self.workers = workers
        self.batch_queries = batch_queries
        self.address = address
        self.num_cpus = num_cpus
        self.runtime_env = runtime_env
        self._pool: Optional[_Pool] = None

    def __repr__(self) -> str:
        return f"RayTransformer({self.transformer!r}, workers={self.workers})"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        if "qid" not in inp.columns:
            raise ScaleError(f"on_ray splits its input by 'qid', which the frame lacks (columns: {list(inp.columns)})")
        if len(inp) == 0:
            return self.transformer.transform(inp)
        started = init_ray(self.address)
        try:
            return self._run(inp)
        finally:
            if started:
                import ray
                self._pool = None
                ray.shutdown()

    def _run(self, inp: pd.DataFrame) -> pd.DataFrame:
        import ray

        nq = inp["qid"].nunique()
        workers = min(self.workers, nq)
        batch = self.batch_queries or max(1, math.ceil(nq / (4 * workers)))
        batches = _split(inp, batch)
        total_cpus = ray.cluster_resources().get("CPU", 0)
        if workers * self.num_cpus > total_cpus:
            raise ScaleError(f"on_ray asks for {workers} workers x {self.num_cpus:g} CPUs, but the Ray cluster has "
                             f"{total_cpus:g}: use fewer workers or a smaller num_cpus (an LLM stage mostly waits "
                             "on its server: num_cpus=0.25 puts four workers on a core)")
        usages = _usages(self.transformer)
        settle = _settle_seconds(self.transformer)
        results: List[Optional[pd.DataFrame]] = [None] * len(batches)
        bar = pt.tqdm(total=len(batches), desc="on_ray", unit="batch", leave=False, disable=len(batches) < 2)
        try:
            actors = self._actors(ray, workers)
            ray.get(self._pool.service.resume.remote())
            ledgers = _budget_ledgers(self.transformer)   # the run's budgets go to the service, and back after
            ray.get([self._pool.service.ledger_load.remote(k, led.limits, led.state()) for k, led in ledgers.items()])
            ref = ray.put(self.transformer)
            loads = [a.load.remote(ref) for a in actors]
            _, waiting = ray.wait(loads, num_returns=len(loads), timeout=START_TIMEOUT)
            if waiting:
                free = ray.available_resources().get("CPU", 0)
                raise ScaleError(f"{len(waiting)} of {len(actors)} on_ray workers did not start within "
                                 f"{START_TIMEOUT:g} s (each asks for {self.num_cpus:g} CPUs; the cluster has {free:g} "
                                 "free): use fewer workers or a smaller num_cpus")
            try:
                ray.get(loads)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
                raise ScaleError(f"the on_ray workers cannot start or unpickle the transformer "
                                 f"(is pyterrier-sci installed on every node?): {e}") from None
            todo = list(range(len(batches)))[::-1]
            running: Dict[Any, Any] = {}
            for a in actors:
                if todo:
                    i = todo.pop()
                    running[a.transform.remote(batches[i])] = (i, a)
            while running:
                done, _ = ray.wait(list(running), num_returns=1)
                i, a = running.pop(done[0])
                try:
                    out, counts = ray.get(done[0])
                except ray.exceptions.RayActorError as e:
                    raise ScaleError(f"an on_ray worker died on batch {i + 1} of {len(batches)} "
                                     f"(finished LLM responses are in the cache; run again to resume): {e}") from None
                except ray.exceptions.RayTaskError as e:   # the transformer's own error, as raised there
                    cause = getattr(e, "cause", None)
                    raise (cause if isinstance(cause, Exception) else e) from None
                if len(counts) != len(usages):
                    raise ScaleError(f"a worker reported {len(counts)} usage counters for {len(usages)} LLM components")
                for u, c in zip(usages, counts):
                    u.add(**c)
                results[i] = out
                bar.update(1)
                if todo:
                    j = todo.pop()
                    running[a.transform.remote(batches[j])] = (j, a)
        except BaseException as e:
            ledgers = locals().get("ledgers") or {}
            if locals().get("running") and self._pool is not None and (settle or ledgers):
                # the other workers send no new call (the service refuses their next cache lookup) and finish the
                # calls in flight, whose answers are committed before the workers are ended: nothing paid for is
                # lost, and the driver's ledger counts every call that was answered
                try:
                    ray.get(self._pool.service.stop.remote(f"another on_ray worker failed ({type(e).__name__})"))
                except Exception:  # noqa: BLE001 - the service is gone: nothing is left to keep
                    pass
                ray.wait(list(running), num_returns=len(running), timeout=max(settle, BUDGET_SETTLE_TIMEOUT))
            self._take_back_budgets(ray, ledgers)
            self.close()     # stops the other workers' batches; finished responses are in the cache
            raise
        else:
            self._take_back_budgets(ray, ledgers)
        finally:
            bar.close()
        return _merge(results, batches, self.order)

    def _take_back_budgets(self, ray, ledgers: Dict[Any, Any]) -> None:
        """The driver's ledgers take over what the workers spent (kept by the cache service)."""
        if not ledgers or self._pool is None:
            return
        try:
            states = ray.get([self._pool.service.ledger_state.remote(k) for k in ledgers])
        except Exception:  # noqa: BLE001 - the service is gone: the error being raised says more
            return
        for ledger, state in zip(ledgers.values(), states):
            ledger.load_state(state)

    def _actors(self, ray, workers: int) -> list:
        """The cache service and ``workers`` actors, kept between calls in one Ray session (a new
        session, e.g. after ``ray.shutdown()``, gets new ones)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


        ctx = ray.get_runtime_context()
        session = (ctx.gcs_address, ctx.get_node_id())
        pool = self._pool
        if pool is None or pool.session != session:
            service = ray.remote(CacheService).options(   # owns the SQLite files: on this node
                num_cpus=0, max_concurrency=64,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=ctx.get_node_id(), soft=False)).remote()
            pool = self._pool = _Pool(session, service)
        opts: Dict[str, Any] = dict(num_cpus=self.num_cpus, max_concurrency=1, scheduling_strategy="SPREAD")
        env = dict(self.runtime_env or {})
        if self.address or os.environ.get(RAY_ADDRESS_ENV):
            env["env_vars"] = {**_env_for_workers(), **env.get("env_vars", {})}
        if env:
            opts["runtime_env"] = env
        while len(pool.actors) < workers:
            pool.actors.append(ray.remote(_Worker).options(**opts).remote(pool.service, os.getcwd()))
        return pool.actors[:workers]

    def close(self) -> None:
        """Ends the workers and the cache service (also done when Ray shuts down)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            import ray
            if ray.is_initialized():
                for a in pool.actors:
                    ray.kill(a)
                ray.kill(pool.service)
        except Exception:  # noqa: BLE001 - a session already gone has nothing left to end
            pass

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_pool"] = None
        return state


def on_ray(transformer: pt.Transformer, workers: int = 2, ray_address: Optional[str] = None,
           batch_queries: Optional[int] = None, num_cpus: float = 1.0,
           runtime_env: Optional[dict] = None, order: str = "auto") -> RayTransformer:
    """``transformer`` run on ``workers`` Ray actors, batches of ``batch_queries`` queries at a
    time (:class:`RayTransformer`): ``pool >> on_ray(listwise, workers=8)``."""
    return RayTransformer(transformer, workers=workers, batch_queries=batch_queries, address=ray_address,
                          num_cpus=num_cpus, runtime_env=runtime_env, order=order)


def _on_ray_params():
    return params(workers=Param(int, min=1, max=10_000), batch_queries=Param(int, min=1, max=10_000_000, optional=True),
                  num_cpus=Param(float, min=0, max=1024, optional=True),
                  address=Param(str, optional=True, min_len=1, max_len=1000),
                  order=Param(str, choices=ORDERS, optional=True))


@_on_ray_params()
def on_ray_component(*inputs, context=None, workers: Optional[int] = None, batch_queries: Optional[int] = None,
                     num_cpus: Optional[float] = None, address: Optional[str] = None, order: Optional[str] = None):
    """``on_ray(pipeline, workers=N)``: runs its input pipeline on N Ray actors, batches of queries
    at a time, with the one-process results (docs/scale.md).  Defaults come from the config's
    ``ray:`` section (``workers``, ``batch_queries``, ``num_cpus``, ``address``, ``order``)."""
    if len(inputs) != 1:
        raise PipelineError(f"on_ray takes exactly one input pipeline (the stage to run on Ray), got {len(inputs)}")
    section = (context.settings.get("ray") if context is not None else None) or {}
    if not isinstance(section, dict):
        raise PipelineError(f"the config's 'ray' section must be a mapping (workers, batch_queries, ...), "
                            f"not {type(section).__name__}")
    section = dict(section)
    keys = ("workers", "batch_queries", "num_cpus", "address", "order")
    unknown = sorted(set(section) - set(keys))
    if unknown:
        raise PipelineError(f"the config's 'ray' section has unknown keys {unknown} (it takes: {', '.join(keys)})")
    checked = on_ray_component.__pyterrier_sci_params__.check("on_ray (the config's 'ray' section)", section)
    own = {"workers": workers, "batch_queries": batch_queries, "num_cpus": num_cpus, "address": address,
           "order": order}
    merged = {k: own[k] if own[k] is not None else checked.get(k) for k in own}
    if merged["address"] is not None and not (context is not None and context.trusted):
        raise PipelineError(f"a Ray address in a pipeline ({merged['address']!r}) is used only when the pipeline is "
                            "trusted (it receives the pipeline and sends back results): pass trusted=True / "
                            f"--trust-config, or set ${RAY_ADDRESS_ENV}")
    return RayTransformer(inputs[0], workers=merged["workers"] or 2, batch_queries=merged["batch_queries"],
                          address=merged["address"], num_cpus=1.0 if merged["num_cpus"] is None else merged["num_cpus"],
                          order=merged["order"] or "auto")
