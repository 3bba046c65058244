"""What the reproduction files declare cannot change unnoticed: every published figure occurs among the lines of
the table the file names in the paper's text (``../shared/seeds``), each system's figures are one row of it in
the declared column order, and every
published figure, tolerance and drift bound is the one ``tests/fixtures/reproduce_declared.json`` holds, so a
typo, a raised tolerance ("0.5" to "50" made BM25 "reproduced") or an edited figure fails CI until the snapshot
is rewritten on purpose::

    python tests/test_reproduce_declared.py --write
"""
import json
import re
import sys
from pathlib import Path

import pytest

from pyterrier_sci import reproduce as R

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT.parent / "shared" / "seeds"
SNAPSHOT = Path(__file__).parent / "fixtures" / "reproduce_declared.json"
#: the paper text of each reproduction file
PAPERS = {"mir": "000_", "doris_mae": "001_", "sciface": "002_", "prism": "003_", "hlm_cite": "004_"}
#: where a table sits in a paper text whose extraction lost its caption: a line of the table itself
ANCHORS = {("sciface", "5"): "| SciFACE (Ours) | 70.63",
           ("sciface", "3"): "| CSFCube Pre-Adjudication | 0.45",
           ("hlm_cite", "2"): "H-LM (GPT3.5) | 0.725",
           ("hlm_cite", "3"): "Full workflow | 0.725"}
BEFORE, AFTER = 60, 80   # lines around a caption (or anchor) that hold its table
#: tables printed with a column per system and a line per measure (the extraction keeps the paper's layout)
TRANSPOSED = {("doris_mae", "1"), ("mir", "3")}
_NUMBER = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?!\d)")


def _papers():
    return {pid: R.load_paper(path) for pid, path in R.paper_files(ROOT / "pipelines" / "reproduce").items()}


def declared() -> dict:
    """Per table: its tolerance and drift, and per system its own and its published figures."""
    out = {}
    for pid, paper in sorted(_papers().items()):
        for key, t in paper.tables.items():
            out[f"{pid}/{key}"] = {
                "tolerance": t.tolerance, "drift": t.drift,
                "systems": {n: {"tolerance": s.tolerance, "drift": s.drift, "reproduces": s.reproduces,
                                "published": s.published} for n, s in t.systems.items()}}
    return out


def _table_lines(lines, pid, number) -> str:
    anchor = ANCHORS.get((pid, number))
    caption = re.compile(rf"^\W*Table {re.escape(str(number))}\s*[:.]")
    at = [i for i, line in enumerate(lines) if (anchor in line if anchor else caption.search(line))]
    return "\n".join("\n".join(lines[max(0, i - BEFORE): i + AFTER]) for i in at)


def _forms(v: float):
    """How a figure in the file's units may be printed in the paper (the file scales fractions by 100; PRISM's
    Table 8 prints its unscaled dispersions with four decimals)."""
    out = {f"{v:.2f}", f"{v:.1f}", f"{v / 100:.3f}", f"{v / 100:.2f}", f"{v:.3f}", f"{v:.4f}"}
    if float(v).is_integer():
        out.add(str(int(v)))
    return out


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"the papers' text is not at {SEEDS}")
def test_every_published_figure_occurs_in_its_table_in_the_paper():
    missing, checked = [], 0
    for pid, paper in _papers().items():
        lines = next(SEEDS.glob(PAPERS[pid] + "*.txt")).read_text(encoding="utf-8").splitlines()
        for key, t in paper.tables.items():
            number = str(t.source.get("table") or t.number).split()[0]
            region = _table_lines(lines, pid, number)
            assert region, f"{pid}/{key}: Table {number} not found in the paper's text (give it an anchor)"
            for s in t.systems.values():
                for label, figs in s.published.items():
                    for m, v in figs.items():
                        checked += 1
                        if not any(re.search(rf"(?<![\d.]){re.escape(f)}(?!\d)", region) for f in _forms(v)):
                            missing.append(f"{pid}/{key} {s.name} {label} {m} = {v}")
    assert checked >= 300 and not missing, "published figures not in their table's lines:\n" + "\n".join(missing)


def _in_order(positions) -> bool:
    """Whether one figure may be taken from each list of positions, each after the one before."""
    last = -1
    for found in positions:
        later = [i for i in found if i > last]
        if not later:
            return False
        last = later[0]
    return True


