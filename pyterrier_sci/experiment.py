"""Experiments declared in a pipeline config's ``experiments:`` section, run with
:func:`pyterrier_sci.evaluation.Experiment`; each finished run is written to ``save_dir`` atomically
and read back by a rerun, so an interrupted experiment resumes where it stopped.  See README,
"Pipeline files (YAML)".
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import pandas as pd
import pyterrier as pt

from pyterrier_sci import measures as _measures
from pyterrier_sci.corpus import pt_dataset_id
from pyterrier_sci.evaluation import Experiment
from pyterrier_sci.pipeline import PipelineConfig, PipelineError, build_all, load_config
from pyterrier_sci.registry import check_dataset

__all__ = ["run_experiment", "run_pipeline_on", "write_run", "topics_and_qrels"]


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", s).strip("_") or "x"


def topics_and_qrels(dataset: str, variant: Optional[str] = None):
    ds = pt.get_dataset(pt_dataset_id(dataset))
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
    from pyterrier_sci import artifacts
    path = artifacts.check_file_target(path, what)
    with artifacts.atomic_file(path, what) as tmp:
        pt.io.write_results(res, str(tmp), format="trec", run_name=run_name)
    if checksum:
        artifacts.record_checksum(path)
    return path


def _read_saved_run(path: Path) -> Optional[pd.DataFrame]:
    """A finished run saved by :func:`write_run`, or None (with a warning) when it is damaged:
    it does not match its checksum or cannot be read."""
    from pyterrier_sci import artifacts
    if not path.exists():
        return None
    if artifacts.discard_if_damaged(path, "saved run", missing_record_is_damage=False):
        return None
    try:
        res = pt.io.read_results(str(path))
    except Exception as e:  # EOFError (truncated gzip), zlib.error, UnicodeDecodeError, parser errors
        import warnings
        warnings.warn(f"saved run {path} cannot be read ({type(e).__name__}: {e}); it is removed and computed "
                      "again", artifacts.DamagedFileWarning, stacklevel=3)
        artifacts.discard(path)
        return None
    if artifacts.verify_checksum(path) is None:  # saved before checksums were kept
        artifacts.record_checksum(path)
    return res


def run_pipeline_on(transformer: pt.Transformer, topics: pd.DataFrame, save_to: Optional[Path] = None,
                    run_name: str = "pyterrier-sci") -> pd.DataFrame:
    """Runs a pipeline on topics, reusing (and otherwise writing) a finished run file at ``save_to``
    (an experiment's ``save_dir``).  A saved run that does not match its checksum or cannot be read
    is computed again, with a :class:`~pyterrier_sci.artifacts.DamagedFileWarning`; a ``save_to``
    that cannot be written is an error before anything runs."""
    if save_to is not None:
        from pyterrier_sci import artifacts
        save_to = artifacts.check_file_target(save_to, "save_dir")
        res = _read_saved_run(save_to)
        if res is not None:
            return res
    res = transformer(topics)
    if save_to is not None:
        write_run(res, save_to, run_name, what="save_dir", checksum=True)
    return res


def run_experiment(config: Union[str, Path, dict, PipelineConfig], name: Optional[str] = None,
                   save_dir: Optional[str] = None, report_llm_usage: Optional[bool] = None,
                   trusted: bool = False) -> pd.DataFrame:
    """Runs one experiment of a config (the only one, or ``name``) and returns its table: one row per
    (dataset, pipeline), one column per measure (plus significance columns with a baseline), and
    the LLM usage of each pipeline (``llm_calls``, ``llm_cache_hits``, tokens, cost) when a pipeline
    has LLM components (``report_llm_usage=None``) or when asked (``True``)."""
    cfg = load_config(config)
    if not cfg.experiments:
        raise PipelineError("the config defines no experiments", where=str(cfg.path or "config"))
    if name is None:
        if len(cfg.experiments) > 1:
            raise PipelineError(f"the config defines several experiments ({', '.join(cfg.experiments)}): name one")
        name = next(iter(cfg.experiments))
    if name not in cfg.experiments:
        raise PipelineError(f"unknown experiment {name!r} (defined: {', '.join(cfg.experiments)})")
    exp = dict(cfg.experiments[name])
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
    measure_names = exp.get("measures")
    if not measure_names:
        raise PipelineError("no measures", where=where)
    baseline = exp.get("baseline")
    if baseline is not None and baseline not in pipelines:
        raise PipelineError(f"baseline {baseline!r} is not one of the pipelines {pipelines}", where=where)
    save_root = save_dir or exp.get("save_dir")  # relative paths are relative to the working directory
    tables = []
    for dataset in datasets:
        topics, qrels = topics_and_qrels(dataset, exp.get("topics_variant"))
        systems = build_all(cfg, pipelines, dataset=dataset, trusted=trusted)
        if report_llm_usage is None:
            from pyterrier_sci.llm import usage_report
            report_llm_usage = len(usage_report([systems[p] for p in pipelines], names=pipelines)) > 0
        if isinstance(measure_names, str):
            measure_names = [measure_names]
        _measures.parse(measure_names, dataset=dataset)   # an unknown name fails before any pipeline runs
        runs = []
        for pname in pipelines:
            save_to = Path(save_root) / _slug(dataset) / f"{_slug(pname)}.res.gz" if save_root else None
            runs.append(run_pipeline_on(systems[pname], topics, save_to, run_name=_slug(pname)))
        kwargs: Dict[str, Any] = {}
        if baseline is not None:
            kwargs["baseline"] = pipelines.index(baseline)
            kwargs["test"] = exp.get("test", "t")
            if exp.get("correction"):
                kwargs["correction"] = exp["correction"]
        # the papers' averaging, tests over the queries that count; columns in the order of measure_names
        table = Experiment(runs, topics, qrels, measure_names, names=pipelines, dataset=dataset, **kwargs)
        if report_llm_usage:
            from pyterrier_sci.llm import add_usage_columns
            table = add_usage_columns(table, [systems[p] for p in pipelines], names=pipelines)
        table.insert(0, "dataset", dataset)
        tables.append(table)
    return pd.concat(tables, ignore_index=True)

