"""The benchmark helpers' arithmetic (pyterrier_sci.bench): interleaving order, per-round timings
on a fake clock, the ratio summary (median, min, max) and the load note. No speed is measured."""
from __future__ import annotations

import os

import pytest

from pyterrier_sci.bench import interleaved, load_note, ratio_summary


class FakeClock:
    """A clock that only moves when a side 'works' for a set number of seconds."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_interleaved_runs_sides_in_turn_after_untimed_warmup():
    calls = []
    clock = FakeClock()
    # side A takes 2, 4, 6 s in its timed rounds; side B 3, 3, 12 s; warm-up costs are not timed
    durations = {"A": iter([50.0, 2.0, 4.0, 6.0]), "B": iter([70.0, 3.0, 3.0, 12.0])}

    def side(name):
        def run():
            calls.append(name)
            clock.now += next(durations[name])
            return f"{name}{len(calls)}"
        return run

    t = interleaved({"A": side("A"), "B": side("B")}, rounds=3, warmup=1, clock=clock)
    assert calls == ["A", "B", "A", "B", "A", "B", "A", "B"]  # warm-up round, then A B A B A B
    assert t.order == [("A", 0), ("B", 0), ("A", 1), ("B", 1), ("A", 2), ("B", 2)]
    assert t.times == {"A": [2.0, 4.0, 6.0], "B": [3.0, 3.0, 12.0]}
    assert t.results == {"A": "A7", "B": "B8"}  # the last call's result of each side
    assert t.median("A") == 4.0 and t.median("B") == 3.0
    r = t.ratio("B", "A")  # per round: 3/2, 3/4, 12/6
    assert r.ratios == (1.5, 0.75, 2.0)
    assert (r.median, r.min, r.max, r.n) == (1.5, 0.75, 2.0, 3)
    assert str(r) == "1.50 (0.75-2.00, n=3)"
    # the median of the ratios, not the ratio of the medians (3 / 4 = 0.75) or of the fastest (3 / 2)
    assert r.median != t.median("B") / t.median("A")


def test_interleaved_three_sides_and_bad_rounds():
    seen = []
    t = interleaved({k: (lambda k=k: seen.append(k)) for k in "xyz"}, rounds=2)
    assert seen == list("xyzxyz") and all(len(v) == 2 for v in t.times.values())
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        interleaved({"x": lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="no sides"):
        interleaved({}, rounds=1)


def test_interleaved_alternate_reverses_odd_rounds():
    seen = []
    t = interleaved({k: (lambda k=k: seen.append(k)) for k in "ab"}, rounds=3, warmup=1, alternate=True)
    assert seen == list("ab" "ab" "ba" "ab")  # warm-up in the given order, then A B, B A, A B
    assert t.order == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert list(t.times) == ["a", "b"] and all(len(v) == 3 for v in t.times.values())


def test_ratio_summary_even_count_and_errors():
    r = ratio_summary([1.0, 2.0, 3.0, 10.0], [1.0, 1.0, 1.0, 1.0])
    assert r.median == 2.5 and r.min == 1.0 and r.max == 10.0
    assert r.as_dict() == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4, "ratios": [1.0, 2.0, 3.0, 10.0]}
    with pytest.raises(ValueError, match="each round needs both sides"):
        ratio_summary([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no timings"):
        ratio_summary([], [])
    with pytest.raises(ValueError, match="zero or negative"):
        ratio_summary([1.0], [0.0])


def test_load_note_reports_before_and_after():
    before = (1.25, 0.5, 0.0)
    note = load_note(before)
    assert note.startswith("load average 1.25/0.50/0.00 before, ")
    assert " after (1/5/15 min) on " in note and note.endswith(f"{os.cpu_count()} cores")
    assert load_note().startswith("load average ") and "before" not in load_note()


def _bench_script(name: str):
    """``benchmarks/<name>.py`` as a module (a script, not a package)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_openvino_settings_padding_keeps_each_text_and_its_pooled_vector():
    """bench_openvino_settings' 'padded to 32' setting: a batch padded to fewer shapes holds the same word pieces
    (padding ids and a zero mask after them, never past the model's length), and mean pooling over the mask
    gives each text the vector it had unpadded, whatever the engine puts at the padded positions."""
    import numpy as np
    mod = _bench_script("bench_openvino_settings")
    batch = {"input_ids": np.array([[101, 7, 8, 102, 0], [101, 9, 102, 0, 0]]),
             "attention_mask": np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])}
    out = mod.padded(batch, 4, 256)
    assert out["input_ids"].shape == (2, 8) and (out["input_ids"][:, :5] == batch["input_ids"]).all()
    assert not out["input_ids"][:, 5:].any() and not out["attention_mask"][:, 5:].any()
    assert mod.padded(batch, 4, 6)["input_ids"].shape == (2, 6)     # capped at the model's maximum length
    assert mod.padded(batch, 5, 256) is batch                         # already a multiple: unchanged
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(2, 5, 3)).astype(np.float32)
    noise = 100 * rng.normal(size=(2, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(mod.pooled(np.concatenate([hidden, noise], axis=1), out["attention_mask"]),
                               mod.pooled(hidden, batch["attention_mask"]), rtol=1e-6)
    manual = hidden[1, :3].mean(0)
    np.testing.assert_allclose(mod.pooled(hidden, batch["attention_mask"])[1], manual / np.linalg.norm(manual),
                               rtol=1e-6)


@pytest.mark.parametrize("cpu,bits,fp32,int8", [
    # Zen 4 (EPYC 9004, family 25): double-pumped AVX-512
    (dict(vendor="AuthenticAMD", family=25, avx512f=True, avx512_vnni=True), 256, 166.4, 665.6),
    # Zen 5 (EPYC 9005, family 26): full 512-bit data paths, twice the per-cycle rate
    (dict(vendor="AuthenticAMD", family=26, avx512f=True, avx512_vnni=True), 512, 332.8, 1331.2),
    (dict(vendor="GenuineIntel", family=6, avx512f=True, avx512_vnni=True), 512, 332.8, 1331.2),
    # AVX2 only, no VNNI: int8 as 16-bit pairs (2x fp32)
    (dict(vendor="AuthenticAMD", family=23, avx512f=False, avx512_vnni=False), 256, 166.4, 332.8),
])
def test_bench_encode_peaks_by_cpu(cpu, bits, fp32, int8):
    """bench_encode's peak arithmetic: the executed vector width from the CPU family, 2 cores at 2.6 GHz."""
    mod = _bench_script("bench_encode")
    cpu = dict(cpu, name="test", mhz=2600.0, cores=2, avx2=True)
    got_bits, why = mod.executed_vector_bits(cpu)
    assert got_bits == bits and why
    peak = mod.peaks(cpu, got_bits, 2)
    assert peak["fp32"] / 1e9 == pytest.approx(fp32) and peak["int8"] / 1e9 == pytest.approx(int8)
    assert f"{fp32:.1f} GFLOP/s" in peak["text"]


def test_bench_encode_reads_this_cpu():
    cpu = _bench_script("bench_encode").cpu_info()
    assert cpu["cores"] >= 1 and cpu["mhz"] > 0 and isinstance(cpu["family"], (int, type(None)))


def test_write_results_gives_the_file_docs_quote(tmp_path, monkeypatch):
    """A recorded results file: title, CPU, command, details, each section's table under its heading (what
    ``<!-- recorded: FILE, heading -->`` quotes), then the load note; written atomically, never through a link."""
    import os

    from pyterrier_sci.bench import write_results
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    path = tmp_path / "r.md"
    written = write_results(path, "bench_x: a title", "benchmarks/bench_x.py", ["--fast", "--out", "r.md"],
                            ["data: d"], [("first", table), ("second", "| c |\n|---|")], "load average 0.1")
    assert written == path.read_text()  # what it returns is what it wrote
    lines = path.read_text().split("\n")
    assert lines[0] == "# bench_x: a title" and lines[2].startswith("CPU: ") and f"{os.cpu_count()} CPUs" in lines[2]
    assert lines[3] == "command: python benchmarks/bench_x.py --fast --out r.md" and lines[4] == "data: d"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")  # a run with AMX hidden says so
    write_results(tmp_path / "amx.md", "t", "s.py", ["--x"], [], [], "n")
    command = (tmp_path / "amx.md").read_text().split("\n")[3]
    assert command == "command: ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI python s.py --x"
    text = path.read_text()
    assert "## first\n\n" + table + "\n\n## second\n\n| c |\n|---|\n\nload average 0.1\n" in text
    target = tmp_path / "elsewhere.md"
    target.write_text("keep")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    write_results(link, "t", "s.py", [], [], [("h", table)], "n")
    assert target.read_text() == "keep" and not link.is_symlink()


def test_time_main_job_reads_each_phase_from_its_bar():
    """benchmarks/time_main_job.py times the main job's phases from their finished progress bars (tqdm redraws
    a bar with carriage returns: the last state counts; a rate per second and seconds per unit both occur)."""
    mod = _bench_script("time_main_job")
    stderr = ("exporting m to OpenVINO:   0%|          | 0/1 [00:00<?, ?step/s]\r"
              "exporting m to OpenVINO: 100%|##########| 1/1 [00:00<00:00,  1.25step/s]\n"
              "calibrating int8 on 128 documents:  50%|#####     | 64/128 [00:02<00:02, 30.00doc/s]\r"
              "calibrating int8 on 128 documents: 100%|##########| 128/128 [00:05<00:00, 25.60doc/s]\n"
              "checking the int8 export against the model on 64 texts: 100%|#| 1/1 [00:02<00:00,  2.40s/step]\n"
              "encoding sci/csfcube: 100%|##########| 4205/4205 [00:32<00:00, 131.41doc/s]\n")
    got = mod.phase_seconds(stderr)
    assert got["export"] == pytest.approx(0.8) and got["calibration"] == pytest.approx(5.0)
    assert got["check"] == pytest.approx(2.4) and got["encoding"] == pytest.approx(4205 / 131.41)
    assert got["docs/s"] == pytest.approx(131.41) and "compilation" not in got
    with pytest.raises(SystemExit) as e:  # no cold run: one clear error before anything runs
        mod.main(["--runs", "0"])
    assert e.value.code == 2


def test_time_main_job_cuts_only_the_dense_components(tmp_path):
    """--max-seq-length N: the copied pipeline file is the main job's with every dense component given
    max_seq_length N and nothing else changed; without it, the file is copied byte for byte."""
    import yaml
    mod = _bench_script("time_main_job")
    plain, cut = tmp_path / "plain.yaml", tmp_path / "cut.yaml"
    mod.write_pipeline(plain)
    assert plain.read_bytes() == mod.PIPELINE.read_bytes()
    mod.write_pipeline(cut, 128)
    before, after = yaml.safe_load(plain.read_text()), yaml.safe_load(cut.read_text())
    dense = [name for name, c in before["components"].items() if c["component"] == "dense"]
    assert dense and all(after["components"][n]["max_seq_length"] == 128 for n in dense)
    for n in dense:
        del after["components"][n]["max_seq_length"]
    assert after == before
    with pytest.raises(SystemExit) as e:
        mod.main(["--runs", "1", "--max-seq-length", "0"])
    assert e.value.code == 2


def test_bench_llm_records_its_table(tmp_path, monkeypatch):
    """benchmarks/bench_llm.py --out: the table docs/llm.md quotes, one row per re-ranker, with the calls the
    re-rankers made (one pointwise judgement per paper) and none on the cached rerun; bad counts are one
    argparse error."""
    from conftest import DATA
    if not (DATA / "csfcube").exists():
        pytest.skip("no CSFCube data")
    mod = _bench_script("bench_llm")
    out = tmp_path / "llm.md"
    monkeypatch.setattr("sys.argv", ["bench_llm.py", "--queries", "1", "--depth", "3", "--rounds", "1",
                                     "--latency", "0", "--out", str(out)])
    mod.main()
    text = out.read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in text.split("\n")
            if line.startswith("| ") and "---" not in line and "reranker" not in line}
    assert set(rows) == {"mir_pointwise", "mir_agent", "listwise (20/10)", "listwise (4/2)", "pairwise_tournament",
                         "hlm_agents"}
    assert rows["mir_pointwise"][1] == "3.00"  # calls per query: one per paper of the top 3
    assert all(r[-2] == "0" and r[-1].rstrip(" |") == "0" for r in rows.values())  # cached rerun: no request
    assert "command: python benchmarks/bench_llm.py --queries 1" in text
    monkeypatch.setattr("sys.argv", ["bench_llm.py", "--rounds", "0"])
    with pytest.raises(SystemExit) as e:
        mod.main()
    assert e.value.code == 2


def test_bench_facet_refuses_empty_sizes_before_loading_a_model(capsys):
    mod = _bench_script("bench_facet")
    with pytest.raises(SystemExit) as e:
        mod.main(["--sizes", "0"])
    assert e.value.code == 2 and "at least 1" in capsys.readouterr().err
    for engines in ("torch,tensorrt", "torch,torch", ","):  # unknown, repeated, none: one error each
        with pytest.raises(SystemExit) as e:
            mod.main(["--engines", engines])
        assert e.value.code == 2 and "distinct engines among torch, onnx, openvino" in capsys.readouterr().err


def _plan_rows(text):
    return {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1] for line in text.split("\n")
            if line.startswith("| ") and "---" not in line and not line.startswith("| quantity")}


