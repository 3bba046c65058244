"""Hostile names and a printed page against the experiment report (issue 31, items 7, 8 and 16):
a ``$...$`` in a system name is text in the plots, not matplotlib math, and a failure while drawing
names the system and ``--report``; line breaks, tabs and control characters in system and
experiment names never reach LaTeX as line breaks (no blank line inside the tabular, no name
escaping the ``%`` comment); the HTML report shows p-values and wins/losses as visible text in one
number format, defines its measures, draws the per-query plots as compact small multiples,
summarises the manifest with the full one folded, and prints to PDF with all of that in it."""
import dataclasses
import html
import re
import shutil
import subprocess

import pytest
from test_report import CHROMIUM, DATASETS, MEASURES, _chromium, _config, _split_cells

from pyterrier_sci import report
from pyterrier_sci.cli import main
from pyterrier_sci.experiment import experiment_outcome
from pyterrier_sci.registry import PipelineError

INPUT = r"S $\input{/etc/passwd}$"                     # LaTeX / matplotlib math in a system name
PDFTOTEXT = shutil.which("pdftotext")


@pytest.fixture(scope="module")
def small(csfcube, tmp_path_factory):
    """test_report's small CSFCube experiment (three BM25 settings, three measures, t-test, Holm) and
    its report; the runs saved, so a rerun of its config reads them back."""
    tmp = tmp_path_factory.mktemp("hostile-report")
    cfg = _config(tmp, tmp / "runs")
    outcome = experiment_outcome(cfg)
    return outcome, report.write_report(outcome, tmp / "out"), cfg, tmp


def _renamed(outcome, names, experiment=None):
    """``outcome`` with its pipelines renamed (``{old: new}``) and, optionally, the experiment: the
    same runs and tables, nothing run again."""
    new = [names.get(p, p) for p in outcome.pipelines]
    datasets = []
    for d in outcome.datasets:
        table = d.table.copy()
        table["name"] = [names.get(n, n) for n in table["name"]]
        datasets.append(dataclasses.replace(d, table=table, systems={names.get(k, k): v for k, v in d.systems.items()},
                                            runs={names.get(k, k): v for k, v in d.runs.items()},
                                            run_paths={names.get(k, k): v for k, v in d.run_paths.items()}))
    table = outcome.table.copy()
    table["name"] = [names.get(n, n) for n in table["name"]]
    return dataclasses.replace(outcome, name=experiment if experiment is not None else outcome.name, pipelines=new,
                               baseline=names.get(outcome.baseline, outcome.baseline), table=table,
                               datasets=datasets)


def _visible_text(page):
    """What a reader sees of an HTML page (tags, attributes and the style sheet removed)."""
    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


# ------------------------------------------------------------------------------ item 7: $...$ in names

def test_a_dollar_math_system_name_is_text_in_the_report(csfcube, tmp_path, capsys):
    cfg = tmp_path / "math.yaml"
    cfg.write_text(f"""
dataset: irds:sci/csfcube
pipelines:
  BM25: pool >> bm25
  '{INPUT}': pool >> bm25(k1=0.6, b=0.1)
experiments:
  math:
    dataset: irds:sci/csfcube/method
    pipelines: [BM25, '{INPUT}']
    measures: [NDCG%20]
    baseline: BM25
""")
    out = tmp_path / "r"
    assert main(["experiment", str(cfg), "--report", str(out)]) == 0, capsys.readouterr().err
    page = (out / "report.html").read_text()
    # the plot's title is the name as plain text (matplotlib drew no math, raised no ParseFatalException)
    svg_texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", page)]
    assert any(INPUT in t for t in svg_texts), svg_texts
    tex = (out / "results.tex").read_text()
    assert r"S \$\textbackslash{}input\{/etc/passwd\}\$" in tex and "\\input{/etc" not in tex


