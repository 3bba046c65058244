"""Experiment reports (``pyterrier-sci experiment FILE --report DIR``): from an
:class:`~pyterrier_sci.experiment.ExperimentOutcome`, a self-contained ``report.html`` (results table
with significance markers, per-query difference plots as inline SVG, LLM usage, manifest summary), a
booktabs LaTeX table ``results.tex`` and the true per-query values ``perquery.csv``.  See
``docs/evaluation.md``, "Reports".
"""
from __future__ import annotations

import html
import io
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

__all__ = ["write_report", "check_target", "render_html", "render_latex", "perquery_frame", "significance",
           "find_manifest", "latex_escape", "REPORT_FILES"]

REPORT_FILES = ("report.html", "results.tex", "perquery.csv")
BETTER, WORSE = "#1b9e77", "#d95f02"   # bar colours of the difference plots: system above / below the reference

_TESTS = {"t": "paired t-test", "wilcoxon": "Wilcoxon signed-rank test"}
_CORRECTIONS = {"bonferroni": "Bonferroni", "sidak": "Sidak", "holm": "Holm", "holm-sidak": "Holm-Sidak",
                "simes-hochberg": "Simes-Hochberg", "hommel": "Hommel", "fdr_bh": "Benjamini-Hochberg (FDR)",
                "fdr_by": "Benjamini-Yekutieli (FDR)", "fdr_tsbh": "two-stage Benjamini-Hochberg (FDR)",
                "fdr_tsbky": "two-stage Benjamini-Krieger-Yekutieli (FDR)"}


# ------------------------------------------------------------------------------------------ data

