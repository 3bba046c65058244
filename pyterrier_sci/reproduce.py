"""Reproductions as data: each paper's tables declared in ``pipelines/reproduce/<paper>.yaml`` and run by
``pyterrier-sci reproduce [PAPER[/TABLE]]``.

A table names its datasets (the paper's column groups), its systems (pipeline expressions of the
pipeline language, or a released run file), the models that training steps produce and the systems
name, its measures, the published figure of each cell (with the paper's table, section and page),
a tolerance, its tiers (``quick``: the cheapest rows, run by the test suite; ``full``: everything)
and how and why it differs from the paper.  The figures a run produces are recorded by ``--record``
into ``pipelines/reproduce/recorded/<paper>.json`` (never typed); a later run prints published /
recorded / reproduced with the deltas and fails (exit status 1) when a figure leaves its tolerance.

Runs are saved under ``<work dir>/reproduce/<paper>/<tier>/<table>/`` (one TREC run per system and
dataset, with its checksum) and read back by a rerun, so an interrupted reproduction resumes; models
are trained on first use by their components and kept in the work directory; every table writes a
manifest (:mod:`pyterrier_sci.manifest`).  Systems sharing a prefix compute it once: the runs are
computed with PyTerrier 1.1's ``pt.Experiment(..., plan='tree')``.

The schema is documented in docs/reproductions.md.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import html
import json
import math
import os
import re
import resource
import sys
import time
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_sci import artifacts, manifest
from pyterrier_sci import measures as _measures
from pyterrier_sci.agreement import MEASURES as AGREEMENT_MEASURES
from pyterrier_sci.agreement import is_agreement_measure, judgements
from pyterrier_sci.agreement import measure as agreement_measure
from pyterrier_sci.data import data_dir, read_json
from pyterrier_sci.environment import environment, jsonable
from pyterrier_sci.errors import (
    PipelineError,
    ReproductionError,  # noqa: F401 - defined there, re-exported
    TrainingDeferred,
)
from pyterrier_sci.evaluation import Experiment
from pyterrier_sci.experiment import llm_key, run_path, topics_and_qrels, write_run
from pyterrier_sci.llm import llm_components
from pyterrier_sci.llm.accounting import usage_report
from pyterrier_sci.llm.dryrun import concat_reports, dry_run
from pyterrier_sci.llm.settings import settings_from
from pyterrier_sci.llm.trust import trusting_urls
from pyterrier_sci.pipeline import PipelineConfig, build_all, load_config, make_context, read_yaml_file
from pyterrier_sci.registry import check_dataset
from pyterrier_sci.scale import ray_session
from pyterrier_sci.training import no_training, trainings

__all__ = ["ReproductionError", "Paper", "Table", "System", "Cell", "TableResult", "papers_dir", "paper_files",
           "load_paper", "select", "run_table", "reproduce", "record", "recorded_path", "read_recorded",
           "dry_run_table", "markdown_matrix", "html_matrix", "write_matrix", "docs_table", "update_docs",
           "stale_docs", "add_reproduce_commands", "dataset_id", "TIERS"]

#: ``quick``: the cheapest rows (the test suite runs them); ``medium``: the rows marked ``medium``, run as the full
#: tier runs them (its settings, queries and recorded figures: CI verifies them); ``full``: every row
TIERS = ("quick", "medium", "full")
#: the tiers whose figures are recorded (a medium run is a part of the full tier)
RECORDED_TIERS = ("quick", "full")
#: what each cell is, derived from the declaration and the figures (docs/reproductions.md, "Statuses"); the first
#: two are the comparable cells (same data, same model or released run), the only ones a tolerance applies to
STATUS_REPRODUCED = "reproduced"
STATUS_DIFFERS = "differs"
STATUS_STAND_IN = "stand-in"
STATUS_OTHER_DATA = "other data"
STATUS_NEEDS_LLM = "needs LLM"
STATUS_NEEDS_CHECKPOINT = "needs checkpoint"
STATUS_NEEDS_DATA = "needs data"
STATUS_UNPUBLISHED = "not in the paper"
#: the statuses of a published cell, in the order the matrix counts them
STATUSES = (STATUS_REPRODUCED, STATUS_DIFFERS, STATUS_STAND_IN, STATUS_OTHER_DATA, STATUS_NEEDS_LLM,
            STATUS_NEEDS_CHECKPOINT, STATUS_NEEDS_DATA)
#: the statuses of a cell that has no figure because its row lacks something here
_NEEDS = (STATUS_NEEDS_LLM, STATUS_NEEDS_CHECKPOINT, STATUS_NEEDS_DATA)
#: what a row that cannot run here lacks (``needs:``): an LLM endpoint, a model (a checkpoint or an API), data
NEEDS_KINDS = ("llm", "checkpoint", "data")
_LLM_NEED = "an LLM endpoint (--llm URL: any OpenAI-compatible server)"
#: the longest one-line reason (``stand_in``, ``other_data``) the matrix shows
REASON_CHARS = 200
RUN_FORMATS = ("ranked_lists_json", "trec")
_TABLE_KEYS = {"number", "title", "source", "datasets", "measures", "systems", "scale", "tolerance", "drift",
               "differs", "tiers", "digits", "stand_in", "other_data"}
_SYSTEM_KEYS = {"pipeline", "run", "random", "agreement", "label", "tiers", "published", "reproduces", "tolerance",
                "drift", "differs", "needs", "stand_in", "other_data"}
_AGREEMENT_KEYS = {"between", "per_query", "sample", "seed"}
_PAPER_KEYS = {"paper", "config", "components", "models", "pipelines", "tables", "settings", "llm", "ray"}
_DATASET_KEYS = {"id", "vars", "topics_variant", "topics", "quick", "full"}
#: a table key or system name: it names a folder of the saved runs, so a plain name (no separator, no "..")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")
#: a template field: ``{name}``, filled by plain substitution of a declared value (no attribute access, no format spec)
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


# ------------------------------------------------------------------------------------------------ schema
@dataclass
class System:
    """One row of a table: a pipeline expression (or a released run), its published figures
    ``{dataset label: {measure: value}}`` in the paper's units, and its tiers."""
    name: str
    pipeline: Optional[str] = None
    run: Optional[Dict[str, Any]] = None
    label: Optional[str] = None
    tiers: Tuple[str, ...] = ("full",)
    published: Dict[str, Dict[str, float]] = field(default_factory=dict)
    reproduces: bool = False
    tolerance: Optional[float] = None
    drift: Optional[float] = None
    differs: Optional[str] = None
    # what the row lacks here, by kind (:data:`NEEDS_KINDS`): {"llm": (...)} for a row that runs with --llm URL;
    # {"checkpoint": (...), "data": (...)} for a row declared for its published figures only
    needs: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    stand_in: Optional[str] = None      # the substitute model and why, in one line (its figures: not comparable)
    other_data: Optional[str] = None    # the other data the paper's method runs on and why, in one line
    random: Optional[Dict[str, int]] = None   # {trials, seed}: the mean over seeded shufflings of each pool
    # {between: [two label sources], per_query, sample, seed}: an agreement row (measures of pyterrier_sci.agreement);
    # a source is a judgement set of the dataset (its name) or {pipeline: EXPR, column: COL} labelling the pairs
    agreement: Optional[Dict[str, Any]] = None

    @property
    def runs_here(self) -> bool:
        """Whether the row computes anything (else it is declared for its published figures and ``needs``)."""
        return any(x is not None for x in (self.pipeline, self.run, self.random, self.agreement))


@dataclass
class Table:
    """One table of a paper as declared (see docs/reproductions.md)."""
    key: str
    number: str
    title: str
    source: Dict[str, Any]
    datasets: Dict[str, Dict[str, Any]]          # label -> {"id": ..., "vars": {...}, "quick": {...}}
    measures: List[str]
    systems: Dict[str, System]
    scale: float = 1.0
    tolerance: float = 0.0
    drift: Optional[float] = None
    differs: str = ""
    tiers: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    digits: int = 2
    stand_in: Optional[str] = None      # the default of its rows (a row's own declaration wins)
    other_data: Optional[str] = None

    def comparability(self, system: "System") -> Tuple[str, str]:
        """How a runnable row's published figures compare with its own: ``("same", "")`` (``reproduces: true``:
        same data, same model or released run; a tolerance applies), ``(STATUS_STAND_IN, why)`` or
        ``(STATUS_OTHER_DATA, why)`` (shown, never compared); ``("", "")`` when nothing says."""
        if system.reproduces:
            return "same", ""
        for status, why in ((STATUS_STAND_IN, system.stand_in), (STATUS_OTHER_DATA, system.other_data),
                            (STATUS_STAND_IN, self.stand_in), (STATUS_OTHER_DATA, self.other_data)):
            if why:
                return status, why
        return "", ""

    @property
    def is_agreement(self) -> bool:
        """A table of agreement between annotators (its measures are :data:`pyterrier_sci.agreement.MEASURES`)."""
        return all(is_agreement_measure(m) for m in self.measures)


@dataclass
class Paper:
    """A reproduction file: the paper, the pipeline config its systems use, its tables."""
    id: str
    meta: Dict[str, Any]
    path: Path
    raw: Dict[str, Any]
    tables: Dict[str, Table]

    def config(self, tier: str = "full", llm: Optional[str] = None) -> PipelineConfig:
        """The pipeline config of a tier: the base config's components and pipelines, this file's
        components and models (a ``quick:`` mapping inside one overrides its settings in the quick
        tier), and its settings (``llm.base_url`` replaced by ``llm`` when given)."""
        base: Dict[str, Any] = {}
        if self.raw.get("config"):
            ref = Path(str(self.raw["config"]))
            if ref.is_absolute() or ".." in ref.parts:
                raise ReproductionError(f"'config' must name a file beside pipelines/, not {ref}", where=str(self.path))
            base_path = self.path.parent.parent / ref
            if not base_path.is_file():
                raise ReproductionError(f"the base config {ref} does not exist ({base_path})", where=str(self.path))
            cfg = load_config(base_path)
            base = {"components": dict(cfg.components), "pipelines": dict(cfg.pipelines), **copy.deepcopy(cfg.settings)}
        comps = dict(base.get("components") or {})
        for section in ("components", "models"):
            for name, spec in (self.raw.get(section) or {}).items():
                spec = dict(spec or {})
                quick = spec.pop("quick", None) or {}
                if tier == "quick":
                    spec.update(quick)
                comps[name] = spec
        settings = {k: copy.deepcopy(v) for k, v in base.items() if k not in ("components", "pipelines")}
        for k in ("settings",):
            settings.update(copy.deepcopy(self.raw.get(k) or {}))
        for k in ("llm", "ray"):
            if self.raw.get(k) is not None:
                settings[k] = copy.deepcopy(self.raw[k])
        if llm:
            settings.setdefault("llm", {})
            settings["llm"] = {**(settings["llm"] or {}), "base_url": llm}
        d = {"components": comps, "pipelines": {**(base.get("pipelines") or {}), **(self.raw.get("pipelines") or {})},
             **settings}
        return PipelineConfig.from_dict(d, path=self.path)


def _fail(msg: str, path: Path, where: str = "") -> ReproductionError:
    return ReproductionError(f"{where}: {msg}" if where else msg, where=str(path))


def _number(v: Any, what: str, path: Path) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise _fail(f"{what} must be a finite number, not {v!r}", path)
    return float(v)


def _tiers(v: Any, what: str, path: Path) -> Tuple[str, ...]:
    v = [v] if isinstance(v, str) else list(v) if isinstance(v, (list, tuple)) else [v] if v else []
    bad = [t for t in v if not isinstance(t, str) or t not in TIERS]
    if bad or not v:
        raise _fail(f"{what}: tiers must be a non-empty list of {list(TIERS)}, not {v!r}", path)
    return tuple(v)


