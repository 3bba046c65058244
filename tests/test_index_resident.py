"""The resident appender (pyterrier_sci/resident.py, pyterrier_sci_launcher.py): ``pyterrier-sci index --output PATH
--resident`` keeps an index's update path loaded and makes the changes later ``index --output PATH --append/--retract``
commands send it over a Unix socket in this user's private folder, with the same results and errors as the command
without it; a command whose index has no live appender (none, a stale socket, a folder others could write) makes
the change itself.  Flat dense indexes with the vectors given (no encoder) keep the protocol tests fast; one test
runs a Lucene index through the installed command."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import pyterrier_sci_launcher as launcher
from pyterrier_sci.plugins.dense.growth import update_index
from pyterrier_sci.resident import ResidentAppender

DIM = 16
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def runtime(monkeypatch):
    """A short private $XDG_RUNTIME_DIR (a socket's path is limited to about 100 bytes)."""
    d = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", d)
    yield Path(d)
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def _vec_docs(prefix, n, seed):
    vecs = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return [{"docno": f"{prefix}{i}", "doc_vec": v} for i, v in enumerate(vecs)]


def _jsonl(path, docs):
    path.write_text("".join(json.dumps({"docno": d["docno"], "doc_vec": d["doc_vec"].tolist()}) + "\n"
                            for d in docs), encoding="utf-8")
    return path


@pytest.fixture
def flat(tmp_path):
    from pyterrier_dr import FlexIndex
    path = tmp_path / "flat"
    FlexIndex(str(path), verbose=False).indexer().index(_vec_docs("d", 200, 0))
    return path


@pytest.fixture
def served(flat, runtime):
    """A resident appender of ``flat`` answering in a thread of this process (the real dense update function)."""
    appender = ResidentAppender(flat, update_index).bind()
    thread = threading.Thread(target=appender.serve_forever, daemon=True)
    thread.start()
    yield appender
    appender.stop()
    thread.join(10)
    assert not thread.is_alive()


def _meta(path):
    return json.loads((Path(path) / "pt_meta.json").read_text())


def test_a_change_sent_to_the_resident_appender_is_the_commands_change(served, flat, tmp_path, capsys):
    new = _jsonl(tmp_path / "new.jsonl", _vec_docs("n", 5, 1))
    assert launcher.main(["index", "--output", str(flat), "--append", str(new)]) == 0
    err = capsys.readouterr().err
    assert f"by the resident appender, pid {os.getpid()}" in err and "generation 1, 205 documents" in err
    assert served.changes == 1 and _meta(flat)["generation"] == 1 and _meta(flat)["docs"]["count"] == 205
    # the same change again: recognised as done (as the command says without an appender), nothing changes
    assert launcher.main(["index", "--output", str(flat), "--append", str(new)]) == 0
    assert _meta(flat)["generation"] == 1
    # retraction, from a relative path: the client sends it absolute
    (tmp_path / "gone.txt").write_text("n1\nd7\n", encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert launcher.main(["index", "--output", "flat", "--retract", "gone.txt"]) == 0
    finally:
        os.chdir(cwd)
    assert _meta(flat)["docs"]["count"] == 203 and served.changes >= 2


def test_a_refused_change_is_the_commands_error_and_changes_nothing(served, flat, tmp_path, capsys):
    held = _jsonl(tmp_path / "held.jsonl", _vec_docs("d", 3, 9))      # d0..d2: docnos the index holds
    assert launcher.main(["index", "--output", str(flat), "--append", str(held)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pyterrier-sci index: error:") and "d0" in err and len(err.splitlines()) == 1
    assert launcher.main(["index", "--output", str(flat), "--append", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    assert _meta(flat).get("generation", 0) == 0 and served.changes == 0


@pytest.mark.parametrize("raw, says", [
    (b"not json\n", "not one JSON line"),
    (b'{"protocol": 99, "op": "update"}\n', "not of protocol"),
    (b'{"protocol": 1, "op": "drop"}\n', "unknown operation"),
    (b'{"protocol": 1, "op": "update", "index": "/etc", "append": "/x"}\n', "this resident appender changes"),
    (b'{"protocol": 1, "op": "update", "index": "INDEX", "append": "relative.jsonl"}\n', "absolute path"),
    (b'{"protocol": 1, "op": "update", "index": "INDEX", "append": "/x", "fields": "title"}\n', "list of field"),
    (b'{"protocol": 1, "op": "update", "index": "INDEX"}\n', "nothing to change"),
    (b"{" + b" " * (launcher.MAX_MESSAGE + 10) + b"}\n", "could not be read"),
])
def test_hostile_requests_get_one_error_and_change_nothing(served, flat, raw, says):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(launcher.socket_path(flat)))
    try:
        s.sendall(raw.replace(b"INDEX", str(served.index).encode()))
    except OSError:   # the appender stops reading an oversized request
        pass
    answer = json.loads(s.makefile("rb").readline())
    s.close()
    assert answer["ok"] is False and says in answer["error"]
    assert _meta(flat).get("generation", 0) == 0 and served.changes == 0
    # and it still answers the next client
    assert launcher._exchange(served.path, {"protocol": launcher.PROTOCOL, "op": "ping"}, 10)["ok"]


def test_a_second_appender_of_the_same_index_is_refused(served, flat):
    from pyterrier_sci.generations import IndexUpdateError
    with pytest.raises(IndexUpdateError, match="already running"):
        ResidentAppender(flat, update_index).bind()


def test_without_a_live_appender_the_command_makes_the_change_itself(flat, runtime, tmp_path, capsys):
    new = _jsonl(tmp_path / "new.jsonl", _vec_docs("n", 4, 2))
    assert launcher.resident_update(flat, str(new)) is None          # nothing listens
    # a socket left by a killed appender: nothing answers it, so it is not used (and a new appender replaces it)
    stale = launcher.socket_path(flat)
    stale.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    assert launcher.main(["index", "--output", str(flat), "--append", str(new)]) == 0
    err = capsys.readouterr().err
    assert "the change took" in err and "resident appender" not in err
    assert _meta(flat)["docs"]["count"] == 204
    appender = ResidentAppender(flat, update_index).bind()   # the stale socket is replaced
    appender.close()
    assert not stale.exists()


def test_a_socket_folder_others_can_write_is_never_used(flat, runtime, tmp_path):
    folder = launcher.socket_directory()
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o777)
    from pyterrier_sci.generations import IndexUpdateError
    with pytest.raises(IndexUpdateError, match="not a private folder"):
        ResidentAppender(flat, update_index).bind()
    assert launcher.resident_update(flat, str(tmp_path / "x.jsonl")) is None
    os.chmod(folder, 0o700)
    folder.rmdir()
    folder.symlink_to(tmp_path)            # a link: refused as well
    with pytest.raises(IndexUpdateError, match="not a private folder"):
        ResidentAppender(flat, update_index).bind()


def test_other_commands_are_the_toolkits_command_line(capsys):
    assert launcher._update_args(["index", "irds:sci/csfcube", "--shards", "2"]) is None
    assert launcher._update_args(["index", "--append", "x.jsonl"]) is None               # no --output
    assert launcher._update_args(["index", "--output", "p", "--append", "x", "--shards", "2"]) is None
    assert launcher._update_args(["run", "bm25", "--output", "p"]) is None
    args = launcher._update_args(["index", "--output", "p", "--append", "x", "--fields", "title", "abstract"])
    assert (args.output, args.append, args.fields) == ("p", "x", ["title", "abstract"])
    with pytest.raises(SystemExit) as stop:     # argparse's --version: the toolkit's parser answered
        launcher.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("pyterrier-sci ")


def test_the_installed_command_through_a_resident_lucene_appender(tmp_path, runtime):
    """pyterrier-sci index --output LUCENE --resident in a subprocess; the installed command's appends go through it
    (the Lucene index then holds the new documents and searches them); SIGTERM removes its socket."""
    pytest.importorskip("pyserini")
    from pyterrier_sci.plugins.bm25 import index_corpus
    from pyterrier_sci.plugins.bm25.lucene import LuceneIndex
    docs = [{"docno": f"p{i}", "text": f"paper {i} about topic {i % 7} and method {i % 5}"} for i in range(300)]
    index_corpus(docs, tmp_path / "lucene", "lucene")
    command = [str(Path(sys.executable).with_name("pyterrier-sci"))]
    if not Path(command[0]).is_file():
        command = [sys.executable, str(ROOT / "pyterrier_sci_launcher.py")]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    proc = subprocess.Popen(command + ["index", "--output", str(tmp_path / "lucene"), "--resident"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while launcher._exchange(launcher.socket_path(tmp_path / "lucene"),
                                 {"protocol": launcher.PROTOCOL, "op": "ping"}, 10) is None:
            assert proc.poll() is None, proc.stderr.read()
            assert time.time() < deadline, "the resident appender did not start"
            time.sleep(0.3)
        new = tmp_path / "new.jsonl"
        new.write_text(json.dumps({"docno": "fresh", "text": "a zeolite catalyst paper"}) + "\n", encoding="utf-8")
        out = subprocess.run(command + ["index", "--output", str(tmp_path / "lucene"), "--append", str(new)],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert f"by the resident appender, pid {proc.pid}" in out.stderr
        assert out.stdout.strip() == str((tmp_path / "lucene").resolve())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped after 1 change(s)" in err
    assert not launcher.socket_path(tmp_path / "lucene").exists()
    res = LuceneIndex(str(tmp_path / "lucene")).bm25().search("zeolite catalyst")
    assert res["docno"].iloc[0] == "fresh" and _meta(tmp_path / "lucene")["docs"]["count"] == 301
