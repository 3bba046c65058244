"""The same app behind Ray Serve: each replica loads the pipelines once (a
:class:`~.service.SearchService`) and serves :func:`~.app.create_app`'s FastAPI app; Ray Serve's proxy
spreads requests over the replicas (no balancer of ours).  Local by default, an existing cluster by
address (:func:`pyterrier_sci.scale.init_ray`).  A local Ray instance started here binds its ports to loopback
only (:data:`LOCAL_RAY_LOOPBACK_ENV`).  docs/serve.md, "Beyond one machine"."""
from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable, Optional, Sequence

from pyterrier_sci.scale import RAY_ADDRESS_ENV, init_ray

from .api import SearchAPI, ServeSettings
from .app import create_app
from .service import SearchService, ServeLimits

__all__ = ["ray_deployment", "run_on_ray", "stop_on_ray", "APP_NAME", "ServeReplica", "LOCAL_RAY_LOOPBACK_ENV",
           "local_ray_on_loopback"]

LOGGER = logging.getLogger("pyterrier_sci.serve")

#: the name of the Ray Serve application ``run_on_ray`` runs
APP_NAME = "pyterrier-sci"
#: Ray's switch (read when ``ray`` is imported) between a node that other machines may join - its GCS, raylet,
#: object manager and agents listening on every address - and one on loopback only (Ray's own default on macOS
#: and Windows): "0" before a local instance starts makes every port it opens a loopback one
LOCAL_RAY_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def local_ray_on_loopback(address: Optional[str] = None) -> bool:
    """Before ``ray`` is imported: makes the local Ray instance that will start (no ``address``, no
    ``$RAY_ADDRESS``) listen on loopback only (:data:`LOCAL_RAY_LOOPBACK_ENV`).  True when it will; False for a
    cluster, or when ``ray`` was imported already without it (Ray's default holds, and a warning says so)."""
    if address or os.environ.get(RAY_ADDRESS_ENV):
        return False
    if "ray" not in sys.modules:
        os.environ.setdefault(LOCAL_RAY_LOOPBACK_ENV, "0")
    if os.environ.get(LOCAL_RAY_LOOPBACK_ENV) == "0":
        return True
    LOGGER.warning("the local Ray instance listens on every address: ray was imported before %s=0 could be set",
                   LOCAL_RAY_LOOPBACK_ENV)
    return False


class ServeReplica:
    """One Ray Serve replica: the loaded pipelines and the app over them."""

    def __init__(self, config: Any, pipelines: Optional[Sequence[str]] = None, dataset: Optional[str] = None,
                 settings: Optional[ServeSettings] = None, limits: Optional[ServeLimits] = None,
                 trusted: bool = False, allow_expressions: bool = False):
        service = SearchService(config, list(pipelines) if pipelines else None, dataset, limits or ServeLimits(),
                                trusted=trusted, allow_expressions=allow_expressions).load()
        self.api = SearchAPI(service, settings or ServeSettings())

    def __serve_build_asgi_app__(self):  # Ray Serve calls it on the replica, after __init__
        return create_app(self.api, mcp_host="0.0.0.0")


def ray_deployment(config: Any, pipelines: Optional[Sequence[str]] = None, dataset: Optional[str] = None,
                   settings: Optional[ServeSettings] = None, limits: Optional[ServeLimits] = None,
                   num_replicas: int = 1, num_cpus: float = 1, trusted: bool = False,
                   allow_expressions: bool = False, name: str = "pyterrier-sci",
                   graceful_shutdown_timeout_s: Optional[float] = None):
    """A bound Ray Serve application: ``num_replicas`` replicas of :class:`ServeReplica` (each ``num_cpus``); a
    replica being stopped finishes the requests it holds within ``graceful_shutdown_timeout_s`` (default: the
    settings' grace period)."""
    from ray import serve
    ingress = serve.ingress()(ServeReplica)
    grace = graceful_shutdown_timeout_s if graceful_shutdown_timeout_s is not None else (settings or
                                                                                         ServeSettings()).grace
    dep = serve.deployment(ingress, name=name, num_replicas=num_replicas,
                           ray_actor_options={"num_cpus": num_cpus}, graceful_shutdown_timeout_s=grace)
    return dep.bind(config, list(pipelines) if pipelines else None, dataset, settings, limits, trusted,
                    allow_expressions)


def run_on_ray(app, host: str = "127.0.0.1", port: int = 8000, address: Optional[str] = None,
               num_cpus: Optional[int] = None, route_prefix: str = "/", blocking: bool = False,
               on_ray_started: Optional[Callable[[], None]] = None):
    """Starts Ray (local, or the cluster at ``address``) and Ray Serve's HTTP proxy on ``host:port``,
    then runs ``app`` (:func:`ray_deployment`); returns its handle.  A local Ray instance binds to loopback
    (:data:`LOCAL_RAY_LOOPBACK_ENV`; when ``ray`` was imported before, Ray's own default holds).
    ``on_ray_started``: called once Ray runs (``ray.init`` installs its SIGTERM handler: the caller's own
    goes in here)."""
    local_ray_on_loopback(address)
    from ray import serve
    init_ray(address, num_cpus)
    if on_ray_started is not None:
        on_ray_started()
    serve.start(http_options={"host": host, "port": port})
    return serve.run(app, name=APP_NAME, route_prefix=route_prefix, blocking=blocking)


def stop_on_ray(address: Optional[str] = None) -> None:
    """Ends what :func:`run_on_ray` started: deletes the application (Ray Serve stops routing to its replicas and
    lets each finish the requests it holds, up to the deployment's ``graceful_shutdown_timeout_s``), then, when
    Ray was started here (no ``address``), Ray Serve and Ray themselves.  On a cluster (``address``) only this
    application goes: the cluster's other applications and its Serve instance stay."""
    import ray
    from ray import serve
    if not ray.is_initialized():
        return
    try:
        serve.delete(APP_NAME)
    finally:
        if address is None:
            serve.shutdown()
            ray.shutdown()