def _name(v: Any, what: str, path: Path, where: str = "") -> str:
    """``v`` when it is a plain name (:data:`NAME`): table keys and system names name folders of the saved runs."""
    if not isinstance(v, str) or not NAME.fullmatch(v) or ".." in v:
        raise _fail(f"{what} {v!r} must be a name of letters, digits, '_', '.', '+' or '-' (at most 100, starting "
                    "with a letter or digit, no '..'): it names a folder of the saved runs", path, where)
    return v


def _whole(v: Any, what: str, path: Path, where: str, least: int = 0, most: int = 2 ** 31 - 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not least <= v <= most:
        raise _fail(f"{what} must be a whole number from {least} to {most}, not {v!r}", path, where)
    return v


def template_fields(template: Any, what: str, path: Path, where: str = "") -> List[str]:
    """The fields of a template (``{name}`` only: plain substitution of declared values); one error naming
    the file and key for anything else (``{x.attr}``, ``{x[0]}``, ``{x!r}``, a lone brace)."""
    if not isinstance(template, str):
        raise _fail(f"{what} must be a string, not {template!r}", path, where)
    rest = _FIELD.sub("", template)
    if "{" in rest or "}" in rest:
        raise _fail(f"{what} {template!r}: a template field is {{name}} (letters, digits and '_'), filled with a "
                    "declared value; no attribute access, index or format spec, and no lone brace", path, where)
    return _FIELD.findall(template)


def fill(template: str, values: Mapping[str, Any]) -> str:
    """``template`` with each ``{name}`` replaced by ``values[name]`` (checked by :func:`template_fields`)."""
    return _FIELD.sub(lambda m: str(values[m.group(1)]), template)


def _check_template(template: Any, fields: Iterable[str], datasets: Mapping[str, Mapping[str, Any]], what: str,
                    path: Path, where: str) -> None:
    """A template filled for each dataset of the table: its fields must be ``fields`` or the dataset's ``vars``."""
    names = template_fields(template, what, path, where)
    for label, ds in datasets.items():
        known = set(fields) | set(ds.get("vars") or {})
        missing = sorted(set(names) - known)
        if missing:
            raise _fail(f"{what} {template!r} uses {{{missing[0]}}}, which dataset {label!r} does not declare "
                        f"(its vars: {sorted(ds.get('vars') or {})})", path, where)


def _dataset_spec(label: Any, spec: Any, path: Path, where: str) -> Dict[str, Any]:
    spec = {"id": spec} if isinstance(spec, str) else spec
    dw = f"{where}, dataset {label!r}"
    if not isinstance(spec, dict) or not isinstance(spec.get("id"), str) or not spec["id"]:
        raise _fail("needs an 'id' (an ir_datasets id), alone or in a mapping {id:, vars:, quick:, full:}", path, dw)
    unknown = sorted(set(spec) - _DATASET_KEYS)
    if unknown:
        raise _fail(f"unknown keys {unknown} (known: {sorted(_DATASET_KEYS)})", path, dw)
    vars_ = spec.get("vars") or {}
    if not isinstance(vars_, dict) or not all(isinstance(k, str) and isinstance(v, (str, int)) and
                                              not isinstance(v, bool) for k, v in vars_.items()):
        raise _fail("'vars' must map names to strings or whole numbers", path, dw)
    for tier in ("quick", "full"):
        t = spec.get(tier)
        if t is None:
            continue
        if not isinstance(t, dict) or set(t) - {"id", "topics"}:
            raise _fail(f"'{tier}' may give the tier's 'id' and 'topics' (the first N judged queries), not {t!r}",
                        path, dw)
        if "id" in t and (not isinstance(t["id"], str) or not t["id"]):
            raise _fail(f"'{tier}' id must be an ir_datasets id, not {t['id']!r}", path, dw)
        if "topics" in t:
            _whole(t["topics"], f"'{tier}' topics", path, dw, 1)
    if spec.get("topics") is not None:
        _whole(spec["topics"], "'topics'", path, dw, 1)
    return dict(spec, vars=dict(vars_)) if "vars" in spec else dict(spec)


def _parse_table(key: str, t: Any, path: Path) -> Table:
    where = f"table {key}"
    _name(key, "the table key", path)
    if not isinstance(t, dict):
        raise _fail("must be a mapping", path, where)
    unknown = sorted(set(t) - _TABLE_KEYS)
    if unknown:
        raise _fail(f"unknown keys {unknown} (known: {sorted(_TABLE_KEYS)})", path, where)
    for k in ("number", "datasets", "measures", "systems", "differs"):
        if t.get(k) in (None, "", [], {}):
            raise _fail(f"'{k}' is required", path, where)
    datasets: Dict[str, Dict[str, Any]] = {}
    if not isinstance(t["datasets"], dict):
        raise _fail("'datasets' maps a column-group label to a dataset id (or {id:, vars:, quick:})", path, where)
    for label, spec in t["datasets"].items():
        datasets[str(label)] = _dataset_spec(label, spec, path, where)
    if not isinstance(t["measures"], (str, list)) or not all(isinstance(m, str) for m in
                                                            ([t["measures"]] if isinstance(t["measures"], str)
                                                             else t["measures"])):
        raise _fail(f"'measures' must be a measure name or a list of them, not {t['measures']!r}", path, where)
    measures = [t["measures"]] if isinstance(t["measures"], str) else [str(m) for m in t["measures"]]
    agreement_table = all(is_agreement_measure(m) for m in measures)   # what Table.is_agreement says
    if any(is_agreement_measure(m) for m in measures) and not agreement_table:
        raise _fail(f"measures {measures} mix agreement measures ({', '.join(AGREEMENT_MEASURES)}) with ranking "
                    "measures: give an agreement table of its own", path, where)
    systems: Dict[str, System] = {}
    if not isinstance(t["systems"], dict):
        raise _fail("'systems' must map a system name to its declaration", path, where)
    for name, s in t["systems"].items():
        sw = f"{where}, system {name!r}"
        _name(name, "the system name", path, where)
        if s is not None and not isinstance(s, (str, dict)):
            raise _fail(f"a system is a pipeline expression or a mapping, not {s!r}", path, sw)
        s = {"pipeline": s} if isinstance(s, str) else dict(s or {})
        unknown = sorted(set(s) - _SYSTEM_KEYS)
        if unknown:
            raise _fail(f"unknown keys {unknown} (known: {sorted(_SYSTEM_KEYS)})", path, sw)
        given = [k for k in ("pipeline", "run", "random", "agreement") if s.get(k) is not None]
        if len(given) > 1 or not given and not s.get("needs"):
            raise _fail("give one of 'pipeline' (an expression), 'run' (a released run file), 'random' (the mean "
                        "over shufflings of each pool) and 'agreement' (between two annotators' labels), or only "
                        "'needs' (what it would take) for a row that cannot run here", path, sw)
        if given and (given[0] == "agreement") != agreement_table:
            raise _fail("an 'agreement' row needs agreement measures (" + ", ".join(AGREEMENT_MEASURES) + ") and "
                        "an agreement table takes only 'agreement' rows (or 'needs')", path, sw)
        if s.get("pipeline") is not None and not isinstance(s["pipeline"], str):
            raise _fail(f"'pipeline' must be a pipeline expression, not {s['pipeline']!r}", path, sw)
        agreement_spec = _agreement_spec(s["agreement"], path, sw) if s.get("agreement") is not None else None
        for src in (agreement_spec or {}).get("between", []):
            if isinstance(src, dict):
                _check_template(src["column"], (), datasets, "agreement column", path, sw)
        random_spec = None
        if s.get("random") is not None:
            r = s["random"]
            if not isinstance(r, dict) or set(r) - {"trials", "seed"} or \
                    not all(isinstance(r.get(k, 1), int) and not isinstance(r.get(k, 1), bool) and r.get(k, 1) >= 0
                            for k in ("trials", "seed")) or r.get("trials", 100) < 1:
                raise _fail("'random' must be a mapping {trials: N >= 1, seed: S >= 0} (both optional: 100 and 0)",
                            path, sw)
            random_spec = {"trials": int(r.get("trials", 100)), "seed": int(r.get("seed", 0))}
        if s.get("run") is not None:
            run = s["run"]
            if not isinstance(run, dict) or not isinstance(run.get("path"), str):
                raise _fail("'run' must be a mapping with a 'path' relative to the data directory", path, sw)
            if run.get("format", "trec") not in RUN_FORMATS:
                raise _fail(f"run format must be one of {list(RUN_FORMATS)}", path, sw)
            if set(run) - {"path", "format", "qid"}:
                raise _fail(f"unknown run keys {sorted(set(run) - {'path', 'format', 'qid'})} (known: path, format, "
                            "qid)", path, sw)
            _check_template(run["path"], (), datasets, "run path", path, sw)
            _check_template(run.get("qid", "{key}"), ("key",), datasets, "run qid", path, sw)
        published: Dict[str, Dict[str, float]] = {}
        if not isinstance(s.get("published") or {}, dict):
            raise _fail("'published' maps a dataset label to {measure: figure}", path, sw)
        for label, figs in (s.get("published") or {}).items():
            if not isinstance(figs or {}, dict):
                raise _fail(f"published figures for {label!r} must map a measure to a figure, not {figs!r}", path, sw)
            if str(label) not in datasets:
                raise _fail(f"published figures for {label!r}, which is not one of the datasets {list(datasets)}",
                            path, sw)
            for m, v in (figs or {}).items():
                if m not in measures:
                    raise _fail(f"published figure for measure {m!r}, which is not one of {measures}", path, sw)
                published.setdefault(str(label), {})[m] = _number(v, f"{sw}: published {label} {m}", path)
        needs = _needs_spec(s.get("needs"), bool(given), path, sw)
        stand_in, other_data = (_reason(s.get(k), k, path, sw) for k in ("stand_in", "other_data"))
        if s.get("reproduces") and (stand_in or other_data):
            raise _fail("'reproduces: true' says the row runs the paper's data and model; a row with 'stand_in' or "
                        "'other_data' does not: give one of them", path, sw)
        systems[str(name)] = System(
            name=str(name), pipeline=s.get("pipeline"), run=s.get("run"), label=s.get("label"),
            tiers=_tiers(s.get("tiers", ["full"]), sw, path), published=published,
            reproduces=bool(s.get("reproduces", False)),
            tolerance=None if s.get("tolerance") is None else _number(s["tolerance"], f"{sw}: tolerance", path),
            drift=None if s.get("drift") is None else _number(s["drift"], f"{sw}: drift", path),
            differs=s.get("differs"), needs=needs, stand_in=stand_in, other_data=other_data, random=random_spec,
            agreement=agreement_spec)
    if not isinstance(t.get("tiers") or {}, dict):
        raise _fail(f"'tiers' maps {list(RECORDED_TIERS)} to settings ({{topics: N}}), not {t['tiers']!r}", path, where)
    tiers = dict(t.get("tiers") or {})
    for tier, spec in tiers.items():
        if tier not in RECORDED_TIERS or not isinstance(spec or {}, dict) or set(spec or {}) - {"topics"}:
            raise _fail(f"'tiers' maps {list(RECORDED_TIERS)} to settings ({{topics: N}}; the medium tier runs with "
                        f"the full tier's), not {tier!r}: {spec!r}", path, where)
        if (spec or {}).get("topics") is not None:
            _whole(spec["topics"], f"tier {tier}: topics", path, where, 1)
    table = Table(key=str(key), number=str(t["number"]), title=str(t.get("title", "")),
                  source=dict(t.get("source") or {}), datasets=datasets, measures=measures, systems=systems,
                  scale=_number(t.get("scale", 1.0), f"{where}: scale", path),
                  tolerance=_number(t.get("tolerance", 0.0), f"{where}: tolerance", path),
                  drift=None if t.get("drift") is None else _number(t["drift"], f"{where}: drift", path),
                  differs=str(t["differs"]).strip(), tiers={k: dict(v or {}) for k, v in tiers.items()},
                  digits=_whole(t.get("digits", 2), "'digits'", path, where, 0, 10),
                  stand_in=_reason(t.get("stand_in"), "stand_in", path, where),
                  other_data=_reason(t.get("other_data"), "other_data", path, where))
    for s in table.systems.values():
        if s.runs_here and s.published and not table.comparability(s)[0]:
            raise _fail("a row that runs and has published figures says how they compare: 'reproduces: true' (the "
                        "paper's data and model, or its released run: a tolerance applies), 'stand_in: WHY' (a named "
                        "substitute model) or 'other_data: WHY' (the paper's method on other data), on the row or the "
                        "table", path, f"{where}, system {s.name!r}")
    return table


def _reason(v: Any, key: str, path: Path, where: str) -> Optional[str]:
    """A one-line reason (``stand_in``, ``other_data``): what the matrix shows beside the row's status."""
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip() or "\n" in v.strip() or len(v.strip()) > REASON_CHARS:
        raise _fail(f"'{key}' is one line of at most {REASON_CHARS} characters saying what differs and why (the "
                    f"table's 'differs' holds the long account), not {str(v)[:80]!r}", path, where)
    return v.strip()


def _needs_spec(v: Any, runs: bool, path: Path, where: str) -> Dict[str, Tuple[str, ...]]:
    """``needs:`` checked: ``[llm]`` for a row that runs with --llm URL; for a row declared for its published
    figures only, a mapping ``{checkpoint: WHAT, data: WHAT}`` (each a line or a list of lines; ``llm:`` may name
    the LLM product too): what it lacks here, which decides its status (``needs data`` before ``needs
    checkpoint``)."""
    if v is None or v == [] or v == {}:
        return {}
    if v == "llm" or v == ["llm"]:
        return {"llm": (_LLM_NEED,)}
    if isinstance(v, dict) and set(v) <= set(NEEDS_KINDS):
        out: Dict[str, Tuple[str, ...]] = {}
        for kind, what in v.items():
            items = [what] if isinstance(what, str) else what if isinstance(what, list) else None
            if not items or not all(isinstance(x, str) and x.strip() for x in items):
                raise _fail(f"needs '{kind}' names what is lacking (a line or a list of lines), not {what!r}",
                            path, where)
            out[kind] = tuple(x.strip() for x in items)
        if runs and set(out) - {"llm"}:
            raise _fail("a row that runs here needs at most an LLM endpoint ('needs: [llm]'); 'checkpoint' and "
                        "'data' belong to a row declared for its published figures only", path, where)
        if not runs and not set(out) - {"llm"}:
            raise _fail("a row that cannot run here says what it lacks by kind: 'needs: {checkpoint: WHAT}' (a model "
                        "or API not reachable) and/or 'needs: {data: WHAT}' (data not offline)", path, where)
        return out
    raise _fail("'needs' is [llm] (the row runs with --llm URL) or, for a row declared for its published figures "
                f"only, a mapping {{checkpoint: WHAT, data: WHAT}} of what it lacks; not {v!r}", path, where)


def _agreement_spec(a: Any, path: Path, where: str) -> Dict[str, Any]:
    """An ``agreement:`` row checked: ``between`` two sources (a judgement set's name, or ``{pipeline: EXPR,
    column: COL}`` labelling the judged pairs), ``per_query`` (the mean over queries of each query's figure;
    default false: one figure over all pairs), ``sample`` pairs drawn with ``seed`` (default all)."""
    if not isinstance(a, dict) or set(a) - _AGREEMENT_KEYS or not isinstance(a.get("between"), list) \
            or len(a["between"]) != 2:
        raise _fail("'agreement' must be a mapping {between: [SOURCE, SOURCE], per_query: bool, sample: N, seed: S} "
                    "(a SOURCE: a judgement set of the dataset, or {pipeline: EXPR, column: COL})", path, where)
    sources = []
    for src in a["between"]:
        if isinstance(src, str) and src:
            sources.append(src)
        elif isinstance(src, dict) and set(src) == {"pipeline", "column"} and \
                all(isinstance(src[k], str) and src[k] for k in src):
            sources.append(dict(src))
        else:
            raise _fail(f"agreement source {src!r}: give a judgement set's name or {{pipeline: EXPR, column: COL}}",
                        path, where)
    if not any(isinstance(x, str) for x in sources):
        raise _fail("an agreement row compares with at least one judgement set of the dataset (the pairs it labels)",
                    path, where)
    for k in ("sample", "seed"):
        v = a.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (1 if k == "sample" else 0)):
            raise _fail(f"agreement '{k}' must be an integer >= {1 if k == 'sample' else 0}, not {v!r}", path, where)
    if not isinstance(a.get("per_query", False), bool):
        raise _fail("agreement 'per_query' must be true or false", path, where)
    return {"between": sources, "per_query": bool(a.get("per_query", False)), "sample": a.get("sample"),
            "seed": int(a.get("seed") or 0)}