def perquery_frame(outcome) -> pd.DataFrame:
    """True per-query values of every pipeline on every dataset of ``outcome``: columns ``dataset``,
    ``name``, ``qid``, ``measure``, ``value`` (NaN where the paper leaves the query out), measures in
    the order asked for.  Evaluates the runs the experiment produced; nothing is run again."""
    from pyterrier_sci.evaluation import Experiment
    frames = []
    for d in outcome.datasets:
        per_q = Experiment([d.runs[p] for p in outcome.pipelines], d.topics, d.qrels, outcome.measures,
                           names=outcome.pipelines, perquery=True, dataset=d.dataset)
        per_q = per_q[["name", "qid", "measure", "value"]].copy()
        per_q["qid"] = per_q["qid"].astype(str)
        per_q.insert(0, "dataset", d.dataset)
        order = {m: i for i, m in enumerate(outcome.measures)}
        sysorder = {p: i for i, p in enumerate(outcome.pipelines)}
        per_q = per_q.sort_values(["name", "measure", "qid"], key=lambda s: s.map(order) if s.name == "measure"
                                  else (s.map(sysorder) if s.name == "name" else s), kind="stable")
        frames.append(per_q)
    cols = ["dataset", "name", "qid", "measure", "value"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def significance(table: pd.DataFrame, measure: str, alpha: float = 0.05) -> pd.Series:
    """Per row of an experiment table: True where the difference to the baseline in ``measure`` is
    significant, i.e. the p-value after the experiment's correction (``<m> p-value corrected``, else
    ``<m> p-value``) is below ``alpha``.  All False when the table has no tests."""
    col = f"{measure} p-value corrected" if f"{measure} p-value corrected" in table.columns else f"{measure} p-value"
    if col not in table.columns:
        return pd.Series(False, index=table.index)
    p = pd.to_numeric(table[col], errors="coerce")
    return (p < alpha).fillna(False).astype(bool)


def find_manifest(outcome) -> Optional[Dict[str, Any]]:
    """The run manifest of ``outcome``: its ``manifest`` attribute when it has one, else the JSON file
    at its ``manifest_path``, else ``<save_dir>/<experiment>.manifest.json`` when that file exists.
    A file that is not a JSON object is named in a warning and in the report, and left out."""
    found = getattr(outcome, "manifest", None)
    if isinstance(found, Mapping):
        return dict(found)
    path = getattr(outcome, "manifest_path", None)
    if path is None and outcome.save_root:
        path = Path(outcome.save_root) / f"{outcome.name}.manifest.json"
    if path is None or not Path(path).is_file():
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        warnings.warn(f"manifest {path} cannot be read ({e}); the report leaves it out", stacklevel=2)
        return {"unreadable manifest": str(path)}
    if not isinstance(data, dict):
        warnings.warn(f"manifest {path} is not a JSON object; the report leaves it out", stacklevel=2)
        return {"unreadable manifest": str(path)}
    return data


def _fmt(v: Any, digits: int = 4) -> Optional[str]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f"{f:.{digits}f}"


def _best(values: Sequence[Optional[str]]) -> set:
    """Indices of the highest shown value (ties after rounding are all best)."""
    nums = [float(v) for v in values if v is not None]
    if not nums:
        return set()
    top = max(nums)
    return {i for i, v in enumerate(values) if v is not None and float(v) == top}


def _legend(outcome, alpha: float) -> Tuple[str, str]:
    """(test description, correction description) in plain words."""
    test = outcome.test
    test_s = _TESTS.get(test, getattr(test, "__name__", str(test))) if test is not None else ""
    corr = outcome.correction
    corr_s = f"{_CORRECTIONS.get(corr, corr)} correction over the {len(outcome.pipelines) - 1} comparisons per " \
             f"measure" if corr else "no multiple-testing correction"
    return test_s, corr_s


def _reference(outcome) -> str:
    return outcome.baseline if outcome.baseline is not None else outcome.pipelines[0]


def _differences(perq: pd.DataFrame, dataset: str, measure: str, system: str, reference: str) -> pd.Series:
    """system - reference per query, over the queries that count for both, sorted descending."""
    sel = perq[(perq["dataset"] == dataset) & (perq["measure"] == measure)]
    a = sel[sel["name"] == system].set_index("qid")["value"]
    b = sel[sel["name"] == reference].set_index("qid")["value"]
    pair = pd.concat([a.rename("sys"), b.rename("ref")], axis=1, join="inner").dropna()
    diff = (pair["sys"] - pair["ref"]).astype(float)
    return diff.sort_values(ascending=False, kind="stable")


# ----------------------------------------------------------------------------------------- plots

def difference_plot_svg(diff: pd.Series, measure: str, system: str, reference: str, salt: str) -> str:
    """The usual IR paper figure as an inline ``<svg>`` element: one bar per query, system minus
    reference, sorted; bars above zero in :data:`BETTER`, below in :data:`WORSE`.  ``salt`` (unique
    per plot of a page) prefixes the SVG's element ids."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: the process's backend is left alone

    values = diff.to_numpy(dtype=float)
    n = len(values)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt, "font.size": 9}):
        fig = Figure(figsize=(7.0, 2.6), dpi=100)
        ax = fig.add_subplot(1, 1, 1)
        x = np.arange(n)
        colours = [BETTER if v > 0 else WORSE for v in values]
        if n:
            ax.bar(x, values, width=0.8, color=colours, linewidth=0)
        ax.axhline(0.0, color="#444444", linewidth=0.8)
        lim = max(float(np.max(np.abs(values))) if n else 0.0, 1e-3) * 1.1
        ax.set_ylim(-lim, lim)
        ax.set_xlim(-0.6, max(n, 1) - 0.4)
        ax.set_ylabel(f"Δ {measure}")
        if 0 < n <= 40:
            ax.set_xticks(x)
            ax.set_xticklabels(list(diff.index), rotation=90, fontsize=6)
            ax.set_xlabel(f"queries, sorted by {system} − {reference}")
        else:
            ax.set_xticks([])
            ax.set_xlabel(f"{n} queries, sorted by {system} − {reference}")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]   # drop the XML declaration and DOCTYPE: inline in HTML
    # element ids (figure_1, patch_1, ...) are unique within one SVG only: prefix them, and the
    # references to them, so that several plots inline in one page keep unique ids
    svg = re.sub(r'(\sid=")([^"]+)"', lambda m: f'{m.group(1)}{salt}-{m.group(2)}"', svg)
    svg = re.sub(r'(href=")#([^"]+)"', lambda m: f'{m.group(1)}#{salt}-{m.group(2)}"', svg)
    return re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{salt}-{m.group(1)})", svg)


# ------------------------------------------------------------------------------------------ HTML

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1100px;color:#222;
padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.3em;margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1.1em}
table{border-collapse:collapse;margin:.5em 0}th,td{padding:.25em .7em;text-align:right;
border-bottom:1px solid #e4e4e4}th:first-child,td:first-child{text-align:left}thead th{border-bottom:2px solid #444}
td.best{font-weight:bold}.legend{font-size:.9em;color:#444}.sig{color:#b00}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{font-size:.9em;color:#444}
table.kv td{text-align:left;vertical-align:top}code{font-size:.9em}details{margin:.5em 0}
"""


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _results_html(outcome, d, alpha: float) -> str:
    table = d.table.reset_index(drop=True)
    ref = outcome.baseline
    shown = {m: [_fmt(v) for v in table[m]] for m in outcome.measures}
    best = {m: _best(shown[m]) for m in outcome.measures}
    sig = {m: significance(table, m, alpha) for m in outcome.measures}
    out = ["<table class='results'><thead><tr><th>system</th>",
           *[f"<th>{_e(m)}</th>" for m in outcome.measures], "</tr></thead><tbody>"]
    for i, name in enumerate(table["name"]):
        label = f"{_e(name)} <span class='legend'>(baseline)</span>" if name == ref else _e(name)
        out.append(f"<tr><td>{label}</td>")
        for m in outcome.measures:
            v = shown[m][i]
            cls = " class='best'" if i in best[m] else ""
            title = ""
            if ref is not None and name != ref and f"{m} p-value" in table.columns:
                parts = [f"p = {_fmt(table.at[i, f'{m} p-value'])}"]
                if f"{m} p-value corrected" in table.columns:
                    parts.append(f"corrected p = {_fmt(table.at[i, f'{m} p-value corrected'])}")
                if f"{m} +" in table.columns:
                    parts.append(f"{table.at[i, f'{m} +']} queries better, {table.at[i, f'{m} -']} worse")
                title = f" title='{_e('; '.join(parts))}'"
            mark = "<span class='sig'>†</span>" if bool(sig[m].iloc[i]) else ""
            out.append(f"<td{cls}{title}>{'–' if v is None else v}{mark}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    out.append("<details><summary>All columns</summary>"
               + table.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0) + "</details>")
    return "".join(out)


