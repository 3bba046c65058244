"""Experiments declared in a pipeline config's ``experiments:`` section, run with
:func:`pyterrier_sci.evaluation.Experiment`; each finished run is written to ``save_dir`` atomically
and read back by a rerun, so an interrupted experiment resumes where it stopped; each experiment
writes a manifest (:mod:`pyterrier_sci.manifest`) and :func:`replay_outcome` recomputes its table
from the saved runs.  See docs/guide.md, "Pipeline files (YAML)", and docs/reproducibility.md.
"""
from __future__ import annotations

import hashlib
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import pandas as pd
import pyterrier as pt

from pyterrier_sci import artifacts, cost, manifest
from pyterrier_sci import measures as _measures
from pyterrier_sci.code_identity import code_identity
from pyterrier_sci.corpus import corpus_version, pt_dataset_id
from pyterrier_sci.evaluation import Experiment
from pyterrier_sci.llm import add_usage_columns, llm_components, usage_report
from pyterrier_sci.llm.budget import new_ledger_id, with_ledger_id
from pyterrier_sci.llm.dryrun import COLUMNS as DRY_RUN_COLUMNS
from pyterrier_sci.llm.dryrun import DryRunReport, budget_notes, concat_reports, dry_run
from pyterrier_sci.llm.settings import answer_settings
from pyterrier_sci.local_corpus import local_name
from pyterrier_sci.manifest import Replay, replay_against
from pyterrier_sci.pipeline import PipelineConfig, PipelineError, build_all, load_config, make_context, pipeline
from pyterrier_sci.registry import REGISTRY, check_dataset

__all__ = ["run_experiment", "experiment_outcome", "replay_outcome", "experiment_spec", "ExperimentOutcome",
           "DatasetOutcome", "run_pipeline_on", "write_run", "topics_and_qrels", "run_path", "pipeline_key",
           "pipeline_code", "llm_key"]


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", s).strip("_") or "x"


def topics_and_qrels(dataset: str, variant: Optional[str] = None):
    ds = pt.get_dataset(pt_dataset_id(dataset))
    irds = ds.irds_ref() if hasattr(ds, "irds_ref") else None
    if irds is not None and not irds.has_queries():
        hint = (" (a corpus of your own: register it with topics, e.g. pyterrier-sci corpus add NAME PATH --topics "
                "topics.tsv --qrels qrels.txt)" if local_name(dataset) else "")
        raise PipelineError(f"dataset {dataset} has no topics to run or evaluate{hint}")
    topics = ds.get_topics(variant) if variant else ds.get_topics()
    if "query" not in topics.columns:
        raise PipelineError(f"dataset {dataset} has several query fields; set topics_variant to one of "
                            f"{[c for c in topics.columns if c != 'qid']}")
    topics = topics[["qid", "query"]].assign(qid=lambda d: d["qid"].astype(str))
    return topics, ds.get_qrels()


def write_run(res: pd.DataFrame, path: Union[str, Path], run_name: str = "pyterrier-sci", what: str = "--output",
              checksum: bool = False) -> Path:
    """Writes a TREC run atomically (a temporary file beside it, renamed into place; ``.gz`` compresses).

    ``path`` must be a regular file or a new one: a directory, a device, a FIFO, a socket or a path
    under a regular file is one :class:`~pyterrier_sci.artifacts.PathError` naming ``what``.
    Temporary files that killed writers left in the directory are removed.  With ``checksum``, its
    SHA-256 is kept beside it (``<name>.sha256``) so that :func:`run_pipeline_on` can tell a damaged
    saved run."""
    path = artifacts.check_file_target(path, what)
    with artifacts.atomic_file(path, what) as tmp:
        pt.io.write_results(res, str(tmp), format="trec", run_name=run_name)
    if checksum:
        artifacts.record_checksum(path)
    return path