def papers_dir() -> Path:
    """``pipelines/reproduce/`` of the installed package."""
    return Path(str(resources.files("pyterrier_sci.pipelines"))) / "reproduce"


def paper_files(directory: Optional[Path] = None) -> Dict[str, Path]:
    """``{paper id: file}`` of the reproduction files in ``directory`` (default :func:`papers_dir`)."""
    d = Path(directory) if directory else papers_dir()
    return {p.stem: p for p in sorted(d.glob("*.yaml"))}


def load_paper(spec: Any, directory: Optional[Path] = None) -> Paper:
    """A reproduction file: a paper id of :func:`paper_files`, a path, or a parsed mapping."""
    if isinstance(spec, Paper):
        return spec
    if isinstance(spec, (str, Path)) and not str(spec).endswith((".yaml", ".yml")):
        files = paper_files(directory)
        if str(spec) not in files:
            raise ReproductionError(f"no reproduction of paper {spec!r} (declared: {', '.join(files) or 'none'})",
                                    where=str(directory or papers_dir()))
        spec = files[str(spec)]
    path = Path(spec) if isinstance(spec, (str, Path)) else Path("<mapping>")
    if isinstance(spec, (str, Path)):
        if not path.is_file():
            raise ReproductionError(f"no reproduction file {path}", where=str(path))
        try:   # an untrusted file: the pipeline files' limits (size, nesting, aliases, expanded size)
            raw = read_yaml_file(path)
        except ReproductionError:
            raise
        except PipelineError as e:
            raise ReproductionError(e.message, where=str(path)) from None
    else:
        raw = dict(spec)
    if not isinstance(raw, dict):
        raise ReproductionError("a reproduction file is a mapping (paper:, tables:, ...)", where=str(path))
    unknown = sorted(set(raw) - _PAPER_KEYS)
    if unknown:
        raise ReproductionError(f"unknown top-level keys {unknown} (known: {sorted(_PAPER_KEYS)})", where=str(path))
    meta = dict(raw.get("paper") or {})
    pid = str(meta.get("id") or path.stem)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", pid):
        raise ReproductionError(f"paper id {pid!r} must be letters, digits, '_' or '-'", where=str(path))
    tables = raw.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise ReproductionError("'tables' must declare at least one table", where=str(path))
    return Paper(id=pid, meta=meta, path=path, raw=raw,
                 tables={str(k): _parse_table(str(k), v, path) for k, v in tables.items()})


def select(spec: Optional[str] = None, directory: Optional[Path] = None) -> List[Tuple[Paper, Table]]:
    """The tables ``PAPER[/TABLE]`` names (all tables of all papers for None)."""
    if not spec:
        return [(p, t) for pid in paper_files(directory) for p in [load_paper(pid, directory)]
                for t in p.tables.values()]
    pid, _, tkey = str(spec).partition("/")
    paper = load_paper(pid, directory)
    if not tkey:
        return [(paper, t) for t in paper.tables.values()]
    if tkey not in paper.tables:
        raise ReproductionError(f"paper {paper.id} declares no table {tkey!r} (declared: {', '.join(paper.tables)})",
                                where=str(paper.path))
    return [(paper, paper.tables[tkey])]


# -------------------------------------------------------------------------------------------- recorded
def recorded_path(paper: Paper) -> Path:
    """``recorded/<paper>.json`` beside the paper's reproduction file."""
    return paper.path.parent / "recorded" / f"{paper.id}.json"


def read_recorded(paper: Paper) -> Dict[str, Any]:
    """The recorded figures of a paper (``{"tables": {table: {tier: {...}}}}``), empty when none."""
    p = recorded_path(paper)
    if not p.is_file():
        return {"paper": paper.id, "tables": {}}
    try:
        data = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ReproductionError(f"the recorded figures are not UTF-8 text (byte {e.start}); record them again with "
                                "--record", where=str(p)) from None
    except RecursionError:
        raise ReproductionError("the recorded figures are not JSON of figures (nested too deeply); record them "
                                "again with --record", where=str(p)) from None
    except json.JSONDecodeError as e:
        raise ReproductionError(f"the recorded figures are not JSON ({e}); record them again with --record",
                                where=str(p)) from None
    if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
        raise ReproductionError("the recorded figures file has no 'tables'", where=str(p))
    return data


def _recorded_entry(paper: Paper, table: Table, tier: str) -> Dict[str, Any]:
    """The recorded entry of a table's tier, its figures checked: ``{system: {dataset label: {measure: a finite
    number}}}``; anything else is one error naming the file and the key."""
    p = recorded_path(paper)
    where = f"tables.{table.key}"
    entries = read_recorded(paper)["tables"].get(table.key, {})

    def bad(key: str, what: str, v: Any) -> ReproductionError:
        return ReproductionError(f"{key}: {what}, not {str(v)[:80]!r}; record the table again with --record",
                                 where=str(p))
    if not isinstance(entries, dict):
        raise bad(where, "a table's entry maps a tier to what was recorded", entries)
    entry = entries.get(tier, {})
    if not isinstance(entry, dict):
        raise bad(f"{where}.{tier}", "a tier's entry is an object", entry)
    figures = entry.get("figures") or {}
    if not isinstance(figures, dict):
        raise bad(f"{where}.{tier}.figures", "the figures map a system to its datasets' figures", figures)
    for system, by_label in figures.items():
        if not isinstance(by_label, dict):
            raise bad(f"{where}.{tier}.figures.{system}", "a system's figures map a dataset label to its measures",
                      by_label)
        for label, by_measure in by_label.items():
            if not isinstance(by_measure, dict):
                raise bad(f"{where}.{tier}.figures.{system}.{label}", "a dataset's figures map a measure to a number",
                          by_measure)
            for m, v in by_measure.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise bad(f"{where}.{tier}.figures.{system}.{label}.{m}", "a figure is a finite number", v)
    models = entry.get("llm_models") or {}
    if not isinstance(models, dict) or not all(isinstance(v, str) for v in models.values()):
        raise bad(f"{where}.{tier}.llm_models", "the LLM models map a system to a model name", models)
    return entry


# ------------------------------------------------------------------------------------------- running
@dataclass
class Cell:
    """One figure: system x dataset label x measure."""
    system: str
    dataset: str
    measure: str
    published: Optional[float]
    recorded: Optional[float]
    reproduced: Optional[float]
    tolerance: float
    drift: float
    status: str
    reason: str = ""
    failed: bool = False

    @property
    def delta_published(self) -> Optional[float]:
        if self.published is None or self.reproduced is None:
            return None
        return self.reproduced - self.published

    @property
    def delta_recorded(self) -> Optional[float]:
        if self.recorded is None or self.reproduced is None:
            return None
        return self.reproduced - self.recorded


@dataclass
class TableResult:
    """What running (or reading back) one table gave."""
    paper: str
    table: Table
    tier: str
    cells: List[Cell]
    seconds: Optional[float] = None
    manifest_path: Optional[Path] = None
    command: str = ""
    figures: Dict[str, Dict[str, Dict[str, float]]] = field(default_factory=dict)
    source_file: str = ""
    partial: bool = False                # only some systems ran (--systems): recorded figures are merged
    read_back: Tuple[str, ...] = ()      # systems whose runs were all read back from an earlier run's saved runs
    computed: Tuple[str, ...] = ()       # systems run now (at least one dataset)
    runs: Dict[str, Dict[str, str]] = field(default_factory=dict)   # {dataset label: {system: its saved run}}
    llm_models: Dict[str, str] = field(default_factory=dict)   # {LLM system run now: the LLM model it asked for}
    llm_usage: Dict[str, Dict[str, int]] = field(default_factory=dict)   # {LLM system run now: calls, unusable, ...}
    cpu_seconds: Optional[float] = None  # CPU time of this process and its finished children (workers): unlike the
    #                                      wall-clock seconds, hardly changed by other jobs on the cores
    cpu: Optional[str] = None            # the CPU of recorded figures (recorded_result)
    trained: List[Dict[str, Any]] = field(default_factory=list)   # models trained by this run (training.trainings)

    @property
    def failed(self) -> List[Cell]:
        return [c for c in self.cells if c.failed]