def _value_html(v: Any, depth: int = 0) -> str:
    if isinstance(v, Mapping):
        if not v:
            return "<em>none</em>"
        if depth >= 3:
            return f"<code>{_e(json.dumps(v, default=str, sort_keys=True))}</code>"
        rows = "".join(f"<tr><td><code>{_e(k)}</code></td><td>{_value_html(x, depth + 1)}</td></tr>"
                       for k, x in v.items())
        return f"<table class='kv'>{rows}</table>"
    if isinstance(v, (list, tuple)):
        if not v:
            return "<em>none</em>"
        if all(not isinstance(x, (Mapping, list, tuple)) for x in v):
            return ", ".join(_value_html(x, depth + 1) for x in v)
        if depth >= 2:
            return f"<code>{_e(json.dumps(v, default=str))}</code>"
        return "<ol>" + "".join(f"<li>{_value_html(x, depth + 1)}</li>" for x in v) + "</ol>"
    if v is None:
        return "<em>none</em>"
    return f"<code>{_e(v)}</code>"


def _manifest_html(manifest: Mapping[str, Any]) -> str:
    rows = []
    for k, v in manifest.items():
        inner = _value_html(v, 1)
        if isinstance(v, (Mapping, list, tuple)) and len(json.dumps(v, default=str)) > 2000:
            inner = f"<details><summary>{len(v)} entries</summary>{inner}</details>"   # long: folded
        rows.append(f"<tr><td><b>{_e(k)}</b></td><td>{inner}</td></tr>")
    return f"<table class='kv manifest'>{''.join(rows)}</table>"


def _usage(outcome) -> List[Tuple[str, pd.DataFrame]]:
    from pyterrier_sci.llm import usage_report
    found = []
    for d in outcome.datasets:
        rep = usage_report([d.systems[p] for p in outcome.pipelines], names=outcome.pipelines)
        if len(rep):
            found.append((d.dataset, rep))
    return found


