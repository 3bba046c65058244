"""pyterrier_sci.upstream: each fix reproduces its library's bug without the fix (in a fresh process, so the
fix applied in this one does not hide it) and shows the behaviour with it."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pyterrier_sci.upstream import fix_npids_single_docno_blocks

ONE_DOCNO = textwrap.dedent("""
    import sys
    import numpy as np, pyterrier_dr
    if sys.argv[1] == "fixed":
        from pyterrier_sci.upstream import fix_npids_single_docno_blocks
        fix_npids_single_docno_blocks()
    index = pyterrier_dr.FlexIndex(sys.argv[2])
    index.indexer().index([{"docno": "hep-th/9901001", "doc_vec": np.ones(4, dtype="float32")}])
    print(len(index), index.docnos().fwd[[0]][0])
""")


def _run(mode, path):
    return subprocess.run([sys.executable, "-c", ONE_DOCNO, mode, str(path)], capture_output=True, text=True,
                          timeout=120)


def test_npids_one_docno_index_is_unreadable_without_the_fix_and_readable_with_it(tmp_path):
    pytest.importorskip("pyterrier_dr")
    unfixed = _run("unfixed", tmp_path / "unfixed")
    if unfixed.returncode == 0:
        pytest.skip("this npids release reads a one-docno block: pyterrier_sci.upstream's fix can go")
    assert "ZeroDivisionError" in unfixed.stderr
    fixed = _run("fixed", tmp_path / "fixed")
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert fixed.stdout.split() == ["1", "hep-th/9901001"]


def test_npids_lookups_are_unchanged_by_the_fix(tmp_path):
    """Docnos of every shape (a common prefix, one longer than the rest at a block's start, numbers, one alone
    at the end) read back as written, forwards and backwards."""
    from npids import Lookup
    assert fix_npids_single_docno_blocks() in (True, False)
    rng = np.random.default_rng(0)
    cases = {
        "one": ["hep-th/9901001"],
        "prefix": [f"hep-th/99{i:05d}" for i in range(300)],
        "longer_last": [f"d{i:03d}" for i in range(256)] + ["a-much-longer-docno"],
        "mixed": [f"{int(x)}" for x in rng.integers(0, 10**9, 700)] + ["x"],
        "two_equal_prefix": ["abc", "abcd"],
    }
    for name, docnos in cases.items():
        docnos = list(dict.fromkeys(docnos))
        lookup = Lookup.build(docnos, tmp_path / f"{name}.npids")
        assert [d for d in lookup.fwd[np.arange(len(docnos))]] == docnos, name
        assert list(lookup.inv[docnos]) == list(range(len(docnos))), name
        assert lookup.inv[["not-there"]][0] == -1, name


MULTI_BLOCK = textwrap.dedent("""
    import sys
    import numpy as np
    from npids import Lookup
    if sys.argv[1] == "fixed":
        from pyterrier_sci.upstream import fix_npids_multi_block_lookup
        fix_npids_multi_block_lookup()
    docnos = [f"d{i}" for i in range(300)] + [f"n{i}" for i in range(1000, 1050)]
    lookup = Lookup.build(docnos, sys.argv[2])
    print(lookup.describe().splitlines()[-1].strip())
    print(" ".join(map(str, lookup.inv[["d5", "n1000", "n1049"]])))
    if sys.argv[1] == "fixed":   # the released lookup also raises on "n" (an empty number)
        print(" ".join(map(str, lookup.inv[["d300", "n999", "n1050", "n01000", "n", "x1"]])))
""")


def test_npids_finds_no_docno_of_a_numbered_block_after_the_first_without_the_fix(tmp_path):
    """Issue 55, item 7: a flat index grown by 50 papers n1000..n1049 over d0..d299 could not find n1000."""
    run = [sys.executable, "-c", MULTI_BLOCK]
    unfixed = subprocess.run(run + ["unfixed", str(tmp_path / "u.npids")], capture_output=True, text=True, timeout=120)
    assert unfixed.returncode == 0, unfixed.stderr[-2000:]
    kind, found = unfixed.stdout.splitlines()
    assert kind == "intsequencemulti"
    if found.split()[1] != "-1":
        pytest.skip("this npids release finds numbered blocks after the first: pyterrier_sci.upstream's fix can go")
    fixed = subprocess.run(run + ["fixed", str(tmp_path / "f.npids")], capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    # n1000 is the 301st docno; d300, n999 and n1050 are outside their blocks, n01000 is not as written
    assert fixed.stdout.splitlines()[1:] == ["5 300 349", "-1 -1 -1 -1 -1 -1"]


def test_npids_numbered_lookups_with_the_fix_agree_with_a_dictionary(tmp_path):
    """Every kind of numbered block (one sequence, several, zero-padded, a prefix-less one) against docnos of
    every shape, the fix's answers against a plain dictionary of the docnos."""
    from npids import Lookup

    from pyterrier_sci.upstream import fix_npids_multi_block_lookup
    fix_npids_multi_block_lookup()
    cases = {
        "one": [f"d{i}" for i in range(300)],
        "offset": [f"d{i}" for i in range(7, 400)],
        "two": [f"d{i}" for i in range(300)] + [f"n{i}" for i in range(1000, 1300)],
        "bare": [str(i) for i in range(50, 450)],
        "padded": [f"p{i:05d}" for i in range(300)] + [f"q{i:05d}" for i in range(300)],
    }
    probes = ["x", "d", "", "d0", "d00", "d-1", "n999", "n1300", "n01000", "p00000", "q00299", "p0", "1", "50",
              "0050", "d1x", "dd1", "n1000 ", "n१"]
    for name, docnos in cases.items():
        lookup = Lookup.build(docnos, tmp_path / f"{name}.npids")
        want = {d: i for i, d in enumerate(docnos)}
        asked = docnos[::7] + probes
        got = lookup.inv[asked]
        assert got == [want.get(d, -1) for d in asked], (name, lookup.describe())