def test_bench_scale_capacity_plan_is_arithmetic_on_the_measured_rates():
    """The capacity plan docs/scale.md quotes is computed from the recorded rates: with the Zen 5 run's rate (32.5
    abstracts/s, 153 word pieces) it gives the figures that were worked out by hand before (855 worker-hours,
    8.5 h a shard, 780-1,176 abstracts/s per GPU, 3,320 chunk worker-hours within rounding), and it scales
    with the rate."""
    mod = _bench_script("bench_scale")
    rows = _plan_rows(mod.capacity_plan(32.5, 153.0, 818.0))
    assert rows["100M abstracts: CPU worker-hours"] == "855"
    assert rows["100M abstracts: one 1M-abstract shard on one worker, hours"] == "8.5"
    assert rows["MiniLM abstracts/s per GPU (estimate)"] == "780-1,176"
    assert rows["10M full papers: 256-word chunks (estimate)"] == "233M"
    assert rows["10M full papers: chunks/s per CPU worker (estimate)"] == "19.4"
    assert rows["10M full papers: CPU worker-hours / GPU-hours (estimate)"].startswith("3,33")
    assert rows["peak memory per worker, MiB (measured)"] == "818"
    doubled = _plan_rows(mod.capacity_plan(65.0, 153.0, 818.0))
    assert doubled["100M abstracts: CPU worker-hours"] == "427"