def test_a_failing_plot_names_the_system_and_report(small, tmp_path, monkeypatch, capsys):
    outcome, _, cfg, _ = small

    def broken(diff, measure, system, *a, **k):
        if system == "Tuned":
            raise RuntimeError("the plot library failed")
        return "<svg></svg>"

    monkeypatch.setattr(report, "difference_plot_svg", broken)
    with pytest.raises(PipelineError) as e:
        report.write_report(outcome, tmp_path / "api")
    assert "--report" in str(e.value) and "'Tuned'" in str(e.value) and "the plot library failed" in str(e.value)
    assert not (tmp_path / "api").exists() or not any((tmp_path / "api").iterdir())
    # the command line: one line naming --report and the system (the saved runs make this cheap)
    assert main(["experiment", str(cfg), "--report", str(tmp_path / "cli")]) == 2
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if "error" in ln]
    assert len(err) == 1 and "--report" in err[0] and "'Tuned'" in err[0] and "traceback" not in err[0], err
    assert not (tmp_path / "cli" / "report.html").exists()


# ------------------------------------------------------------------ item 8: line breaks and controls in names

HOSTILE = {"Tuned": "Tuned\n\nfast", "Low_b & 50%": "Low_b\t&\r\n50%\x07\x0b\u2028end\u202e"}
EXPERIMENT = "small\n\\begin{document}\nPWNED\n\n"


def test_line_breaks_in_names_never_reach_latex_as_line_breaks(small, tmp_path):
    outcome, *_ = small
    odd = _renamed(outcome, HOSTILE, experiment=EXPERIMENT)
    tex = report.render_latex(odd)
    lines = tex.splitlines()
    begin = lines.index("\\begin{table}[t]")
    assert all(ln.startswith("%") for ln in lines[:begin])          # nothing of a name before the table
    assert "PWNED" in lines[0] and "PWNED" not in "\n".join(lines[1:begin])
    assert "\n\n" not in tex.strip() and all(ln.strip() for ln in lines[:-1])   # no blank line at all
    body = tex[tex.index("\\toprule"):tex.index("\\bottomrule")]
    rows = [ln for ln in body.splitlines() if ln.strip() and not ln.startswith(("\\midrule", "\\toprule"))]
    assert all(ln.endswith("\\\\") for ln in rows)                  # every line of the tabular is one row
    names = [_split_cells(r)[0].strip() for r in rows if not r.startswith(("System", "\\multicolumn"))]
    assert names == ["BM25", "Tuned fast", "Low\\_b \\& 50\\% end"] * len(DATASETS)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029\u202e]", tex)
    assert "\\label{tab:small-begin-document-PWNED}" in tex
    assert report.latex_escape("a\n\nb\tc\x07d\u2029e") == "a b c d e"


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed (structure checked above)")
def test_a_latex_table_of_hostile_names_compiles(small, tmp_path):
    outcome, *_ = small
    (tmp_path / "results.tex").write_text(report.render_latex(_renamed(outcome, HOSTILE, experiment=EXPERIMENT)))
    (tmp_path / "doc.tex").write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
                                      "\\input{results.tex}\n\\end{document}\n")
    out = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "doc.tex"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:]


def test_line_breaks_in_names_are_one_line_in_the_html(small, tmp_path):
    outcome, *_ = small
    odd = _renamed(outcome, {**HOSTILE, "BM25": INPUT}, experiment=EXPERIMENT)
    written = report.write_report(odd, tmp_path / "r")
    page = written["report.html"].read_text()
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u2028\u202e]", page)
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
    assert title == "Experiment small \\begin{document} PWNED"
    text = _visible_text(page)
    assert "Tuned fast" in text and "Low_b & 50% end" in text and INPUT in text
    # the plots too: their labels are one line
    svg_texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", page)]
    assert any(t.startswith("Tuned fast") for t in svg_texts) and not any("\n" in t for t in svg_texts)


# -------------------------------------------------------------------- item 16: a results section that prints

def _cell_stats(outcome):
    """(dataset, system, measure, p-value text, wins/losses text) of every non-baseline cell."""
    for d in outcome.datasets:
        t = d.table.reset_index(drop=True)
        for i, name in enumerate(t["name"]):
            if name == outcome.baseline:
                continue
            for m in outcome.measures:
                p, adj = t.at[i, f"{m} p-value"], t.at[i, f"{m} p-value corrected"]
                yield (d.dataset, name, m, f"p {p:.4f} (adj. {adj:.4f})",
                       f"+{int(t.at[i, f'{m} +'])}/\u2212{int(t.at[i, f'{m} -'])}")