class _SaveRun(pt.Transformer):
    """The last stage of a system in the tree plan: writes its run (with a checksum) and passes it on."""

    def __init__(self, path: Path, name: str):
        self.path = path
        self.name = name

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        if len(inp) == 0:   # PyTerrier's validation runs pipelines on empty frames: that is not the run
            return inp
        write_run(inp, self.path, run_name=re.sub(r"[^A-Za-z0-9_.+-]+", "_", self.name) or "run",
                  what="the reproduction's saved run", checksum=True)
        return inp

    def __repr__(self) -> str:
        return f"SaveRun({self.name})"


def _saved(path: Optional[Path]) -> Optional[pd.DataFrame]:
    if path is None or not path.exists():
        return None
    if artifacts.discard_if_damaged(path, "saved run", missing_record_is_damage=False):
        return None
    try:
        run = pt.io.read_results(str(path))
        if len(run) == 0:   # what an earlier version saved of a validation call: computed again
            artifacts.discard(path)
            return None
        return run
    except Exception:  # a damaged file: computed again
        artifacts.discard(path)
        return None


def _covering(run: Optional[pd.DataFrame], topics: pd.DataFrame) -> Optional[pd.DataFrame]:
    """A saved run read back for ``topics``: its rows for those queries, or None (computed again) when it lacks
    one of them (saved for fewer queries: a tier whose ``topics`` grew, or a system that returned nothing for a
    query, which is then run again each time)."""
    if run is None:
        return None
    qids = set(topics["qid"].astype(str))
    have = run["qid"].astype(str)
    if not qids <= set(have):
        return None
    return run[have.isin(qids)].reset_index(drop=True)


def _released_run(system: System, vars_: Mapping[str, Any]) -> pd.DataFrame:
    """A released ranking read from the data directory: TREC, or ``ranked_lists_json`` (an object
    mapping a key to its ranked list of document ids or ``[docno, score]`` pairs; ``qid`` is a
    template over ``{key}`` and the dataset's ``vars``)."""
    run = system.run or {}
    rel = fill(run["path"], vars_)
    if Path(rel).is_absolute() or ".." in Path(rel).parts or "\x00" in rel:
        raise ReproductionError(f"system {system.name}: run path {rel} must be relative to the data directory")
    path = data_dir() / rel
    if not os.path.realpath(path).startswith(os.path.realpath(data_dir()).rstrip(os.sep) + os.sep):
        raise ReproductionError(f"system {system.name}: run path {rel} leads outside the data directory "
                                f"({data_dir()}) through a link", where=str(path))
    if run.get("format", "trec") == "trec":
        if not path.is_file():
            raise ReproductionError(f"system {system.name}: the released run {path} is missing", where=str(path))
        return pt.io.read_results(str(path))
    ranked = read_json(path, expect=dict)
    rows = []
    for key, cands in ranked.items():
        qid = fill(run.get("qid", "{key}"), {**vars_, "key": key})
        for rank, c in enumerate(cands):
            docno = c[0] if isinstance(c, (list, tuple)) else c
            rows.append((qid, str(docno), float(len(cands) - rank), rank))
    return pd.DataFrame(rows, columns=["qid", "docno", "score", "rank"])


def _save_root(paper: Paper, table: Table, tier: str) -> Path:
    return artifacts.work_dir() / "reproduce" / paper.id / tier / table.key


def _systems_of(table: Table, tier: str) -> List[System]:
    """The rows a tier runs: every row in the full tier, the rows marked for it in the others."""
    return [s for s in table.systems.values() if tier == "full" or tier in s.tiers]


def _agreement_pairs(system: System, dsid: str, topics: pd.DataFrame, where: str):
    """``(frames, pairs)`` of an agreement row: each source's judgements on the tier's queries (None for a
    pipeline source) and the pairs compared, ``qid``, ``docno`` (those every judgement set grades, in (qid,
    docno) order; ``sample`` of them drawn with ``seed`` when set)."""
    spec = system.agreement
    qids = set(topics["qid"].astype(str))
    frames: List[Optional[pd.DataFrame]] = []
    for src in spec["between"]:
        if isinstance(src, str):
            try:
                j = judgements(dsid, src)
            except KeyError as e:
                raise ReproductionError(str(e.args[0]), where=where) from None
            frames.append(j[j["qid"].isin(qids)])
        else:
            frames.append(None)
    pairs = None
    for f in frames:
        if f is not None:
            keys = f[["qid", "docno"]].drop_duplicates()
            pairs = keys if pairs is None else pairs.merge(keys, on=["qid", "docno"])
    pairs = pairs.sort_values(["qid", "docno"]).reset_index(drop=True)
    if spec["sample"] is not None and spec["sample"] < len(pairs):
        rng = np.random.default_rng(spec["seed"])
        pairs = pairs.iloc[np.sort(rng.choice(len(pairs), spec["sample"], replace=False))].reset_index(drop=True)
    return frames, pairs


def _agreement_input(pairs: pd.DataFrame, topics: pd.DataFrame) -> pd.DataFrame:
    """What a labelling pipeline of an agreement row gets: the pairs with their queries' text."""
    return pairs.merge(topics[["qid", "query"]].astype({"qid": str}), on="qid")


def _agreement_figures(system: System, table: Table, dsid: str, dataset: Mapping[str, Any], topics: pd.DataFrame,
                       built: Mapping[str, Any], paper: Paper) -> Dict[str, float]:
    """The table's agreement measures between the two label sources of ``system`` on the judged pairs of the
    tier's queries (the pairs every judgement set named grades; ``sample`` of them when set), pooled or the mean
    over queries (``per_query``).  A pipeline source labels those pairs (its input: ``qid``, ``query``, ``docno``)
    and gives its ``column`` (``{facet}``-style fields filled from the dataset's ``vars``); a pair it leaves
    unlabelled (NaN: an unusable LLM answer) is left out."""
    spec = system.agreement
    where = f"{paper.path}: table {table.key}, system {system.name!r}"
    frames, pairs = _agreement_pairs(system, dsid, topics, where)
    labelled = pairs
    for i, (src, f) in enumerate(zip(spec["between"], frames)):
        if f is None:
            out = built[src["pipeline"]](_agreement_input(pairs, topics))
            column = fill(src["column"], dataset.get("vars") or {})
            if column not in out.columns:
                raise ReproductionError(f"the pipeline {src['pipeline']!r} gives no column {column!r} (it gives: "
                                        f"{', '.join(map(str, out.columns))})", where=where)
            f = out[["qid", "docno", column]].rename(columns={column: "label"})
            f = f.assign(qid=f["qid"].astype(str), docno=f["docno"].astype(str))
        labelled = labelled.merge(f[["qid", "docno", "label"]].rename(columns={"label": f"label{i}"}),
                                  on=["qid", "docno"], how="left")
    labelled = labelled.dropna(subset=["label0", "label1"])
    result: Dict[str, float] = {}
    for m in table.measures:
        if spec["per_query"]:
            per = [agreement_measure(m, g["label0"], g["label1"]) for _, g in labelled.groupby("qid")]
            per = [v for v in per if v == v]
            result[m] = float(np.mean(per)) if per else float("nan")
        else:
            result[m] = agreement_measure(m, labelled["label0"], labelled["label1"])
    return result


def _random_runs(system: System, pool: pd.DataFrame) -> List[pd.DataFrame]:
    """The ``trials`` seeded shufflings of each query's pool (``pool``: the dataset's scoreddocs for the
    table's queries) of a ``random`` row."""
    pool = pool[["qid", "docno"]].sort_values(["qid", "docno"], kind="stable").reset_index(drop=True)
    rng = np.random.default_rng(system.random["seed"])
    runs = []
    for _ in range(system.random["trials"]):
        # a random key per document, ranked within its query: one uniform permutation of each pool
        run = pool.assign(score=rng.random(len(pool)))
        run["rank"] = run.groupby("qid")["score"].rank(ascending=False, method="first").astype(int) - 1
        runs.append(run)
    return runs


def _runnable(system: System, llm: Optional[str]) -> Optional[str]:
    """None, or what the system needs that is not given."""
    if not system.runs_here:
        return _needs_text(system) or "a declaration"
    if "llm" in system.needs and not llm:
        return "needs " + _LLM_NEED
    return None


def _needs_text(system: System) -> str:
    """What a row lacks, in one line (its ``needs``, every kind)."""
    return "; ".join(x for kind in NEEDS_KINDS for x in system.needs.get(kind, ()))


def _one_line(text: Optional[str]) -> str:
    """The first sentence of a declared account (a row's ``differs``), for the matrix."""
    text = " ".join((text or "").split())
    m = re.search(r"(?<=[a-z0-9)])\. (?=[A-Z(])", text)
    return text[:m.start()] if m else text.rstrip(".")


def cell_status(table: Table, system: System, published: Optional[float], figure: Optional[float],
                llm: Optional[str]) -> Tuple[str, str]:
    """``(status, reason)`` of one cell, derived from the declaration and the figure (never typed): a row that
    cannot run says what it lacks (``needs data``, else ``needs checkpoint``, else ``needs LLM``); an LLM row without
    ``--llm`` (and no figure) ``needs LLM``; a row without a published figure is ``not in the paper``; a comparable
    row (``reproduces: true``) is ``reproduced`` within the tolerance, else ``differs``; any other row is the
    ``stand-in`` or ``other data`` its declaration names, shown with its figure and never compared."""
    if not system.runs_here:
        status = STATUS_NEEDS_DATA if "data" in system.needs else \
            STATUS_NEEDS_CHECKPOINT if "checkpoint" in system.needs else STATUS_NEEDS_LLM
        return status, _needs_text(system)
    if "llm" in system.needs and not llm and figure is None:
        return STATUS_NEEDS_LLM, "needs " + _LLM_NEED
    if published is None:
        return STATUS_UNPUBLISHED, _one_line(system.differs)
    kind, why = table.comparability(system)
    if kind == "same":
        tol = system.tolerance if system.tolerance is not None else table.tolerance
        if figure is not None and abs(figure - published) <= tol + 1e-9:
            return STATUS_REPRODUCED, _one_line(system.differs)
        return STATUS_DIFFERS, _one_line(system.differs or table.differs)
    return kind, why


def _topics(table: Table, tier: str, dataset: Mapping[str, Any]):
    topics, qrels = topics_and_qrels(dataset["id"], dataset.get("topics_variant"))
    n = (table.tiers.get(tier) or {}).get("topics")
    n = (dataset.get(tier) or {}).get("topics", n)
    if n:
        keep = sorted(set(qrels["qid"].astype(str)) & set(topics["qid"]))[:int(n)]
        topics = topics[topics["qid"].isin(keep)].reset_index(drop=True)
    return topics, qrels


def dataset_id(dataset: Mapping[str, Any], tier: str) -> str:
    """The ir_datasets id a table's dataset entry (``table.datasets[label]``) runs on in ``tier``."""
    return (dataset.get(tier) or {}).get("id", dataset["id"])