def test_bench_scale_encode_refuses_bad_settings_before_running(capsys):
    mod = _bench_script("bench_scale")
    for argv in (["--rounds", "0"], ["--memory-sizes", "30k"], ["--docs", "0", "--out", "x.md"],
                 ["--memory-sizes", "", "--out", "x.md"]):
        with pytest.raises(SystemExit) as e:
            mod.main_encode(argv)
        assert e.value.code == 2, argv
    assert "--out records the capacity plan" in capsys.readouterr().err


def test_bench_mir_table_and_thread_counts(capsys):
    """bench_mir.py --threads 1,2: one column per thread count (each run in a process of its own); a bad count is
    one argparse error."""
    mod = _bench_script("bench_mir")
    row = {"torch_threads": 1, "triplets_per_second": 2.4418, "triplets": 72, "train_seconds": 29.49,
           "total_seconds": 36.1, "peak_rss_mb": 3036.2, "load_average_1min": 1.39}
    text = mod.table([row, {**row, "torch_threads": 2, "triplets_per_second": 3.9}])
    assert text.split("\n")[0] == "| measure | `--threads 1` | `--threads 2` |"
    assert "| training throughput, triplets/s | 2.44 (72 in 29.5 s) | 3.90 (72 in 29.5 s) |" in text
    assert "| peak memory (RSS), MB | 3,036 | 3,036 |" in text
    for bad in ("0", "1,x", ""):
        with pytest.raises(SystemExit) as e:
            mod.main(["--threads", bad])
        assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        mod.main(["--steps", "0"])
    assert e.value.code == 2 and "at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("script,argv", [("bench_ann", ["hepth", "--rounds", "0"]), ("bench_ann", ["--k", "0"]),
                                         ("bench_hlm", ["--queries", "0"]), ("bench_hlm", ["--repeats", "0"])])
