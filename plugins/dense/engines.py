"""The registry of encoder engines: one :class:`~.engine.Engine` per ``backend`` name of the core
(:data:`pyterrier_sci.models.BACKENDS`).  Code that runs an encoder asks the registry for the engine
(:func:`engine_for`) and calls it (``engine.exported``, ``engine.export``, ``engine.compile``, ...) instead of
comparing backend names at each use."""
from __future__ import annotations

from typing import Dict

from pyterrier_sci.models import check_backend

from .engine import Engine
from .onnx_engine import ONNXEngine
from .openvino_engine import OpenVINOEngine
from .torch_engine import TorchEngine

__all__ = ["ENGINES", "engine_for"]

#: backend name -> its engine
ENGINES: Dict[str, Engine] = {e.name: e for e in (TorchEngine(), OpenVINOEngine(), ONNXEngine())}


def engine_for(backend: str, precision: str = "fp32") -> Engine:
    """The engine of ``backend``, once ``backend`` and ``precision`` are checked to go together (one
    :class:`~pyterrier_sci.models.BackendError` naming the choices otherwise: torch runs fp32 only)."""
    check_backend(backend, precision)
    return ENGINES[backend]
