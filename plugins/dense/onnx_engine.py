"""The ``onnx`` engine: the model's transformer exported with ``torch.onnx.export`` (opset 17) and run by
ONNX Runtime's CPU provider; int8 by ``onnxruntime.quantization.quantize_dynamic`` (QInt8 weights)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional, Sequence

from pyterrier_sci.progress import phase

from .engine import Engine, example_inputs, exported_module, transformers_quiet

__all__ = ["ONNXEngine"]


class ONNXEngine(Engine):
    """ONNX Runtime on the CPU (``model.onnx``)."""

    name = "onnx"
    packages = ("onnxruntime", "onnx")
    model_files = ("model.onnx",)
    int8_note = "onnxruntime dynamic quantisation; "

    def export(self, st, tmp: Path, precision: str, calibration, *, output: str = "last_hidden_state",
               examples: Sequence = (), reference: Optional[dict] = None, verbose: bool = False,
               name: str = "the model", bias_correction: bool = True) -> dict:
        """``last_hidden_state`` is named ``token_embeddings``; any other output has a dynamic batch axis only."""
        with phase(f"exporting {name} to ONNX{' (int8)' if precision == 'int8' else ''}", verbose):
            return self._export(st, tmp, precision, output, examples)

    def _export(self, st, tmp: Path, precision: str, output: str, examples: Sequence) -> dict:
        import onnxruntime
        import torch
        module = exported_module(st, output)
        example = example_inputs(st, examples)
        names = list(example)
        tmp.mkdir(parents=True)
        target = tmp / ("model-fp32.onnx" if precision == "int8" else "model.onnx")
        out_name = "token_embeddings" if output == "last_hidden_state" else output
        axes = {n: {0: "batch", 1: "tokens"} for n in names}
        axes[out_name] = {0: "batch", 1: "tokens"} if output == "last_hidden_state" else {0: "batch"}
        with torch.no_grad(), warnings.catch_warnings(), transformers_quiet():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, tuple(example[n] for n in names), str(target), input_names=names,
                              output_names=[out_name], dynamic_axes=axes, opset_version=17, dynamo=False)
        info = {"onnxruntime": onnxruntime.__version__, "torch_onnx_opset": 17}
        if precision == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic
            quantize_dynamic(str(target), str(tmp / "model.onnx"), weight_type=QuantType.QInt8)
            target.unlink()
            info["method"] = "onnxruntime.quantization.quantize_dynamic (weights QInt8, activations per batch)"
        return info

    def compile(self, path: Path, threads: Optional[int]):
        import onnxruntime as ort
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        return ort.InferenceSession(str(path / self.model_files[0]), options, providers=["CPUExecutionProvider"])

    def runner(self, compiled):
        names = {i.name for i in compiled.get_inputs()}

        def run_onnx(inputs):
            return compiled.run(None, {k: v for k, v in inputs.items() if k in names})[0]
        return run_onnx

    def threads(self, compiled) -> int:
        return int(compiled.get_session_options().intra_op_num_threads)
