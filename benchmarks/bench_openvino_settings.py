"""The main job's int8 encoder under the settings OpenVINO offers beyond the toolkit's one synchronous request
(issue 31, item 17: threads, hints, batch shapes), each against that request, interleaved.

The work is the main job's: MiniLM's int8 OpenVINO export as ``pipelines/csfcube.yaml`` builds it (calibrated on
the first ``CALIBRATION_SIZE`` CSFCube abstracts; built on first use in the work directory), encoding the first
``--docs`` CSFCube texts (title and abstract, longest first, as the index builder sorts them), already tokenised,
so that only the engine is timed.  Every round compiles each setting afresh and times its compilation and one
pass over the texts: the main job meets every batch shape once, and a new shape costs the CPU plugin its kernels.

Settings (the first is the toolkit's, ``openvino_engine.run_compiled``):

- ``sync``: one infer request, ``INFERENCE_PRECISION_HINT`` f32, OpenVINO's default threads (one per core,
  pinned);
- ``sync batch 16`` / ``sync batch 64``: other batch sizes;
- ``sync padded to 32``: each batch padded to a multiple of 32 word pieces (fewer shapes: the table's ``shapes``);
- ``2 streams async``: ``NUM_STREAMS`` 2 (one thread each) and an ``AsyncInferQueue`` of 2 requests;
- ``THROUGHPUT hint async``: ``PERFORMANCE_HINT`` THROUGHPUT and a queue of OpenVINO's optimal size;
- ``LATENCY hint``: ``PERFORMANCE_HINT`` LATENCY, one request;
- ``precision hint default``: no precision hint (bf16 for the fp32 parts where the CPU has bf16 units);
- ``threads not pinned``: ``ENABLE_CPU_PINNING`` off (OpenVINO pins its threads to cores by default);
- ``1 thread``: ``INFERENCE_NUM_THREADS`` 1, against which the default's speed-up is its parallel efficiency.

Reported per setting: the median seconds, the speed-up against ``sync`` (median of the per-round ratios, min,
max), documents per second, and the mean and least cosine of its mean-pooled vectors to ``sync``'s.  Usage::

    python benchmarks/bench_openvino_settings.py --docs 1024 --rounds 2 \
        --out benchmarks/results/bench_openvino_settings_zen4.md
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, Dict

import numpy as np

DATASET = "irds:sci/csfcube"


def pooled(out: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    v = (out * m).sum(1) / m.sum(1)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def padded(batch: Dict[str, np.ndarray], multiple: int, cap: int) -> Dict[str, np.ndarray]:
    """``batch`` with its sequence axis padded (zeros: padding ids, a zero attention mask) to a multiple of
    ``multiple``, at most ``cap``."""
    length = batch["input_ids"].shape[1]
    target = min(-(-length // multiple) * multiple, max(cap, length))
    return batch if target == length else {k: np.pad(v, ((0, 0), (0, target - length))) for k, v in batch.items()}


def sync_side(core, model, config: dict, batches) -> Callable[[], np.ndarray]:
    def run():
        compiled = core.compile_model(model, "CPU", config)
        request = compiled.create_infer_request()
        outs = []
        for b in batches:
            request.infer(b)
            outs.append(pooled(request.get_output_tensor(0).data, b["attention_mask"]))
        return np.concatenate(outs)
    return run


def async_side(core, model, config: dict, batches, jobs: int) -> Callable[[], np.ndarray]:
    import openvino as ov

    def run():
        compiled = core.compile_model(model, "CPU", config)
        queue = ov.AsyncInferQueue(compiled, jobs)
        outs = [None] * len(batches)

        def done(request, i):
            outs[i] = pooled(request.get_output_tensor(0).data, batches[i]["attention_mask"])
        queue.set_callback(done)
        for i, b in enumerate(batches):
            queue.start_async(b, i)
        queue.wait_all()
        return np.concatenate(outs)
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="also write the table as a Markdown results file")
    args = ap.parse_args(argv)

    import openvino as ov
    import pandas as pd

    import pyterrier_sci  # noqa: F401  (registers the datasets)
    from pyterrier_sci.bench import interleaved, load_note, markdown, write_results
    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.models import load_sentence_transformer
    from pyterrier_sci.plugins.dense.calibration import CALIBRATION_SIZE, calibration_from_corpus
    from pyterrier_sci.plugins.dense.encoders import encoder_path, load_encoder
    from pyterrier_sci.plugins.dense.engine import engine_inputs, features

    before = os.getloadavg()
    calibration = calibration_from_corpus(DATASET)
    load_encoder("default", backend="openvino", precision="int8", calibration=calibration)   # built once
    xml = encoder_path("default", "openvino", "int8", calibration) / "model.xml"
    texts = sorted((d["text"] for _, d in zip(range(args.docs), corpus_texts(DATASET))), key=len, reverse=True)
    st = load_sentence_transformer("default", "cpu")
    core = ov.Core()
    model = core.read_model(str(xml))
    names = {i.get_any_name() for i in model.inputs}

    def batches(size: int):
        return [{k: v for k, v in engine_inputs(features(st, texts[b:b + size])).items() if k in names}
                for b in range(0, len(texts), size)]
    b16, b32, b64 = batches(16), batches(32), batches(64)
    cap = st.max_seq_length
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    padded32 = [padded(b, 32, cap) for b in b32]
    # name: (engine config, batches, async queue size or None for one synchronous request)
    plans = {
        "sync": (f32, b32, None),
        "sync batch 16": (f32, b16, None),
        "sync batch 64": (f32, b64, None),
        "sync padded to 32": (f32, padded32, None),
        "2 streams async": ({**f32, "NUM_STREAMS": 2, "INFERENCE_NUM_THREADS": 2}, b32, 2),
        "THROUGHPUT hint async": ({**f32, "PERFORMANCE_HINT": "THROUGHPUT"}, b32, 0),
        "LATENCY hint": ({**f32, "PERFORMANCE_HINT": "LATENCY"}, b32, None),
        "precision hint default": ({}, b32, None),
        "threads not pinned": ({**f32, "ENABLE_CPU_PINNING": False}, b32, None),
        "1 thread": ({**f32, "INFERENCE_NUM_THREADS": 1}, b32, None),
    }
    sides = {name: sync_side(core, model, config, bs) if jobs is None else async_side(core, model, config, bs, jobs)
             for name, (config, bs, jobs) in plans.items()}
    timings = interleaved(sides, args.rounds, alternate=True)   # odd rounds in reverse order
    ref = timings.results["sync"]
    rows = []
    for name in sides:
        ratio = timings.ratio("sync", name) if name != "sync" else None  # sync's time / this one's
        got = timings.results[name]
        cos = (got * ref).sum(1)
        rows.append({"setting": name, "seconds": timings.median(name),
                     "speed-up vs sync": ratio.median if ratio else 1.0,
                     "min": ratio.min if ratio else 1.0, "max": ratio.max if ratio else 1.0,
                     "docs/s": len(texts) / timings.median(name),
                     "shapes": len({b["input_ids"].shape for b in plans[name][1]}),
                     "mean cos": f"{cos.mean():.5f}", "least cos": f"{cos.min():.5f}"})
    table = pd.DataFrame(rows)
    note = load_note(before)
    detail = (f"work: the first {len(texts)} CSFCube texts (title and abstract, longest first, tokenised beforehand), "
              f"MiniLM's int8 OpenVINO export (calibrated on the first {CALIBRATION_SIZE} abstracts, OpenVINO "
              f"{ov.__version__}), each round compiling every setting afresh and timing its compilation and one pass; "
              f"{args.rounds} interleaved rounds (odd ones in reverse order); "
              f"{sum(b['input_ids'].size for b in b32)} word pieces padded in "
              "batches of 32")
    print(detail)
    print(markdown(table))
    print(note)
    if args.out:
        write_results(Path(args.out), "bench_openvino_settings: the main job's int8 encoder under OpenVINO's "
                      "settings, against one synchronous request", "benchmarks/bench_openvino_settings.py", argv,
                      [detail], [("settings", markdown(table))], note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
