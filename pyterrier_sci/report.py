"""Experiment reports (``pyterrier-sci experiment FILE --report DIR``): from an
:class:`~pyterrier_sci.experiment.ExperimentOutcome`, a self-contained ``report.html`` laid out like a
paper's results section (results tables with p-values and wins/losses as visible text, the measures
defined, per-query difference plots as small multiples in inline SVG, LLM usage, a manifest summary
with the full manifest folded; prints cleanly), a booktabs LaTeX table ``results.tex`` and the true
per-query values ``perquery.csv``.  Names (systems, experiments, datasets, measures) are text
everywhere: one line in LaTeX and in the plots, never LaTeX or matplotlib math.  See
``docs/evaluation.md``, "Reports".
"""
from __future__ import annotations

import html
import io
import json
import math
import re
import unicodedata
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from pyterrier_sci import __version__, artifacts, cost
from pyterrier_sci import measures as _measures
from pyterrier_sci.evaluation import Experiment
from pyterrier_sci.llm import usage_report
from pyterrier_sci.registry import PipelineError

__all__ = ["write_report", "check_target", "render_html", "render_latex", "perquery_frame", "significance",
           "find_manifest", "latex_escape", "one_line_text", "REPORT_FILES"]

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


# ----------------------------------------------------------------------------------------- text

# bidirectional embeddings, overrides, isolates and marks: they reorder what a reader sees
_BIDI = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def one_line_text(s: Any) -> str:
    """``s`` as one line of plain text, as every name (system, experiment, dataset, measure) enters
    the report: line breaks, tabs and other control characters become spaces, runs of spaces one
    space, leading and trailing spaces go; bidirectional overrides are removed."""
    s = _BIDI.sub("", str(s))
    s = "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in s)
    return " ".join(s.split())


def _short(s: Any, limit: int) -> str:
    s = one_line_text(s)
    return s if len(s) <= limit else s[:limit - 1] + "\u2026"


def _fmt(v: Any, digits: int = 4) -> Optional[str]:
    """The report's one number format: ``digits`` decimals (as the table the CLI prints); None for NaN
    and what is not a number."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f"{f:.{digits}f}"


def _fmt_p(v: Any) -> str:
    """A p-value in the report's format: 4 decimals, ``<0.0001`` below that, ``–`` when there is none."""
    s = _fmt(v)
    if s is None:
        return "–"
    return "<0.0001" if float(v) < 0.00005 else s


def _count(v: Any) -> Optional[int]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


def _best(values: Sequence[Optional[str]], lower: bool = False) -> set:
    """Indices of the highest shown value, the lowest with ``lower`` (a cost; ties after rounding are all
    best)."""
    nums = [float(v) for v in values if v is not None]
    if not nums:
        return set()
    top = min(nums) if lower else max(nums)
    return {i for i, v in enumerate(values) if v is not None and float(v) == top}


def _is_cost(name: str) -> bool:
    """Whether ``name`` is a cost measure (:mod:`pyterrier_sci.cost`): lower is better."""
    return name in cost.NAMES


def _legend(outcome, alpha: float) -> Tuple[str, str]:
    """(test description, correction description) in plain words."""
    test = outcome.test
    test_s = _TESTS.get(test, getattr(test, "__name__", str(test))) if test is not None else ""
    corr = outcome.correction
    corr_s = f"{_CORRECTIONS.get(corr, corr)} correction over the {len(outcome.pipelines) - 1} comparisons per " \
             f"measure" if corr else "no multiple-testing correction"
    return one_line_text(test_s), one_line_text(corr_s)


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


def _first_sentences(doc: Optional[str], limit: int = 260) -> str:
    """The opening of a docstring's first paragraph: its first sentence, the second too when both fit
    in ``limit`` characters."""
    text = one_line_text((doc or "").strip().split("\n\n")[0])
    found = re.findall(r".+?[.!?](?=\s+[A-Z]|$)", text)
    if not found:
        return text[:limit]
    out = found[0]
    if len(found) > 1 and len(out) + len(found[1]) <= limit:
        out += found[1]
    return out.strip()[:limit]