def _read_saved_run(path: Path) -> Optional[pd.DataFrame]:
    """A finished run saved by :func:`write_run`, or None (with a warning) when it is damaged:
    it does not match its checksum or cannot be read."""
    if not path.exists():
        return None
    if artifacts.discard_if_damaged(path, "saved run", missing_record_is_damage=False):
        return None
    try:
        res = pt.io.read_results(str(path))
    except Exception as e:  # EOFError (truncated gzip), zlib.error, UnicodeDecodeError, parser errors
        warnings.warn(f"saved run {path} cannot be read ({type(e).__name__}: {e}); it is removed and computed "
                      "again", artifacts.DamagedFileWarning, stacklevel=3)
        artifacts.discard(path)
        return None
    if artifacts.verify_checksum(path) is None:  # saved before checksums were kept
        artifacts.record_checksum(path)
    return res


def run_pipeline_on(transformer: pt.Transformer, topics: pd.DataFrame, save_to: Optional[Path] = None,
                    run_name: str = "pyterrier-sci", costs: bool = False) -> pd.DataFrame:
    """Runs a pipeline on topics, reusing (and otherwise writing) a finished run file at ``save_to``
    (an experiment's ``save_dir``).  A saved run that does not match its checksum or cannot be read
    is computed again, with a :class:`~pyterrier_sci.artifacts.DamagedFileWarning`; a ``save_to``
    that cannot be written is an error before anything runs.

    With ``costs`` the pipeline runs under a :class:`~pyterrier_sci.cost.CostMeter` (one query at a
    time; the result has the per-query cost columns) and the costs are kept beside the saved run
    (:func:`pyterrier_sci.cost.write_costs`); a saved run without them is run again (its LLM calls come
    from the response cache)."""
    if save_to is not None:
        save_to = artifacts.check_file_target(save_to, "save_dir")
        res = _read_saved_run(save_to)
        if res is not None:
            kept = cost.read_costs(save_to) if costs else None
            if not costs or kept is not None:
                return cost.attach_costs(res, kept)
    res = (cost.metered(transformer) if costs else transformer)(topics)
    if save_to is not None:
        write_run(res, save_to, run_name, what="save_dir", checksum=True)
        cost.write_costs(res, save_to, what="save_dir")
    return res


@dataclass
class DatasetOutcome:
    """What one dataset of an experiment produced: its topics and qrels, each pipeline's built
    transformer and its run (a result frame, read back from ``save_dir`` when one was saved), and
    the dataset's rows of the table."""
    dataset: str
    topics: pd.DataFrame
    qrels: pd.DataFrame
    systems: Dict[str, Any]
    runs: Dict[str, pd.DataFrame]
    table: pd.DataFrame
    run_paths: Dict[str, Optional[Path]] = field(default_factory=dict)


@dataclass
class ExperimentOutcome:
    """Everything an experiment produced (:func:`experiment_outcome`): the table
    :func:`run_experiment` returns, and per dataset the topics, qrels, systems and runs that
    per-query analyses, reports and manifests need."""
    name: str
    config: PipelineConfig
    spec: Dict[str, Any]
    pipelines: List[str]
    measures: List[str]
    baseline: Optional[str]
    test: Optional[str]
    correction: Optional[str]
    save_root: Optional[str]
    table: pd.DataFrame
    datasets: List[DatasetOutcome] = field(default_factory=list)
    manifest: Optional[Dict[str, Any]] = None       # what the manifest records (pyterrier_sci.manifest)
    manifest_path: Optional[Path] = None            # where it was written


def run_experiment(config: Union[str, Path, dict, PipelineConfig], name: Optional[str] = None,
                   save_dir: Optional[str] = None, report_llm_usage: Optional[bool] = None,
                   trusted: bool = False) -> pd.DataFrame:
    """Runs one experiment of a config (the only one, or ``name``) and returns its table: one row per
    (dataset, pipeline), one column per measure (plus significance columns with a baseline), and
    the LLM usage of each pipeline (``llm_calls``, ``llm_cache_hits``, tokens, cost) when a pipeline
    has LLM components (``report_llm_usage=None``) or when asked (``True``)."""
    return experiment_outcome(config, name=name, save_dir=save_dir, report_llm_usage=report_llm_usage,
                              trusted=trusted).table


