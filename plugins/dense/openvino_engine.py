"""The ``openvino`` engine: the model's transformer converted with ``openvino.convert_model`` (dynamic batch
and length) and compiled for the CPU with ``INFERENCE_PRECISION_HINT=f32``; int8 by NNCF post-training
static quantisation (``nncf.quantize``, ``ModelType.TRANSFORMER``, SmoothQuant off)."""
from __future__ import annotations

import contextlib
import importlib
import io
import logging
import warnings
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from pyterrier_sci.progress import phase

from .engine import Engine, engine_inputs, example_inputs, exported_module, features, transformers_quiet

__all__ = ["OpenVINOEngine", "run_compiled"]


@contextlib.contextmanager
def no_telemetry():
    """OpenVINO's converter and NNCF send usage telemetry (Google Analytics) from a forked process and
    write ``~/intel/``; with no network its DNS lookup can hang, and the interpreter's exit waits for it.
    The toolkit sends none and writes nothing there: while the block runs, both use the stub OpenVINO
    ships for installations without ``openvino_telemetry``."""
    patches = []
    try:
        from openvino.tools.ovc import telemetry_stub
        stubs = [("openvino.tools.ovc.telemetry_utils", "tm", telemetry_stub),
                 ("openvino.tools.ovc.convert_impl", "tm", telemetry_stub)]
    except ImportError:
        stubs = []
    try:
        from nncf.telemetry.wrapper import NNCFTelemetryStub
        stubs += [(name, "telemetry", NNCFTelemetryStub())
                  for name in ("nncf.telemetry.wrapper", "nncf.telemetry.decorator")]
    except ImportError:
        pass
    for name, attr, stub in stubs:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, attr):
            patches.append((module, attr, getattr(module, attr)))
            setattr(module, attr, stub)
    try:
        yield
    finally:
        for module, attr, old in reversed(patches):
            setattr(module, attr, old)


@contextlib.contextmanager
def _quiet_nncf():
    """NNCF's progress bars (rich, on stdout) and INFO log lines stay out of the caller's output."""
    log = logging.getLogger("nncf")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        log.setLevel(level)


def run_compiled(compiled):
    """The engine function of a compiled OpenVINO model (its own infer request: a request runs one
    inference at a time)."""
    request = compiled.create_infer_request()
    names = {i.get_any_name() for i in compiled.inputs}

    def run(inputs):
        request.infer({k: v for k, v in inputs.items() if k in names})
        return np.array(request.get_output_tensor(0).data, copy=True)
    return run


class OpenVINOEngine(Engine):
    """OpenVINO on the CPU (``model.xml`` + ``model.bin``)."""

    name = "openvino"
    packages = ("openvino",)
    model_files = ("model.xml", "model.bin")
    recommended_int8 = True

    def export(self, st, tmp: Path, precision: str, calibration, *, output: str = "last_hidden_state",
               examples: Sequence = (), reference: Optional[dict] = None, verbose: bool = False,
               name: str = "the model", bias_correction: bool = True) -> dict:
        import openvino as ov
        import torch
        module = exported_module(st, output)
        example = example_inputs(st, examples)
        with torch.no_grad(), warnings.catch_warnings(), transformers_quiet(), no_telemetry(), \
                phase(f"exporting {name} to OpenVINO", verbose):
            # tracer warnings about shapes (the exported graph keeps them dynamic), and transformers' log line
            # about an unset loss_type, which tracing provokes by reading every attribute of the model
            warnings.simplefilter("ignore")
            ovm = ov.convert_model(module, example_input=example)
        ovm.reshape({inp.get_any_name(): ov.PartialShape([-1, -1]) for inp in ovm.inputs})
        info = {"openvino": ov.__version__}
        if precision == "int8":
            import nncf
            from nncf.quantization.advanced_parameters import (
                AdvancedQuantizationParameters,
                AdvancedSmoothQuantParameters,
            )
            if reference is not None:
                fp32 = ov.Core().compile_model(ovm.clone(), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
                reference["run"] = run_compiled(fp32)
            data = [engine_inputs(features(st, [t])) for t in calibration.texts]
            # SmoothQuant off: on CSFCube it moved NDCG%20 by up to +0.70 points (method facet) against torch
            # fp32, without it at most 0.41 (docs/dense.md, the quality guard)
            # fast bias correction off for bi-encoders (bias_correction=False): on MiniLM it left the int8 vectors
            # as close to fp32 (mean cosine 0.99526 with and without, 1,000 held-out CSFCube abstracts) and took
            # 4 s of a 13 s calibration on the Intel Xeon (docs/dense.md)
            advanced = AdvancedQuantizationParameters(smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1),
                                                      disable_bias_correction=not bias_correction)
            with _quiet_nncf(), no_telemetry(), \
                    phase(f"calibrating int8 on {len(data)} documents", verbose, total=len(data), unit="doc") as bar:
                def seen(item):  # nncf's statistics pass reads each calibration input once
                    if bar.n < bar.total:
                        bar.update(1)
                    return item
                ovm = nncf.quantize(ovm, nncf.Dataset(data, seen), model_type=nncf.ModelType.TRANSFORMER,
                                    subset_size=len(data), advanced_parameters=advanced)
            info.update(nncf=nncf.__version__, method="nncf.quantize (post-training static, ModelType.TRANSFORMER, "
                        f"SmoothQuant off, {'fast bias correction' if bias_correction else 'no bias correction'}, "
                        "per-text calibration inputs)")
        tmp.mkdir(parents=True)
        ov.save_model(ovm, str(tmp / "model.xml"), compress_to_fp16=False)
        return info

    def compile(self, path: Path, threads: Optional[int]):
        import openvino as ov
        core = ov.Core()
        # f32: on CPUs with bf16 units OpenVINO would otherwise run fp32 models in bf16
        config = {"INFERENCE_PRECISION_HINT": "f32"}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        return core.compile_model(core.read_model(str(path / self.model_files[0])), "CPU", config)

    def runner(self, compiled):
        return run_compiled(compiled)

    def threads(self, compiled) -> int:
        return int(compiled.get_property("INFERENCE_NUM_THREADS"))