def test_html_report_reads_like_a_results_section(small):
    outcome, written, *_ = small
    page = written["report.html"].read_text()
    text = _visible_text(page)
    # p-values (raw and corrected) and wins/losses are visible text of each cell, not tooltips
    tables = re.findall(r"<table class='results'>.*?</table>", page, re.S)
    assert len(tables) == len(DATASETS)
    for dataset, name, m, p, counts in _cell_stats(outcome):
        table = _visible_text(tables[DATASETS.index(dataset)])
        assert p in table and counts in table, (dataset, name, m, p, counts)
    assert "title=" not in "".join(tables)
    # one number format: every decimal number in the tables (the folded full table too) has 4 decimals
    numbers = re.findall(r"\d+\.\d+", _visible_text("".join(re.findall(r"<table.*?</table>", page[
        page.index("id='results'"):page.index("id='measures'")], re.S))))
    assert numbers and all(re.fullmatch(r"\d+\.\d{4}", n) for n in numbers), sorted(set(numbers))[:20]
    # the measures are defined; CSFCube's figures are means of fold means
    glossary = _visible_text(page[page.index("id='measures'"):page.index("id='perquery'")])
    for m in MEASURES:
        assert f" {m} " in glossary
    assert "20% of the ranked pool" in glossary and "mean of fold means" in glossary
    assert "Discounted Cumulative Gain" in glossary          # nDCG@10: ir_measures' own description
    # small multiples: one figure per dataset, compact plots, no label smaller than 7 pt, no query ids
    assert page.count("<figure class='group'>") == len(DATASETS)
    svgs = re.findall(r"<svg[^>]*>.*?</svg>", page, re.S)
    assert len(svgs) == len(DATASETS) * len(MEASURES) * 2
    for svg in svgs:
        width = float(re.search(r'width="([\d.]+)pt"', svg).group(1))
        assert width <= 4 * 72
        sizes = [float(s) for s in re.findall(r"font-size: ([\d.]+)px", svg)]
        assert sizes and min(sizes) >= 7
    # the manifest: a summary of the key facts, the full one folded (and shown in print)
    manifest = page[page.index("id='manifest'"):]
    assert "manifest-summary" in manifest and "library versions" in manifest and "data files" in manifest
    assert re.search(r"<details[^>]*><summary>Full manifest</summary>", manifest)
    assert "class='print-only'" in manifest and "@media print" in page
    assert outcome.manifest["environment"]["versions"]["numpy"] in text


@pytest.mark.skipif(CHROMIUM is None or PDFTOTEXT is None,
                    reason="Chromium or pdftotext is not installed (Debian: apt-get install chromium poppler-utils)")
def test_html_report_prints_to_pdf_with_its_figures_and_manifest(small, tmp_path):
    outcome, written, *_ = small
    pdf = tmp_path / "report.pdf"
    out = _chromium(tmp_path, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", written["report.html"].as_uri())
    assert out.returncode == 0 and pdf.exists() and pdf.stat().st_size > 10_000, out.stderr[-2000:]
    text = subprocess.run([PDFTOTEXT, "-layout", str(pdf), "-"], capture_output=True, text=True, timeout=60).stdout
    flat = " ".join(text.split())
    for _, _, _, p, counts in _cell_stats(outcome):
        assert p in flat and counts in flat, (p, counts)
    assert "mean of fold means" in flat and "Figure 1." in flat
    # the full manifest is printed (not left in a closed <details>): its figures' keys are in the PDF
    assert '"manifest_version"' in flat and "Full manifest" in flat
    # nothing clipped at the right edge: every word lies on its page
    bbox = subprocess.run([PDFTOTEXT, "-bbox", str(pdf), "-"], capture_output=True, text=True, timeout=60).stdout
    pages = re.findall(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', bbox, re.S)
    assert pages
    for width, _, body in pages:
        right = [float(x) for x in re.findall(r'xMax="([\d.]+)"', body)]
        assert all(x <= float(width) for x in right)