def experiment_spec(cfg: PipelineConfig, name: Optional[str] = None) -> Tuple[str, Dict[str, Any]]:
    """``(name, spec)`` of the experiment ``name`` of ``cfg`` (the only one when ``name`` is None)."""
    if not cfg.experiments:
        raise PipelineError("the config defines no experiments", where=str(cfg.path or "config"))
    if name is None:
        if len(cfg.experiments) > 1:
            raise PipelineError(f"the config defines several experiments ({', '.join(cfg.experiments)}): name one")
        name = next(iter(cfg.experiments))
    if name not in cfg.experiments:
        raise PipelineError(f"unknown experiment {name!r} (defined: {', '.join(cfg.experiments)})")
    return name, dict(cfg.experiments[name])


def _plan(config, name: Optional[str], save_dir: Optional[str]) -> Tuple[ExperimentOutcome, List[str]]:
    """The experiment ``name`` of ``config``, checked (datasets, pipelines, measures, baseline), as an
    outcome without results, and its datasets."""
    cfg = load_config(config)
    name, exp = experiment_spec(cfg, name)
    where = f"experiment '{name}'"
    datasets = exp.get("datasets") or ([exp["dataset"]] if exp.get("dataset") else
                                       ([cfg.dataset] if cfg.dataset else []))
    if not datasets:
        raise PipelineError("no dataset: give 'dataset' or 'datasets'", where=where)
    if isinstance(datasets, str):
        datasets = [datasets]
    for ds in datasets:   # an unknown id is one error before anything runs or downloads
        if not isinstance(ds, str):
            raise PipelineError(f"a dataset must be an ir_datasets id, not {ds!r}", where=where)
        check_dataset(ds, where=where)
    pipelines: List[str] = list(exp.get("pipelines") or cfg.pipelines)
    if not pipelines:
        raise PipelineError("no pipelines to compare", where=where)
    twice = sorted({p for p in pipelines if pipelines.count(p) > 1}, key=str)
    if twice:
        raise PipelineError(f"pipeline(s) {', '.join(map(repr, twice))} listed more than once: the table and the "
                            "saved runs need one row and one file per pipeline", where=where)
    measure_names = exp.get("measures")
    if not measure_names:
        raise PipelineError("no measures", where=where)
    if isinstance(measure_names, str):
        measure_names = [measure_names]
    baseline = exp.get("baseline")
    if baseline is not None and baseline not in pipelines:
        raise PipelineError(f"baseline {baseline!r} is not one of the pipelines {pipelines}", where=where)
    save_root = save_dir or exp.get("save_dir")  # relative paths are relative to the working directory
    outcome = ExperimentOutcome(name=name, config=cfg, spec=exp, pipelines=pipelines, measures=list(measure_names),
                                baseline=baseline, test=exp.get("test", "t") if baseline is not None else None,
                                correction=exp.get("correction") if baseline is not None else None,
                                save_root=save_root, table=pd.DataFrame())
    check_run_paths(outcome)
    return outcome, list(datasets)


def _table(outcome: ExperimentOutcome, runs: Dict[str, pd.DataFrame], topics, qrels, dataset: str) -> pd.DataFrame:
    kwargs: Dict[str, Any] = {}
    if outcome.baseline is not None:
        kwargs["baseline"] = outcome.pipelines.index(outcome.baseline)
        kwargs["test"] = outcome.test
        if outcome.correction:
            kwargs["correction"] = outcome.correction
    # the papers' averaging, tests over the queries that count; columns in the order of measure_names
    return Experiment([runs[p] for p in outcome.pipelines], topics, qrels, outcome.measures, names=outcome.pipelines,
                      dataset=dataset, **kwargs)


