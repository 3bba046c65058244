"""The command line under failures of user input and of the environment (issue 18, item 8): each
is one line on stderr (plus the expression picture for pipeline errors) and exit status 2;
``--debug`` adds the traceback."""
import errno
import re
import time

import pyterrier as pt
import pytest

import pyterrier_sci as ps
from pyterrier_sci.cli import main
from pyterrier_sci.llm import LLMError

D = "irds:sci/csfcube/method"


class Failing(pt.Transformer):
    """Raises ``error`` when run (after the pipeline was built), as a broken environment would."""

    def __init__(self, error):
        self.error = error

    def transform(self, inp):
        raise self.error


ERRORS = {
    "assertion": AssertionError("index shape mismatch"),
    "attribute": AttributeError("'NoneType' object has no attribute 'search'"),
    "runtime": RuntimeError("worker died"),
    "overflow": OverflowError("cannot convert float infinity to integer"),
    "memory": MemoryError(),
    "recursion": RecursionError("maximum recursion depth exceeded"),
    "enospc": OSError(errno.ENOSPC, "No space left on device", "/work/index.partial"),
    "isadir": IsADirectoryError(errno.EISDIR, "Is a directory", "/tmp"),
    "permission": PermissionError(errno.EACCES, "Permission denied", "/root/x"),
    "unicode": UnicodeDecodeError("utf-8", b"\xff\xfe", 0, 1, "invalid start byte"),
    "llm": LLMError("server at http://127.0.0.1:1/v1 refused the connection after 3 tries"),
    "import": ImportError("No module named 'pyserini'"),
    "type": TypeError("unsupported operand"),
    "key": KeyError("docno"),
}


@pytest.fixture(scope="module", autouse=True)
def failing_component():
    ps.register("failing", lambda kind="runtime": Failing(ERRORS[kind]), replace=True)


def run_cli(capsys, *argv):
    t = time.perf_counter()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.err, time.perf_counter() - t


@pytest.mark.parametrize("kind, says", [
    ("assertion", "AssertionError: index shape mismatch"), ("attribute", "AttributeError: 'NoneType'"),
    ("runtime", "RuntimeError: worker died"), ("overflow", "OverflowError: cannot convert"),
    ("memory", "out of memory"), ("recursion", "nests too deeply"),
    ("enospc", "no space left on device: /work/index.partial"), ("isadir", "Is a directory: /tmp"),
    ("permission", "Permission denied: /root/x"), ("unicode", "cannot read text as utf-8 (byte 0"),
    ("llm", "refused the connection after 3 tries"), ("import", "No module named 'pyserini' (an optional part"),
    ("type", "TypeError: unsupported operand"), ("key", "error: docno"),
])
def test_every_failure_is_one_line_and_exit_2(csfcube, tmp_path, capsys, kind, says):
    out = tmp_path / "run.trec"
    rc, err, _ = run_cli(capsys, "run", f"failing(kind='{kind}')", "--dataset", D, "--output", str(out))
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("pyterrier-sci run: error: ") and says in err, err
    assert "Traceback" not in err and not out.exists()
    rc, err, _ = run_cli(capsys, "--debug", "run", f"failing(kind='{kind}')", "--dataset", D, "--output", str(out))
    assert rc == 2 and "Traceback (most recent call last)" in err and says in err.splitlines()[-1]


def test_debug_flag_anywhere_and_from_the_environment(csfcube, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "r.trec")
    rc, err, _ = run_cli(capsys, "run", "failing", "--dataset", D, "--output", out, "--debug")
    assert rc == 2 and "Traceback" in err
    monkeypatch.setenv("PYTERRIER_SCI_DEBUG", "1")
    rc, err, _ = run_cli(capsys, "run", "failing", "--dataset", D, "--output", out)
    assert rc == 2 and "Traceback" in err


@pytest.mark.parametrize("dataset, says", [
    ("irds:sci/nope", "unknown dataset 'irds:sci/nope'"),
    ("irds:sci/csfcub", "did you mean irds:sci/csfcube"),
    ("irds:msmarco-passage/nope", "unknown dataset"),
    ("vaswani-typo", "unknown dataset 'vaswani-typo'"),
])
def test_unknown_dataset_is_refused_before_any_download(capsys, tmp_path, dataset, says):
    rc, err, took = run_cli(capsys, "run", "pool >> bm25", "--dataset", dataset, "--output", str(tmp_path / "x"))
    assert rc == 2 and says in err and err.count("\n") == 1 and took < 2
    rc, err, took = run_cli(capsys, "evaluate", str(tmp_path / "x"), "--dataset", dataset, "--measures", "MAP")
    assert rc == 2 and says in err and took < 2


