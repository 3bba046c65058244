"""Encoding throughput of each encoder backend and precision (plugins/dense/backends.py), against
torch fp32 and against this CPU's limit.

Every toolkit setting encodes as the toolkit does (``plugins/dense/encoding.py``'s ``encode_texts``: each text
padded to a length of its own, so its vector does not depend on its batch); ``st:fp32`` is the raw library,
sentence-transformers' own ``SentenceTransformer.encode`` (batches padded to their longest text), the reference
the speed-ups are measured against when it comes first.

The same hep-th abstracts (``irds:sci/hepth-core-citations/train``, field ``abstract``, the first
``--docs``) are encoded by every setting in turn, ``--rounds`` times (A B C A B C ...: each round's
settings see the same load); reported: median documents/s, the ratio to torch fp32 (median of
the per-round ratios, min, max), the mean cosine to torch fp32, the load average before and after,
and the fraction of the CPU's peak that the achieved FLOP/s (fp32) or OP/s (int8) are.

The limit: FLOPs per document from the model's config (layers L, hidden h, intermediate i) and the
measured token count t of each document (after truncation):
``2 * L * (t * (4 h^2 + 2 h i) + 2 t^2 h)`` (Q, K, V, O projections, the two FFN matrices, and the
attention scores and weighted sum; a multiply-add counts 2), summed over the documents.  Peak
from the CPU: cores x clock x per-cycle rate, where the per-cycle rate of one core is (FMA pipes)
x (lanes of the executed vector width) x 2 for fp32, and (VNNI pipes) x (lanes) x 4 x 2 for int8 (each
VPDPBUSD lane does 4 int8 multiply-adds).  Assumptions (printed), from /proc/cpuinfo's vendor and
family: AMD Zen 4 (family 25) executes 512-bit AVX-512 operations as two 256-bit halves on two FMA
pipes (fp32: 2 x 8 lanes x 2 = 32 FLOP/cycle/core) and VPDPBUSD likewise (2 x 8 lanes x 4 MACs x 2
= 128 OP/cycle/core, 4x fp32); Zen 5 (family 26) and Intel's AVX-512 CPUs have 512-bit data paths,
which double both (``--vector-bits`` overrides).  Usage::

    python benchmarks/bench_encode.py                       # 2,000 abstracts, 3 rounds
    python benchmarks/bench_encode.py --docs 200 --rounds 2 --calibration 64   # a quick check
    python benchmarks/bench_encode.py --guard               # the quality guard on CSFCube

``--guard`` runs the quality guard instead: CSFCube's MiniLM pipeline (``pool >> dense``, as in
pipelines/csfcube.yaml) with each setting on the three facets and all of them, NDCG%20 of each
fast setting minus torch fp32 and the mean top-10 overlap of its runs with torch fp32's.  A setting
passes within 0.5 points on all facets together (50 queries) and within 1 point on each facet (16-17
queries): int8 exports that are equally close to fp32 (mean cosine 0.9952-0.9953) already move a
single facet by up to 0.86 points (docs/dense.md, "Quality guard").
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

DATASET = "irds:sci/hepth-core-citations/train"


def cpu_info() -> dict:
    text = open("/proc/cpuinfo").read()
    flags = set(re.search(r"^flags\s*:\s*(.*)$", text, re.M).group(1).split())
    mhz = float(re.search(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M).group(1))
    name = re.search(r"^model name\s*:\s*(.*)$", text, re.M).group(1)
    cores = len(os.sched_getaffinity(0))
    vendor = re.search(r"^vendor_id\s*:\s*(.*)$", text, re.M)
    family = re.search(r"^cpu family\s*:\s*(\d+)", text, re.M)
    model = re.search(r"^model\s*:\s*(\d+)", text, re.M)
    return {"name": name, "mhz": mhz, "cores": cores, "avx512f": "avx512f" in flags,
            "avx512_vnni": "avx512_vnni" in flags, "avx2": "avx2" in flags,
            "vendor": vendor.group(1).strip() if vendor else "?", "family": int(family.group(1)) if family else None,
            "model": int(model.group(1)) if model else None}


def executed_vector_bits(cpu: dict) -> tuple:
    """(bits, why): the vector width the CPU's FMA / VNNI pipes execute per cycle.  AMD family 25 (Zen 4)
    runs 512-bit AVX-512 instructions as two 256-bit halves; family 26 (Zen 5, EPYC 9005) has full 512-bit
    data paths; Intel CPUs with AVX-512 execute 512 bits; without AVX-512, 256 (AVX2)."""
    fam = cpu.get("family")
    if not cpu["avx512f"]:
        return 256, "no AVX-512: AVX2, 256-bit"
    if cpu.get("vendor") == "AuthenticAMD" and fam == 25:
        return 256, "AMD family 25 (Zen 4): AVX-512 executed as two 256-bit halves"
    if cpu.get("vendor") == "AuthenticAMD" and fam is not None and fam >= 26:
        return 512, f"AMD family {fam} (Zen 5): full 512-bit AVX-512 data paths"
    return 512, f"{cpu.get('vendor')} family {fam} with AVX-512: 512-bit"


def peaks(cpu: dict, vector_bits: int, pipes: int) -> dict:
    """Peak fp32 FLOP/s and int8 OP/s, with the arithmetic as text."""
    lanes = vector_bits // 32
    fp32_cycle = pipes * lanes * 2
    int8_cycle = pipes * lanes * 4 * 2 if cpu["avx512_vnni"] else pipes * lanes * 2 * 2  # no VNNI: 16-bit pairs
    hz = cpu["mhz"] * 1e6
    return {"fp32": cpu["cores"] * hz * fp32_cycle, "int8": cpu["cores"] * hz * int8_cycle,
            "text": (f"{cpu['name']}: {cpu['cores']} cores x {cpu['mhz'] / 1000:.2f} GHz; {pipes} FMA pipes x "
                     f"{vector_bits}-bit ({lanes} fp32 lanes) executed width.\n"
                     f"  fp32 peak = {cpu['cores']} x {cpu['mhz'] / 1000:.2f}e9 x ({pipes} x {lanes} x 2) = "
                     f"{cpu['cores'] * hz * fp32_cycle / 1e9:.1f} GFLOP/s\n"
                     f"  int8 peak (VPDPBUSD: 4 int8 multiply-adds per 32-bit lane) = {cpu['cores']} x "
                     f"{cpu['mhz'] / 1000:.2f}e9 x ({pipes} x {lanes} x 4 x 2) = "
                     f"{cpu['cores'] * hz * int8_cycle / 1e9:.1f} GOP/s")}


def model_flops(st, texts) -> tuple:
    """(total FLOPs of the transformer on ``texts``, mean tokens per text, config string)."""
    from pyterrier_sci.bench import word_pieces
    cfg = st[0].model.config
    n_layers, h, i = cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size
    t = np.asarray(word_pieces(st, texts), dtype=np.float64)
    total = float((2 * n_layers * (t * (4 * h * h + 2 * h * i) + 2 * t * t * h)).sum())
    return total, float(t.mean()), f"L={n_layers}, h={h}, i={i}"


#: a fast setting passes within GUARD_POINTS of torch fp32 on all facets together (GUARD_ALL) and within
#: GUARD_FACET_POINTS on each facet
GUARD_ALL = "irds:sci/csfcube"
GUARD_DATASETS = tuple(f"{GUARD_ALL}/{facet}" for facet in ("background", "method", "result")) + (GUARD_ALL,)
GUARD_POINTS = 0.5
GUARD_FACET_POINTS = 1.0


def quality_guard(settings, model: str = "default", datasets=GUARD_DATASETS):
    """A frame with, per fast setting and dataset, NDCG%20 (x100), its difference to the first
    setting (torch fp32), the mean top-10 overlap with that setting's run and whether it passes."""
    import pandas as pd

    from pyterrier_sci.experiment import experiment_outcome
    comps = {s: "dense_" + s.replace(":", "_") for s in settings}
    names = {s: c.upper() for s, c in comps.items()}  # pipeline names (not the components')
    config = {"dataset": "irds:sci/csfcube",
              "components": {n: {"component": "dense", "model": model, "backend": s.split(":")[0],
                                 "precision": s.split(":")[1], "verbose": False} for s, n in comps.items()},
              "pipelines": {names[s]: f"pool >> {c}" for s, c in comps.items()},
              "experiments": {"guard": {"datasets": list(datasets), "pipelines": list(names.values()),
                                        "measures": ["NDCG%20"]}}}
    out = experiment_outcome(config, name="guard")
    ref_setting = settings[0]
    rows = []
    for ds in out.datasets:
        tab = ds.table.set_index("name")
        col = next(c for c in tab.columns if str(c).startswith("NDCG"))
        ref_run = ds.runs[names[ref_setting]]
        ref_top = {q: set(g.nsmallest(10, "rank")["docno"]) for q, g in ref_run.groupby("qid")}
        for s in settings[1:]:
            run = ds.runs[names[s]]
            top = {q: set(g.nsmallest(10, "rank")["docno"]) for q, g in run.groupby("qid")}
            overlap = float(np.mean([len(top.get(q, set()) & d) / max(len(d), 1) for q, d in ref_top.items()]))
            delta = 100 * (tab.loc[names[s], col] - tab.loc[names[ref_setting], col])
            rows.append({"setting": s, "dataset": ds.dataset, "NDCG%20": 100 * tab.loc[names[s], col],
                         "torch fp32": 100 * tab.loc[names[ref_setting], col], "difference (points)": delta,
                         "top-10 overlap": overlap,
                         "passes": abs(delta) <= (GUARD_POINTS if ds.dataset == GUARD_ALL else GUARD_FACET_POINTS)})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--model", default="default")
    ap.add_argument("--calibration", type=int, help="int8 calibration: the corpus's first N documents (default: the "
                                                    "toolkit's CALIBRATION_SIZE)")
    ap.add_argument("--settings", default="st:fp32,torch:fp32,openvino:fp32,openvino:int8,onnx:fp32,onnx:int8",
                    help="backend:precision pairs; the first is the reference")
    ap.add_argument("--vector-bits", type=int, default=None,
                    help="executed vector width (default: from the CPU, see executed_vector_bits; "
                         "Zen 4: 256, Zen 5: 512)")
    ap.add_argument("--pipes", type=int, default=2, help="FMA / VNNI pipes per core")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--out", help="also write the table, with the CPU, date, command, work and load, as a Markdown "
                                  "results file (docs/dense.md quotes benchmarks/results/bench_encode.md)")
    ap.add_argument("--guard", action="store_true", help="run the CSFCube quality guard instead")
    args = ap.parse_args(argv)
    if args.guard:
        from pyterrier_sci.bench import load_note, markdown, write_results
        before = os.getloadavg()
        table = quality_guard(args.settings.split(","), args.model)
        verdict = f"passes (within {GUARD_POINTS} points on all facets, {GUARD_FACET_POINTS} on each): " + \
            ", ".join(f"{s} {'yes' if ok else 'no'}" for s, ok in table.groupby("setting", sort=False)["passes"].all()
                      .items())
        note = load_note(before)
        print(markdown(table))
        print(verdict)
        print(note)
        if args.out:
            from pyterrier_sci.plugins.dense.backends import CALIBRATION_SIZE, EXPORT_VERSION
            details = [f"work: CSFCube's MiniLM pipeline (pool >> dense) on the official test folds, each setting "
                       f"against the first ({args.settings.split(',')[0]}); int8 export version {EXPORT_VERSION}, "
                       f"calibrated on the first {CALIBRATION_SIZE} CSFCube abstracts", verdict]
            write_results(Path(args.out), "bench_encode --guard: NDCG%20 of the fast encoder settings against torch "
                          "fp32 on CSFCube", "benchmarks/bench_encode.py", argv, details,
                          [("guard", markdown(table))], note)
        return 0

    import pandas as pd

    import pyterrier_sci  # noqa: F401  (registers the datasets)
    from pyterrier_sci.bench import interleaved, load_note, markdown, write_results
    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.dense.backends import (
        CALIBRATION_SIZE,
        BackendError,
        calibration_from_corpus,
        load_encoder,
    )
    from pyterrier_sci.plugins.dense.encoding import encode_texts
    if args.calibration is None:
        args.calibration = CALIBRATION_SIZE

    before = os.getloadavg()
    texts = [d["text"] for d in itertools.islice((d for d in corpus_texts(DATASET, ["abstract"]) if d["text"].strip()),
                                                 args.docs)]
    encoders, skipped = {}, {}
    cal = None
    for s in args.settings.split(","):
        backend, precision = s.split(":")
        if backend == "st":   # the raw library: sentence-transformers' own encode
            encoders[s] = load_encoder(args.model)
            continue
        try:
            if precision == "int8" and cal is None:
                cal = calibration_from_corpus(DATASET, ["abstract"], args.calibration)
            t = time.perf_counter()
            encoders[s] = load_encoder(args.model, None, backend, precision, cal)
            print(f"loaded {s} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        except BackendError as e:
            skipped[s] = str(e)
            print(f"skipped {s}: {e}", file=sys.stderr)
    ref_name = next(iter(encoders))
    st = encoders[ref_name] if ref_name.startswith("torch") else load_encoder(args.model)
    flops, mean_tokens, cfg = model_flops(st, texts)
    cpu = cpu_info()
    bits, why = (args.vector_bits, "--vector-bits") if args.vector_bits else executed_vector_bits(cpu)
    peak = peaks(cpu, bits, args.pipes)
    peak["text"] += f"\n  vector width {bits} bits: {why}"

    sides = {s: ((lambda e=e: np.asarray(e.encode(texts, batch_size=args.batch_size, show_progress_bar=False,
                                                  convert_to_numpy=True), dtype=np.float32))
                 if s.startswith("st:") else (lambda e=e: encode_texts(e, texts, args.batch_size)))
             for s, e in encoders.items()}
    timings = interleaved(sides, args.rounds)
    ref = timings.results[ref_name]
    rows = []
    for s in encoders:
        docs_s = len(texts) / timings.median(s)
        ratio = timings.ratio(ref_name, s)  # time_ref / time_s = speed-up
        got = timings.results[s]
        cos = float(((got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)).mean())
        rate = flops / timings.median(s)
        kind = "int8" if s.endswith("int8") else "fp32"
        rows.append({"setting": s, "docs/s": docs_s, "speed-up vs " + ref_name: ratio.median,
                     "min": ratio.min, "max": ratio.max, "mean cos": f"{cos:.4f}",
                     "G(FL)OP/s": rate / 1e9, "% of peak": 100 * rate / peak[kind], "peak": kind})
    table = pd.DataFrame(rows)
    print(f"\n{len(texts)} abstracts of {DATASET}, mean {mean_tokens:.1f} word pieces (truncated), batch "
          f"{args.batch_size}, {args.rounds} interleaved rounds; model {args.model} ({cfg}); "
          f"{flops / len(texts) / 1e9:.3f} GFLOP per document")
    print(peak["text"])
    print(markdown(table))
    for s, why in skipped.items():
        print(f"- {s} not run: {why}")
    note = load_note(before)
    print(note)
    if args.out:
        details = [f"work: {len(texts)} abstracts of {DATASET}, mean {mean_tokens:.1f} word pieces, batch "
                   f"{args.batch_size}, {args.rounds} interleaved rounds, {flops / len(texts) / 1e9:.3f} GFLOP per "
                   f"document; int8 calibrated on the first {args.calibration} documents", "", peak["text"]]
        body = "\n".join([markdown(table), "", *(f"- {s} not run: {why}" for s, why in skipped.items())])
        write_results(Path(args.out), "bench_encode: the encoder settings against torch fp32, interleaved",
                      "benchmarks/bench_encode.py", argv, details, [("settings", body)], note)
    if args.json:
        json.dump({"rows": rows, "skipped": skipped, "docs": len(texts), "mean_tokens": mean_tokens,
                   "flops_per_doc": flops / len(texts), "peak": peak, "cpu": cpu, "load_before": before,
                   "load_after": os.getloadavg(), "times": timings.times}, open(args.json, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
