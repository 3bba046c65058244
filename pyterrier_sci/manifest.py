"""Run manifests: what produced a run, an experiment's figures or an artifact, as one JSON file.

A manifest records the versions of the libraries that decide results, Python, the OS and the CPU,
the git commit of the checkout, each model's identifier and a SHA-256 of its weight files, SHA-256s
of the data files read, the seeds, the pipeline expressions and their resolved configuration, the
SHA-256s of the LLM prompt templates and (for experiments) the table's figures.
:func:`diff_manifests` lists what differs between two manifests; ``pyterrier-sci experiment FILE
--replay`` and ``pyterrier-sci manifest diff A B`` use it (docs/reproducibility.md).  File hashes are
cached by (path, size, modification time) in the work directory, so a rerun does not hash again.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from pyterrier_sci import data
from pyterrier_sci.artifacts import atomic_write_text
from pyterrier_sci.corpus import irds_id
from pyterrier_sci.data import DataFile, data_dir, work_dir
from pyterrier_sci.environment import (  # noqa: F401
    LIBRARIES,
    MANIFEST_VERSION,
    artifact_manifest,
    environment,
    git_state,
    jsonable,
    library_versions,
    manifest_header,
)
from pyterrier_sci.errors import ManifestError  # noqa: F401 - defined there, re-exported
from pyterrier_sci.hashing import WEIGHT_SUFFIXES, FileHasher, file_sha256, weights_digest  # noqa: F401
from pyterrier_sci.pipeline import Ref, load_config, parse, refs
from pyterrier_sci.protocol import models_of, seeds_of, templates_of
from pyterrier_sci.registry import DATASETS_GROUP, REGISTRY, PipelineError, load_group

__all__ = ["MANIFEST_VERSION", "LIBRARIES", "ManifestError", "environment", "library_versions", "git_state",
           "file_sha256", "FileHasher", "weights_digest", "model_entries",
           "template_entries", "seed_entries", "data_entries", "resolved_config",
           "figures_of", "pipeline_manifest", "experiment_manifest", "write_manifest", "read_manifest",
           "experiment_manifest_path", "diff_manifests", "manifest_sections", "compare_figures",
           "format_changes", "Change", "Replay", "replay_against"]

FIGURE_TOLERANCE = 1e-9

# ------------------------------------------------------------------------------ walking the pipelines
# what a pipeline uses is asked of its components through the component protocol (pyterrier_sci.protocol)

def model_entries(systems: Iterable[Any], hasher: Optional[FileHasher] = None) -> Dict[str, Dict[str, Any]]:
    """``{identifier: {"kind", "used_by", "path", "sha256", ...}}`` of the models the components of
    built pipelines declare (``sci_models()``): local weights are hashed (:func:`weights_digest`), a
    model without a local path is recorded with the component's note; an LLM as ``llm:<model>``."""
    own = hasher is None
    hasher = hasher or FileHasher()
    out: Dict[str, Dict[str, Any]] = {}
    for comp, ref in models_of(list(systems)):
        ident = f"llm:{ref.name}" if ref.kind == "llm" else str(ref.name)
        if ident in out:
            continue
        entry: Dict[str, Any] = {"kind": ref.kind, "used_by": type(comp).__name__}
        path = Path(ref.path) if ref.path else None
        if path is not None and path.exists():
            entry["path"] = str(path)
            entry.update(weights_digest(path, hasher))
        else:
            entry.update({"path": None, "sha256": None,
                          "note": ref.note or ("missing" if path is not None else "not a local path")})
        out[ident] = entry
    if own:
        hasher.save()
    return out


def template_entries(systems: Iterable[Any]) -> Dict[str, str]:
    """SHA-256s of the LLM prompt templates the components of the pipelines declare
    (``sci_templates()``: the templates shipped with them and those they loaded)."""
    return dict(sorted((name, hashlib.sha256(text.encode("utf-8")).hexdigest())
                       for _, name, text in templates_of(list(systems))))