def test_pipeline_errors_are_a_headline_and_the_picture(csfcube, capsys, tmp_path):
    expr = "pool >> " + "bm25 % 5 >> " * 40 + "bm25(k1=1e999) >> dense"
    rc, err, _ = run_cli(capsys, "run", expr, "--dataset", D, "--output", str(tmp_path / "x"))
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 3
    assert lines[0] == ("pyterrier-sci run: error: component 'bm25': parameter 'k1' got inf (not a finite number); "
                        "it takes a number from 0 to 100")
    assert len(lines[1]) <= 105 and lines[1][lines[2].index("^"):lines[2].rindex("^") + 1] == "1e999"


@pytest.mark.parametrize("config, says", [
    ("/dev/zero", "/dev/zero: is not a regular file"),
    ("DIR", "is a directory"),
    ("LAUGHS", "values once its aliases are expanded"),
    ("BINARY", "is not UTF-8 text"),
])
def test_hostile_config_files(capsys, tmp_path, csfcube, config, says):
    if config == "DIR":
        config = str(tmp_path)
    elif config == "LAUGHS":
        f = tmp_path / "laughs.yaml"
        f.write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(8))
            + "llm: {model: *i}\n")
        config = str(f)
    elif config == "BINARY":
        f = tmp_path / "bin.yaml"
        f.write_bytes(b"pipelines:\n  P: \xff\xfe\x00\n")
        config = str(f)
    rc, err, took = run_cli(capsys, "run", "pool", "--dataset", D, "--config", config, "--output", str(tmp_path / "x"))
    assert rc == 2 and says in err and err.count("\n") == 1 and took < 1
    rc, err, took = run_cli(capsys, "experiment", config)
    assert rc == 2 and says in err and err.count("\n") == 1 and took < 1


def test_evaluate_unreadable_run_files(csfcube, capsys, tmp_path):
    for name, content in [("binary.trec", b"\xff\xfe\x00\x01garbage\n"), ("short.trec", b"q1 Q0\n")]:
        f = tmp_path / name
        f.write_bytes(content)
        rc, err, _ = run_cli(capsys, "evaluate", str(f), "--dataset", D, "--measures", "MAP")
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    rc, err, _ = run_cli(capsys, "evaluate", str(tmp_path), "--dataset", D, "--measures", "MAP")
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err


# -- issue 31 item 10: errors name the file ---------------------------------------------------------
RUN_FILES = {
    "truncated.trec": (b"q1 Q0 d1 0 1.5 r\nq1 Q0 d2 1 1.2 r\nq1 Q0 d3", "line 3 has 3 columns, not 6 (the file ends"),
    "empty.trec": (b"", "is empty"),
    "utf16.trec": ("q1 Q0 d1 0 1.5 r\n".encode("utf-16"), "is UTF-16 text"),
    "utf16le.trec": ("q1 Q0 d1 0 1.5 r\n".encode("utf-16-le"), "NUL bytes"),
    "garbage.trec": (bytes(range(128, 256)) * 3, "line 1 is not UTF-8 text"),
    "rank.trec": (b"q1 Q0 d1 first 1.5 r\n", "its rank 'first' is not a whole number"),
    "score.trec": (b"q1 Q0 d1 0 high r\n", "its score 'high' is not a number"),
    "cut.trec.gz": (__import__("gzip").compress(b"q1 Q0 d1 0 1.5 r\n" * 50)[:25], "truncated gzip file"),
}


@pytest.mark.parametrize("name", sorted(RUN_FILES))
def test_evaluate_names_the_run_file_and_what_is_wrong(csfcube, capsys, tmp_path, name):
    content, says = RUN_FILES[name]
    f = tmp_path / name
    f.write_bytes(content)
    rc, err, _ = run_cli(capsys, "evaluate", str(f), "--dataset", D, "--measures", "MAP")
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(f) in err and says in err, err
    assert "Integer column has NA" not in err


def test_a_full_disk_names_the_file_being_written(csfcube, capsys, tmp_path, monkeypatch):
    """``write()`` raises ENOSPC with no file name: the message names the run file being written,
    or (a full disk inside a component) the command's output and the work directory."""
    import pyterrier_sci.cli as cli

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "write_run", full)  # the function ``run`` calls to write the run file
    out = tmp_path / "run.trec"
    rc, err, _ = run_cli(capsys, "run", "pool", "--dataset", D, "--output", str(out))
    assert rc == 2 and err.count("\n") == 1 and f"no space left on device: {out}" in err, err
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path / "home"))
    ERRORS["enospc_nameless"] = OSError(errno.ENOSPC, "No space left on device")
    rc, err, _ = run_cli(capsys, "run", "failing(kind='enospc_nameless')", "--dataset", D, "--output", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert f"no space left on device: while writing to {out} (--output) or {tmp_path / 'home'}" in err, err


# -- issue 31 item 15: small slips --------------------------------------------------------------------
def test_a_closed_pipe_ends_the_command_quietly():
    """``pyterrier-sci datasets | head``: the reader goes away; no "error: Broken pipe", no traceback."""
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "pyterrier_sci.cli", "datasets"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()   # before the command writes anything
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=120)
    assert err == "" and rc == 141, (rc, err)