def row_and_column_errors(paper, table, lines) -> list:
    """The systems of ``table`` whose published figures are not in one row of the paper's table, in the declared
    order of the columns (datasets, then measures): on one line, left to right; for a transposed table, one
    figure per line in the order of the measures, in one column."""
    number = str(table.source.get("table") or table.number).split()[0]
    region = _table_lines(lines, paper.id, number).splitlines()
    numbers = [[m.group(0) for m in _NUMBER.finditer(line)] for line in region]
    errors = []
    for s in table.systems.values():
        figs = [v for label in table.datasets for m in table.measures
                if (v := s.published.get(label, {}).get(m)) is not None]
        if len(figs) < 2:
            continue
        where = [[[i for i, tok in enumerate(toks) if tok in _forms(v)] for v in figs] for toks in numbers]
        if (paper.id, number) in TRANSPOSED:   # a column counted from the right (labels before it vary in length)
            right = [[[i - len(toks) for i in found] for found in line] for toks, line in zip(numbers, where)]
            ok = any(_in_order([[li for li, line in enumerate(right) if -col in line[k]] for k in range(len(figs))])
                     for col in range(1, max(map(len, numbers), default=0) + 1))
        else:
            ok = any(all(found) and _in_order(found) for found in where)
        if not ok:
            errors.append(f"{paper.id}/{table.key} {s.name}: {figs}")
    return errors


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"the papers' text is not at {SEEDS}")
def test_every_row_of_published_figures_is_a_row_of_the_paper_in_the_declared_column_order():
    """A figure moved to another row or column (two columns swapped, a measure declared in another order than
    the paper prints it) fails: each system's figures are one row of the paper's table, left to right."""
    errors, checked = [], 0
    for pid, paper in _papers().items():
        lines = next(SEEDS.glob(PAPERS[pid] + "*.txt")).read_text(encoding="utf-8").splitlines()
        for t in paper.tables.values():
            checked += sum(sum(len(f) for f in s.published.values()) > 1 for s in t.systems.values())
            errors += row_and_column_errors(paper, t, lines)
    assert checked >= 90 and not errors, "rows not found in the paper's table in the declared order:\n" + \
        "\n".join(errors)
    # the check can fail: two figures of a row swapped, or a figure from another row
    paper = _papers()["sciface"]
    lines = next(SEEDS.glob(PAPERS["sciface"] + "*.txt")).read_text(encoding="utf-8").splitlines()
    table = paper.tables["table5"]
    specter = table.systems["SPECTER"].published
    specter["Background"]["NDCG%20"], specter["Background"]["MAP"] = specter["Background"]["MAP"], \
        specter["Background"]["NDCG%20"]
    assert row_and_column_errors(paper, table, lines) == [f"sciface/table5 SPECTER: {[43.95, 66.70, 37.41, 22.44]}"]
    specter["Background"]["NDCG%20"], specter["Background"]["MAP"] = 66.70, 43.95
    table.systems["TSASPIRE"].published["Method"]["MAP"] = 27.64     # OTASPIRE's
    assert [e.split(":")[0] for e in row_and_column_errors(paper, table, lines)] == ["sciface/table5 TSASPIRE"]
    mir = _papers()["mir"]
    lines = next(SEEDS.glob(PAPERS["mir"] + "*.txt")).read_text(encoding="utf-8").splitlines()
    agent = mir.tables["table3"].systems["Agent_ZS"].published["Restricted"]
    agent["R@3"], agent["R@5"] = agent["R@5"], agent["R@3"]
    assert [e.split(":")[0] for e in row_and_column_errors(mir, mir.tables["table3"], lines)] == ["mir/table3 Agent_ZS"]


def test_no_published_figure_or_tolerance_changes_unnoticed():
    want = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    got = declared()
    changed = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    assert not changed, (f"the published figures or tolerances of {changed} differ from {SNAPSHOT.name}; if the "
                         f"change is deliberate, rewrite it: python tests/{Path(__file__).name} --write")


def test_the_snapshot_catches_a_raised_tolerance():
    got = declared()
    key = next(k for k, v in got.items() if v["tolerance"])
    got[key]["tolerance"] *= 100
    assert got != json.loads(SNAPSHOT.read_text(encoding="utf-8"))


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    SNAPSHOT.write_text(json.dumps(declared(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