def seed_entries(config: Optional[Mapping[str, Any]] = None, systems: Iterable[Any] = ()) -> Dict[str, Any]:
    """Seeds: the components' ``seed`` parameters (resolved configuration), the seeds the built
    components declare (``sci_seeds()``), the config's ``settings`` seeds and ``$PYTHONHASHSEED``."""
    out: Dict[str, Any] = {}

    def scan(prefix: str, mapping: Mapping[str, Any]):
        for k, v in mapping.items():
            if isinstance(v, Mapping):
                scan(f"{prefix}{k}.", v)
            elif str(k) == "seed" or str(k).endswith("_seed"):
                out[f"{prefix}{k}"] = v

    if config:
        scan("config.components.", config.get("components") or {})
        scan("config.settings.", config.get("settings") or {})
    for label, seed in seeds_of(list(systems)).items():
        out.setdefault(label, seed)
    out["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED")
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------------------------- data

def _relative(path: Path) -> str:
    try:
        return "$DATA/" + path.resolve().relative_to(data_dir().resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)


def _declared_files(owner: Any) -> List[Any]:
    files = getattr(owner, "files", None)
    if isinstance(files, Mapping):
        found = list(files.values())
    else:
        module = owner if isinstance(owner, ModuleType) else sys.modules.get(type(owner).__module__)
        table = getattr(module, "FILES", None)
        keys = getattr(owner, "keys", None)
        if not isinstance(table, Mapping):
            return []
        found = [table[k] for k in keys if k in table] if isinstance(keys, tuple) else list(table.values())
    return [f for f in found if isinstance(f, DataFile)]


def dataset_files(dataset: str) -> List[Path]:
    """The data files a registered ``sci/...`` dataset is read from (those present), as its module
    declares them (``STATUS``, ``FILES``)."""
    name = irds_id(dataset)
    status: Dict[str, Any] = {}
    for module in load_group(DATASETS_GROUP).values():
        status.update(getattr(module, "STATUS", {}) or {})
    prefixes = [p for p in status if name == p or name.startswith(p + "/")]
    if not prefixes:
        return []
    out = []
    for f in _declared_files(status[max(prefixes, key=len)]):
        try:
            p = f.local()
            if p.is_file():
                out.append(p)
        except Exception:  # noqa: BLE001 - no data directory: nothing to record
            continue
    return out


def _touched_files() -> List[Path]:
    """The data files this process checked (``pyterrier_sci.data.verified_once``): those it read."""
    out = []
    for memo in list(getattr(data, "_PASSED", ())):
        try:
            for p, _size, _mtime in memo[1]:
                out.append(Path(p))
        except (TypeError, ValueError, IndexError):
            continue
    return out


def data_entries(datasets: Sequence[str] = (), hasher: Optional[FileHasher] = None) -> Dict[str, str]:
    """``{path: sha256}`` of the data files read: the datasets' declared files and every data file
    this process checked (paths under the data directory are written ``$DATA/...``)."""
    own = hasher is None
    hasher = hasher or FileHasher()
    paths = {}
    for ds in datasets:
        for p in dataset_files(ds):
            paths[str(p.resolve())] = p
    for p in _touched_files():
        if p.is_file():
            paths.setdefault(str(p.resolve()), p)
    out = {_relative(p): hasher(p) for p in paths.values()}
    if own:
        hasher.save()
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------ configuration