def experiment_outcome(config: Union[str, Path, dict, PipelineConfig], name: Optional[str] = None,
                       save_dir: Optional[str] = None, report_llm_usage: Optional[bool] = None,
                       trusted: bool = False, write_manifest: bool = True) -> ExperimentOutcome:
    """Runs one experiment like :func:`run_experiment` and returns an :class:`ExperimentOutcome`.

    With ``write_manifest`` (the default) its manifest (:mod:`pyterrier_sci.manifest`) is written
    atomically to ``<save_dir>/<experiment>.manifest.json`` (``<work dir>/runs/`` without a
    ``save_dir``); ``outcome.manifest_path`` says where."""
    outcome, datasets = _plan(config, name, save_dir)
    cfg, pipelines, measure_names = outcome.config, outcome.pipelines, outcome.measures
    tables = []
    llm_ledger = new_ledger_id()   # one LLM budget (llm: budget:) for the whole experiment
    for dataset in datasets:
        topics, qrels = topics_and_qrels(dataset, outcome.spec.get("topics_variant"))
        context = with_ledger_id(make_context(cfg, dataset, None, trusted), llm_ledger)
        systems = build_all(cfg, pipelines, context=context)
        if report_llm_usage is None:
            report_llm_usage = len(usage_report([systems[p] for p in pipelines], names=pipelines)) > 0
        # an unknown name fails before any pipeline runs; cost measures meter the runs (pyterrier_sci.cost)
        costs = cost.wanted(_measures.parse(measure_names, dataset=dataset))
        runs, paths = {}, {}
        for pname in pipelines:
            save_to = run_path(outcome.save_root, dataset, pname, cfg, extra=llm_key(systems[pname]))
            runs[pname] = run_pipeline_on(systems[pname], topics, save_to, run_name=_slug(pname), costs=costs)
            paths[pname] = save_to
        table = _table(outcome, runs, topics, qrels, dataset)
        if report_llm_usage:
            table = add_usage_columns(table, [systems[p] for p in pipelines], names=pipelines)
        table.insert(0, "dataset", dataset)
        tables.append(table)
        outcome.datasets.append(DatasetOutcome(dataset=dataset, topics=topics, qrels=qrels, systems=systems,
                                               runs=runs, table=table, run_paths=paths))
    outcome.table = pd.concat(tables, ignore_index=True)
    if write_manifest:
        outcome.manifest = manifest.experiment_manifest(outcome)
        outcome.manifest_path = manifest.write_manifest(
            outcome.manifest, manifest.experiment_manifest_path(outcome.name, outcome.save_root),
            "the experiment's manifest")
    return outcome


def _read_for_replay(path: Optional[Path], dataset: str, pipeline_name: str) -> pd.DataFrame:
    if path is None or not path.is_file():
        raise PipelineError(f"no saved run of pipeline {pipeline_name!r} on {dataset} ({path}): a replay only "
                            "recomputes the figures from saved runs; run the experiment without --replay first",
                            where="--replay")
    if artifacts.verify_checksum(path) is False:
        raise PipelineError(f"the saved run {path} does not match its checksum ({path.name}"
                            f"{artifacts.CHECKSUM_SUFFIX}): it changed since it was written; run the experiment "
                            "without --replay to compute it again", where="--replay")
    try:
        res = pt.io.read_results(str(path))
    except Exception as e:  # EOFError (truncated gzip), zlib.error, UnicodeDecodeError, parser errors
        raise PipelineError(f"the saved run {path} cannot be read ({type(e).__name__}: {e})", where="--replay") from e
    return cost.attach_costs(res, cost.read_costs(path))   # its per-query costs, when they were kept


def replay_outcome(config: Union[str, Path, dict, PipelineConfig], name: Optional[str] = None,
                   save_dir: Optional[str] = None, trusted: bool = False) -> ExperimentOutcome:
    """The experiment's table recomputed from its saved runs (``save_dir``) without running any
    pipeline: the pipelines are built (building loads and computes nothing) only so that the
    manifest can name their models and templates.  A missing or damaged saved run is one
    :class:`~pyterrier_sci.registry.PipelineError` naming it; the table has no LLM usage columns
    (a replay makes no calls)."""
    outcome, datasets = _plan(config, name, save_dir)
    if not outcome.save_root:
        raise PipelineError(f"experiment '{outcome.name}' has no save_dir, so there are no saved runs to replay: "
                            "give it a save_dir (or --save-dir) and run it without --replay first", where="--replay")
    built, paths = {}, {}
    for dataset in datasets:  # every saved run is there before anything is read
        built[dataset] = build_all(outcome.config, outcome.pipelines, dataset=dataset, trusted=trusted)
        paths[dataset] = {p: run_path(outcome.save_root, dataset, p, outcome.config,
                                     extra=llm_key(built[dataset][p]))
                          for p in outcome.pipelines}
        for pname, p in paths[dataset].items():
            if p is None or not p.is_file():
                _read_for_replay(p, dataset, pname)
    tables = []
    for dataset in datasets:
        topics, qrels = topics_and_qrels(dataset, outcome.spec.get("topics_variant"))
        _measures.parse(outcome.measures, dataset=dataset)
        runs = {p: _read_for_replay(paths[dataset][p], dataset, p) for p in outcome.pipelines}
        systems = built[dataset]
        table = _table(outcome, runs, topics, qrels, dataset)
        table.insert(0, "dataset", dataset)
        tables.append(table)
        outcome.datasets.append(DatasetOutcome(dataset=dataset, topics=topics, qrels=qrels, systems=systems,
                                               runs=runs, table=table, run_paths=paths[dataset]))
    outcome.table = pd.concat(tables, ignore_index=True)
    return outcome