def _measure_definition(name: str, dataset: str) -> Tuple[str, str]:
    """(what the measure is, how the table averages it) for ``name`` on ``dataset``: the toolkit's
    registry description (``pyterrier_sci.measures``), else ir_measures' own documentation."""
    try:
        obj = _measures.get(name, dataset=dataset)
    except Exception:  # noqa: BLE001 - a measure the table already computed; a definition is a courtesy
        return "", "the mean over the queries"
    desc = getattr(obj, "description", None) or ""
    if not desc:
        doc = _first_sentences(type(obj).__doc__)
        params = getattr(obj, "params", None) or {}
        info = getattr(obj, "SUPPORTED_PARAMS", None) or {}
        shown = ", ".join(f"{getattr(info.get(k), 'desc', None) or k}: {v}" for k, v in params.items()
                          if v is not None) if isinstance(params, Mapping) and isinstance(info, Mapping) else ""
        desc = f"{doc} Parameters: {shown}." if doc and shown else doc
        if not desc or desc.startswith("Measure"):
            desc = f"ir_measures' {obj}"
    if cost.is_cost_measure(obj):
        how = "the mean over the queries (a query whose cost is not known is left out)"
    elif getattr(obj, "group_of", None) is not None:
        how = ("a mean of fold means: each test fold's mean over its queries, then the mean over the folds (the "
               "paper's evaluation script; folds of unequal size weigh the same). Per-query values, plots and tests "
               "use each query's own value")
    elif callable(getattr(obj, "aggregate", None)):
        how = "the mean over the queries that count (queries the paper leaves out do not)"
    else:
        how = "the mean over the queries"
    return one_line_text(desc), how


# ----------------------------------------------------------------------------------------- plots

