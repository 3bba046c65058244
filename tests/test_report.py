"""Experiment reports (issue 22, items 5-6): a real small CSFCube experiment (BM25 and two other BM25
settings, three measures, t-test with Holm correction) rendered as report.html (checked in headless
Chromium: the plots are drawn where the page puts them, with the bars the per-query values call
for), results.tex (compiled with pdflatex where it is installed, and checked structurally) and
perquery.csv; the table's columns in a fixed order."""
import html
import io
import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

import pyterrier_sci as ps
from pyterrier_sci import measures as M
from pyterrier_sci import report
from pyterrier_sci.cli import main
from pyterrier_sci.experiment import experiment_outcome

MEASURES = ["NDCG%20", "MAP", "nDCG@10"]
ODD = "Low_b & 50%"          # a system name with LaTeX's special characters
DATASETS = ["irds:sci/csfcube/method", "irds:sci/csfcube/background"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _config(tmp, save_dir):
    cfg = tmp / "exp.yaml"
    cfg.write_text(f"""
dataset: irds:sci/csfcube
pipelines:
  BM25: pool >> bm25
  Tuned: pool >> bm25(k1=1.2, b=0.75)
  "{ODD}": pool >> bm25(k1=0.6, b=0.1)
experiments:
  small:
    datasets: [{", ".join(DATASETS)}]
    pipelines: [BM25, Tuned, "{ODD}"]
    measures: [{", ".join(MEASURES)}]
    baseline: BM25
    test: t
    correction: holm
    save_dir: {save_dir}
""")
    return cfg


@pytest.fixture(scope="module")
def small(csfcube, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    cfg = _config(tmp, tmp / "runs")
    outcome = experiment_outcome(cfg)
    written = report.write_report(outcome, tmp / "out")
    return outcome, written, cfg, tmp


def _expected_columns(measures, correction=True):
    sig = ["+", "-", "p-value"] + (["reject", "p-value corrected"] if correction else [])
    return ["name", *measures, *[f"{m} {s}" for m in measures for s in sig]]


def test_columns_come_in_a_fixed_order(small):
    outcome, *_ = small
    assert list(outcome.table.columns) == ["dataset"] + _expected_columns(MEASURES)
    d = outcome.datasets[0]
    runs = [d.runs[p] for p in outcome.pipelines]
    for order, corr in ((["nDCG@10", "NDCG%20", "MAP"], "holm"), (["MAP", "nDCG@10", "NDCG%20"], None)):
        kw = {"correction": corr} if corr else {}
        t = ps.Experiment(runs, d.topics, d.qrels, order, names=outcome.pipelines, baseline=0, dataset=d.dataset,
                          **kw)
        assert list(t.columns) == _expected_columns(order, correction=corr is not None)
        # the same figures, whatever the order
        for m in order:
            assert t[m].to_numpy() == pytest.approx(d.table[m].to_numpy())
            assert t[f"{m} p-value"].to_numpy() == pytest.approx(d.table[f"{m} p-value"].to_numpy(), nan_ok=True)


def test_perquery_csv_holds_the_true_values_behind_the_table(small):
    outcome, written, *_ = small
    perq = pd.read_csv(written["perquery.csv"], dtype={"qid": str})
    assert list(perq.columns) == ["dataset", "name", "qid", "measure", "value"]
    assert list(perq["measure"].drop_duplicates()) == MEASURES
    for d in outcome.datasets:
        objs = dict(zip(MEASURES, M.parse(MEASURES, dataset=d.dataset)))
        nq = d.topics["qid"].nunique()
        for _, row in d.table.iterrows():
            for m in MEASURES:
                sel = perq[(perq.dataset == d.dataset) & (perq.name == row["name"]) & (perq.measure == m)]
                assert len(sel) == nq
                # the paper's averaging of these values is the table's figure (CSFCube: mean of fold means)
                assert M.aggregate(objs[m], dict(zip(sel.qid, sel.value))) == pytest.approx(row[m])
                assert sel.value.between(0, 1).all()


def _tabular_rows(tex):
    body = tex[tex.index("\\toprule"):tex.index("\\bottomrule")]
    return [ln.strip()[:-2].strip() for ln in body.splitlines() if ln.strip().endswith("\\\\")]


def _split_cells(row):
    return re.split(r"(?<!\\)&", row)


def test_latex_table_bold_best_dagger_significant_and_escaped(small):
    outcome, written, _, tmp = small
    tex = written["results.tex"].read_text()
    # structure: booktabs rules in order, one column per measure, balanced braces, escaping
    assert tex.index("\\toprule") < tex.index("\\midrule") < tex.index("\\bottomrule")
    spec = re.search(r"\\begin\{tabular\}\{([^}]*)\}", tex).group(1)
    assert spec == "l" + "r" * len(MEASURES)
    assert tex.count("{") - tex.count("\\{") == tex.count("}") - tex.count("\\}")
    rows = _tabular_rows(tex)
    assert rows[0] == "System & NDCG\\%20 & MAP & nDCG@10"
    assert "Low\\_b \\& 50\\%" in tex and ODD not in tex
    blocks, current = {}, None
    for row in rows[1:]:
        if row.startswith("\\multicolumn"):
            assert row.startswith(f"\\multicolumn{{{len(spec)}}}")
            current = re.search(r"\\emph\{(.*)\}\}", row).group(1)
            blocks[current] = []
            continue
        cells = _split_cells(row)
        assert len(cells) == len(spec)
        blocks[current].append([c.strip() for c in cells])
    assert list(blocks) == DATASETS
    for d in outcome.datasets:
        cells = blocks[d.dataset]
        assert [c[0] for c in cells] == ["BM25", "Tuned", "Low\\_b \\& 50\\%"]
        for j, m in enumerate(MEASURES, start=1):
            shown = [round(v, 4) for v in d.table[m]]
            for i, cell in enumerate(c[j] for c in cells):
                value = float(re.sub(r"[^0-9.]", "", cell.replace("$^\\dagger$", "")))
                assert value == pytest.approx(shown[i], abs=1e-9)
                assert cell.startswith("\\textbf{") == (shown[i] == max(shown))
                # a dagger exactly where the Holm-corrected test rejects (statsmodels' own decision)
                assert cell.endswith("$^\\dagger$") == bool(d.table[f"{m} reject"].iloc[i])
    # the data give both kinds of cells: significant and not
    daggers = tex.count("$^\\dagger$") - 1       # one in the caption
    assert 0 < daggers < sum(len(c) for c in blocks.values()) * len(MEASURES)
    assert "Holm correction" in tex and "paired t-test" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed (structure checked above)")
def test_latex_table_compiles(small, tmp_path):
    _, written, *_ = small
    (tmp_path / "results.tex").write_text(written["results.tex"].read_text())
    (tmp_path / "doc.tex").write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
                                      "\\input{results.tex}\n\\end{document}\n")
    out = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "doc.tex"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 1000
    log = (tmp_path / "doc.log").read_text(errors="replace")
    assert "Missing character" not in log and "Undefined control sequence" not in log


def _chromium(tmp, *args):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
           "--force-device-scale-factor=1", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _runs(flags):
    """Number of runs of True in a 1-D boolean array (bars drawn side by side)."""
    flags = np.asarray(flags, dtype=np.int8)
    return int(np.sum(np.diff(np.concatenate([[0], flags])) == 1))


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_html_report_renders_its_plots_in_chromium(small, tmp_path):
    from PIL import Image
    outcome, written, *_ = small
    page = written["report.html"].read_text()
    # self-contained: no script, no stylesheet or image fetched from anywhere
    assert "<script" not in page and "<link" not in page and not re.search(r"\ssrc\s*=", page)
    refs = re.findall(r"""href\s*=\s*["']([^"']*)["']""", page)
    assert refs and all(r.startswith("#") for r in refs)          # only the plots' own symbols
    ids = re.findall(r"""\sid\s*=\s*["']([^"']*)["']""", page)
    assert len(ids) == len(set(ids)) and {r[1:] for r in refs} <= set(ids)   # unique across the inline plots
    assert "Holm correction" in page and "paired t-test" in page and "baseline" in page
    assert "id='llm'" not in page           # no LLM component, no usage section
    # where the browser lays out each plot: a copy of the page with a probe that writes the boxes into the DOM
    probe = ("<script>const b=[...document.querySelectorAll('figure.diff-plot')].map(f=>{const s=f.querySelector('svg')"
             ".getBoundingClientRect();return {d:f.dataset.dataset,m:f.dataset.measure,s:f.dataset.system,"
             "x:s.left+scrollX,y:s.top+scrollY,w:s.width,h:s.height}});const p=document.createElement('pre');"
             "p.id='probe';p.textContent=JSON.stringify({boxes:b,height:document.documentElement.scrollHeight});"
             "document.body.appendChild(p);</script>")
    (tmp_path / "probe.html").write_text(page.replace("</body>", probe + "</body>"))
    out = _chromium(tmp_path, "--window-size=1280,900", "--dump-dom", (tmp_path / "probe.html").as_uri())
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', out.stdout, re.S).group(1)))
    boxes = found["boxes"]
    assert len(boxes) == len(DATASETS) * len(MEASURES) * 2       # two systems against the baseline
    assert all(b["w"] > 300 and b["h"] > 100 for b in boxes)
    # a screenshot of the whole page, the report itself (not the probe)
    shot = tmp_path / "shot.png"
    out = _chromium(tmp_path, f"--window-size=1280,{int(found['height']) + 10}", f"--screenshot={shot}",
                    written["report.html"].as_uri())
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape[0] >= found["height"] - 10

    def mask(colour):
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        return (img == rgb).all(axis=2)

    better, worse = mask(report.BETTER), mask(report.WORSE)
    perq = pd.read_csv(written["perquery.csv"], dtype={"qid": str})
    for b in boxes:
        x0, y0, x1, y1 = int(b["x"]), int(b["y"]), int(b["x"] + b["w"]), int(b["y"] + b["h"])
        sel = perq[(perq.dataset == b["d"]) & (perq.measure == b["m"])].pivot(index="qid", columns="name",
                                                                              values="value")
        diff = (sel[b["s"]] - sel["BM25"]).dropna()
        big = diff.abs() >= 0.05 * diff.abs().max()          # bars tall enough to have solid pixels
        for m, n_all, n_big in ((better, (diff > 0).sum(), (big & (diff > 0)).sum()),
                                (worse, (diff < 0).sum(), (big & (diff < 0)).sum())):
            bars = _runs(m[y0:y1, x0:x1].any(axis=0))       # distinct bars of this colour, left to right
            assert n_big <= bars <= n_all, (b, bars, n_big, n_all)
        # sorted: every bar of the better colour lies left of every bar of the worse colour
        cols_b = np.where(better[y0:y1, x0:x1].any(axis=0))[0]
        cols_w = np.where(worse[y0:y1, x0:x1].any(axis=0))[0]
        if len(cols_b) and len(cols_w):
            assert cols_b.max() < cols_w.min()
    # nothing of the bars' colours is drawn outside the plots but the legend's two squares
    inside = np.zeros(better.shape, bool)
    for b in boxes:
        inside[int(b["y"]):int(b["y"] + b["h"]) + 1, int(b["x"]):int(b["x"] + b["w"]) + 1] = True
    assert (better & ~inside).sum() < 400 and (worse & ~inside).sum() < 400


def test_report_renders_a_manifest_generically_and_escapes_it(small, tmp_path):
    outcome, written, *_ = small
    page = written["report.html"].read_text()
    if outcome.manifest:      # the one the experiment recorded
        for key in outcome.manifest:
            assert f"<b>{key}</b>" in page
    odd = {"versions": {"torch": "2.5.1", "numpy": "2.1"}, "seeds": [0, 1], "note": "<img src=x onerror=alert(1)>",
           "models": [{"id": "default", "sha256": "ab" * 32}]}
    report.write_report(outcome, tmp_path / "r", manifest=odd)
    page = (tmp_path / "r" / "report.html").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img" not in page
    assert "2.5.1" in page and "ab" * 32 in page


def test_cli_report_and_a_bad_target(small, tmp_path, capsys):
    outcome, _, cfg, tmp = small
    out = tmp_path / "cli-report"
    assert main(["experiment", str(cfg), "--report", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["NDCG%20"] for r in rows] == pytest.approx(list(outcome.table["NDCG%20"]))
    assert sorted(p.name for p in out.iterdir()) == sorted(report.REPORT_FILES)
    assert (out / "results.tex").read_text() == (tmp / "out" / "results.tex").read_text()
    # a report target that is a file: one error naming --report, before anything runs
    blocker = tmp_path / "a-file"
    blocker.write_text("keep")
    fresh = _config(tmp_path, tmp_path / "never")
    assert main(["experiment", str(fresh), "--report", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--report" in err[0] and "a-file" in err[0]
    assert not (tmp_path / "never").exists() and blocker.read_text() == "keep"


def test_an_interrupted_report_writes_nothing(small, tmp_path, monkeypatch):
    outcome, *_ = small
    target = tmp_path / "r"
    target.mkdir()
    (target / "report.html").write_text("previous report")

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "render_latex", interrupted)
    with pytest.raises(KeyboardInterrupt):
        report.write_report(outcome, target)
    assert sorted(p.name for p in target.iterdir()) == ["report.html"]
    assert (target / "report.html").read_text() == "previous report"


def test_llm_usage_and_cost_table(csfcube, tmp_path):
    from llm_server import ScriptedServer, prompt_of, yes_no
    with ScriptedServer(lambda kind, body: yes_no(len(prompt_of(kind, body)) % 2 == 0)) as srv:
        cfg = tmp_path / "llm.yaml"
        cfg.write_text(f"""
dataset: irds:sci/csfcube
llm:
  base_url: {srv.base_url}
  model: test-model
  mode: completion
  cache_dir: {tmp_path / "cache"}
  progress: false
  backoff: 0.01
  prices: {{test-model: {{prompt: 1.0, completion: 2.0}}}}
pipelines:
  BM25: pool >> bm25
  Judge: pool >> bm25 % 3 >> text >> mir_pointwise
experiments:
  e:
    dataset: irds:sci/csfcube/method
    pipelines: [BM25, Judge]
    measures: [NDCG%20]
    baseline: BM25
""")
        outcome = experiment_outcome(cfg)
        calls = srv.calls
    written = report.write_report(outcome, tmp_path / "r")
    page = written["report.html"].read_text()
    assert "LLM usage and cost" in page
    usage = pd.read_html(io.StringIO(page[page.index("id='llm'"):page.index("id='manifest'")]))[0]
    assert list(usage["name"]) == ["Judge"]
    nq = outcome.datasets[0].topics["qid"].nunique()
    assert usage["calls"].iloc[0] == calls == 3 * nq
    tokens = usage["prompt_tokens"].iloc[0], usage["completion_tokens"].iloc[0]
    assert usage["cost"].iloc[0] == pytest.approx((tokens[0] * 1.0 + tokens[1] * 2.0) / 1e6, rel=1e-3)
