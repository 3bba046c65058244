"""Tables in the docs that quote a recorded benchmark run (``<!-- recorded: FILE, SECTION -->`` above the
table, a Markdown table or a fenced block of what a command printed) are the recorded table, line for line: a
figure typed by hand, or a rerun not copied over, fails here."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- recorded: (?P<file>[^,]+), (?P<section>[^>]+?) -->\n"
                    r"(?P<table>(?:\|.*\n)+|```\n(?:(?!```).*\n)*```\n)")


def _table_after(text: str, heading: str) -> str:
    """The first Markdown table or fenced block under ``heading``."""
    lines = text[text.index(heading):].split("\n")[1:]
    out = []
    for line in lines:
        if out and out[0] == "```":
            out.append(line)
            if line == "```":
                break
        elif line.startswith("|") or (not out and line == "```"):
            out.append(line)
        elif out:
            break
    return "\n".join(out) + "\n"


def _pages():
    """The docs pages (lab notes under docs/notes/ included; not the built site) and the README."""
    return sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts) + [ROOT / "README.md"]


def _quoted():
    for doc in _pages():
        for m in MARKER.finditer(doc.read_text(encoding="utf-8")):
            yield pytest.param(doc, m["file"], m["section"], m["table"],
                               id=f"{doc.relative_to(ROOT)}:{m['file']}:{m['section']}")


QUOTED = list(_quoted())


def test_some_tables_are_quoted():
    assert any(p.values[0].name == "indexes.md" for p in QUOTED)


@pytest.mark.parametrize("doc,recorded,section,table", QUOTED)
def test_a_quoted_table_is_the_recorded_one(doc, recorded, section, table):
    source = ROOT / recorded
    assert source.is_file(), f"{doc.name} quotes {recorded}, which is not in the repository"
    assert table == _table_after(source.read_text(encoding="utf-8"), "## " + section), \
        f"{doc.name}: the table under <!-- recorded: {recorded}, {section} --> differs from the recorded run"


GENERATED = re.compile(r"<!-- generated: python (?P<script>benchmarks/\S+\.py) --table (?P<file>\S+) -->\n"
                       r"(?P<body>(?:(?!## ).*\n)+)")  # up to the next heading


def _generated():
    for doc in _pages():
        for m in GENERATED.finditer(doc.read_text(encoding="utf-8")):
            yield pytest.param(doc, m["script"], m["file"], m["body"], id=f"{doc.name}:{m['file']}")


@pytest.mark.parametrize("doc,script,recorded,body", list(_generated()))
def test_a_generated_table_is_the_scripts_output_for_the_recorded_run(doc, script, recorded, body):
    out = subprocess.run([sys.executable, str(ROOT / script), "--table", str(ROOT / recorded)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in body.splitlines() if line.strip()]
    assert lines == [line for line in out.stdout.splitlines() if line.strip()], \
        f"{doc.name}: the table differs from `{script} --table {recorded}`"


def test_a_fenced_block_is_quoted_whole():
    """A section holding what a command printed (a fenced block) is compared whole: a changed figure in it,
    or a block cut short, differs."""
    recorded = "# x\n\n## runs\n\n| a |\n|---|\n\n## table\n\n```\nname  MAP\nBM25  0.2227\n```\n\nload\n"
    doc = "intro\n<!-- recorded: r.md, table -->\n```\nname  MAP\nBM25  0.2227\n```\nafter\n"
    m = MARKER.search(doc)
    assert m["section"] == "table" and m["table"] == _table_after(recorded, "## table")
    assert MARKER.search(doc.replace("0.2227", "0.2228"))["table"] != _table_after(recorded, "## table")
    assert _table_after(recorded, "## runs") == "| a |\n|---|\n"
