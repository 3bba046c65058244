"""Hostile interruption and hostile targets: ``kill -9`` in the middle of writing, damaged derived and
saved files, and outputs that must not be written over (issue 18, items 10 and 11).

Whatever touches PISA's native code after a file was damaged runs in a subprocess, so that a crash
(SIGSEGV) fails the test instead of killing pytest.
"""
import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest
from conftest import popen_python, wait_for_file

import pyterrier_sci as ps
from pyterrier_sci import artifacts
from pyterrier_sci.artifacts import DamagedFileWarning, PathError
from pyterrier_sci.cli import main
from pyterrier_sci.experiment import run_experiment, run_pipeline_on, write_run

RESULTS = pd.DataFrame({"qid": ["q1", "q1", "q2"], "docno": ["d1", "d2", "d3"], "score": [2.0, 1.0, 3.0],
                        "rank": [0, 1, 0]})
TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["one", "two"]})


def _python(code: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONSAFEPATH="1", PYTHONWARNINGS="default")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


# ------------------------------------------------------------------------------- kill -9 mid-write

# writes the run as `run --output` does, then stops before the rename until it is killed
SLOW_WRITE = """
    import sys, time
    from pathlib import Path
    import pandas as pd
    import pyterrier as pt
    real = pt.io.write_results
    def write_then_hang(res, path, **kw):
        real(res, path, **kw)
        Path(sys.argv[2]).touch()
        time.sleep(300)
    pt.io.write_results = write_then_hang
    from pyterrier_sci.experiment import write_run
    res = pd.DataFrame({"qid": ["q1"], "docno": ["d1"], "score": [1.0], "rank": [0]})
    write_run(res, sys.argv[1])
"""


def test_kill_during_output_leaves_a_temporary_that_the_next_run_removes(tmp_path):
    out, ready = tmp_path / "runs" / "bm25.trec.gz", tmp_path / "ready"
    proc = popen_python(SLOW_WRITE, out, ready)
    wait_for_file(ready, proc)
    _kill(proc)
    left = list(out.parent.glob(".tmp*"))
    assert len(left) == 1 and left[0].name.startswith(f".tmp{proc.pid}") and not out.exists()
    # a live writer's temporary is kept; the dead one's goes with the next write into the directory
    live = out.parent / f".tmp{os.getpid()}.{artifacts.host_tag()}-other.trec"
    live.write_text("being written\n")
    write_run(RESULTS, out)
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([out.name, live.name])
    assert len(pt.io.read_results(str(out))) == 3


def test_kill_during_an_index_build_is_recovered(tmp_path):
    path, ready = tmp_path / "idx", tmp_path / "ready"
    proc = popen_python("""
        import sys, time
        from pathlib import Path
        from pyterrier_sci.plugins.bm25 import build_index
        def docs():
            for i in range(100000):
                if i == 500:
                    Path(sys.argv[2]).touch()
                    time.sleep(300)
                yield {"docno": f"d{i}", "text": f"term{i % 13} shared words {i}"}
        build_index(docs(), sys.argv[1])
    """, path, ready)
    wait_for_file(ready, proc)
    _kill(proc)
    partial = [p.name for p in tmp_path.iterdir() if p.name.startswith("idx.partial-")]
    assert partial == [f"idx.partial-{proc.pid}.{artifacts.host_tag()}"] and not path.exists()
    from pyterrier_sci.plugins.bm25 import build_index
    index = build_index(({"docno": f"d{i}", "text": f"term{i % 13} words"} for i in range(50)), path)
    assert len(index) == 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx", "ready"]  # no partial, no lock file


# -------------------------------------------------------------------------- PISA's derived files

RETRIEVE = """
    import json, sys
    import pandas as pd
    from pyterrier_sci.plugins.bm25 import BM25, build_index
    docs = [{"docno": f"d{i}", "text": f"term{i % 17} common words number{i % 5} text"} for i in range(400)]
    index = build_index(docs, sys.argv[1])
    res = BM25(index, num_results=5)(pd.DataFrame({"qid": ["1", "2"], "query": ["term3 number2", "term11 words"]}))
    print(json.dumps(res[["qid", "docno", "score"]].astype(str).values.tolist()))
"""


@pytest.fixture(scope="module")
def pisa_reference(tmp_path_factory):
    """A small PISA index whose BM25 files were derived once (in a subprocess), and its results."""
    path = tmp_path_factory.mktemp("pisa") / "idx"
    out = _python(RETRIEVE, path)
    assert out.returncode == 0, out.stderr
    return path, json.loads(out.stdout.splitlines()[-1])


def _derived(path):
    from pyterrier_sci.plugins.bm25 import pisa_derived_files
    files = pisa_derived_files(path, 0.9, 0.4)
    assert [f.name for f in files] == ["bm25.k1-0.9.b-0.4.q0.bmw.64", "bm25.k1-0.9.b-0.4.q0.bmw.64.block_simdbp"]
    return files