def test_components_are_described_in_whole_sentences(capsys):
    from pyterrier_sci.registry import REGISTRY, first_sentence
    assert first_sentence("``x``: does a, e.g. the b.\nSecond line. More.\n\nOther.") == "``x``: does a, e.g. the b."
    assert first_sentence("``y``: one line\ncontinued here\n\nnext paragraph") == "``y``: one line continued here"
    assert main(["components"]) == 0
    lines = capsys.readouterr().out.splitlines()
    blank = lines.index("")
    described, deprecated = lines[:blank], lines[blank + 1:]
    assert deprecated[0].startswith("deprecated names")
    old_names = dict(line.split(None, 1) for line in deprecated[1:])
    assert old_names["facet_rerank"] == "now sciface_rerank" and len(old_names) == len(REGISTRY.aliases())
    entries, current = [], None
    for line in described:
        if line.startswith(" "):
            current[1] += " " + line.strip()
        else:
            current = [line.split(" ", 1)[0], line.split(" ", 1)[1].strip() if " " in line else ""]
            entries.append(current)
    assert [e[0] for e in entries] == list(REGISTRY.names())
    bm25 = dict(entries)["bm25"]
    assert bm25.endswith("`pisa` or `lucene`."), bm25   # cut after "backend ``pisa``" before
    assert all(len(line) <= 120 for line in lines)
    # docstring markup as a terminal shows it, and no component's name repeated before its description
    assert bm25.startswith("BM25 over `index` or"), bm25
    assert not any(re.search(r"``|:(class|func|mod|meth):", line) for line in lines)
    assert "`CurriculumSettings`' defaults" in dict(entries)["hlm_dense"]
    assert dict(entries)["rrf"].startswith("`rrf(a, b, ...)`: reciprocal rank fusion")


def test_plain_markup_turns_rst_roles_into_code():
    from pyterrier_sci.registry import plain_markup
    assert plain_markup("``x``: a :class:`~.training.Settings`, :func:`a.b` and :mod:`~p.q.r`; ``y``") == \
        "`x`: a `Settings`, `a.b` and `r`; `y`"
    assert plain_markup("no markup, a `single` one") == "no markup, a `single` one"


# -- issue 55, items 4 and 8: internal errors told from the user's, --version, measures, warnings --------------
def test_a_key_error_from_inside_a_command_is_called_a_bug(capsys, monkeypatch):
    """A KeyError the toolkit did not raise on purpose (pandas refusing what a command handed it) is a bug, not the
    user's mistake: one line saying so, with the --debug hint; before, it printed "error: ['table'] not found in
    axis" like a user error."""
    import pandas as pd

    import pyterrier_sci.cli as cli
    monkeypatch.setattr(cli, "registry_status", lambda: pd.DataFrame({"a": [1]}).drop(columns=["table"]))
    rc, err, _ = run_cli(capsys, "datasets")
    assert rc == 2 and err.count("\n") == 1, err
    assert "internal error (a bug in pyterrier-sci" in err and "KeyError" in err and "not found in axis" in err
    assert err.rstrip().endswith("[--debug shows the traceback]")
    monkeypatch.setattr(cli, "registry_status", lambda: {}["table"])
    rc, err, _ = run_cli(capsys, "datasets")   # raised in the user's (here the test's) own code: not called a bug
    assert rc == 2 and "internal error" not in err


def test_an_error_the_toolkit_raises_on_purpose_is_not_called_a_bug(csfcube, capsys, tmp_path):
    rc, err, _ = run_cli(capsys, "evaluate", str(tmp_path / "none.trec"), "--dataset", D, "--measures", "MAP")
    assert rc == 2 and "internal error" not in err and "none.trec" in err


def test_version(capsys):
    from importlib.metadata import version
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"pyterrier-sci {version('pyterrier-sci')}"


def _run_file(tmp_path):
    run = pt.model.add_ranks(pt.get_dataset(D).get_results())
    path = tmp_path / "run.trec"
    pt.io.write_results(run, str(path))
    return path