def _compute(paper: Paper, table: Table, tier: str, llm: Optional[str], trusted: bool,
             cfg: PipelineConfig, fresh: bool = False
             ) -> Tuple[Dict[str, Dict[str, Dict[str, float]]], Dict[str, Any], Dict[str, Any], Dict[str, bool],
                        Dict[str, List[Any]]]:
    """Runs (or reads back) every runnable system of the table on each dataset; returns the figures
    ``{system: {dataset label: {measure: value in the paper's units}}}``, the built systems, the runs and,
    per system, whether every one of its runs was read back from an earlier run's saved run (never when
    ``fresh``: every run is computed again and saved anew)."""
    save_root = _save_root(paper, table, tier)
    systems = [s for s in _systems_of(table, tier) if _runnable(s, llm) is None]
    figures: Dict[str, Dict[str, Dict[str, float]]] = {}
    built_all: Dict[str, Any] = {}
    every: Dict[str, List[Any]] = {}
    run_files: Dict[str, Dict[str, str]] = {}
    read_back: Dict[str, bool] = {}
    for label, ds in table.datasets.items():
        dsid = dataset_id(ds, tier)
        topics, qrels = _topics(table, tier, ds)
        if not table.is_agreement:
            _measures.parse(table.measures, dataset=dsid)   # an unknown measure fails before anything runs
        exprs = {s.name: s.pipeline for s in systems if s.pipeline is not None}
        exprs.update({f"{s.name}:{i}": src["pipeline"] for s in systems if s.agreement is not None
                      for i, src in enumerate(s.agreement["between"]) if isinstance(src, dict)})
        context = make_context(cfg, dsid, None, trusted)
        built = build_all(cfg, list(exprs.values()), context=context) if exprs else {}
        inputs, names = [], []

        def put(name: str, m: str, v: Any, label: str = label) -> None:
            if v is not None and v == v:
                figures.setdefault(name, {}).setdefault(label, {})[m] = round(float(v) * table.scale, 6)
        for s in systems:
            if s.agreement is not None:
                for m, v in _agreement_figures(s, table, dsid, ds, topics, built, paper).items():
                    put(s.name, m, v)
                read_back[s.name] = False
                continue
            if s.random is not None:
                continue
            if s.run is not None:
                inputs.append(_released_run(s, dict(ds.get("vars") or {})))
            else:
                system = built[s.pipeline]
                # keyed by what the system computes: for an LLM row, the LLMs it asks too (another model's or
                # server's saved run is never read back as this one's), as an experiment's saved runs are
                path = run_path(save_root, dsid, s.name, cfg, s.pipeline, llm_key(system))
                run_files.setdefault(label, {})[s.name] = str(path)
                saved = None if fresh else _covering(_saved(path), topics)
                read_back[s.name] = read_back.get(s.name, True) and saved is not None
                built_all.setdefault(s.name, system)
                every.setdefault(s.name, []).append(system)   # one per dataset: each counts its own LLM calls
                inputs.append(saved if saved is not None else system >> _SaveRun(path, s.name))
            names.append(s.name)

        randoms = [s for s in systems if s.random is not None]
        pool = build_all(cfg, ["pool"], context=context)["pool"](topics) if randoms else None
        if randoms and len(pool) == 0:
            raise ReproductionError(f"system {randoms[0].name}: 'random' shuffles the dataset's pool, and {dsid} "
                                    "has none for these queries", where=str(paper.path))
        for s in randoms:    # the mean of each measure over the shufflings (DORIS-MAE's random row)
            trials = _random_runs(s, pool)
            res = Experiment(trials, topics, qrels, table.measures, names=[f"{s.name}:{i}" for i in range(len(trials))],
                             dataset=dsid, verbose=False)
            for m in table.measures:
                put(s.name, m, pd.to_numeric(res[m], errors="coerce").mean())
            read_back[s.name] = False
        if not inputs:
            continue
        res = Experiment(inputs, topics, qrels, table.measures, names=names, dataset=dsid, plan="tree",
                         verbose=False)
        for _, row in res.iterrows():
            for m in table.measures:
                put(row["name"], m, row[m])
    return figures, built_all, run_files, read_back, every


def _llm_model(cfg: PipelineConfig) -> str:
    """The model the LLM systems of a config ask the server for (the ``llm:`` settings, then the environment)."""
    try:
        return settings_from((cfg.settings or {}).get("llm")).model
    except ValueError as e:   # the components report a bad llm setting with its file when they are built
        return f"unknown ({e})"


def _asked_models(systems: Mapping[str, List[Any]], default: str) -> Dict[str, str]:
    """Per system, the model its LLM components asked for, as they resolved it (the config's ``llm:``, a
    component's own ``llm=``, the environment; several joined with " + "); ``default`` for a system built
    without one here (an agreement row's labeller)."""
    out = {}
    for name, built in systems.items():
        models = sorted({str(c.sci_llm_settings().model) for b in built for c in llm_components(b)})
        out[name] = " + ".join(models) if models else default
    return out


def _usage(systems: Mapping[str, List[Any]], llm: Optional[str]) -> Dict[str, Dict[str, int]]:
    """Per system that asked an LLM in this run: its LLM components' counters summed over its datasets (calls,
    unusable answers, repaired rankings, tokens, ...; :mod:`pyterrier_sci.llm.accounting`)."""
    if not llm or not systems:
        return {}
    names = [n for n, built in systems.items() for _ in built]
    report = usage_report([b for built in systems.values() for b in built], names=names)
    counters = [c for c in report.columns if c not in ("name", "component", "model", "cost")]
    out = {}
    for name, rows in report.groupby("name", sort=True):
        total = {c: int(rows[c].sum()) for c in counters}
        if total.get("calls") or total.get("cache_hits"):
            out[str(name)] = total
    return out


def _cells(paper: Paper, table: Table, tier: str, figures: Mapping[str, Any], llm: Optional[str],
           llm_model: Optional[str] = None, asked: Optional[Mapping[str, str]] = None,
           rows: Optional[str] = None) -> List[Cell]:
    """The cells of the rows of ``tier`` (of ``rows``, another tier's, when given) against its recorded figures."""
    entry = _recorded_entry(paper, table, tier)
    recorded = entry.get("figures") or {}
    recorded_models = entry.get("llm_models") or {}
    cells = []
    for s in _systems_of(table, rows or tier):
        tol = s.tolerance if s.tolerance is not None else table.tolerance
        drift = s.drift if s.drift is not None else (table.drift if table.drift is not None else tol)
        for label in table.datasets:
            for m in table.measures:
                pub = s.published.get(label, {}).get(m)
                rec = recorded.get(s.name, {}).get(label, {}).get(m)
                rep = figures.get(s.name, {}).get(label, {}).get(m)
                status, reason = cell_status(table, s, pub, rep, llm)
                if status in _NEEDS:
                    cells.append(Cell(s.name, label, m, pub, rec, None, tol, drift, status, reason))
                    continue
                failed = False
                other = recorded_models.get(s.name)
                now = (asked or {}).get(s.name, llm_model)
                if rep is not None and "llm" in s.needs and (now or other):
                    reason = f"with the LLM {now or other!r}; " + reason
                if rep is not None and rec is not None and other is not None and other != now:
                    # another LLM's figure: a difference says nothing about the toolkit, so it is not a drift
                    reason = (f"recorded with the LLM {other!r}, this run asked {now!r}: not compared; "
                              + reason)
                    rec = None
                if rep is not None and rec is not None and abs(rep - rec) > drift + 1e-9:
                    failed, reason = True, f"drifted {rep - rec:+.{table.digits}f} from the recorded figure " \
                                           f"(tolerance {drift:g}); " + reason
                if status == STATUS_DIFFERS:
                    failed = True
                    reason = f"declared to reproduce the published figure within {tol:g}; " + reason
                cells.append(Cell(s.name, label, m, pub, rec, rep, tol, drift, status, reason.strip().rstrip(";"),
                                  failed))
    return cells


def _command(paper: Paper, table: Table, tier: str) -> str:
    return f"pyterrier-sci reproduce {paper.id}/{table.key} --tier {tier}"


def _only(table: Table, systems: Optional[Sequence[str]], paper: Paper) -> Table:
    """The table restricted to ``systems`` (names; None: all)."""
    if not systems:
        return table
    unknown = [n for n in systems if n not in table.systems]
    if unknown:
        raise ReproductionError(f"table {table.key} has no system {', '.join(map(repr, unknown))} "
                                f"(declared: {', '.join(table.systems)})", where=str(paper.path))
    return replace(table, systems={n: s for n, s in table.systems.items() if n in systems})


def run_table(paper: Any, table: Any, tier: str = "full", llm: Optional[str] = None,
              trusted: bool = False, systems: Optional[Sequence[str]] = None, verify: bool = False) -> TableResult:
    """Runs one table (``table`` a key or a :class:`Table`) in a tier: reuses saved runs and trained
    models, writes the table's manifest, compares with the published and recorded figures.
    ``systems`` runs only those systems (their figures are then merged into what is recorded).  The medium tier
    runs the rows marked ``medium`` as the full tier runs them, compared with the full tier's
    recorded figures.  ``verify`` computes every run again (no saved run is read back; trained models and indexes
    are reused) and fails a cell whose recorded figure it does not reproduce within the drift bound, or which has
    no recorded figure to verify."""
    paper = load_paper(paper)
    table = paper.tables[table] if isinstance(table, str) else table
    if tier not in TIERS:
        raise ReproductionError(f"unknown tier {tier!r} (tiers: {', '.join(TIERS)})")
    partial = bool(systems)
    table = _only(table, systems, paper)
    if tier == "medium":   # a part of the full tier: its settings, queries, saved runs and recorded figures
        table = replace(table, systems={s.name: s for s in _systems_of(table, "medium")})
        tier, partial = "full", True
    for ds in table.datasets.values():
        check_dataset(dataset_id(ds, tier), where=f"{paper.path}: table {table.key}")
    cfg = paper.config(tier, llm)
    start, cpu_start, mark = time.perf_counter(), cpu_time(), len(trainings())
    with trusting_urls(llm or ""):   # --llm URL: that URL may get the key; the file's expressions stay untrusted
        figures, systems, run_files, read_back, every = _compute(paper, table, tier, llm, trusted, cfg, fresh=verify) \
            if table.systems else ({}, {}, {}, {}, {})   # a medium run of a table without medium rows
    seconds, cpu_seconds, trained = time.perf_counter() - start, cpu_time() - cpu_start, trainings(mark)
    model = _llm_model(cfg) if llm else None
    asked = _asked_models(every, model) if llm else {}
    cells = _cells(paper, table, tier, figures, llm, model, asked)
    if verify:
        for c in cells:
            if c.status in _NEEDS or c.failed:
                continue
            if c.recorded is None and "not compared" not in c.reason:
                c.failed, c.reason = True, f"nothing recorded in the {tier} tier to verify (record it: --record); " \
                                           + c.reason
            elif c.reproduced is None:
                c.failed, c.reason = True, f"recorded {c.recorded}, not reproduced by this run; " + c.reason
    m = manifest.pipeline_manifest(systems, cfg, [dataset_id(d, tier) for d in table.datasets.values()],
                                   kind="reproduction",
                                   extra={"reproduction": {"paper": paper.id, "table": table.key, "tier": tier,
                                                           "number": table.number, "source": table.source,
                                                           "file": str(paper.path), "command": _command(paper, table,
                                                                                                        tier),
                                                           "seconds": round(seconds, 2),
                                                           "cpu_seconds": round(cpu_seconds, 2), "runs": run_files,
                                                           "verify": verify}})
    usage = _usage(every, llm)
    if usage:
        m["llm_usage"] = usage
    m["figures"] = [{"system": c.system, "dataset": c.dataset, "measure": c.measure, "published": c.published,
                     "recorded": c.recorded, "reproduced": c.reproduced, "status": c.status} for c in cells]
    path = manifest.write_manifest(m, _save_root(paper, table, tier) / "manifest.json", "the table's manifest")
    command = _command(paper, table, tier) + (f" --systems {','.join(table.systems)}" if partial else "")
    read_back_names = tuple(sorted(n for n, back in read_back.items() if back))
    llm_models = {n: asked.get(n, model) for n, s in table.systems.items() if "llm" in s.needs and n in figures} \
        if llm else {}
    if llm_models:
        command += f" --llm {llm}"
    usage = {n: u for n, u in usage.items() if n in llm_models and n not in read_back_names}
    return TableResult(paper.id, table, tier, cells, seconds, path, command, figures, str(paper.path), partial,
                       read_back_names, tuple(sorted(n for n, back in read_back.items() if not back)), run_files,
                       llm_models, usage, cpu_seconds, trained=trained)