def _defaults(factory: Callable) -> Dict[str, Any]:
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return {}
    return {n: p.default for n, p in sig.parameters.items()
            if n not in ("self", "context") and p.default is not p.empty
            and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def resolved_config(config: Any, pipelines: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The configuration the pipelines were built from: their expressions (and those of the named
    pipelines they use), and for every component they refer to its registered component and
    parameters, the factory's defaults filled in under what the config and the expression set."""
    cfg = load_config(config)
    exprs: Dict[str, str] = {}
    todo = list(pipelines if pipelines is not None else cfg.pipelines)
    comps: Dict[str, Any] = {}
    while todo:
        name = todo.pop(0)
        expr = cfg.pipelines.get(name, name)
        if name in exprs:
            continue
        exprs[name] = expr
        try:
            tree = parse(expr)
        except PipelineError:
            continue
        for r in refs(tree):
            if not isinstance(r, Ref):
                continue
            if r.name in cfg.pipelines and not r.called:
                if r.name not in exprs:
                    todo.append(r.name)
                continue
            spec = dict(cfg.components.get(r.name, {}))
            kind = str(spec.pop("component", spec.pop("type", r.name)))
            given = {**spec, **r.kwargs}
            key = r.name if not r.kwargs else f"{r.name}({', '.join(f'{k}={v!r}' for k, v in r.kwargs.items())})"
            try:
                defaults = _defaults(REGISTRY.get(kind).factory)
            except Exception:  # noqa: BLE001 - an unavailable component: what was given is recorded
                defaults = {}
            comps[key] = {"component": kind, "params": jsonable({**defaults, **given}),
                          "given": jsonable(given)}
    return {"path": str(Path(cfg.path).resolve()) if cfg.path else None,
            "dataset": cfg.dataset,
            "pipelines": exprs,
            "components": dict(sorted(comps.items())),
            "settings": jsonable(cfg.settings)}


def figures_of(table: Any) -> List[Dict[str, Any]]:
    """The rows of an experiment's table as JSON records (NaN as null)."""
    return [jsonable(dict(r)) for r in table.to_dict(orient="records")]


# ------------------------------------------------------------------------------------------ writing

def pipeline_manifest(systems: Mapping[str, Any], config: Any = None, datasets: Sequence[str] = (),
                      kind: str = "run", extra: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The manifest of built pipelines (``{name: transformer}``): environment, resolved
    configuration, models, data, seeds and templates."""
    cfg = load_config(config)
    hasher = FileHasher()
    conf = resolved_config(cfg, list(systems))
    m = manifest_header(kind)
    if extra:
        m.update(jsonable(dict(extra)))
    m.update({"config": conf,
              "models": model_entries(systems.values(), hasher),
              "data": data_entries(datasets, hasher),
              "seeds": seed_entries(conf, systems.values()),
              "templates": template_entries(systems.values())})
    hasher.save()
    return m


def experiment_manifest(outcome: Any) -> Dict[str, Any]:
    """The manifest of an :class:`~pyterrier_sci.experiment.ExperimentOutcome`: what
    :func:`pipeline_manifest` records, the experiment's identity, its saved runs' SHA-256s and its
    figures."""
    systems: Dict[str, Any] = {}
    for d in outcome.datasets:   # the same names on every dataset; the first dataset's objects suffice
        for name, s in d.systems.items():
            systems.setdefault(name, s)
    if not systems:
        systems = {p: None for p in outcome.pipelines}
    datasets = [d.dataset for d in outcome.datasets]
    runs: Dict[str, Dict[str, Any]] = {}
    hasher = FileHasher()
    for d in outcome.datasets:
        for name, p in d.run_paths.items():
            if p is not None and Path(p).is_file():
                runs.setdefault(d.dataset, {})[name] = {"path": str(p), "sha256": hasher(p)}
    hasher.save()
    cfg = outcome.config
    exp = {"name": outcome.name,
           "config": Path(cfg.path).name if cfg.path else None,
           "config_path": str(Path(cfg.path).resolve()) if cfg.path else None,
           "datasets": datasets,
           "pipelines": {p: cfg.pipelines.get(p, p) for p in outcome.pipelines},
           "measures": list(outcome.measures), "baseline": outcome.baseline, "test": outcome.test,
           "correction": outcome.correction,
           "save_dir": str(Path(outcome.save_root).resolve()) if outcome.save_root else None}
    m = pipeline_manifest({k: v for k, v in systems.items() if v is not None}, cfg, datasets, kind="experiment",
                          extra={"experiment": exp})
    if not any(v is not None for v in systems.values()):
        m["config"] = resolved_config(cfg, outcome.pipelines)
    m["runs"] = runs
    m["figures"] = figures_of(outcome.table)
    return m


def experiment_manifest_path(name: str, save_root: Optional[Union[str, Path]]) -> Path:
    """``<save_dir>/<experiment>.manifest.json``, or ``<work dir>/runs/<experiment>.manifest.json``
    for an experiment without ``save_dir``."""
    slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("_") or "experiment"
    root = Path(save_root) if save_root else work_dir() / "runs"
    return root / f"{slug}.manifest.json"


def write_manifest(manifest: Mapping[str, Any], path: Union[str, Path], what: str = "the manifest") -> Path:
    """Writes a manifest as JSON, atomically."""
    text = json.dumps(jsonable(dict(manifest)), indent=2, allow_nan=False) + "\n"
    return atomic_write_text(path, text, what)


def read_manifest(path: Union[str, Path]) -> Dict[str, Any]:
    """A manifest written by :func:`write_manifest`; one :class:`ManifestError` when it is missing,
    not JSON or not a manifest."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"no manifest at {p}", where=str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"cannot read the manifest {p}: {e}", where=str(p)) from None
    except ValueError as e:
        raise ManifestError(f"{p} is not a manifest: it is not valid JSON ({e})", where=str(p)) from None
    if not isinstance(data, dict) or "manifest_version" not in data or "environment" not in data:
        raise ManifestError(f"{p} is not a pyterrier-sci manifest (no manifest_version / environment)",
                            where=str(p))
    if not isinstance(data["manifest_version"], int) or data["manifest_version"] > MANIFEST_VERSION:
        raise ManifestError(f"{p} is a manifest of version {data['manifest_version']!r}; this toolkit reads "
                            f"versions up to {MANIFEST_VERSION}", where=str(p))
    return data


# ------------------------------------------------------------------------------------------- diffs

class Change(tuple):
    """One difference: ``(section, key, a, b)``; ``a`` or ``b`` is ``MISSING`` when only one side has it."""
    __slots__ = ()

    def __new__(cls, section: str, key: str, a: Any, b: Any):
        return super().__new__(cls, (section, key, a, b))

    section = property(lambda self: self[0])
    key = property(lambda self: self[1])
    a = property(lambda self: self[2])
    b = property(lambda self: self[3])


MISSING = "<absent>"
#: the sections diffs show first, in this order; every other section of either manifest follows (``run``,
#: ``kind``, a builder's own entries ...), sorted by name
SECTIONS = ("environment", "models", "data", "seeds", "config", "templates", "experiment", "runs", "figures")
#: what differs between any two manifests and says nothing about how a result was produced
UNCOMPARED = ("created",)


def _flatten(x: Any, prefix: str = "") -> Dict[str, Any]:
    if isinstance(x, Mapping) and x:
        out: Dict[str, Any] = {}
        for k, v in x.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: x}


def _same(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= tol
    return a == b


def _figure_key(row: Mapping[str, Any]) -> str:
    return " / ".join(str(row.get(k)) for k in ("dataset", "name") if k in row) or "row"


def _usage_column(col: str) -> bool:
    return col.startswith("llm_")


def compare_figures(recorded: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]],
                    tolerance: float = FIGURE_TOLERANCE, skip: Callable[[str], bool] = lambda c: False) -> List[Change]:
    """Every figure of ``current`` that differs from ``recorded`` by more than ``tolerance`` (rows by
    dataset and pipeline name; columns by name; ``skip`` leaves columns out)."""
    a = {_figure_key(r): r for r in recorded}
    b = {_figure_key(r): r for r in current}
    out: List[Change] = []
    for key in list(a) + [k for k in b if k not in a]:
        ra, rb = a.get(key), b.get(key)
        if ra is None or rb is None:
            out.append(Change("figures", key, MISSING if ra is None else "row", MISSING if rb is None else "row"))
            continue
        for col in list(ra) + [c for c in rb if c not in ra]:
            if col in ("dataset", "name") or skip(col):
                continue
            va, vb = ra.get(col, MISSING), rb.get(col, MISSING)
            if not _same(va, vb, tolerance):
                out.append(Change("figures", f"{key}: {col}", va, vb))
    return out


def manifest_sections(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[str]:
    """Every section of either manifest but :data:`UNCOMPARED`: :data:`SECTIONS` first, then the others
    by name."""
    others = sorted({str(k) for k in (*a, *b)} - set(SECTIONS) - set(UNCOMPARED))
    return [s for s in SECTIONS if s in a or s in b] + others


def diff_manifests(a: Mapping[str, Any], b: Mapping[str, Any], sections: Optional[Sequence[str]] = None,
                   tolerance: float = FIGURE_TOLERANCE) -> List[Change]:
    """What changed from manifest ``a`` to manifest ``b``, section by section: by default every section
    either has (:func:`manifest_sections`: versions, Python, OS, CPU and git under ``environment``;
    models; data; seeds; config; templates; the experiment; saved runs; figures; a run's ``run``; the
    manifest's ``kind`` and version; an artifact builder's own entries), only the creation time left
    out."""
    out: List[Change] = []
    for section in manifest_sections(a, b) if sections is None else sections:
        if section == "figures":
            if "figures" in a or "figures" in b:
                out += compare_figures(a.get("figures") or [], b.get("figures") or [], tolerance)
            continue
        va, vb = a.get(section, MISSING), b.get(section, MISSING)
        if not isinstance(va, Mapping) and not isinstance(vb, Mapping) or va == {} or vb == {}:
            if not _same(va, vb, 0.0):   # a plain value (kind, manifest_version), or a section one side lacks
                out.append(Change(section, "value", va, vb))
            continue
        fa = _flatten(va) if isinstance(va, Mapping) else {"": va}
        fb = _flatten(vb) if isinstance(vb, Mapping) else {"": vb}
        for key in list(fa) + [k for k in fb if k not in fa]:
            if key == "cpu.usable_cores":
                continue
            ka, kb = fa.get(key, MISSING), fb.get(key, MISSING)
            if not _same(ka, kb, 0.0):
                out.append(Change(section, key or "value", ka, kb))
    return out


def _show(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v):
        return v[:12] + "…"
    text = json.dumps(v) if not isinstance(v, str) else v
    return text if len(text) <= 80 else text[:77] + "..."


def format_changes(changes: Sequence[Change], indent: str = "  ") -> List[str]:
    """Lines ``section  key: a -> b`` (hashes shortened), grouped by section."""
    lines = []
    for c in changes:
        diff = ""
        if isinstance(c.a, (int, float)) and isinstance(c.b, (int, float)) and not isinstance(c.a, bool) \
                and not isinstance(c.b, bool):
            diff = f" (difference {c.b - c.a:+.3g})"
        lines.append(f"{indent}{c.section:<11} {c.key}: {_show(c.a)} -> {_show(c.b)}{diff}")
    return lines


def check_same_experiment(recorded: Mapping[str, Any], current: Mapping[str, Any], path: Union[str, Path]) -> None:
    """One :class:`ManifestError` when the manifest at ``path`` was written by another experiment:
    another experiment name, config file name, datasets or pipelines (names and expressions)."""
    ra, cb = recorded.get("experiment") or {}, current.get("experiment") or {}
    if recorded.get("kind") != "experiment" or not ra:
        raise ManifestError(f"{path} is the manifest of a {recorded.get('kind', 'unknown')}, not of an experiment",
                            where=str(path))
    for key, what in (("name", "experiment name"), ("config", "config file"), ("datasets", "datasets"),
                      ("pipelines", "pipelines")):
        if ra.get(key) != cb.get(key):
            raise ManifestError(f"{path} is the manifest of another experiment: its {what} is {_show(ra.get(key))}, "
                                f"this one's is {_show(cb.get(key))}", where=str(path))


# ------------------------------------------------------------------------------------------ replay

class Replay:
    """What :func:`replay` found: the recomputed outcome, the manifest it was compared with, the
    figures that differ (``figures``) and the manifest entries that differ from this environment
    (``entries``).  ``identical`` when no figure differs."""

    def __init__(self, outcome: Any, manifest_path: Path, recorded: Dict[str, Any], current: Dict[str, Any],
                 figures: List[Change], entries: List[Change], compared: int, skipped: List[str]):
        self.outcome, self.manifest_path, self.recorded, self.current = outcome, manifest_path, recorded, current
        self.figures, self.entries, self.compared, self.skipped = figures, entries, compared, skipped

    @property
    def identical(self) -> bool:
        return not self.figures

    def lines(self) -> List[str]:
        """The report, as printed by ``pyterrier-sci experiment FILE --replay``."""
        out = [f"replayed experiment '{self.outcome.name}' from its saved runs against {self.manifest_path} "
               f"(recorded {self.recorded.get('created', 'at an unknown time')})"]
        if self.figures:
            out.append(f"{len(self.figures)} of {self.compared} figures differ from the recorded ones "
                       f"(tolerance {FIGURE_TOLERANCE:g}):")
            out += format_changes(self.figures)
        else:
            out.append(f"all {self.compared} figures equal the recorded ones (tolerance {FIGURE_TOLERANCE:g})")
        if self.skipped:
            out.append(f"not compared (a replay makes no LLM calls): {', '.join(self.skipped)}")
        if self.entries:
            out.append(f"{len(self.entries)} manifest entries differ from this environment:")
            out += format_changes(self.entries)
        else:
            out.append("no manifest entry differs from this environment")
        return out

    def as_dict(self) -> Dict[str, Any]:
        return {"experiment": self.outcome.name, "manifest": str(self.manifest_path), "identical": self.identical,
                "figures_compared": self.compared, "not_compared": self.skipped,
                "figures": [dict(zip(("section", "key", "recorded", "now"), jsonable(list(c))))
                            for c in self.figures],
                "entries": [dict(zip(("section", "key", "recorded", "now"), jsonable(list(c))))
                            for c in self.entries]}


def replay_against(outcome: Any, manifest: Optional[Union[str, Path]] = None) -> Replay:
    """Compares an experiment's table recomputed from its saved runs (``outcome``, see
    :func:`pyterrier_sci.experiment.replay`) with the manifest the run wrote (``manifest``, default
    ``<save_dir>/<experiment>.manifest.json``): every figure that differs by more than 1e-9, and every
    manifest entry (versions, models, data, seeds, config, templates, commit, saved runs) that differs
    from this environment.  A manifest of another experiment is one :class:`ManifestError`."""
    path = Path(manifest) if manifest else experiment_manifest_path(outcome.name, outcome.save_root)
    if not path.exists() and not manifest:
        raise ManifestError(f"no manifest at {path}: the experiment was run before manifests were written, or "
                            "elsewhere; run it without --replay to write one, or name one with --manifest",
                            where="--replay")
    recorded = read_manifest(path)
    current = experiment_manifest(outcome)
    check_same_experiment(recorded, current, path)
    rec_figs, cur_figs = recorded.get("figures") or [], current["figures"]
    skipped = sorted({c for r in rec_figs for c in r if _usage_column(c)} - {c for r in cur_figs for c in r})
    figures = compare_figures(rec_figs, cur_figs, skip=lambda c: c in skipped)
    compared = sum(1 for r in rec_figs for c in r if c not in ("dataset", "name") and c not in skipped)
    entries = diff_manifests(recorded, current, sections=[s for s in SECTIONS if s != "figures"])
    return Replay(outcome, path, recorded, current, figures, entries, compared, skipped)