def test_bench_scripts_refuse_counts_below_one(script, argv, capsys):
    mod = _bench_script(script)
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    assert e.value.code == 2 and "at least 1" in capsys.readouterr().err


def test_bench_facet_agreement_needs_torch_first_and_onnx_int8_only_with_it(capsys):
    mod = _bench_script("bench_facet")
    for engines in ("openvino,torch", "torch"):
        with pytest.raises(SystemExit) as e:
            mod.main(["--engines", engines, "--agreement"])
        assert e.value.code == 2 and "--agreement compares engines with torch" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        mod.main(["--engines", "torch,onnx-int8"])
    assert e.value.code == 2 and "only reported with --agreement" in capsys.readouterr().err


def test_bench_facet_agreement_aligns_a_ranked_output_with_its_input():
    """A re-ranker returns its rows ranked: the agreement compares each pair's score with the same pair's, not the
    n-th best with the n-th best (which gives a per-query Spearman of 1 whatever the engines do)."""
    import pandas as pd
    mod = _bench_script("bench_facet")
    pairs = pd.DataFrame({"qid": ["a", "a", "a", "b", "b"], "docno": ["1", "2", "3", "1", "4"]})
    given = {("a", "1"): 0.1, ("a", "2"): 0.9, ("a", "3"): 0.5, ("b", "1"): 0.2, ("b", "4"): 0.7}

    def ranked_scorer(df):
        out = df.assign(score=[given[(q, d)] for q, d in zip(df.qid, df.docno)])
        return out.sort_values(["qid", "score"], ascending=[True, False]).reset_index(drop=True)
    assert mod.aligned_scores(ranked_scorer, pairs).tolist() == [0.1, 0.9, 0.5, 0.2, 0.7]
    with pytest.raises(ValueError, match="dropped rows"):
        mod.aligned_scores(lambda df: ranked_scorer(df).head(3), pairs)