def cpu_time() -> float:
    """Seconds of CPU time (user and system) of this process and of its children that have ended and been
    waited for (the ColBERT and llama.cpp workers): what a table costs, whatever else shares the cores."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _on_ray(jobs: List[Tuple[Paper, Table]], tier: str, llm: Optional[str], address: Optional[str],
            num_cpus: Optional[int], systems: Optional[Sequence[str]] = None) -> List[TableResult]:
    """The tables' systems as Ray tasks, on a local Ray or the cluster at ``address``: one task per system
    that runs a pipeline (all tables at once), each saving its runs in the work directory, whose indexes and
    trained models the tasks share (built once, under the artifact lock); then each table is assembled on the
    driver from those saved runs (released runs, random rows and agreement rows are read or computed there), with its
    manifest.  A table's time is its slowest task's plus the assembly.  ``systems``: only those (one table)."""
    import ray

    def one(path: str, key: str, name: str) -> TableResult:
        return run_table(path, key, tier=tier, llm=llm, systems=[name])

    with ray_session(address, num_cpus):
        task = ray.remote(num_cpus=1)(one)
        handles = [[task.remote(str(p.path), t.key, s.name) for s in _systems_of(_only(t, systems, p), tier)
                    if s.pipeline is not None and _runnable(s, llm) is None] for p, t in jobs]
        parts = [ray.get(h) for h in handles]
    results = []
    for (paper, table), done in zip(jobs, parts):
        r = run_table(paper, table.key, tier=tier, llm=llm, systems=systems)
        computed = sorted({n for x in done for n in x.computed} | set(r.computed))
        results.append(replace(r, seconds=max([x.seconds or 0.0 for x in done], default=0.0) + (r.seconds or 0.0),
                               cpu_seconds=sum(x.cpu_seconds or 0.0 for x in done) + (r.cpu_seconds or 0.0),
                               computed=tuple(computed), read_back=tuple(n for n in r.read_back if n not in computed)))
    return results


def reproduce(spec: Optional[str] = None, tier: str = "quick", llm: Optional[str] = None, on_ray: bool = False,
              ray_address: Optional[str] = None, num_cpus: Optional[int] = None,
              directory: Optional[Path] = None, systems: Optional[Sequence[str]] = None,
              verify: bool = False) -> List[TableResult]:
    """Runs the tables ``spec`` names (``PAPER[/TABLE]``, all for None) in ``tier`` (only ``systems``
    of one table when given; ``verify``: see :func:`run_table`)."""
    jobs = select(spec, directory)
    if systems and len(jobs) != 1:
        raise ReproductionError("--systems needs one table: PAPER/TABLE")
    if on_ray:
        if verify:
            raise ReproductionError("--verify runs on this machine (a Ray task would read back its saved runs)")
        return _on_ray(jobs, tier, llm, ray_address, num_cpus, systems)
    return [run_table(p, t, tier=tier, llm=llm, systems=systems, verify=verify) for p, t in jobs]


def record(results: Sequence[TableResult]) -> List[Path]:
    """Writes each result's figures, time, CPU and command into ``recorded/<paper>.json`` (atomically,
    under a lock); only what a run produced is recorded."""
    written = []
    by_paper: Dict[str, List[TableResult]] = {}
    for r in results:
        if r.partial and not r.figures:   # a medium run of a table without medium rows: nothing to record
            continue
        by_paper.setdefault(r.source_file, []).append(r)
    env = environment()
    for source, rs in by_paper.items():
        paper = load_paper(Path(source))
        path = recorded_path(paper)
        with artifacts.lock(path, "the recorded figures"):
            data = read_recorded(paper)
            for r in rs:
                figures, seconds = dict(r.figures), round(r.seconds or 0.0, 1)
                cpu = None if r.cpu_seconds is None else round(r.cpu_seconds, 1)
                before = _recorded_entry(paper, r.table, r.tier)
                cpu_before = before.get("cpu_seconds")
                command = r.command + " --record"
                commands = [command]
                if r.partial and before:      # the other systems' figures stay; the time is the sum of the runs
                    figures = {**(before.get("figures") or {}), **figures}
                    seconds = round(seconds + float(before.get("seconds") or 0.0), 1)
                    cpu = None if cpu is None or cpu_before is None else round(cpu + float(cpu_before), 1)
                    # every run that recorded a part (a record of before this list names only its last)
                    commands = [c for c in before.get("commands") or [before.get("command")] if c] + commands
                elif r.read_back and before.get("seconds") is not None:
                    # saved runs read back cost nothing now: their time is the earlier record's; systems run now
                    # add theirs, and a rerun that computed nothing keeps the earlier time
                    earlier = float(before["seconds"])
                    seconds = round(earlier + seconds, 1) if r.computed else earlier
                    cpu = None if cpu is None or cpu_before is None else \
                        (round(float(cpu_before) + cpu, 1) if r.computed else float(cpu_before))
                entry = {"read_back": list(r.read_back)} if r.read_back else {}
                # which LLM each LLM row's figures are from (a later run with another one is not compared with them)
                models = {**((before.get("llm_models") or {}) if r.partial else {}), **r.llm_models}
                if models:
                    entry["llm_models"] = dict(sorted(models.items()))
                # what the LLM rows' calls gave (a row read back from its saved run keeps the earlier record's)
                usage = {**{n: u for n, u in (before.get("llm_usage") or {}).items() if n in models}, **r.llm_usage}
                if usage:
                    entry["llm_usage"] = dict(sorted(usage.items()))
                if r.read_back and before.get("seconds") is None:
                    entry["read_back_untimed"] = True
                # the models this run trained first, and how long each took (part of its time); a part run keeps
                # the other parts' (a dry run estimates a run from empty with them)
                trained = {**({t["model"]: t for t in before.get("trained") or []} if r.partial or r.read_back
                              else {}), **{t["model"]: t for t in r.trained}}
                entry["trained"] = sorted(trained.values(), key=lambda t: t["model"])
                data["tables"].setdefault(r.table.key, {})[r.tier] = jsonable({**entry,
                    "figures": figures, "seconds": seconds, **({"cpu_seconds": cpu} if cpu is not None else {}),
                    "cpu": env["cpu"],
                    "versions": {k: env["versions"].get(k) for k in ("pyterrier", "torch", "sentence-transformers",
                                                                       "pyterrier-pisa", "ir-measures")
                                 if k in env["versions"]},
                    "git": (env.get("git") or {}).get("commit"),
                    "date": datetime.date.today().isoformat(), "command": command,
                    **({"commands": commands} if len(commands) > 1 else {}),
                    "load_average": [round(x, 2) for x in os.getloadavg()]})   # others' work slows the timing
            data["paper"] = paper.id
            artifacts.atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n", "the recorded figures")
        written.append(path)
    return written


# ------------------------------------------------------------------------------------------- dry run
def dry_run_table(paper: Paper, table: Table, tier: str = "quick", llm: Optional[str] = None) -> Dict[str, Any]:
    """What a run of the table would do: systems to run or read back, models trained on first use,
    the LLM calls and cost (through :func:`pyterrier_sci.llm.dryrun.dry_run`: LLM systems run with no
    request sent) and the time the last recorded run took.  Nothing is trained: an LLM row whose first
    stage needs a model not trained yet is listed with that model (``deferred``), its calls not counted."""
    cfg = paper.config(tier, llm)
    save_root = _save_root(paper, table, tier)
    rows, reports, deferred = [], [], []

    def defer(row, e: TrainingDeferred) -> None:
        row["action"] += f" (LLM calls not counted: the run first trains or builds {e.what})"
        deferred.append({"system": f"{table.key}/{row['system']}", "dataset": row["dataset"], "model": e.what,
                         "path": str(e.path)})

    def counted(system, inp, row) -> None:
        """Runs ``system`` on ``inp`` with no request sent; a model its first stage would train first is not
        trained (:func:`~pyterrier_sci.training.no_training`): the row says so and its calls are not counted."""
        try:
            with no_training():
                system(inp)
        except TrainingDeferred as e:
            defer(row, e)
            return
        reports.append(run.report([system], [f"{table.key}/{row['system']}"], dataset=row["dataset"]))

    def built(pipeline, dsid):
        """The LLM pipeline built (no model trained: a :class:`TrainingDeferred` instead)."""
        with no_training():
            # --llm trusts that URL only, never the file's expressions (as a run: run_table)
            return build_all(cfg, [pipeline], context=make_context(cfg, dsid, None, False))[pipeline]

    # one dry run for the whole table: a call repeated on another dataset (the same topics) counts as
    # cached, as the response cache answers it in a real run
    with dry_run() as run:
        for label, ds in table.datasets.items():
            dsid = dataset_id(ds, tier)
            check_dataset(dsid, where=f"{paper.path}: table {table.key}")
            for s in _systems_of(table, tier):
                missing = _runnable(s, llm)
                # an LLM row is built first: its saved run is keyed by the LLMs it asks (llm_key), as a run keys it;
                # one whose model is not trained yet has no saved run either (a row's code keys it unbuilt)
                system, untrained = None, None
                if s.pipeline and "llm" in s.needs:
                    try:
                        system = built(s.pipeline, dsid)
                    except TrainingDeferred as e:
                        untrained = e
                path = run_path(save_root, dsid, s.name, cfg, s.pipeline, llm_key(system) if system is not None
                                else None) if s.pipeline and untrained is None else None
                if s.run is not None:
                    what = "read the released run " + fill(s.run["path"], ds.get("vars") or {})
                elif path is not None and path.exists():
                    what = f"read back its saved run {path}"
                elif s.random is not None:
                    what = f"shuffle each pool {s.random['trials']} times (seed {s.random['seed']}) and average"
                elif s.agreement is not None:
                    a = s.agreement
                    what = ("agreement between " + " and ".join(x if isinstance(x, str) else "the labels of " +
                                                                x["pipeline"] for x in a["between"]) +
                            (f" on {a['sample']} sampled pairs (seed {a['seed']})" if a["sample"] else "") +
                            (", the mean over queries" if a["per_query"] else ""))
                elif s.pipeline is None:
                    what = "-"
                else:
                    what = "run " + s.pipeline
                rows.append({"table": table.key, "dataset": label, "system": s.name,
                             "action": what if missing is None or s.pipeline is None else f"{what} (LLM: counted only)",
                             "needs": missing or ""})
                if untrained is not None:
                    defer(rows[-1], untrained)
                if system is not None and not (path is not None and path.exists()):
                    topics, _ = _topics(table, tier, ds)
                    counted(system, topics, rows[-1])
                if s.agreement is not None and "llm" in s.needs:   # its labelling pipeline on the pairs it compares
                    topics, _ = _topics(table, tier, ds)
                    _, pairs = _agreement_pairs(s, dsid, topics, f"{paper.path}: table {table.key}")
                    for src in s.agreement["between"]:
                        if isinstance(src, dict):
                            try:
                                system = built(src["pipeline"], dsid)
                            except TrainingDeferred as e:
                                defer(rows[-1], e)
                                continue
                            counted(system, _agreement_input(pairs, topics), rows[-1])
    models = {name: dict(cfg.components.get(name) or {})      # with the tier's overrides
              for name in (paper.raw.get("models") or {})
              if any(re.search(rf"\b{re.escape(name)}\b", s.pipeline or "") for s in _systems_of(table, tier))}
    rec = _recorded_entry(paper, table, tier)
    return {"rows": rows, "models": models, "llm": reports, "deferred": deferred,
            "recorded_seconds": rec.get("seconds"), "recorded_cpu": (rec.get("cpu") or {}).get("model"),
            "recorded_trained": rec.get("trained")}


def _known_trainings(directory: Path) -> Dict[str, Dict[str, Any]]:
    """``{model folder: {"seconds", "table"}}``: every training a record of the papers in ``directory`` timed."""
    out: Dict[str, Dict[str, Any]] = {}
    for pid in paper_files(directory):
        paper = load_paper(pid, directory)
        for key, tiers in read_recorded(paper)["tables"].items():
            for tier, entry in (tiers or {}).items() if isinstance(tiers, dict) else ():
                for t in (entry or {}).get("trained") or [] if isinstance(entry, dict) else []:
                    if isinstance(t, dict) and isinstance(t.get("seconds"), (int, float)):
                        out.setdefault(str(t.get("model")), {"seconds": t["seconds"],
                                                             "table": f"{pid}/{key} ({tier} tier)"})
    return out


# -------------------------------------------------------------------------------------------- output
def _f(v: Optional[float], digits: int = 2, sign: bool = False) -> str:
    if v is None:
        return "-"
    if abs(v) < 0.5 * 10 ** -digits:
        v = 0.0             # no "-0.00"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def print_results(results: Sequence[TableResult], file: Any = None) -> None:
    out = file or sys.stdout
    for r in results:
        t = r.table
        print(f"\n{r.paper} {t.key} (the paper's Table {t.number}{': ' + t.title if t.title else ''}), "
              f"tier {r.tier}, {r.seconds or 0:.1f} s", file=out)
        rows = [{"system": c.system, "dataset": c.dataset, "measure": c.measure,
                 "published": _f(c.published, t.digits), "recorded": _f(c.recorded, t.digits),
                 "reproduced": _f(c.reproduced, t.digits), "Δ published": _f(c.delta_published, t.digits, True),
                 "Δ recorded": _f(c.delta_recorded, t.digits, True),
                 "status": ("FAIL: " if c.failed else "") + c.status} for c in r.cells]
        if not rows:
            print(f"  no system of this table runs on the {r.tier} tier (the full tier lists each row with what it "
                  "needs)", file=out)
        else:
            with pd.option_context("display.max_columns", None, "display.width", 250):
                print(pd.DataFrame(rows).to_string(index=False), file=out)
        for c in r.failed:
            print(f"  FAIL {c.system} {c.dataset} {c.measure}: {c.reason}", file=out)
        print(f"  manifest: {r.manifest_path}", file=out)


_COMPARABLE = (STATUS_REPRODUCED, STATUS_DIFFERS)
_PAPER_NAMES = {"sciface": "SciFACE", "mir": "MIR", "doris_mae": "DORIS-MAE", "prism": "PRISM", "hlm_cite": "HLM-Cite"}


def status_counts(results: Sequence[TableResult]) -> Dict[str, Dict[str, int]]:
    """``{paper: {status: cells}}`` over the published cells (:data:`STATUSES`, with ``cells``: their number, and
    ``not in the paper``: the cells of rows the paper does not report), and ``all`` summed over the papers."""
    out: Dict[str, Dict[str, int]] = {}
    for r in results:
        for c in r.cells:
            for key in (r.paper, "all"):
                counts = out.setdefault(key, {**{st: 0 for st in STATUSES}, "cells": 0, STATUS_UNPUBLISHED: 0})
                if c.published is None:
                    counts[STATUS_UNPUBLISHED] += 1
                else:
                    counts["cells"] += 1
                    counts[c.status] += 1
    return out


def summary_line(counts: Mapping[str, int]) -> str:
    """One paper's (or all papers') counts in one line."""
    shown = [f"{counts[st]} {'differ' if st == STATUS_DIFFERS else st}" for st in STATUSES]
    return (f"{counts['cells']} published cells: " + " / ".join(shown) +
            f"; {counts[STATUS_UNPUBLISHED]} more cells in rows the paper does not report")


def _row_status(cells: Sequence[Cell]) -> str:
    statuses = [c.status for c in cells]
    distinct = list(dict.fromkeys(statuses))
    text = distinct[0] if len(distinct) == 1 else ", ".join(f"{statuses.count(x)} {x}" for x in distinct)
    return ("FAIL: " if any(c.failed for c in cells) else "") + text


def _rerun(r: TableResult, name: str) -> str:
    """The command that reruns exactly this row (none for a row that cannot run here)."""
    system = r.table.systems[name]
    if not system.runs_here:
        return ""
    tier = "full" if r.tier == "full" or r.tier not in system.tiers else r.tier
    return (f"pyterrier-sci reproduce {r.paper}/{r.table.key} --tier {tier} --systems {name}"
            + (" --llm URL" if "llm" in system.needs else ""))


def matrix_rows(r: TableResult) -> List[Dict[str, str]]:
    """One row per system of a table: its cells' published figures, ours, Δ (comparable cells only: a stand-in's
    or other data's figure is never compared), the status, the reason in one line and the command that reruns it."""
    t, rows = r.table, []
    by_system: Dict[str, List[Cell]] = {}
    for c in r.cells:
        by_system.setdefault(c.system, []).append(c)
    for name, cells in by_system.items():
        def joined(values: Iterable[Optional[float]], sign: bool = False) -> str:
            values = list(values)
            return "-" if all(v is None for v in values) else " · ".join(_f(v, t.digits, sign) for v in values)
        reasons = list(dict.fromkeys(c.reason for c in cells if c.reason))
        rows.append({"system": t.systems[name].label or name,
                     "published": joined(c.published for c in cells),
                     "ours": joined(c.reproduced for c in cells),
                     "delta": joined(((c.delta_published if c.status in _COMPARABLE else None) for c in cells), True),
                     "status": _row_status(cells), "reason": "; ".join(reasons),
                     "rerun": _rerun(r, name)})
    return rows