def difference_plot_svg(diff: pd.Series, measure: str, system: str, reference: str, salt: str,
                        limit: Optional[float] = None) -> str:
    """One small multiple of the usual IR paper figure as an inline ``<svg>`` element: one bar per
    query, system minus reference, sorted; bars above zero in :data:`BETTER`, below in :data:`WORSE`;
    ``limit`` (the largest absolute difference of the plots it sits beside) fixes the y range so
    plots side by side share a scale.  Every label is plain text (``$`` is no math).  ``salt``
    (unique per plot of a page) prefixes the SVG's element ids."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: the process's backend is left alone

    values = diff.to_numpy(dtype=float)
    n = len(values)
    rc = {"svg.fonttype": "none", "svg.hashsalt": salt, "font.size": 8, "text.usetex": False,
          "text.parse_math": False, "axes.titlesize": 8.5, "axes.labelsize": 8, "ytick.labelsize": 7.5}
    with matplotlib.rc_context(rc):
        fig = Figure(figsize=(3.4, 1.9), dpi=100)
        ax = fig.add_subplot(1, 1, 1)
        x = np.arange(n)
        colours = [BETTER if v > 0 else WORSE for v in values]
        if n:
            ax.bar(x, values, width=0.8, color=colours, linewidth=0)
        ax.axhline(0.0, color="#444444", linewidth=0.8)
        top = limit if limit is not None and limit > 0 else (float(np.max(np.abs(values))) if n else 0.0)
        lim = max(top, 1e-3) * 1.1
        ax.set_ylim(-lim, lim)
        ax.set_xlim(-0.6, max(n, 1) - 0.4)
        ax.set_ylabel(f"Δ {_short(measure, 24)}", parse_math=False)
        ax.set_title(f"{_short(system, 26)} − {_short(reference, 18)}", parse_math=False, loc="left")
        ax.set_xticks([])
        ax.set_xlabel(f"{n} queries, sorted", parse_math=False)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        fig.tight_layout(pad=0.4)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]   # drop the XML declaration and DOCTYPE: inline in HTML
    # element ids (figure_1, patch_1, ...) are unique within one SVG only: prefix them, and the
    # references to them, so that several plots inline in one page keep unique ids
    svg = re.sub(r'(\sid=")([^"]+)"', lambda m: f'{m.group(1)}{salt}-{m.group(2)}"', svg)
    svg = re.sub(r'(href=")#([^"]+)"', lambda m: f'{m.group(1)}#{salt}-{m.group(2)}"', svg)
    return re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{salt}-{m.group(1)})", svg)


def pareto_front(points: Sequence[Tuple[str, float, float]]) -> List[str]:
    """The systems of ``points`` (``(system, cost, effectiveness)``) that no other system beats: none is at
    most as costly and at least as effective and better in one of the two; ordered by cost."""
    front = []
    for name, x, y in points:
        if not any((x2 <= x and y2 >= y) and (x2 < x or y2 > y) for _, x2, y2 in points):
            front.append((x, -y, name))
    return [name for _, _, name in sorted(front)]


def cost_plot_svg(points: Sequence[Tuple[str, float, float]], cost_name: str, measure: str, salt: str,
                  reference: Optional[str] = None) -> str:
    """One effectiveness-against-cost plot as an inline ``<svg>``: a point per system (``points``:
    ``(system, mean cost, mean effectiveness)``), labelled with its name, ``reference`` drawn hollow; the
    systems no other beats on both (:func:`pareto_front`) joined by a dashed line.  Labels are plain text."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: the process's backend is left alone

    rc = {"svg.fonttype": "none", "svg.hashsalt": salt, "font.size": 8, "text.usetex": False,
          "text.parse_math": False, "axes.titlesize": 8.5, "axes.labelsize": 8, "xtick.labelsize": 7.5,
          "ytick.labelsize": 7.5}
    with matplotlib.rc_context(rc):
        fig = Figure(figsize=(3.4, 2.4), dpi=100)
        ax = fig.add_subplot(1, 1, 1)
        front = pareto_front(points)
        if len(front) > 1:
            where = {name: (x, y) for name, x, y in points}
            ax.plot([where[n][0] for n in front], [where[n][1] for n in front], linestyle="--", linewidth=0.8,
                    color="#888888", zorder=1)
        for name, x, y in points:
            hollow = name == reference
            ax.scatter([x], [y], s=22, zorder=2, facecolors="none" if hollow else BETTER, edgecolors=BETTER,
                       linewidths=1.2)
            ax.annotate(_short(name, 22), (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7,
                        annotation_clip=False, parse_math=False)
        xs = [x for _, x, _ in points]
        ys = [y for _, _, y in points]
        if xs:
            span = (max(xs) - min(xs)) or max(abs(max(xs)), 1e-3)
            ax.set_xlim(min(xs) - 0.08 * span, max(xs) + 0.35 * span)
            yspan = (max(ys) - min(ys)) or max(abs(max(ys)), 1e-3)
            ax.set_ylim(min(ys) - 0.15 * yspan, max(ys) + 0.2 * yspan)
        ax.set_xlabel(f"{_short(cost_name, 30)} (mean per query)", parse_math=False)
        ax.set_ylabel(_short(measure, 24), parse_math=False)
        ax.set_title(f"{_short(measure, 24)} against {_short(cost_name, 24)}", parse_math=False, loc="left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        fig.tight_layout(pad=0.4)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r'(\sid=")([^"]+)"', lambda m: f'{m.group(1)}{salt}-{m.group(2)}"', svg)
    svg = re.sub(r'(href=")#([^"]+)"', lambda m: f'{m.group(1)}#{salt}-{m.group(2)}"', svg)
    return re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{salt}-{m.group(1)})", svg)


# ------------------------------------------------------------------------------------------ HTML

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1100px;color:#222;
padding:0 1em;line-height:1.4}
h1{font-size:1.6em}h2{font-size:1.3em;margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1.1em}
table{border-collapse:collapse;margin:.5em 0;max-width:100%}th,td{padding:.25em .7em;text-align:right;
border-bottom:1px solid #e4e4e4;vertical-align:top}th:first-child,td:first-child{text-align:left}
thead th{border-bottom:2px solid #444}caption{caption-side:top;text-align:left;font-size:.9em;color:#333;
padding:.3em 0}
table.results td{font-variant-numeric:tabular-nums}td.best .v{font-weight:bold}.legend{font-size:.9em;color:#444}
.sig{color:#b00}.stat{display:block;font-size:.75em;color:#555;white-space:nowrap}
.multiples{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:.2em 1em;margin:.3em 0}
figure{margin:0}figure.diff-plot svg{width:100%;height:auto;display:block}
figcaption{font-size:.85em;color:#444}figure.group{margin:1em 0}figure.group>figcaption{margin-top:.3em}
dl.glossary dt{font-weight:bold;margin-top:.4em}dl.glossary dd{margin-left:1.5em}
table.kv{width:100%}table.kv td{text-align:left}table.kv td:first-child{width:11em;white-space:nowrap}
table.kv table.kv td:first-child{width:auto}code{font-size:.9em;overflow-wrap:anywhere;word-break:break-word}
details{margin:.5em 0}.print-only{display:none}
@media print{
@page{margin:1.5cm}
body{max-width:none;margin:0;padding:0;font-size:10pt}
h2{break-after:avoid;margin-top:1.2em}h3{break-after:avoid}
table.results,figure.diff-plot,dl.glossary dd,caption{break-inside:avoid}
pre.manifest-json{font-size:6.5pt;white-space:pre-wrap;overflow-wrap:anywhere;column-count:2;column-gap:1.5em}
.screen-only{display:none!important}.print-only{display:block!important}
td,th{overflow-wrap:anywhere}
}
"""

# C0/C1 controls other than tab, line feed and carriage return have no place in an HTML document
_HTML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _e(s: Any) -> str:
    """``s`` as HTML text: control characters shown as U+FFFD, Unicode line and paragraph separators
    as line breaks, bidirectional overrides removed."""
    s = _BIDI.sub("", str(s)).replace("\u2028", "\n").replace("\u2029", "\n")
    return html.escape(_HTML_BAD.sub("\ufffd", s), quote=True)


def _n(s: Any) -> str:
    """A name as HTML text: one line (:func:`one_line_text`), escaped."""
    return html.escape(one_line_text(s), quote=True)


def _stat_html(table: pd.DataFrame, i: int, m: str) -> str:
    """The visible second line of a cell: the p-value, the corrected one, wins and losses."""
    bits = []
    if f"{m} p-value" in table.columns:
        bits.append(f"p {_fmt_p(table.at[i, f'{m} p-value'])}")
        if f"{m} p-value corrected" in table.columns:
            bits[-1] += f" (adj. {_fmt_p(table.at[i, f'{m} p-value corrected'])})"
    if f"{m} +" in table.columns and f"{m} -" in table.columns:
        up, down = _count(table.at[i, f"{m} +"]), _count(table.at[i, f"{m} -"])
        if up is not None and down is not None:
            bits.append(f"+{up}/\u2212{down}")
    return f"<span class='stat'>{' · '.join(bits)}</span>" if bits else ""


def _results_html(outcome, d, alpha: float, number: int) -> str:
    table = d.table.reset_index(drop=True)
    ref = outcome.baseline
    shown = {m: [_fmt(v) for v in table[m]] for m in outcome.measures}
    best = {m: _best(shown[m], lower=_is_cost(m)) for m in outcome.measures}
    sig = {m: significance(table, m, alpha) for m in outcome.measures}
    nq = d.topics["qid"].nunique()
    caption = (f"<b>Table {number}.</b> {_n(', '.join(outcome.measures))} on {_n(d.dataset)} ({nq} queries)")
    out = [f"<table class='results'><caption>{caption}</caption><thead><tr><th>System</th>",
           *[f"<th>{_n(m)}</th>" for m in outcome.measures], "</tr></thead><tbody>"]
    for i, name in enumerate(table["name"]):
        label = f"{_n(name)} <span class='legend'>(baseline)</span>" if name == ref else _n(name)
        out.append(f"<tr><td>{label}</td>")
        for m in outcome.measures:
            v = shown[m][i]
            cls = " class='best'" if i in best[m] else ""
            mark = "<span class='sig'>†</span>" if bool(sig[m].iloc[i]) else ""
            stat = _stat_html(table, i, m) if ref is not None and name != ref else ""
            out.append(f"<td{cls}><span class='v'>{'–' if v is None else v}</span>{mark}{stat}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    full = table.copy()
    full["name"] = [one_line_text(x) for x in full["name"]]
    out.append("<details class='screen-only'><summary>All columns of the table</summary>"
               + full.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4f}", border=0) + "</details>")
    return "".join(out)


def _glossary_html(outcome) -> str:
    """A definition of each measure of the tables (per dataset where the definitions differ)."""
    items = []
    for m in outcome.measures:
        found: Dict[Tuple[str, str], List[str]] = {}
        for d in outcome.datasets:
            found.setdefault(_measure_definition(m, d.dataset), []).append(d.dataset)
        dds = []
        for (desc, how), datasets in found.items():
            where = f"On {_n(', '.join(datasets))}: " if len(found) > 1 else ""
            text = (f"{_e(desc)} " if desc.endswith((".", "!", "?")) else f"{_e(desc)}. ") if desc else ""
            dds.append(f"<dd>{where}{text}Each figure of the table is {_e(how)}.</dd>")
        items.append(f"<dt>{_n(m)}</dt>{''.join(dds)}")
    return f"<dl class='glossary'>{''.join(items)}</dl>"


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
    rows = "".join(f"<tr><td><b>{_e(k)}</b></td><td>{_value_html(v, 1)}</td></tr>" for k, v in manifest.items())
    return f"<table class='kv manifest'>{rows}</table>"


def _hash(h: Any) -> str:
    s = str(h)
    if re.fullmatch(r"[0-9a-f]{16,}", s):     # a digest: its first 12 digits (all of it in the title)
        return f"<code title='{_e(s)}'>{_e(s[:12])}…</code>"
    return f"<code>{_e(s)}</code>"


def _listing(items: List[str], limit: int = 8) -> str:
    if len(items) > limit:
        items = items[:limit] + [f"and {len(items) - limit} more (full manifest below)"]
    return "<br>".join(items)


def _manifest_summary(manifest: Mapping[str, Any]) -> str:
    """The key facts of a manifest (whatever of them it holds): when and from which checkout, the
    environment and library versions, models and their hashes, data files and their hashes, seeds,
    saved runs.  Anything of an unexpected shape is left to the full manifest."""
    def get(obj: Any, *keys: str) -> Any:
        for k in keys:
            obj = obj.get(k) if isinstance(obj, Mapping) else None
        return obj

    rows: List[Tuple[str, str]] = []
    if get(manifest, "unreadable manifest"):
        rows.append(("unreadable manifest", f"<code>{_e(manifest['unreadable manifest'])}</code>"))
    created, kind = get(manifest, "created"), get(manifest, "kind")
    if created or kind:
        rows.append(("recorded", _e(" ".join(str(x) for x in (kind, created) if x))))
    git = get(manifest, "environment", "git")
    if isinstance(git, Mapping) and git.get("commit"):
        rows.append(("git commit", f"<code>{_e(git['commit'])}</code>"
                     + (" (with uncommitted changes)" if git.get("dirty") else "")))
    env = [f"{_e(get(manifest, 'environment', k))}" for k in ("python", "os", "cpu")
           if isinstance(get(manifest, "environment", k), (str, int, float))]
    if env:
        rows.append(("environment", "; ".join(env)))
    versions = get(manifest, "environment", "versions")
    if isinstance(versions, Mapping) and versions:
        rows.append(("library versions", ", ".join(f"{_e(k)}&nbsp;<code>{_e(v)}</code>" for k, v in versions.items()
                                                    if v is not None) or "<em>none found</em>"))
    models = get(manifest, "models")
    if isinstance(models, Mapping):
        shown = []
        for ident, entry in models.items():
            if isinstance(entry, Mapping):
                what = _hash(entry["sha256"]) if entry.get("sha256") else \
                    _e(one_line_text(entry.get("note") or "no hash"))
                shown.append(f"<code>{_e(ident)}</code> ({_e(entry.get('kind') or 'model')}): {what}")
            else:
                shown.append(f"<code>{_e(ident)}</code>")
        rows.append((f"models ({len(models)})", _listing(shown) or "<em>none</em>"))
    data = get(manifest, "data")
    if isinstance(data, Mapping):
        rows.append((f"data files ({len(data)})",
                     _listing([f"<code>{_e(p)}</code>: {_hash(h)}" for p, h in data.items()]) or "<em>none</em>"))
    seeds = get(manifest, "seeds")
    if isinstance(seeds, Mapping):
        rows.append(("seeds", ", ".join(f"<code>{_e(k)}</code> = {_e(v)}" for k, v in seeds.items())
                     or "<em>none</em>"))
    runs = get(manifest, "runs")
    if isinstance(runs, Mapping) and runs:
        n = sum(len(v) for v in runs.values() if isinstance(v, Mapping))
        rows.append(("saved runs", f"{n} run files with their SHA-256 (full manifest below)"))
    templates = get(manifest, "templates")
    if isinstance(templates, Mapping) and templates:
        rows.append(("prompt templates", f"{len(templates)} with their SHA-256"))
    if not rows:
        return "<p class='legend'>The manifest holds none of the usual entries; it is shown in full below.</p>"
    return "<table class='kv manifest-summary'>" + "".join(f"<tr><td>{_e(k)}</td><td>{v}</td></tr>" for k, v in rows) \
        + "</table>"


def _usage(outcome) -> List[Tuple[str, pd.DataFrame]]:
    found = []
    for d in outcome.datasets:
        rep = usage_report([d.systems[p] for p in outcome.pipelines], names=outcome.pipelines)
        if len(rep):
            found.append((d.dataset, rep))
    return found


def _plots_html(outcome, perq: pd.DataFrame, ref: str, first_figure: int) -> List[str]:
    """Per dataset one figure of small multiples: a row of plots per measure, one plot per system."""
    others = [p for p in outcome.pipelines if p != ref]
    parts, k = [], 0
    for j, d in enumerate(outcome.datasets):
        rows = []
        for m in [m for m in outcome.measures if not _is_cost(m)]:   # costs: the cost plots
            panels = []
            diffs = {s: _differences(perq, d.dataset, m, s, ref) for s in others}
            limit = max([float(x.abs().max()) for x in diffs.values() if len(x)] or [0.0])
            for s in others:
                diff = diffs[s]
                try:
                    svg = difference_plot_svg(diff, m, s, ref, salt=f"plot{k}", limit=limit)
                except Exception as e:  # noqa: BLE001 - one error that names the plot, the system and --report
                    raise PipelineError(f"the per-query plot of system {one_line_text(s)!r} ({one_line_text(m)} on "
                                        f"{one_line_text(d.dataset)}) cannot be drawn: {type(e).__name__}: {e}",
                                        where="--report") from e
                k += 1
                better, worse = int((diff > 0).sum()), int((diff < 0).sum())
                panels.append(f"<figure class='diff-plot' data-dataset='{_e(d.dataset)}' data-measure='{_e(m)}' "
                              f"data-system='{_e(s)}'>{svg}<figcaption>{better} better, {worse} worse, "
                              f"{len(diff) - better - worse} equal</figcaption></figure>")
            rows.append(f"<div class='multiples'>{''.join(panels)}</div>")
        parts.append(f"<h3>{_n(d.dataset)}</h3><figure class='group'>{''.join(rows)}<figcaption><b>Figure "
                     f"{first_figure + j}.</b> "
                     f"Per-query differences on {_n(d.dataset)}: one row of plots per measure "
                     f"({_n(', '.join(m for m in outcome.measures if not _is_cost(m)))}), one plot per system, the "
                     "same y scale along a row."
                     "</figcaption></figure>")
    return parts


def _cost_points(d, pipelines: Sequence[str], cost_name: str, measure: str) -> List[Tuple[str, float, float]]:
    """``(system, mean cost, mean effectiveness)`` from a dataset's table, systems without both left out."""
    table = d.table.set_index("name")
    out = []
    for p in pipelines:
        x, y = _fmt(table.at[p, cost_name]), _fmt(table.at[p, measure])
        if x is not None and y is not None:
            out.append((p, float(table.at[p, cost_name]), float(table.at[p, measure])))
    return out


def _cost_plots_html(outcome, first_figure: int) -> List[str]:
    """Per dataset one figure: a row per cost measure asked for, one plot per effectiveness measure, a point
    per system."""
    costs = [m for m in outcome.measures if _is_cost(m)]
    effect = [m for m in outcome.measures if not _is_cost(m)]
    parts, k = [], 0
    for j, d in enumerate(outcome.datasets):
        rows = []
        for c in costs:
            panels = []
            for m in effect:
                points = _cost_points(d, outcome.pipelines, c, m)
                if not points:
                    panels.append(f"<figure class='cost-plot' data-dataset='{_e(d.dataset)}' data-cost='{_e(c)}' "
                                  f"data-measure='{_e(m)}'><figcaption>{_n(m)} against {_n(c)}: no system has both "
                                  "figures</figcaption></figure>")
                    continue
                try:
                    svg = cost_plot_svg(points, c, m, salt=f"cost{j}-{k}", reference=outcome.baseline)
                except Exception as e:  # noqa: BLE001 - one error that names the plot and --report
                    raise PipelineError(f"the plot of {one_line_text(m)} against {one_line_text(c)} on "
                                        f"{one_line_text(d.dataset)} cannot be drawn: {type(e).__name__}: {e}",
                                        where="--report") from e
                k += 1
                front = pareto_front(points)
                panels.append(f"<figure class='cost-plot' data-dataset='{_e(d.dataset)}' data-cost='{_e(c)}' "
                              f"data-measure='{_e(m)}'>{svg}<figcaption>not beaten on both: "
                              f"{_n(', '.join(front))}</figcaption></figure>")
            rows.append(f"<div class='multiples'>{''.join(panels)}</div>")
        parts.append(f"<h3>{_n(d.dataset)}</h3><figure class='group'>{''.join(rows)}<figcaption><b>Figure "
                     f"{first_figure + j}.</b> Effectiveness against cost on {_n(d.dataset)}: one row of plots per "
                     f"cost measure ({_n(', '.join(costs))}), one plot per measure ({_n(', '.join(effect))}), one "
                     "point per system (the table's figures); the dashed line joins the systems that no other "
                     "system beats on both (as cheap or cheaper and as good or better).</figcaption></figure>")
    return parts


def render_html(outcome, perq: pd.DataFrame, manifest: Optional[Mapping[str, Any]] = None,
                alpha: float = 0.05) -> str:
    """The self-contained HTML page (no script, no external resource), laid out like a paper's
    results section and printable (``@media print``: nothing folded away, nothing clipped)."""
    ref = _reference(outcome)
    test_s, corr_s = _legend(outcome, alpha)
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             f"<title>Experiment {_n(outcome.name)}</title><style>{_CSS}</style></head><body>",
             f"<h1>Experiment <code>{_n(outcome.name)}</code></h1>"]
    where = getattr(outcome.config, "path", None)
    facts = [("config", _e(where) if where is not None else None),
             ("pipelines", ", ".join(_n(p) for p in outcome.pipelines)),
             ("measures", ", ".join(_n(m) for m in outcome.measures)),
             ("baseline", _n(outcome.baseline) if outcome.baseline is not None else "none"),
             ("test", _e(f"{test_s}, {corr_s}, alpha = {alpha:g}") if outcome.baseline is not None else None),
             ("datasets", ", ".join(_n(d.dataset) for d in outcome.datasets))]
    parts.append("<table class='kv'>" + "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in facts
                                                 if v is not None) + "</table>")
    parts.append("<h2 id='results'>Results</h2>")
    if outcome.baseline is not None:
        corr_words = " and, in parentheses, after the correction (adj.)" if outcome.correction else ""
        parts.append(f"<p class='legend'>Each cell is the system's figure (see <a href='#measures'>Measures</a>); "
                     f"<b>bold</b>: the best value in the column; <span class='sig'>†</span>: the difference to the "
                     f"baseline <b>{_n(outcome.baseline)}</b> is significant ({_e(test_s)} over the queries that "
                     f"count for both systems, {_e(corr_s)}, p &lt; {alpha:g}). Below each figure: the test's "
                     f"p-value{corr_words}, then +wins/−losses: the number of queries on which the system is better / "
                     "worse than the baseline.</p>")
    else:
        parts.append("<p class='legend'>No baseline was named, so no significance tests. <b>Bold</b>: best value "
                     "in the column.</p>")
    for j, d in enumerate(outcome.datasets, start=1):
        parts.append(_results_html(outcome, d, alpha, j))

    parts.append("<h2 id='measures'>Measures</h2>" + _glossary_html(outcome))

    parts.append("<h2 id='perquery'>Per-query differences</h2>")
    others = [p for p in outcome.pipelines if p != ref]
    effect = [m for m in outcome.measures if not _is_cost(m)]
    if not others:
        parts.append("<p>Only one pipeline: nothing to compare.</p>")
    elif not effect:
        parts.append("<p>Only cost measures: see <a href='#cost'>Effectiveness against cost</a>.</p>")
    else:
        parts.append(f"<p class='legend'>Each bar is one query: the system's value minus {_n(ref)}'s"
                     f"{'' if outcome.baseline is not None else ' (no baseline was named: the first pipeline)'}, "
                     f"sorted; <span style='color:{BETTER}'>■</span> system better, "
                     f"<span style='color:{WORSE}'>■</span> worse. Queries that do not count for both systems are "
                     "left out. Query ids and values are in perquery.csv.</p>")
        parts += _plots_html(outcome, perq, ref, 1)
    if effect and len(effect) < len(outcome.measures):
        parts.append("<h2 id='cost'>Effectiveness against cost</h2><p class='legend'>Each system's mean cost per "
                     "query (docs/evaluation.md, \u201cCost measures\u201d: LLM calls, tokens, seconds, dollars, cache "
                     "hits counted as first answered) against its effectiveness, from the tables above; lower cost and "
                     "higher effectiveness is better."
                     f"{' The hollow point is the baseline.' if outcome.baseline else ''}</p>")
        parts += _cost_plots_html(outcome, 1 + (len(outcome.datasets) if others else 0))

    usage = _usage(outcome)
    if usage:
        parts.append("<h2 id='llm'>LLM usage and cost</h2><p class='legend'>Calls this invocation made (runs read "
                     "back from save_dir make none); cost from the components' price tables, empty without one."
                     "</p>")
        for dataset, rep in usage:
            parts.append(f"<h3>{_n(dataset)}</h3>" + rep.to_html(index=False, na_rep="", border=0,
                                                                 float_format=lambda v: f"{v:.4g}"))
    if manifest:
        full = _manifest_html(manifest)
        parts.append("<h2 id='manifest'>Manifest</h2><p class='legend'>What produced these figures "
                     "(docs/reproducibility.md); <code>pyterrier-sci experiment FILE --replay</code> checks them "
                     "against it.</p>" + _manifest_summary(manifest)
                     + f"<details class='screen-only'><summary>Full manifest</summary>{full}</details>"
                     + "<div class='print-only'><h3>Full manifest</h3><pre class='manifest-json'>"
                     + _e(json.dumps(manifest, indent=1, ensure_ascii=False, default=str)) + "</pre></div>")
    parts.append(f"<p class='legend'>Written by pyterrier-sci {_e(__version__)}: report.html, results.tex "
                 "(booktabs), perquery.csv.</p></body></html>\n")
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------- LaTeX

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}
_LATEX_RE = re.compile("|".join(re.escape(c) for c in _LATEX_SPECIAL))


def latex_escape(s: Any) -> str:
    """``s`` as one line of LaTeX text: line breaks, tabs and other control characters become one
    space (:func:`one_line_text`: a blank line would end a paragraph, a newline a ``%`` comment), and
    the characters special to LaTeX (``\\ & % $ # _ { } ~ ^ < > |``) escaped."""
    return _LATEX_RE.sub(lambda m: _LATEX_SPECIAL[m.group()], one_line_text(s))


def render_latex(outcome, alpha: float = 0.05) -> str:
    """A booktabs table (``\\usepackage{booktabs}``) for ``\\input``: systems as rows, measures as
    columns in the order asked for, the best value per column (per dataset) in bold, a dagger where
    the difference to the baseline is significant after the chosen correction (p < alpha).  Every
    name is one line of escaped text."""
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
    label = re.sub(r"[^A-Za-z0-9]+", "-", one_line_text(outcome.name)).strip("-") or "experiment"
    lines = [f"% written by pyterrier-sci experiment --report (experiment {latex_escape(outcome.name)});",
             "% needs \\usepackage{booktabs}",
             "\\begin{table}[t]", "\\centering",
             f"\\begin{{tabular}}{{l{'r' * len(measures)}}}", "\\toprule",
             "System & " + " & ".join(latex_escape(m) for m in measures) + " \\\\"]
    for d in outcome.datasets:
        lines.append("\\midrule")
        if len(outcome.datasets) > 1:
            lines.append(f"\\multicolumn{{{ncols}}}{{l}}{{\\emph{{{latex_escape(d.dataset)}}}}} \\\\")
        table = d.table.reset_index(drop=True)
        shown = {m: [_fmt(v) for v in table[m]] for m in measures}
        best = {m: _best(shown[m], lower=_is_cost(m)) for m in measures}
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
              f"\\label{{tab:{label}}}", "\\end{table}", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------- files

def check_target(directory) -> Path:
    """``directory`` when a report can be written there: it is (or can be created as) a directory and
    matplotlib (the ``report`` extra) is installed; otherwise one
    :class:`~pyterrier_sci.registry.PipelineError` naming ``--report``.  Creates nothing."""
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
    file.  ``manifest`` defaults to :func:`find_manifest`.  A failure while rendering is one
    :class:`~pyterrier_sci.registry.PipelineError` naming ``--report`` (and the system, for a plot)."""
    directory = check_target(directory)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if manifest is None:
        manifest = find_manifest(outcome)
    try:
        perq = perquery_frame(outcome)
        texts = {"report.html": render_html(outcome, perq, manifest, alpha),
                 "results.tex": render_latex(outcome, alpha),
                 "perquery.csv": perq.to_csv(index=False)}
    except PipelineError:
        raise
    except Exception as e:  # noqa: BLE001 - one error naming --report; the table and manifest are already out
        raise PipelineError(f"the report of experiment {one_line_text(outcome.name)!r} cannot be rendered "
                            f"({type(e).__name__}: {e}); nothing was written", where="--report") from e
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    with artifacts.lock(directory / "report", what=f"the report in {directory}"):
        for name, text in texts.items():
            written[name] = artifacts.atomic_write_text(directory / name, text, what="--report")
    return written