def _sparse_row(backend, n, seconds, index_anon_mb, first_query_anon_mb, import_anon_mb, index_bytes, after_bytes,
                serve_bytes):
    mb = 2 ** 20
    return dict(backend=backend, n=n, peaks={"import": [0, import_anon_mb * mb], "index": [0, index_anon_mb * mb],
                                             "first query": [0, first_query_anon_mb * mb]},
                result=dict(num_docs=n, index_s=seconds, index_bytes=index_bytes,
                            index_bytes_after_first_query=after_bytes, serve_bytes=serve_bytes))


def test_bench_scale_sparse_capacity_plan_is_arithmetic_on_the_measured_rows():
    """docs/scale.md's 100M-abstract BM25 plan is computed from the recorded run: bytes per document of the largest
    run, memory at the largest size plus its growth since the size before, the indexing rates of the 1M+ runs.
    With the Intel run's figures it gives what was worked out by hand before (PISA 981 + 85 B/doc: 107 GB to build;
    Lucene 93 B/doc: 9.3 GB), and it follows the rows."""
    mod = _bench_script("bench_scale_sparse")
    rows = [_sparse_row("pisa", 100_000, 7.2, 340, 285, 160, 98_800_000, 103 * 2 ** 20, 10_000_000),
            _sparse_row("pisa", 1_000_000, 62.8, 594, 427, 160, 981_000_000, 1_066_000_000, 110_000_000),
            _sparse_row("pisa", 2_000_000, 124.0, 577, 409, 160, 1_962_000_000, 2_132_000_000, 220_000_000),
            _sparse_row("lucene", 1_000_000, 40.8, 547, 549, 240, 93_000_000, 93_000_000, 93_000_000),
            _sparse_row("lucene", 2_000_000, 80.3, 679, 681, 240, 186_000_000, 186_000_000, 186_000_000)]
    plan = mod.capacity_plan(rows, java_heap="1g")
    cells = {line.split(" | ")[0].lstrip("| "): line.rstrip(" |").split(" | ")[1:] for line in plan.split("\n")[2:]}
    assert plan.startswith("| 100M abstracts (estimates) | PISA | Lucene |")
    pisa, lucene = {k: v[0] for k, v in cells.items()}, {k: v[1] for k, v in cells.items()}
    assert pisa["disk while building"].startswith("100M x (981 + 85 B) = **107 GB**")
    assert pisa["disk to serve"].startswith("100M x 110 B = **11.0 GB**")
    assert lucene["disk while building"].startswith("100M x 93 B = **9.3 GB** (measured at 2M)")
    # PISA's indexing memory did not grow from 1M to 2M: none is added; Lucene's is capped by its heap
    assert pisa["RAM while indexing (1 thread)"].endswith(
        "+ 100M x 0 B (its growth per document from 1M) = **0.6 GB**")
    assert lucene["RAM while indexing (1 thread)"].startswith("**679 MB** (measured at 2M): bounded by -Xmx1g")
    # deriving: the growth over the imported process, scaled 50x from 2M, plus the process
    assert pisa["RAM while deriving (first query per k1/b)"].endswith("= **13.2 GB** (linear in the derived index)")
    assert pisa["indexing time, 1 thread"] == "100M / 15,924-16,129 docs/s (measured at 1M, 2M) = **1.7 h**"
    assert lucene["indexing time, 1 thread"] == "100M / 24,510-24,907 docs/s (measured at 1M, 2M) = **1.1 h**"
    # without a heap cap the growth is extrapolated; twice the rate halves the time
    grown = mod.capacity_plan([rows[3], rows[4]])
    assert "+ 100M x 138 B (its growth per document from 1M) = **14.6 GB**" in grown
    fast = [dict(r, result=dict(r["result"], index_s=r["result"]["index_s"] / 2)) for r in rows]
    assert "= **0.9 h**" in mod.capacity_plan(fast, java_heap="1g").split("\n")[-1]


def test_the_recorded_sparse_run_gives_its_recorded_tables():
    """The run behind docs/scale.md's BM25 tables is kept as rows (``--json``): its two recorded tables are what
    ``report`` and ``capacity_plan`` give on them, so the plan is the arithmetic of that run, not typed."""
    import json
    import re
    from pathlib import Path
    results = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
    mod = _bench_script("bench_scale_sparse")
    rows = json.loads((results / "bench_scale_sparse.json").read_text())
    text = (results / "bench_scale_sparse.md").read_text()
    heap = re.search(r"--java-heap (\S+)", text)

    def section(heading):
        part = text.split(f"## {heading}\n\n", 1)[1]
        return "\n".join(line for line in part.split("\n\n", 1)[0].split("\n") if line.startswith("|"))
    assert section("indexing and queries") == mod.report(rows)
    assert section("capacity plan") == mod.capacity_plan(rows, java_heap=heap[1] if heap else "")