def render_html(outcome, perq: pd.DataFrame, manifest: Optional[Mapping[str, Any]] = None,
                alpha: float = 0.05) -> str:
    """The self-contained HTML page (no script, no external resource)."""
    from pyterrier_sci import __version__
    ref = _reference(outcome)
    test_s, corr_s = _legend(outcome, alpha)
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             f"<title>Experiment {_e(outcome.name)}</title><style>{_CSS}</style></head><body>",
             f"<h1>Experiment <code>{_e(outcome.name)}</code></h1>"]
    where = getattr(outcome.config, "path", None)
    facts = [("config", where), ("pipelines", ", ".join(outcome.pipelines)), ("measures", ", ".join(outcome.measures)),
             ("baseline", outcome.baseline or "none"), ("datasets", ", ".join(d.dataset for d in outcome.datasets))]
    parts.append("<table class='kv'>" + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in facts
                                                 if v is not None) + "</table>")
    parts.append("<h2 id='results'>Results</h2>")
    if outcome.baseline is not None:
        parts.append(f"<p class='legend'><span class='sig'>†</span> the difference to the baseline "
                     f"<b>{_e(outcome.baseline)}</b> is significant: {_e(test_s)} over the queries that count for "
                     f"both systems, {_e(corr_s)}, p &lt; {alpha:g}. <b>Bold</b>: best value in the column. "
                     "Hover a value for its p-values and wins/losses.</p>")
    else:
        parts.append("<p class='legend'>No baseline was named, so no significance tests. <b>Bold</b>: best value "
                     "in the column.</p>")
    for d in outcome.datasets:
        parts.append(f"<h3>{_e(d.dataset)} <span class='legend'>({d.topics['qid'].nunique()} queries)</span></h3>")
        parts.append(_results_html(outcome, d, alpha))

    parts.append("<h2 id='perquery'>Per-query differences</h2>")
    others = [p for p in outcome.pipelines if p != ref]
    if not others:
        parts.append("<p>Only one pipeline: nothing to compare.</p>")
    else:
        parts.append(f"<p class='legend'>Each bar is one query: the system's value minus {_e(ref)}'s"
                     f"{'' if outcome.baseline is not None else ' (no baseline was named: the first pipeline)'}, "
                     f"sorted; <span style='color:{BETTER}'>■</span> system better, "
                     f"<span style='color:{WORSE}'>■</span> worse. Queries that do not count for both systems are "
                     "left out. The values are in perquery.csv.</p>")
    k = 0
    for d in outcome.datasets:
        for m in outcome.measures:
            for s in others:
                diff = _differences(perq, d.dataset, m, s, ref)
                svg = difference_plot_svg(diff, m, s, ref, salt=f"plot{k}")
                k += 1
                better, worse = int((diff > 0).sum()), int((diff < 0).sum())
                parts.append(f"<figure class='diff-plot' data-dataset='{_e(d.dataset)}' data-measure='{_e(m)}' "
                             f"data-system='{_e(s)}'>{svg}<figcaption>{_e(m)} on {_e(d.dataset)}: {_e(s)} − "
                             f"{_e(ref)} per query ({len(diff)} queries: {better} better, {worse} worse, "
                             f"{len(diff) - better - worse} equal)</figcaption></figure>")

    usage = _usage(outcome)
    if usage:
        parts.append("<h2 id='llm'>LLM usage and cost</h2><p class='legend'>Calls this invocation made (runs read "
                     "back from save_dir make none); cost from the components' price tables, empty without one."
                     "</p>")
        for dataset, rep in usage:
            parts.append(f"<h3>{_e(dataset)}</h3>" + rep.to_html(index=False, na_rep="", border=0,
                                                                 float_format=lambda v: f"{v:.4g}"))
    if manifest:
        parts.append("<h2 id='manifest'>Manifest</h2>" + _manifest_html(manifest))
    parts.append(f"<p class='legend'>Written by pyterrier-sci {_e(__version__)}: report.html, results.tex "
                 "(booktabs), perquery.csv.</p></body></html>\n")
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------- LaTeX

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_RE = re.compile("|".join(re.escape(c) for c in _LATEX_SPECIAL))


def latex_escape(s: Any) -> str:
    """``s`` as LaTeX text: the characters special to LaTeX (``\\ & % $ # _ { } ~ ^``) escaped."""
    return _LATEX_RE.sub(lambda m: _LATEX_SPECIAL[m.group()], str(s))


