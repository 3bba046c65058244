"""Tables in the docs that quote a recorded benchmark run (``<!-- recorded: FILE, SECTION -->`` above the
table) are the recorded table, line for line: a figure typed by hand, or a rerun not copied over, fails here."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- recorded: (?P<file>[^,]+), (?P<section>[^>]+?) -->\n(?P<table>(?:\|.*\n)+)")


def _table_after(text: str, heading: str) -> str:
    lines = text[text.index(heading):].split("\n")[1:]
    out = []
    for line in lines:
        if line.startswith("|"):
            out.append(line)
        elif out:
            break
    return "\n".join(out) + "\n"


def _quoted():
    for doc in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        for m in MARKER.finditer(doc.read_text(encoding="utf-8")):
            yield pytest.param(doc, m["file"], m["section"], m["table"], id=f"{doc.name}:{m['file']}:{m['section']}")


QUOTED = list(_quoted())


def test_some_tables_are_quoted():
    assert any(p.values[0].name == "indexes.md" for p in QUOTED)


@pytest.mark.parametrize("doc,recorded,section,table", QUOTED)
def test_a_quoted_table_is_the_recorded_one(doc, recorded, section, table):
    source = ROOT / recorded
    assert source.is_file(), f"{doc.name} quotes {recorded}, which is not in the repository"
    assert table == _table_after(source.read_text(encoding="utf-8"), "## " + section), \
        f"{doc.name}: the table under <!-- recorded: {recorded}, {section} --> differs from the recorded run"
