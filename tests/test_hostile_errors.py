"""Errors that name the file (issue 31, item 10): a damaged BM25 index is one error naming the
file and what to do, never JSON's "Expecting value" or an abort inside PISA."""
import json
import subprocess
import sys

import pytest

from pyterrier_sci.cli import describe_error

DOCS = [{"docno": f"d{i}", "text": f"citation graph number {i} of scientific papers"} for i in range(40)]


@pytest.fixture(scope="module")
def pisa_index(tmp_path_factory):
    from pyterrier_sci.plugins.bm25 import build_index
    path = tmp_path_factory.mktemp("pisa") / "idx"
    build_index(DOCS, path)
    return path


def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def _search(path) -> str:
    """Runs a BM25 search over ``path`` in a child process (an abort in PISA would end this one)."""
    code = ("import sys, pandas as pd, pyterrier_sci as ps\n"
            "from pyterrier_sci.cli import describe_error\n"
            "try:\n"
            f"    t = ps.pipeline(\"bm25(index='{path}')\", trusted=True)\n"
            "    print(len(t(pd.DataFrame([{'qid': '1', 'query': 'citation graph'}]))))\n"
            "except Exception as e:\n"
            "    print('ERROR', describe_error(e))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    return out.stdout.strip()


@pytest.mark.parametrize("emptied", ["pt_meta.json", "all", "inv.docs", "fwd.termlex"])
def test_an_emptied_pisa_index_is_one_error_naming_the_file(pisa_index, tmp_path, emptied):
    idx = _copy(pisa_index, tmp_path / "idx")
    files = [p for p in idx.iterdir() if p.is_file()] if emptied == "all" else [idx / emptied]
    for f in files:
        f.write_bytes(b"")
    got = _search(idx)
    assert got.startswith("ERROR "), got
    assert "Expecting value" not in got.split("(")[0]
    if emptied in ("pt_meta.json", "all"):
        assert f"{idx / 'pt_meta.json'} is empty" in got, got
    else:
        assert f"the BM25 index {idx} is damaged: {idx / emptied} is empty" in got and "delete the directory" in got


def test_a_work_directory_index_with_an_emptied_meta_file_names_it(pisa_index, tmp_path):
    from pyterrier_sci.plugins.bm25.retriever import BM25, DamagedIndexError
    idx = _copy(pisa_index, tmp_path / "idx")
    (idx / "pt_meta.json").write_bytes(b"")
    with pytest.raises(DamagedIndexError) as err:
        BM25(str(idx))
    assert f"{idx / 'pt_meta.json'} is empty" in describe_error(err.value)
    (idx / "pt_meta.json").write_text(json.dumps([1]))
    with pytest.raises(DamagedIndexError, match="holds a JSON list, not an object"):
        BM25(str(idx))


def test_an_intact_index_still_searches(pisa_index):
    assert _search(pisa_index) == "40"
