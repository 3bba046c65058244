"""Nearest-centroid codes of a PLAID build: colbert-ai's reduction against the worker's FAISS search, in one run.

colbert-ai's index pass gives every token vector the id of its nearest centroid
(``ResidualCodec.compress_into_codes``: ``(centroids @ batch.T).max(dim=0)`` over 16K vectors at a
time on the CPU).  The ColBERT worker (``plugins/colbert/_worker.py``, ``assign_codes_with_faiss``)
replaces it with FAISS's exact inner-product search.  This script takes the centroids of a built
PLAID index (``--index``, a ``colbert`` component index directory or its ``plaid`` folder), encodes
``--passages`` passages of ``--dataset`` with the index's checkpoint (colbert-ai's own
``Checkpoint.docFromText``, as the index pass does), then computes their codes both ways, interleaved
(colbert-ai, FAISS, colbert-ai, ...) for ``--rounds`` rounds, and reports token vectors/s, GFLOP/s
(``2 x vectors x centroids x dim``), the median (min-max) of the per-round time ratios, the load
average before and after, and whether the codes agree (any that differ, with the score gap between
the two choices).

    python benchmarks/bench_colbert_codes.py --index DIR --dataset sci/acl-fulltext/chunks-256 \\
        [--passages 1000] [--rounds 3] [--threads N] [--json out.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace


def plaid_dir(path: str) -> Path:
    from pyterrier_sci.plugins.colbert.plaid import PLAID_DIR
    p = Path(path)
    for cand in (p, p / PLAID_DIR):
        if (cand / "centroids.pt").is_file() and (cand / "metadata.json").is_file():
            return cand
    raise SystemExit(f"{path}: not a PLAID index (no centroids.pt / metadata.json in it or in its plaid/ folder)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--dataset", required=True, help="ir_datasets id whose documents' text is encoded")
    ap.add_argument("--passages", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, help="torch and FAISS threads (default: every core)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()

    import torch

    import pyterrier_sci  # noqa: F401 - registers the datasets
    from pyterrier_sci.bench import interleaved, load_note
    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.colbert._compat import import_colbert
    if args.threads:
        torch.set_num_threads(args.threads)
    import_colbert()
    from colbert.indexing.codecs.residual import ResidualCodec
    from colbert.infra import ColBERTConfig
    from colbert.modeling.checkpoint import Checkpoint

    from pyterrier_sci.plugins.colbert._worker import assign_codes_with_faiss
    plaid = plaid_dir(args.index)
    meta = json.loads((plaid / "metadata.json").read_text())
    config = ColBERTConfig.load_from_index(str(plaid))
    centroids = torch.load(plaid / "centroids.pt", map_location="cpu").float()
    texts = [d["text"] for d in itertools.islice(corpus_texts(args.dataset, ["text"]), args.passages)]
    t = time.perf_counter()
    ckpt = Checkpoint(config.checkpoint, colbert_config=config)
    with torch.inference_mode():
        embs, doclens = ckpt.docFromText(texts, bsize=config.index_bsize, keep_dims="flatten")
    embs = embs.float()
    encode_s = time.perf_counter() - t
    n, (c, dim) = embs.shape[0], centroids.shape
    print(f"index {plaid} ({meta.get('num_partitions', c)} centroids of {dim} dims); {len(texts)} passages of "
          f"{args.dataset} -> {n:,} token vectors (encoded in {encode_s:.1f} s)", flush=True)

    original = ResidualCodec.compress_into_codes
    assign_codes_with_faiss(args.threads)
    faiss_codes = ResidualCodec.compress_into_codes
    ResidualCodec.compress_into_codes = original
    codec = SimpleNamespace(use_gpu=False, centroids=centroids)
    faiss_codes(codec, embs[:64], out_device="cpu")  # builds the search structure once, as the worker does per codec
    timings = interleaved({"colbert-ai": lambda: original(codec, embs, out_device="cpu"),
                           "faiss": lambda: faiss_codes(codec, embs, out_device="cpu")}, args.rounds)
    want, got = timings.results["colbert-ai"], timings.results["faiss"]
    differ = (want != got).nonzero().flatten()
    gaps = []
    for i in differ[:1000].tolist():
        s = centroids @ embs[i]
        gaps.append(float(s[want[i]] - s[got[i]]))
    flops = 2.0 * n * c * dim
    rows = {}
    for side in ("colbert-ai", "faiss"):
        sec = timings.median(side)
        rows[side] = {"seconds": sec, "vectors_per_s": n / sec, "gflops": flops / sec / 1e9}
        print(f"{side:10s} {sec:8.2f} s  {n / sec:10,.0f} vectors/s  {flops / sec / 1e9:6.1f} GFLOP/s", flush=True)
    speedup = timings.ratio("colbert-ai", "faiss")
    print(f"FAISS speed-up (colbert-ai time / FAISS time, per round): {speedup}")
    print(f"codes that differ: {len(differ)} of {n:,}" +
          (f" (score gap of colbert-ai's choice over FAISS's: max {max(gaps):.2e})" if gaps else ""))
    print(load_note(load_before))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "index": str(plaid), "dataset": args.dataset, "passages": len(texts), "vectors": n, "centroids": c,
            "dim": dim, "encode_s": encode_s, "sides": rows, "speedup": speedup.as_dict(),
            "differ": int(len(differ)), "max_gap": max(gaps) if gaps else 0.0,
            "threads": args.threads or torch.get_num_threads(), "load_before": load_before,
            "load_after": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