def render_latex(outcome, alpha: float = 0.05) -> str:
    """A booktabs table (``\\usepackage{booktabs}``) for ``\\input``: systems as rows, measures as
    columns in the order asked for, the best value per column (per dataset) in bold, a dagger where
    the difference to the baseline is significant after the chosen correction (p < alpha)."""
    measures = outcome.measures
    ncols = 1 + len(measures)
    test_s, corr_s = _legend(outcome, alpha)
    caption = f"Experiment {latex_escape(outcome.name)}"
    if len(outcome.datasets) == 1:
        caption += f" on {latex_escape(outcome.datasets[0].dataset)}"
    caption += ". Bold: best value per column"
    caption += " and dataset." if len(outcome.datasets) > 1 else "."
    if outcome.baseline is not None:
        caption += (f" $^\\dagger$: significant difference to {latex_escape(outcome.baseline)} "
                    f"({latex_escape(test_s)}, {latex_escape(corr_s)}, $p < {alpha:g}$).")
    lines = [f"% written by pyterrier-sci experiment --report (experiment {latex_escape(outcome.name)});",
             "% needs \\usepackage{booktabs}",
             "\\begin{table}[t]", "\\centering",
             f"\\begin{{tabular}}{{l{'r' * len(measures)}}}", "\\toprule",
             "System & " + " & ".join(latex_escape(m) for m in measures) + " \\\\"]
    for j, d in enumerate(outcome.datasets):
        lines.append("\\midrule")
        if len(outcome.datasets) > 1:
            lines.append(f"\\multicolumn{{{ncols}}}{{l}}{{\\emph{{{latex_escape(d.dataset)}}}}} \\\\")
        table = d.table.reset_index(drop=True)
        shown = {m: [_fmt(v) for v in table[m]] for m in measures}
        best = {m: _best(shown[m]) for m in measures}
        sig = {m: significance(table, m, alpha) for m in measures}
        for i, name in enumerate(table["name"]):
            cells = [latex_escape(name)]
            for m in measures:
                v = shown[m][i]
                cell = "--" if v is None else (f"\\textbf{{{v}}}" if i in best[m] else v)
                if bool(sig[m].iloc[i]):
                    cell += "$^\\dagger$"
                cells.append(cell)
            lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", f"\\caption{{{caption}}}",
              f"\\label{{tab:{re.sub(r'[^A-Za-z0-9]+', '-', outcome.name)}}}", "\\end{table}", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------- files

def check_target(directory) -> Path:
    """``directory`` when a report can be written there: it is (or can be created as) a directory and
    matplotlib (the ``report`` extra) is installed; otherwise one
    :class:`~pyterrier_sci.registry.PipelineError` naming ``--report``.  Creates nothing."""
    from pyterrier_sci import artifacts
    from pyterrier_sci.registry import PipelineError
    directory = artifacts.check_directory(directory, "--report")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PipelineError("the report's plots need matplotlib: pip install 'pyterrier-sci[report]'",
                            where="--report") from None
    return directory


def write_report(outcome, directory, manifest: Optional[Mapping[str, Any]] = None,
                 alpha: float = 0.05) -> Dict[str, Path]:
    """Writes ``report.html``, ``results.tex`` and ``perquery.csv`` for ``outcome`` into
    ``directory`` (created when missing; other files in it are left alone) and returns their paths.

    Everything is rendered before the first file is written, each file is written atomically, and
    the three are written under a lock, so an interrupted or concurrent report leaves no half-written
    file.  ``manifest`` defaults to :func:`find_manifest`."""
    from pyterrier_sci import artifacts
    directory = check_target(directory)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if manifest is None:
        manifest = find_manifest(outcome)
    perq = perquery_frame(outcome)
    texts = {"report.html": render_html(outcome, perq, manifest, alpha),
             "results.tex": render_latex(outcome, alpha),
             "perquery.csv": perq.to_csv(index=False)}
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    with artifacts.lock(directory / "report", what=f"the report in {directory}"):
        for name, text in texts.items():
            written[name] = artifacts.atomic_write_text(directory / name, text, what="--report")
    return written

