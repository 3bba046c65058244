"""Where an OpenVINO encoder spends its time, by operation (OpenVINO's own per-node counters).

Compiles the main job's MiniLM export (int8 by default, calibrated on the first 300 CSFCube abstracts, built
on first use in the work directory) with ``PERF_COUNT``, encodes CSFCube abstracts (longest first, batches of
32, as the index builder does) once to warm every shape, then again counting, and prints the time per node type
and kernel.  Run it twice to compare instruction sets, e.g. with AMX hidden from oneDNN::

    python benchmarks/profile_openvino.py --docs 640
    ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI python benchmarks/profile_openvino.py --docs 640
"""
from __future__ import annotations

import argparse
import collections
import time

import openvino as ov

from pyterrier_sci.corpus import corpus_texts
from pyterrier_sci.models import load_sentence_transformer
from pyterrier_sci.plugins.dense.calibration import calibration_from_corpus
from pyterrier_sci.plugins.dense.encoders import encoder_path, load_encoder
from pyterrier_sci.plugins.dense.engine import engine_inputs, features


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=640)
    ap.add_argument("--precision", choices=["int8", "fp32"], default="int8")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)
    dataset = "irds:sci/csfcube"
    calibration = calibration_from_corpus(dataset) if args.precision == "int8" else None
    load_encoder("default", backend="openvino", precision=args.precision, calibration=calibration)  # built once
    xml = encoder_path("default", "openvino", args.precision, calibration) / "model.xml"
    texts = sorted((d["text"] for _, d in zip(range(args.docs), corpus_texts(dataset))), key=len, reverse=True)
    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": True})
    names = {i.get_any_name() for i in compiled.inputs}
    st = load_sentence_transformer("default", "cpu")      # its tokenizer, as the encoder's
    batches = [{k: v for k, v in engine_inputs(features(st, texts[b:b + args.batch_size])).items()
                if k in names} for b in range(0, len(texts), args.batch_size)]
    request = compiled.create_infer_request()
    for inp in batches:          # every shape once: compiled kernels are cached per shape
        request.infer(inp)
    per_node: collections.Counter = collections.Counter()
    start = time.perf_counter()
    for inp in batches:
        request.infer(inp)
        for p in request.profiling_info:
            per_node[(p.node_type, p.exec_type)] += p.real_time.total_seconds()
    wall = time.perf_counter() - start
    total = sum(per_node.values())
    print(f"{len(texts)} CSFCube abstracts, openvino {args.precision}, batch {args.batch_size}: {wall:.2f} s wall, "
          f"{total:.2f} s counted")
    print("| node type | kernel | s | share |\n|---|---|---|---|")
    for (node, kernel), s in per_node.most_common(args.top):
        print(f"| {node} | {kernel} | {s:.2f} | {100 * s / total:.1f} % |")


if __name__ == "__main__":
    main()