_ROW_COLUMNS = ["system", "published", "ours", "delta", "status", "reason", "rerun"]
_HEAD = {"delta": "Δ", "ours": "ours"}


def _md_cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _cell_names(t: Table) -> str:
    return " · ".join(f"{label} {m}" if len(t.datasets) > 1 else m for label in t.datasets for m in t.measures)


def _table_heading(r: TableResult) -> str:
    t = r.table
    name = _PAPER_NAMES.get(r.paper, r.paper)
    what = f"Table {t.number}" + (f": {t.title}" if t.title else "")
    return f"{name} `{r.paper}/{t.key}` ({what})"


def markdown_matrix(results: Sequence[TableResult], title: Optional[str] = "# Reproductions",
                    level: int = 2) -> str:
    """The matrix as Markdown: the counts per status per paper and overall, then per table one row per system
    (:func:`matrix_rows`)."""
    counts = status_counts(results)
    papers = list(dict.fromkeys(r.paper for r in results))
    lines = ([title, ""] if title else []) + [
        "**All papers:** " + summary_line(counts["all"]) + ".", "",
        "| paper | published cells | " + " | ".join(STATUSES) + f" | {STATUS_UNPUBLISHED} (cells) |",
        "|---" * (len(STATUSES) + 3) + "|"]
    for pid in papers + ["all"]:
        c = counts.get(pid)
        if c:
            lines.append(f"| {_PAPER_NAMES.get(pid, pid)} | {c['cells']} | " +
                         " | ".join(str(c[st]) for st in STATUSES) + f" | {c[STATUS_UNPUBLISHED]} |")
    for r in results:
        lines += ["", f"{'#' * level} {_table_heading(r)}", "",
                  f"Cells: {_cell_names(r.table)}; figures of the {r.tier} tier"
                  + (f", recorded on {r.cpu}" if r.cpu else "") + ".", "",
                  "| " + " | ".join(_HEAD.get(c, c) for c in _ROW_COLUMNS) + " |", "|---" * len(_ROW_COLUMNS) + "|"]
        for row in matrix_rows(r):
            lines.append("| " + " | ".join(_md_cell(f"`{row[c]}`" if c == "rerun" and row[c] else row[c])
                                           for c in _ROW_COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def html_matrix(results: Sequence[TableResult]) -> str:
    """The same matrix as one self-contained HTML page (statuses coloured)."""
    e = html.escape
    colour = {STATUS_REPRODUCED: "#d9f2d9", STATUS_DIFFERS: "#f7c5c5", STATUS_STAND_IN: "#fbe8c8",
              STATUS_OTHER_DATA: "#fbf3c8", STATUS_UNPUBLISHED: "#eeeeee"}
    counts = status_counts(results)
    papers = list(dict.fromkeys(r.paper for r in results))
    summary = "".join(f"<tr><td>{e(_PAPER_NAMES.get(p, p))}</td><td>{counts[p]['cells']}</td>" +
                      "".join(f"<td>{counts[p][st]}</td>" for st in STATUSES) +
                      f"<td>{counts[p][STATUS_UNPUBLISHED]}</td></tr>" for p in papers + ["all"] if p in counts)
    parts = []
    for i, r in enumerate(results):
        body = []
        for row in matrix_rows(r):
            status = row["status"]
            bg = "#f7c5c5" if status.startswith("FAIL") else next(
                (v for k, v in colour.items() if status.startswith(k)), "#dde6f5")
            cells = "".join(f"<td class='{c}'>{e(row[c])}</td>" for c in _ROW_COLUMNS)
            body.append(f"<tr style='background:{bg}'>{cells}</tr>")
        head = "".join(f"<th>{e(_HEAD.get(c, c))}</th>" for c in _ROW_COLUMNS)
        parts.append(f"<h2>{e(_table_heading(r))}</h2><p>Cells: {e(_cell_names(r.table))}; the {e(r.tier)} tier.</p>"
                     f"<table class='matrix' id='matrix-{i}'><thead><tr>{head}</tr></thead>"
                     f"<tbody>{''.join(body)}</tbody></table>")
    n_fail = sum(len(r.failed) for r in results)
    c = counts.get("all") or {**{st: 0 for st in STATUSES}, "cells": 0, STATUS_UNPUBLISHED: 0}
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Reproductions</title><style>"
            "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin-bottom:1em}"
            "td,th{border:1px solid #999;padding:2px 6px;font-size:13px;vertical-align:top}"
            "td.published,td.ours,td.delta{text-align:right;font-family:monospace}"
            "td.rerun{font-family:monospace;font-size:11px}</style></head><body>"
            f"<h1>Reproductions</h1><p id='summary'>{e(summary_line(c))}; {n_fail} failing.</p>"
            "<table id='counts'><thead><tr><th>paper</th><th>published cells</th>" +
            "".join(f"<th>{e(st)}</th>" for st in STATUSES) + f"<th>{e(STATUS_UNPUBLISHED)} (cells)</th></tr></thead>"
            f"<tbody>{summary}</tbody></table>{''.join(parts)}</body></html>\n")


def write_matrix(results: Sequence[TableResult], directory: Any) -> Tuple[Path, Path]:
    """``reproductions.html`` and ``reproductions.md`` in ``directory`` (written atomically)."""
    d = artifacts.check_directory(directory, "--report")
    d.mkdir(parents=True, exist_ok=True)
    h = artifacts.atomic_write_text(d / "reproductions.html", html_matrix(results), "--report")
    m = artifacts.atomic_write_text(d / "reproductions.md", markdown_matrix(results), "--report")
    return h, m


def recorded_result(paper: Paper, table: Table) -> TableResult:
    """A table as its recorded figures give it (the full tier's when recorded, else the quick tier's): every row,
    each cell with its status, as :func:`markdown_matrix` shows it."""
    rec_all = read_recorded(paper)["tables"].get(table.key, {})
    tier = "full" if isinstance(rec_all, dict) and "full" in rec_all else "quick"
    entry = _recorded_entry(paper, table, tier)
    figures = entry.get("figures") or {}
    cells = _cells(paper, table, tier, figures, None, None, entry.get("llm_models") or {}, rows="full")
    return TableResult(paper.id, table, tier, cells, entry.get("seconds"), None, _command(paper, table, tier),
                       figures, str(paper.path), cpu=(entry.get("cpu") or {}).get("model"))


# ----------------------------------------------------------------------------------- generated docs
_MARKER = re.compile(r"(<!-- reproduce:begin (?P<key>[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+)"
                     r"(?: tier=(?P<tier>quick|full))? -->\n)(?P<body>.*?)(<!-- reproduce:end -->)", re.S)


def docs_table(paper: Paper, table: Table, tier: Optional[str] = None) -> str:
    """The Markdown of a table from its recorded figures (the full tier's when recorded, else the
    quick tier's): one row per system, ``recorded (published)`` per column, and how it was recorded."""
    rec_all = read_recorded(paper)["tables"].get(table.key, {})
    tier = tier or ("full" if isinstance(rec_all, dict) and "full" in rec_all else "quick")
    rec = _recorded_entry(paper, table, tier) or None
    cols = [(label, m) for label in table.datasets for m in table.measures]
    head = "| system | " + " | ".join(_md_cell(f"{label} {m}") for label, m in cols) + " |"
    lines = [head, "|---" * (len(cols) + 1) + "|"]
    figures = (rec or {}).get("figures") or {}
    for s in table.systems.values():
        vals = []
        for label, m in cols:
            v = figures.get(s.name, {}).get(label, {}).get(m)
            p = s.published.get(label, {}).get(m)
            shown = _f(v, table.digits) if v is not None else "-"
            if p is not None:
                shown += f" ({_f(p, table.digits)})"
            vals.append(shown)
        lines.append(f"| {_md_cell(s.label or s.name)} | " + " | ".join(vals) + " |")
    if rec:
        cpu = (rec.get("cpu") or {}).get("model") or "unknown CPU"
        load = rec.get("load_average")
        load = f", load average {load[0]:g} while other jobs ran" if load and load[0] > 2.5 else ""
        back = rec.get("read_back") or []
        back = "" if not back else (
            f"; the runs of {', '.join(back)} read back from an earlier run, "
            + ("not timed here" if rec.get("read_back_untimed") else "whose recorded time is included"))
        commands = rec.get("commands") or [rec.get("command")]
        by = f"`{commands[0]}`" if len(commands) == 1 else \
            f"{len(commands)} runs of some systems each ({'; '.join(f'`{c}`' for c in commands)}), the last"
        models = sorted(set((rec.get("llm_models") or {}).values()))
        used = "; ".join(f"{n}: {u.get('calls', 0)} calls"
                         + (f" and {u['cache_hits']} answers from the response cache" if u.get("cache_hits") else "")
                         + f", {u.get('unusable', 0)} unusable answers, {u.get('repaired', 0)} repaired rankings"
                         for n, u in sorted((rec.get("llm_usage") or {}).items()))
        llm = (f"; LLM rows with {', '.join(f'`{m}`' for m in models)}" + (f" ({used})" if used else "")) \
            if models else ""
        cpu_time = f", {rec['cpu_seconds']} s of CPU time" if rec.get("cpu_seconds") is not None else ""
        how = (f"Recorded by {by} ({rec.get('seconds')} s on "
               f"{rec.get('cpu', {}).get('usable_cores', '?')} cores of {cpu}{cpu_time}{load}{back}{llm}); "
               f"in parentheses the paper's Table {table.number}")
    else:
        how = f"Not recorded yet: `pyterrier-sci reproduce {paper.id}/{table.key} --tier {tier} --record`"
    return "\n".join(lines) + f"\n\n{how} ({'tier ' + tier}; generated by `pyterrier-sci reproduce --write-docs`).\n"


_MATRIX_MARKER = re.compile(r"(<!-- reproduce:matrix -->\n)(?P<body>.*?)(<!-- reproduce:end -->)", re.S)


def recorded_matrix(directory: Optional[Path] = None) -> str:
    """The matrix of every declared table from its recorded figures (what docs/reproductions.md shows)."""
    return markdown_matrix([recorded_result(p, t) for p, t in select(None, directory)], title=None, level=3)


def _regenerate(text: str, directory: Optional[Path]) -> str:
    def sub(m: "re.Match") -> str:
        pid, _, tkey = m.group("key").partition("/")
        (paper, table), = select(f"{pid}/{tkey}", directory)
        return m.group(1) + docs_table(paper, table, m.group("tier")) + m.group(5)
    text = _MARKER.sub(sub, text)
    if _MATRIX_MARKER.search(text):
        matrix = recorded_matrix(directory)
        text = _MATRIX_MARKER.sub(lambda m: m.group(1) + matrix + m.group(3), text)
    return text


def _doc_files(root: Path) -> List[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def stale_docs(root: Any = ".", directory: Optional[Path] = None) -> List[Path]:
    """The README and docs pages under ``root`` whose generated tables differ from the recorded figures."""
    return [p for p in _doc_files(Path(root))
            if _regenerate(p.read_text(encoding="utf-8"), directory) != p.read_text(encoding="utf-8")]


def update_docs(root: Any = ".", directory: Optional[Path] = None) -> List[Path]:
    """Rewrites the generated tables (between ``<!-- reproduce:begin PAPER/TABLE -->`` and
    ``<!-- reproduce:end -->``) of the README and docs pages under ``root``; returns the files changed."""
    changed = []
    for p in _doc_files(Path(root)):
        text = p.read_text(encoding="utf-8")
        new = _regenerate(text, directory)
        if new != text:
            artifacts.atomic_write_text(p, new, str(p))
            changed.append(p)
    return changed


# ------------------------------------------------------------------------------------------------ CLI
def add_reproduce_commands(subparsers) -> argparse.ArgumentParser:
    """Adds ``reproduce`` to the CLI (entry point ``pyterrier_sci.cli``)."""
    p = subparsers.add_parser("reproduce", help="run the papers' tables declared in pipelines/reproduce/ and compare "
                                                "with the published and recorded figures")
    p.add_argument("target", nargs="?", default=None, help="PAPER or PAPER/TABLE (default: every declared table)")
    p.add_argument("--tier", choices=TIERS, default="quick",
                   help="quick: the cheapest rows (default); medium: the rows marked medium, as the full tier runs "
                        "them (what CI verifies); full: all")
    p.add_argument("--verify", action="store_true",
                   help="compute every run again (no saved run read back) and exit 1 when a recorded figure is not "
                        "reproduced within its drift bound")
    p.add_argument("--dry-run", action="store_true", help="list what would run, the LLM calls and cost, the time")
    p.add_argument("--on-ray", action="store_true",
                   help="run every system of the tables as a Ray task (local Ray, or --ray-address), then assemble "
                        "each table from their saved runs")
    p.add_argument("--ray-address", default=None, help="an existing Ray cluster (default: a local Ray)")
    p.add_argument("--llm", default=None, help="base URL of an OpenAI-compatible server for the LLM rows")
    p.add_argument("--report", default=None, metavar="DIR", help="write the matrix as reproductions.html and .md")
    p.add_argument("--record", action="store_true", help="record this run's figures in pipelines/reproduce/recorded/")
    p.add_argument("--systems", default=None, metavar="A,B",
                   help="run only these systems of one table (--record merges their figures)")
    p.add_argument("--list", action="store_true", help="list the declared papers and tables")
    p.add_argument("--write-docs", action="store_true",
                   help="regenerate the README's and docs' tables from the recorded figures (run in the checkout)")
    p.add_argument("--check-docs", action="store_true",
                   help="exit 1 when a generated table of the README or docs is stale")
    p.set_defaults(func=reproduce_main)
    return p


def _print_dry_run(jobs: Iterable[Tuple[Paper, Table]], tier: str, llm: Optional[str], out: Any) -> None:
    total, unknown, untimed, reports, waiting = 0.0, [], [], [], 0
    known: Dict[Path, Dict[str, Dict[str, Any]]] = {}   # per papers' folder: the trainings their records timed
    for paper, table in jobs:
        d = dry_run_table(paper, table, tier, llm)
        print(f"\n{paper.id}/{table.key} (Table {table.number}), tier {tier}:", file=out)
        if d["rows"]:
            print(pd.DataFrame(d["rows"]).drop(columns="table").to_string(index=False), file=out)
        else:
            print(f"  no system of this table runs in the {tier} tier" +
                  (" (its rows run in the full tier: --tier full)" if tier != "full" else ""), file=out)
        for name, spec in d["models"].items():
            print(f"  model {name}: trained on first use by component {spec.get('component')} "
                  f"({', '.join(f'{k}={v}' for k, v in spec.items() if k != 'component')}), then reused", file=out)
        reports += d["llm"]
        waiting += len(d["deferred"])
        for x in d["deferred"]:
            print(f"  LLM calls of {x['system']} on {x['dataset']} not counted: its first stage needs {x['model']} "
                  f"({x['path']}), which a dry run does not train or build", file=out)
        if d["recorded_seconds"] is not None:
            total += float(d["recorded_seconds"])
            trained = d["recorded_trained"]
            if trained:
                how = (f"from empty, training {len(trained)} model(s) in {sum(t['seconds'] for t in trained):.0f} s "
                       "of it; saved runs and models make it shorter")
            elif d["models"]:
                how = (f"its models ({', '.join(d['models'])}) " +
                       ("may have been trained before that record, which does not say" if trained is None else
                        "were trained before that run") + ": a run from empty trains them first")
                untimed.append(f"{paper.id}/{table.key}")
            else:
                how = "from empty; saved runs make it shorter"
            print(f"  time: {d['recorded_seconds']} s when recorded on {d['recorded_cpu']} ({how})", file=out)
            for x in d["deferred"]:
                if paper.path.parent not in known:
                    known[paper.path.parent] = _known_trainings(paper.path.parent)
                timed = known[paper.path.parent].get(Path(x["path"]).name)
                if timed:
                    print(f"  training {x['model']} first: {timed['seconds']} s when {timed['table']} trained it",
                          file=out)
        else:
            unknown.append(f"{paper.id}/{table.key}")
    print("\nLLM calls (no request sent):", file=out)
    if reports or not waiting:
        concat_reports(reports).print(file=out)
    if waiting:
        print(f"not counted: {waiting} LLM row(s) whose first stage needs a model not trained yet (above); a run "
              "trains it once, then a dry run counts their calls", file=out)
    print(f"\nestimated time: {total:.0f} s" + (f" plus the unrecorded {', '.join(unknown)}" if unknown else "")
          + (f" plus the training of {', '.join(untimed)}'s models where they are not trained yet" if untimed else ""),
          file=out)


def reproduce_main(args: argparse.Namespace) -> int:
    """Runs ``pyterrier-sci reproduce``; returns the exit status (1 when a figure leaves its tolerance)."""
    if args.write_docs or args.check_docs:
        if args.check_docs:
            stale = stale_docs(".")
            for p in stale:
                print(f"stale generated table in {p}: run pyterrier-sci reproduce --write-docs", file=sys.stderr)
            return 1 if stale else 0
        for p in update_docs("."):
            print(f"updated {p}")
        return 0
    jobs = select(args.target)
    if args.list:
        for paper, table in jobs:
            n = sum(len(f) for s in table.systems.values() for f in s.published.values())
            print(f"{paper.id}/{table.key}\tTable {table.number}\t{table.title}\t{len(table.systems)} systems, "
                  f"{n} published figures")
        return 0
    if args.dry_run:
        _print_dry_run(jobs, args.tier, args.llm, sys.stdout)
        return 0
    systems = [x.strip() for x in args.systems.split(",") if x.strip()] if args.systems else None
    if systems and len(jobs) != 1:
        raise ReproductionError("--systems needs one table: PAPER/TABLE")
    if args.on_ray:
        if args.verify:
            raise ReproductionError("--verify runs on this machine (a Ray task would read back its saved runs)")
        results = _on_ray(jobs, args.tier, args.llm, args.ray_address, None)
    else:
        results = [run_table(p, t, tier=args.tier, llm=args.llm, systems=systems, verify=args.verify) for p, t in jobs]
    print_results(results)
    if args.report:
        for p in write_matrix(results, args.report):
            print(f"wrote {p}")
    if args.record:
        for p in record(results):
            print(f"recorded {p}")
    failed = sum(len(r.failed) for r in results)
    if failed:
        print(f"{failed} figure(s) outside their tolerance", file=sys.stderr)
        return 1
    return 0