def test_evaluate_takes_measures_as_ir_measures_does_and_names_another_benchmarks_measure(csfcube, capsys, tmp_path):
    path = _run_file(tmp_path)
    rc = main(["evaluate", str(path), "--dataset", D, "--measures", "NDCG%20 MAP", "--json"])
    spaced = capsys.readouterr().out
    rc2 = main(["evaluate", str(path), "--dataset", D, "--measures", "NDCG%20,MAP", "--json"])
    assert rc == rc2 == 0 and spaced == capsys.readouterr().out and "sciface.NDCG%20" not in spaced
    # doris.MAP on CSFCube: before, "invalid literal for int() with base 10: 'method'"
    rc, err, _ = run_cli(capsys, "evaluate", str(path), "--dataset", D, "--measures", "doris.MAP")
    assert rc == 2 and "int()" not in err and "doris.MAP" in err and "sci/doris-mae" in err, err
    assert "NDCG%20" in err                       # the dataset's own names
    rc, err, _ = run_cli(capsys, "evaluate", str(path), "--dataset", D, "--measures", "NDCG%21x")
    assert rc == 2 and "ir_measures cannot parse it" in err and "…" not in err, err   # the reason is not cut


def test_a_paper_measure_name_without_its_dataset_is_an_error_naming_what_to_write(csfcube):
    """Before, ["NDCG%20", "MAP"] without dataset= gave SciFACE's NDCG%20 beside plain MAP (0.4329 instead of
    0.2227) under the same labels."""
    ds = pt.get_dataset(D)
    with pytest.raises(ValueError, match=r"sciface\.NDCG%20.*dataset="):
        ps.Experiment([ds.get_results()], ds.get_topics(), ds.get_qrels(), ["NDCG%20", "MAP"])
    table = ps.Experiment([ds.get_results()], ds.get_topics(), ds.get_qrels(), ["NDCG%20", "MAP"], dataset=D)
    full = ps.Experiment([ds.get_results()], ds.get_topics(), ds.get_qrels(), ["sciface.NDCG%20", "sciface.MAP"],
                         dataset=D)
    assert table["MAP"].iloc[0] == pytest.approx(full["sciface.MAP"].iloc[0])
    assert table["NDCG%20"].iloc[0] == pytest.approx(full["sciface.NDCG%20"].iloc[0])


def test_a_warning_in_the_cli_is_one_plain_line(csfcube, capsys, tmp_path):
    """A cut run warns (ShortRunWarning); the CLI prints it as one line without a source path and line number."""
    run = pt.model.add_ranks(pt.get_dataset(D).get_results())
    run = run[run["rank"] < 5]
    path = tmp_path / "cut.trec"
    pt.io.write_results(run, str(path))
    assert main(["evaluate", str(path), "--dataset", D, "--measures", "NDCG%20"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err and all(line.startswith("pyterrier-sci: warning: ") for line in err), err
    assert not any(re.search(r"\.py:\d+", line) for line in err), err


def test_irds_is_ir_datasets_command_line_with_the_sci_ids(csfcube, capfd):
    """Plain ``ir_datasets export sci/csfcube/method qrels`` raises KeyError (the ids exist only once
    pyterrier_sci is imported); ``pyterrier-sci irds`` is that command line with them registered."""
    assert main(["irds", "export", "sci/csfcube/method", "qrels"]) == 0
    lines = capfd.readouterr().out.splitlines()
    qrels = pt.get_dataset(D).get_qrels()
    assert len(lines) == len(qrels) and all(line.split()[0].endswith("_method") for line in lines)
    assert main(["irds"]) == 1 and "Usage: ir_datasets" in capfd.readouterr().err


def test_components_lists_a_components_parameters_and_defaults(capsys):
    """Issue 55, item 5: nothing told a user that dense's engine was chosen for them, or that a faster one
    existed; `components NAME` lists every parameter, what it takes and its default."""
    assert main(["components", "dense", "bm25"]) == 0
    out = capsys.readouterr().out
    dense = out.split("\nbm25:")[0]
    assert dense.startswith("dense: ")
    flat = " ".join(dense.split())   # wrapped to the terminal's width
    assert "backend default None; takes one of 'torch', 'openvino', 'onnx' or None (None: the index's own where " \
           "it records one, else 'openvino' where OpenVINO is installed" in flat, dense
    assert "batch_size default 32; takes a whole number from 1 to 65536" in flat
    assert "k1 default 0.9; takes a number from 0 to 100" in " ".join(out.split())
    rc, err, _ = run_cli(capsys, "components", "densse")
    assert rc == 2 and "unknown component 'densse'" in err


def test_the_default_encoder_is_openvino_fp32_on_the_cpu_where_installed():
    import importlib.util

    from pyterrier_sci.models import default_backend
    from pyterrier_sci.plugins.dense import DenseRetriever
    expected = "openvino" if importlib.util.find_spec("openvino") else "torch"
    assert default_backend() == default_backend("cpu") == expected
    assert default_backend("cuda:0") == "torch"
    r = DenseRetriever("default", verbose=False)
    assert (r.backend, r.precision) == (expected, "fp32")
    assert DenseRetriever("default", backend="torch", verbose=False).backend == "torch"
    assert ps.pipeline("dense(index=False)").backend == expected