@pytest.mark.parametrize("damage", ["compressed-truncated", "blockmax-truncated", "blockmax-bitflip",
                                    "compressed-empty", "no-record"])
def test_damaged_derived_pisa_file_is_rebuilt_with_a_warning(tmp_path, pisa_reference, damage):
    import shutil
    ref_path, expected = pisa_reference
    path = tmp_path / "idx"
    shutil.copytree(ref_path, path)
    blockmax, compressed = _derived(path)
    for f in (blockmax, compressed):
        assert artifacts.verify_checksum(f) is True  # recorded when derived
    target = compressed if damage.startswith("compressed") else blockmax
    if damage == "compressed-truncated":  # what made PISA crash with SIGSEGV
        os.truncate(target, target.stat().st_size * 2 // 5)
    elif damage == "blockmax-truncated":  # PISA silently returned no results
        os.truncate(target, 100)
    elif damage == "compressed-empty":  # SIGABRT
        os.truncate(target, 0)
    elif damage == "blockmax-bitflip":  # same size, different content
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    else:  # derivation killed before its checksum was recorded
        os.truncate(target, target.stat().st_size // 2)
        Path(str(target) + ".sha256").unlink()
    out = _python(RETRIEVE, path)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert json.loads(out.stdout.splitlines()[-1]) == expected
    assert "DamagedFileWarning" in out.stderr and target.name in out.stderr
    for f in _derived(path):
        assert artifacts.verify_checksum(f) is True
    # the next use finds intact files and says nothing
    again = _python(RETRIEVE, path)
    assert again.returncode == 0 and "DamagedFileWarning" not in again.stderr
    assert json.loads(again.stdout.splitlines()[-1]) == expected


# ------------------------------------------------------------------------------------ saved runs

class _Counted(pt.Transformer):
    def __init__(self):
        self.calls = 0

    def transform(self, topics):
        self.calls += 1
        return RESULTS.merge(topics, on="qid")


@pytest.mark.parametrize("damage", ["truncated", "bitflip", "emptied", "garbage", "checksum-garbage"])
def test_damaged_saved_run_is_recomputed_with_a_warning(tmp_path, damage):
    save = tmp_path / "runs" / "ds" / "BM25.res.gz"
    system = _Counted()
    first = run_pipeline_on(system, TOPICS, save)
    assert system.calls == 1 and save.exists() and artifacts.verify_checksum(save) is True
    pd.testing.assert_frame_equal(run_pipeline_on(system, TOPICS, save)[["qid", "docno"]], first[["qid", "docno"]])
    assert system.calls == 1
    data = save.read_bytes()
    if damage == "truncated":  # the rerun crashed with EOFError
        save.write_bytes(data[: len(data) // 2])
    elif damage == "bitflip":
        save.write_bytes(data[:-12] + bytes([data[-12] ^ 0x01]) + data[-11:])
    elif damage == "emptied":
        save.write_bytes(b"")
    elif damage == "garbage":
        save.write_bytes(b"\x00\xff" * 100)
    else:
        Path(str(save) + ".sha256").write_bytes(b"\xff\xfe not a checksum")
    with pytest.warns(DamagedFileWarning, match="saved run"):
        again = run_pipeline_on(system, TOPICS, save)
    assert system.calls == 2
    pd.testing.assert_frame_equal(again[["qid", "docno", "score"]], first[["qid", "docno", "score"]])
    assert artifacts.verify_checksum(save) is True
    assert sorted(p.name for p in save.parent.iterdir()) == ["BM25.res.gz", "BM25.res.gz.sha256"]


def test_saved_runs_without_a_record_are_checked_by_reading_them(tmp_path):
    save = tmp_path / "BM25.res.gz"
    pt.io.write_results(RESULTS, str(save), format="trec")  # written by an older version: no checksum
    system = _Counted()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = run_pipeline_on(system, TOPICS, save)
    assert system.calls == 0 and len(res) == 3 and artifacts.verify_checksum(save) is True
    with gzip.open(save, "rb") as f:
        data = f.read()
    save.write_bytes(gzip.compress(data)[:-20])  # cut: EOFError when read
    Path(str(save) + ".sha256").unlink()
    with pytest.warns(DamagedFileWarning, match="cannot be read"):
        run_pipeline_on(system, TOPICS, save)
    assert system.calls == 1


def test_experiment_rerun_recomputes_a_truncated_saved_run(tmp_path, csfcube):
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(f"""
dataset: irds:sci/csfcube
pipelines:
  BM25: pool >> bm25
experiments:
  small:
    dataset: irds:sci/csfcube/method
    pipelines: [BM25]
    measures: [NDCG%20, MAP]
    save_dir: {tmp_path / 'runs'}
""")
    table = run_experiment(cfg)
    (saved,) = (tmp_path / "runs").rglob("*.res.gz")
    saved.write_bytes(saved.read_bytes()[:200])
    with pytest.warns(DamagedFileWarning):
        again = run_experiment(cfg)
    pd.testing.assert_frame_equal(again, table)


# ---------------------------------------------------------------------- targets that are not ours

def _char_device(tmp_path) -> Path:
    """A character device to write over: a copy of /dev/null's node where this user may create one
    (the real /dev/null is never handed to code that writes)."""
    node = tmp_path / "null-device"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("cannot create a device node here (not root)")
    return node


def test_output_onto_a_fifo_or_device_is_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(PathError, match=r"--output: .*pipe is a FIFO"):
        write_run(RESULTS, fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    device = _char_device(tmp_path)
    with pytest.raises(PathError, match="is a character device"):
        write_run(RESULTS, device)
    assert stat.S_ISCHR(os.stat(device).st_mode)
    link = tmp_path / "link-to-pipe"
    link.symlink_to(fifo)
    with pytest.warns(artifacts.LinkReplacedWarning, match="link-to-pipe .* symbolic link to .*pipe"):
        write_run(RESULTS, link)   # the link's own entry is replaced; the FIFO is never opened
    assert not link.is_symlink() and len(pt.io.read_results(str(link))) == 3
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    # /dev/null itself is only checked, never written
    with pytest.raises(PathError, match="is a character device"):
        artifacts.check_file_target(os.devnull, "--output")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link-to-pipe", "null-device", "pipe"]


def test_output_that_is_a_directory_or_under_a_file_is_one_error(tmp_path):
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("keep me\n")
    with pytest.raises(PathError, match="adir is a directory; give the path of a file"):
        write_run(RESULTS, tmp_path / "adir")
    with pytest.raises(PathError, match="afile is a file, not a directory"):
        write_run(RESULTS, tmp_path / "afile" / "run.trec")
    with pytest.raises(PathError, match="afile is a file, not a directory"):
        write_run(RESULTS, tmp_path / "afile" / "deeper" / "run.trec")
    with pytest.raises(PathError, match="not a file name"):
        write_run(RESULTS, "")
    assert (tmp_path / "afile").read_text() == "keep me\n" and not any((tmp_path / "adir").iterdir())
    # a symbolic link to a regular file: the link is replaced, the file it named left as it was
    (tmp_path / "real.trec").write_text("old\n")
    (tmp_path / "link.trec").symlink_to(tmp_path / "real.trec")
    with pytest.warns(artifacts.LinkReplacedWarning):
        write_run(RESULTS, tmp_path / "link.trec")
    assert not (tmp_path / "link.trec").is_symlink() and len(pt.io.read_results(str(tmp_path / "link.trec"))) == 3
    assert (tmp_path / "real.trec").read_text() == "old\n"


def test_cli_run_output_errors_are_one_line(tmp_path, csfcube, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, message in [(fifo, "is a FIFO"), (tmp_path, "is a directory"),
                            (tmp_path / "pipe" / "x.trec", "is a file, not a directory")]:
        code = main(["run", "pool >> bm25 % 5", "--dataset", "irds:sci/csfcube/method", "--output", str(target)])
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_work_dir_that_is_a_regular_file_is_one_error(tmp_path, monkeypatch, csfcube, capsys):
    home = tmp_path / "home-file"
    home.write_text("not a directory\n")
    for value, message in [(home, "home-file is a file, not a directory"),
                           (home / "sub", "sub cannot be created: .*home-file is a file")]:
        monkeypatch.setenv("PYTERRIER_SCI_HOME", str(value))
        with pytest.raises(ps.PipelineError, match=r"\$PYTERRIER_SCI_HOME: .*" + message):
            ps.pipeline("bm25(k1=0.77)", dataset="irds:sci/csfcube")
        code = main(["run", "bm25(k1=0.77) % 5", "--dataset", "irds:sci/csfcube/method", "--output",
                     str(tmp_path / "out.trec")])
        err = capsys.readouterr().err
        assert code == 2 and "$PYTERRIER_SCI_HOME" in err and "Traceback" not in err, err
    assert home.read_text() == "not a directory\n" and not (tmp_path / "out.trec").exists()


def test_save_dir_that_is_a_regular_file_is_one_error(tmp_path, csfcube):
    runs = tmp_path / "runs"
    runs.write_text("a file\n")
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(f"""
dataset: irds:sci/csfcube
pipelines: {{Pool: pool}}
experiments:
  small: {{dataset: irds:sci/csfcube/method, pipelines: [Pool], measures: [MAP], save_dir: {runs}}}
""")
    with pytest.raises(PathError, match=r"save_dir: .*runs is a file, not a directory"):
        run_experiment(cfg)
    assert runs.read_text() == "a file\n"
    code = main(["experiment", str(cfg)])
    assert code == 2