def pipeline_key(config: Optional[PipelineConfig], pipeline_name: str, expression: Optional[str] = None,
                 extra: Optional[Dict[str, Any]] = None) -> str:
    """A short hash of what a pipeline computes: its expression (``expression`` when given, else the
    config's pipeline of that name, else ``pipeline_name`` itself), and, transitively, the named
    pipelines and the component settings it uses, and ``extra`` (what else decides its output, such as the
    LLM an LLM system asks).  Part of its saved run's name, so that a changed pipeline is run again and two
    names that read alike on disk never share a run."""
    pipelines = dict(config.pipelines) if config is not None else {}
    components = dict(config.components) if config is not None else {}
    used: Dict[str, Any] = {"name": pipeline_name}
    todo, seen = [expression if expression is not None else pipelines.get(pipeline_name, pipeline_name)], set()
    used["expression"] = todo[0]
    if extra:
        used["extra"] = extra
    while todo:
        expr = todo.pop()
        for ident in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(expr)):
            if ident in seen:
                continue
            seen.add(ident)
            if ident in pipelines and ident != pipeline_name:
                used.setdefault("pipelines", {})[ident] = pipelines[ident]
                todo.append(pipelines[ident])
            if ident in components:
                used.setdefault("components", {})[ident] = components[ident]
    used["code"] = pipeline_code(seen, used.get("components") or {})["code"]
    blob = json.dumps(used, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def pipeline_code(identifiers: Iterable[str], components: Dict[str, Any]) -> Dict[str, Any]:
    """The :func:`~pyterrier_sci.code_identity.code_identity` of what a pipeline runs: the factories of the
    components it names (``identifiers``: the names its expression and named pipelines use, as
    :func:`pipeline_key` collects them), directly or through the config's ``components`` it uses, and the modules
    they reach."""
    names = set(identifiers) | {str(spec.get("component", spec.get("type", name)))
                                for name, spec in components.items() if isinstance(spec, dict)}
    factories = []
    for name in sorted(names):
        if name in REGISTRY:
            try:
                factories.append(REGISTRY.get(name).factory)
            except ImportError:   # a component that cannot load fails with its own message when the pipeline is built
                continue
    return code_identity(factories)


def llm_key(system: Any) -> Optional[Dict[str, Any]]:
    """What keys a pipeline's saved run beyond its expression and components: the answer settings
    (:data:`~pyterrier_sci.llm.settings.ANSWER_SETTINGS`) of each LLM it asks, as its components resolved them
    from the config's ``llm:`` section, their own ``llm=`` and the environment; None for a pipeline without one."""
    asked = [answer_settings(c.sci_llm_settings()) for c in llm_components(system)]
    return {"llm": asked} if asked else None


def run_path(save_root: Optional[Union[str, Path]], dataset: str, pipeline_name: str,
             config: Optional[PipelineConfig] = None, expression: Optional[str] = None,
             extra: Optional[Dict[str, Any]] = None) -> Optional[Path]:
    """Where an experiment with ``save_dir`` ``save_root`` keeps the run of a pipeline on a dataset:
    ``<save_root>/<dataset>/<name>-<key>.res.gz``, the name made safe for a file name and ``key``
    the :func:`pipeline_key` of the pipeline in ``config`` (or of ``expression``, for a pipeline that is
    named elsewhere, as a reproduction's systems are): names that read alike on disk, ``x<y`` and
    ``x>y``, and a pipeline whose expression or components changed get runs of their own."""
    if not save_root:
        return None
    key = pipeline_key(config, pipeline_name, expression, extra)
    version = corpus_version(dataset) if dataset else None   # a local corpus's runs are its version's only
    return Path(save_root) / (_slug(dataset) + (f"@{version}" if version else "")) / \
        f"{_slug(pipeline_name)}-{key}.res.gz"


def check_run_paths(outcome: "ExperimentOutcome") -> None:
    """One :class:`PipelineError` when two pipelines of an experiment would share a saved run (a
    hash collision; every dataset keeps its runs in a folder of its own, so one check covers all)."""
    if not outcome.save_root:
        return
    seen: Dict[str, str] = {}
    for pname in outcome.pipelines:
        name = run_path(outcome.save_root, "", pname, outcome.config).name
        if name in seen:
            raise PipelineError(f"pipelines {seen[name]!r} and {pname!r} would share the saved run {name} of "
                                "each dataset: give each pipeline of an experiment once, under its own name",
                                where=f"experiment '{outcome.name}'")
        seen[name] = pname


# ------------------------------------------------------------------- the CLI's dry runs (no LLM request)
def dry_run_pipeline(expr: str, dataset: str, config: Any = None, topics_variant: Optional[str] = None,
                     trusted: bool = False) -> DryRunReport:
    """``pyterrier-sci run --dry-run``: builds and runs the pipeline on the dataset's topics with
    no LLM request sent; writes no run."""
    topics, _ = topics_and_qrels(dataset, topics_variant)
    transformer = pipeline(expr, config=config, dataset=dataset, trusted=trusted)
    with dry_run() as run:
        transformer(topics)
    return run.report([transformer], [expr], dataset=dataset)


def dry_run_experiment(config: Any, name: Optional[str] = None, save_dir: Optional[str] = None,
                       trusted: bool = False) -> DryRunReport:
    """``pyterrier-sci experiment --dry-run``: runs the experiment's pipelines on each dataset's
    topics with no LLM request sent; writes no runs and evaluates nothing.  A pipeline whose run
    is already saved in ``save_dir`` is not run (a real run reads it back and makes no calls)."""
    plan, datasets = _plan(config, name, save_dir)   # the same checks as a real run, before anything runs
    cfg, exp, pipelines, save_root = plan.config, plan.spec, plan.pipelines, plan.save_root
    ledger = new_ledger_id()   # one budget for the whole experiment, as in a real run
    reports, everything = [], []
    with dry_run() as run:
        for ds in datasets:
            topics, _ = topics_and_qrels(ds, exp.get("topics_variant"))
            context = with_ledger_id(make_context(cfg, ds, None, trusted), ledger)
            systems = build_all(cfg, pipelines, context=context)
            paths = {p: run_path(save_root, ds, p, cfg, extra=llm_key(systems[p])) for p in pipelines}
            costs = cost.wanted(_measures.parse(plan.measures, dataset=ds))   # a real run reruns a run without costs
            saved = []
            for p in pipelines:
                if paths[p] is not None and paths[p].exists() and (not costs or cost.costs_path(paths[p]).exists()):
                    saved.append(p)
                else:
                    systems[p](topics)
            everything += [systems[p] for p in pipelines if p not in saved]
            report = run.report([systems[p] for p in pipelines if p not in saved],
                                [p for p in pipelines if p not in saved], dataset=ds, notes=False)
            report.notes += [f"{ds} {p}: its run is saved in {paths[p]}; a real run reads it back and makes no LLM "
                             "calls" for p in saved]
            reports.append(report)
    reports.append(DryRunReport(pd.DataFrame(columns=DRY_RUN_COLUMNS), budget_notes(run, everything)))
    return concat_reports(reports)


def replay(config, name: Optional[str] = None, save_dir: Optional[str] = None,
           manifest: Optional[Union[str, Path]] = None, trusted: bool = False) -> Replay:
    """``pyterrier-sci experiment FILE --replay``: recomputes the experiment's table from its saved runs
    (:func:`replay_outcome`: no pipeline runs) and compares it with the manifest the run wrote
    (:func:`pyterrier_sci.manifest.replay_against`)."""
    return replay_against(replay_outcome(config, name=name, save_dir=save_dir, trusted=trusted), manifest)
