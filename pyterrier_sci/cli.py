"""The ``pyterrier-sci`` command line (``datasets``, ``components``, ``measures``, ``reference``, ``run``,
``evaluate``, ``experiment`` (``--replay``), ``manifest diff``, plus the commands of the
``pyterrier_sci.cli`` entry-point group).
Every failure is one line on stderr and exit status 2; ``--debug`` shows the traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.metadata
import json
import linecache
import os
import shutil
import sys
import sysconfig
import textwrap
import traceback
import warnings
from typing import Iterator, List, Optional

import ir_datasets
import pandas as pd

from pyterrier_sci import cost, manifest, measures
from pyterrier_sci.artifacts import check_file_target
from pyterrier_sci.data import registry_status, work_dir
from pyterrier_sci.errors import PipelineError, SciError, one_line
from pyterrier_sci.evaluation import Experiment, read_run
from pyterrier_sci.experiment import (
    dry_run_experiment,
    dry_run_pipeline,
    experiment_outcome,
    replay,
    run_pipeline_on,
    topics_and_qrels,
    write_run,
)
from pyterrier_sci.llm.cli import add_llm_commands
from pyterrier_sci.local_corpus import as_dataset
from pyterrier_sci.manifest import diff_manifests, format_changes, read_manifest
from pyterrier_sci.pipeline import pipeline
from pyterrier_sci.reference import (
    components_markdown,
    dataset_counts,
    dataset_rows,
    datasets_markdown,
    measures_markdown,
    reference_pages,
    stale_pages,
    write_counts,
    write_pages,
)
from pyterrier_sci.registry import CLI_GROUP, REGISTRY, check_dataset, irds_id, load_group
from pyterrier_sci.report import check_target, write_report
from pyterrier_sci_launcher import command_started


def _print_table(df: pd.DataFrame, as_json: bool) -> None:
    df = df.copy()
    for col in df.columns:  # win/loss counts of significance tests are counts, not floats
        if isinstance(col, str) and (col.endswith(" +") or col.endswith(" -")):
            df[col] = df[col].astype("Int64")
    if as_json:
        print(df.to_json(orient="records", indent=2))
    else:
        for col in df.columns:  # the baseline's empty counts print as nothing, not <NA>
            if str(df[col].dtype) == "Int64":
                df[col] = df[col].astype(object).where(df[col].notna(), "")
        with pd.option_context("display.max_columns", None, "display.width", 200, "display.max_colwidth", 60):
            print(df.to_string(index=False, na_rep="", float_format=lambda x: f"{x:.4f}"))


def cmd_datasets(args) -> int:
    if args.count:
        ids = [irds_id(n) for n in args.names] or None
        if args.write:
            record = write_counts(ids)
            counts = {k: v for k, v in record.items() if ids is None or k in ids}
        else:
            counts = {irds_id(r["id"]): dataset_counts(r["id"]) for r in dataset_rows(include_local=False)
                      if ids is None or irds_id(r["id"]) in ids}
        print(json.dumps(counts, indent=1, sort_keys=True))
        return 0
    if args.names or args.write:
        raise ValueError("datasets: NAMES and --write go with --count")
    if args.markdown:
        print(datasets_markdown(), end="")
        return 0
    rows = registry_status()
    about = {r["id"]: r for r in dataset_rows()}
    for r in rows:
        r.update({k: about.get(r["id"], {}).get(k, "") for k in ("description", "holds")})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        width = max(60, min(160, shutil.get_terminal_size((120, 24)).columns))
        for r in rows:
            state = "present" if r["present"] else "MISSING: " + ", ".join(r["missing"])
            line = f"{r['id']:<44} {state:<8} {r['description']}"
            print(line if len(line) <= width else line[:width - 1] + "…")
    return 0


def cmd_components(args) -> int:
    """Each component's name and the first sentence of its description, wrapped to the terminal; with names,
    each of those components' parameters: what it takes and its default."""

    if args.markdown:
        print(components_markdown(), end="")
        return 0
    width = max(60, min(120, shutil.get_terminal_size((100, 24)).columns))
    if args.names:
        return _component_params(args.names, width)
    for name in REGISTRY.names():
        try:
            desc = REGISTRY.get(name).description
        except ImportError as e:
            desc = f"(unavailable: {e})"
        print(textwrap.fill(desc, width=width, initial_indent=f"{name:<22} ", subsequent_indent=" " * 23,
                            break_long_words=False, break_on_hyphens=False) if desc else name)
    aliases = REGISTRY.aliases()
    if aliases:
        print("\ndeprecated names (still accepted, with a warning):")
        for old, new in aliases.items():
            print(f"{old:<22} now {new}")
    return 0


def _component_params(names: List[str], width: int) -> int:
    for i, name in enumerate(names):
        spec = REGISTRY.get(name)   # an unknown name: one error naming the known ones
        print(("\n" if i else "") + textwrap.fill(f"{name}: {spec.description}", width=width,
                                                 subsequent_indent="  ", break_on_hyphens=False))
        decl = spec.params
        if decl is None:
            print("  (its parameters are not declared: see its documentation)")
            continue
        rows = decl.describe()
        if not rows:
            print("  no parameters")
        col = max(len(n) for n, _, _ in rows) + 2
        for pname, takes, default in rows:
            print(textwrap.fill(f"default {default}; takes {takes}", width=width,
                                initial_indent=f"  {pname:<{col}}", subsequent_indent=" " * (col + 2),
                                break_long_words=False, break_on_hyphens=False))
    return 0


def cmd_irds(args) -> int:
    """``pyterrier-sci irds ARGS``: ir_datasets' own command line (``export``, ``lookup``, ``list``, ...) with the
    toolkit's ``sci/...`` datasets registered, which plain ``ir_datasets`` does not know (it has no plugin
    mechanism: they exist once ``pyterrier_sci`` is imported)."""
    argv = list(args.args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    try:
        ir_datasets.main(argv)
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    return 0


def cmd_measures(args) -> int:
    if args.markdown:
        print(measures_markdown(), end="")
        return 0
    for name in measures.names():
        m = measures.get(name)
        print(f"{name:<20} {getattr(m, 'description', '')}")
    print("(and any ir_measures name: nDCG@10, R@100, AP(rel=2), RR@10, ...)")
    return 0


def cmd_reference(args) -> int:
    """``pyterrier-sci reference``: the generated reference pages (docs/reference/): written into a folder
    (``--write``), checked against one (``--check``: exit status 1 naming each stale page), or one printed."""
    parser = build_parser()
    if args.write:
        for path in write_pages(args.write, parser):
            print(f"wrote {path}")
        return 0
    if args.check:
        stale = stale_pages(args.check, parser)
        for path in stale:
            print(f"stale: {path} (pyterrier-sci reference --write {args.check})")
        return 1 if stale else 0
    pages = reference_pages(parser)
    if args.page not in pages:
        raise SciError(f"name a page to print ({', '.join(pages)}), or give --write DIR or --check DIR")
    print(pages[args.page], end="")
    return 0


def cmd_run(args) -> int:
    if args.dry_run:  # no LLM request sent, no run written (docs/llm.md, "Dry runs")
        return dry_run_pipeline(args.expr, args.dataset, config=args.config, topics_variant=args.topics_variant,
                                trusted=args.trust_config).print(args.json)
    if not args.output:
        raise ValueError("--output is required (except with --dry-run)")
    check_file_target(args.output, "--output")   # refuse a device, FIFO or directory before running anything
    topics, _ = topics_and_qrels(args.dataset, args.topics_variant)
    transformer = pipeline(args.expr, config=args.config, dataset=args.dataset, trusted=args.trust_config)
    res = run_pipeline_on(transformer, topics, costs=args.costs)
    with _writing(args.output):
        out = write_run(res, args.output, run_name=args.run_name)
        kept = cost.write_costs(res, out, what="--output")   # --costs: beside the run, where evaluate finds them
    if kept is not None:
        print(f"wrote the per-query LLM costs to {kept}", file=sys.stderr)
    print(f"wrote {len(res)} results for {res['qid'].nunique() if len(res) else 0} queries to {args.output}",
          file=sys.stderr)
    m = manifest.pipeline_manifest({args.expr: transformer}, args.config, [args.dataset], kind="run",
                                   extra={"run": {"expression": args.expr, "dataset": args.dataset,
                                                  "config": args.config, "output": str(out),
                                                  "sha256": manifest.file_sha256(out),
                                                  "results": len(res), "queries": int(res["qid"].nunique())
                                                  if len(res) else 0}})
    with _writing(f"{out}.manifest.json"):
        where = manifest.write_manifest(m, f"{out}.manifest.json", "the run's manifest")
    print(f"manifest: {where}", file=sys.stderr)
    return 0


def cmd_evaluate(args) -> int:
    run = read_run(args.run)
    topics, qrels = topics_and_qrels(args.dataset)
    names = measures.split_names(args.measures)
    table = Experiment([run], topics, qrels, names, names=[args.name or args.run], perquery=args.perquery,
                       dataset=args.dataset)
    if args.perquery:
        # true per-query values; a query the paper leaves out of the mean is marked, not given 0
        order = {n: i for i, n in enumerate(names)}
        table = table.assign(counted=table["value"].notna(), _order=table["measure"].map(order))
        table = table.sort_values(["name", "qid", "_order"], kind="stable").drop(columns="_order")
        if not args.json:
            table["value"] = [f"{v:.4f}" if c else "not counted" for v, c in zip(table["value"], table["counted"])]
            table = table.drop(columns="counted")
    _print_table(table, args.json)
    return 0


def cmd_experiment(args) -> int:
    modes = [flag for flag, on in (("--replay", args.replay), ("--dry-run", args.dry_run),
                                   ("--report", args.report)) if on]
    if len(modes) > 1:
        raise ValueError(f"{' and '.join(modes)} cannot be combined: --replay recomputes saved runs, --dry-run "
                         "sends no LLM request and writes nothing, --report writes a report of a full run")
    if args.manifest and not args.replay:
        raise ValueError("--manifest is for --replay")
    if args.replay:
        return cmd_replay(args)
    if args.dry_run:  # no LLM request sent, no run written, nothing evaluated (docs/llm.md, "Dry runs")
        return dry_run_experiment(args.file, name=args.name, save_dir=args.save_dir,
                                  trusted=args.trust_config).print(args.json)
    if args.report:  # refused before anything runs (not a directory, no matplotlib)
        check_target(args.report)
    outcome = experiment_outcome(args.file, name=args.name, save_dir=args.save_dir, trusted=args.trust_config)
    table = outcome.table
    _print_table(table, args.json)
    print(f"manifest: {outcome.manifest_path}", file=sys.stderr)
    if args.report:  # report.html, results.tex, perquery.csv (docs/evaluation.md, "Reports")
        with _writing(args.report):
            written = write_report(outcome, args.report)
        print(f"report: {written['report.html']}", file=sys.stderr)
    return 0


def cmd_replay(args) -> int:
    """``experiment FILE --replay``: exit status 0 when every figure equals the recorded one, 1 when
    some differ."""
    rep = replay(args.file, name=args.name, save_dir=args.save_dir, manifest=args.manifest,
                 trusted=args.trust_config)
    if args.json:
        print(json.dumps(rep.as_dict(), indent=2))
    else:
        print("\n".join(rep.lines()))
    return 0 if rep.identical else 1


def cmd_manifest_diff(args) -> int:
    """``manifest diff A B``: exit status 0 when nothing differs, 1 otherwise (like diff(1))."""
    a, b = read_manifest(args.a), read_manifest(args.b)
    changes = diff_manifests(a, b)
    if args.json:
        print(json.dumps([{"section": c.section, "key": c.key, "a": c.a, "b": c.b} for c in changes], indent=2,
                         default=str))
    elif changes:
        print(f"{len(changes)} differences from {args.a} to {args.b}:")
        print("\n".join(format_changes(changes)))
    else:
        print(f"no differences between {args.a} and {args.b}")
    return 1 if changes else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyterrier-sci",
                                description="PyTerrier pipelines for scientific-literature retrieval",
                                epilog="Errors are one line (exit status 2); --debug (anywhere) shows the traceback.")
    p.add_argument("--debug", action="store_true", help="show the full error and its traceback")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("datasets", help="registered dataset ids, what each is, and whether their data is present")
    s.add_argument("--json", action="store_true")
    s.add_argument("--markdown", action="store_true", help="the reference page docs/reference/datasets.md")
    s.add_argument("--count", action="store_true",
                   help="count the documents, queries and judgements of each (or of NAMES) from its data")
    s.add_argument("--write", action="store_true",
                   help="with --count: record the counts for the reference page (the package's dataset_counts.json)")
    s.add_argument("names", nargs="*", help="with --count: the ids to count (default every benchmark id)")
    s.set_defaults(fn=cmd_datasets)

    s = sub.add_parser("components", help="component names of the pipeline language; with names, their "
                                          "parameters and defaults")
    s.add_argument("names", nargs="*", help="components whose parameters to list (e.g. dense bm25)")
    s.add_argument("--markdown", action="store_true",
                   help="every component with its parameters: the reference page docs/reference/components.md")
    s.set_defaults(fn=cmd_components)

    s = sub.add_parser("irds", help="ir_datasets' own command line with the sci/ datasets registered, e.g. "
                                    "'irds export sci/csfcube/method qrels'")
    s.add_argument("args", nargs=argparse.REMAINDER, help="ir_datasets' arguments (export, lookup, list, ...)")
    s.set_defaults(fn=cmd_irds)

    s = sub.add_parser("measures", help="the toolkit's measure names")
    s.add_argument("--markdown", action="store_true",
                   help="every measure, each dataset's short names: the reference page docs/reference/measures.md")
    s.set_defaults(fn=cmd_measures)

    s = sub.add_parser("reference", help="the reference pages generated from the code (docs/reference/)")
    s.add_argument("page", nargs="?", help="a page to print: components.md, datasets.md, measures.md, cli.md or "
                                           "http-api.md")
    s.add_argument("--write", metavar="DIR", help="write every page into DIR (e.g. docs/reference)")
    s.add_argument("--check", metavar="DIR", help="exit status 1 when a page of DIR differs from what the code "
                                                  "generates now")
    s.set_defaults(fn=cmd_reference)

    s = sub.add_parser("run", help="run a pipeline expression on a dataset's topics, write a TREC run")
    s.add_argument("expr", help="pipeline expression or the name of a pipeline of --config")
    s.add_argument("--dataset", required=True, help="ir_datasets id, e.g. irds:sci/csfcube")
    s.add_argument("--config", help="pipeline YAML file")
    s.add_argument("--output", help="TREC run file to write (.gz allowed); required unless --dry-run")
    s.add_argument("--run-name", default="pyterrier-sci")
    s.add_argument("--topics-variant", help="query field to use when the dataset has several")
    s.add_argument("--costs", action="store_true",
                   help="run one query at a time and keep each query's LLM cost beside the run (OUTPUT.costs.tsv), "
                        "for the cost.* measures of 'evaluate'")
    s.add_argument("--trust-config", action="store_true",
                   help="trust the expression and --config: their LLM base_url gets the API key, "
                        "their paths may lie anywhere")
    s.add_argument("--dry-run", action="store_true",
                   help="run the pipeline without sending any LLM request; print per LLM component the calls it "
                        "would make, how many the cache holds, estimated tokens and cost (docs/llm.md)")
    s.add_argument("--json", action="store_true", help="with --dry-run: print JSON")
    s.set_defaults(fn=cmd_run)

    s = sub.add_parser("evaluate", help="evaluate a TREC run on a dataset")
    s.add_argument("run", help="TREC run file")
    s.add_argument("--dataset", required=True)
    s.add_argument("--measures", required=True,
                   help="separated by commas or spaces, e.g. 'NDCG%%20,MAP' or 'nDCG@10 R@100'")
    s.add_argument("--name", help="row name (default: the run file)")
    s.add_argument("--perquery", action="store_true")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_evaluate)

    s = sub.add_parser("experiment", help="run an experiment defined in a pipeline YAML file")
    s.add_argument("file")
    s.add_argument("--name", help="which experiment, when the file defines several")
    s.add_argument("--save-dir", help="override the experiment's save_dir")
    s.add_argument("--report", metavar="DIR",
                   help="also write report.html, results.tex (booktabs) and perquery.csv into DIR")
    s.add_argument("--json", action="store_true")
    s.add_argument("--trust-config", action="store_true",
                   help="trust FILE: its LLM base_url gets the API key, its paths may lie anywhere (docs/llm.md)")
    s.add_argument("--replay", action="store_true",
                   help="recompute the table from the saved runs (runs no pipeline) and report every figure and "
                        "manifest entry that differs from the recorded manifest; exit status 1 when figures differ")
    s.add_argument("--manifest", help="with --replay: the manifest to compare with "
                                      "(default: <save_dir>/<experiment>.manifest.json)")
    s.add_argument("--dry-run", action="store_true",
                   help="run the pipelines without sending any LLM request and without writing runs; print per "
                        "LLM component the calls they would make, how many the cache holds, estimated tokens and "
                        "cost (docs/llm.md)")
    s.set_defaults(fn=cmd_experiment)

    s = sub.add_parser("manifest", help="run manifests (docs/reproducibility.md)")
    msub = s.add_subparsers(dest="manifest_command", required=True)
    d = msub.add_parser("diff", help="what changed between two manifests (exit status 1 when anything did)")
    d.add_argument("a", help="the older manifest (.manifest.json)")
    d.add_argument("b", help="the newer manifest")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=cmd_manifest_diff)

    llm = add_llm_commands(sub)  # "llm serve", "llm settings"
    llm.set_defaults(fn=lambda args: args.func(args))

    for add_commands in load_group(CLI_GROUP).values():  # e.g. "annotate run|compile|agreement" (Anno-GPT)
        added = add_commands(sub)
        added.set_defaults(fn=lambda args: args.func(args))
    return p


def _version() -> str:
    try:
        return importlib.metadata.version("pyterrier-sci")
    except importlib.metadata.PackageNotFoundError:   # run from a checkout that is not installed
        return "(not installed)"


def _split_debug(argv: List[str]):
    """``--debug`` anywhere before a ``--`` (or ``$PYTERRIER_SCI_DEBUG=1``) shows tracebacks."""
    debug = os.environ.get("PYTERRIER_SCI_DEBUG", "") not in ("", "0")
    out = []
    for i, a in enumerate(argv):
        if a == "--":
            out += argv[i:]
            break
        if a == "--debug":
            debug = True
        else:
            out.append(a)
    return debug, out


def describe_error(e: BaseException) -> str:
    """One line saying what went wrong, for any failure of user input or of the environment."""
    if isinstance(e, PipelineError):
        return e.headline
    if _ours(e):  # MissingDataError, LLMError, ...: their messages are written for users
        return one_line(e) or type(e).__name__
    if isinstance(e, KeyError):
        return one_line(e.args[0] if e.args else "missing key")
    if isinstance(e, UnicodeDecodeError):
        return one_line(f"cannot read text as {e.encoding} (byte {e.start}: {e.object[e.start:e.start + 4]!r}); "
                        "the file is damaged or not in that encoding")
    if isinstance(e, OSError):
        what = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}.get(e.errno)
        what = what or e.strerror or one_line(e)
        names = " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None)
        return one_line(f"{what}: {names}" if names else what)
    if isinstance(e, MemoryError):
        return "out of memory" + (f": {one_line(e)}" if str(e) else "")
    if isinstance(e, RecursionError):
        return "the input nests too deeply (Python's recursion limit was reached)"
    if isinstance(e, ImportError):
        return one_line(f"{e} (an optional part may not be installed: see the README's extras and docs/guide.md)")
    text = one_line(e) or type(e).__name__
    return text if isinstance(e, ValueError) else f"{type(e).__name__}: {text}"


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def _writing(target) -> Iterator[None]:
    """A full disk (or quota) met by a ``write()``, which knows no file name, is reported with
    ``target``, the file or directory being written."""
    try:
        yield
    except OSError as e:
        if e.errno in DISK_FULL and e.filename is None:
            e.filename = str(target)
        raise


def _name_what_was_written(e: BaseException, args) -> None:
    """For a full disk whose error names no file (raised outside :func:`_writing`, e.g. while a
    component builds an index): the places the command writes to, its outputs (``--output``,
    ``--report``, ``--save-dir``) and the work directory, where components build their indexes."""
    if not (isinstance(e, OSError) and e.errno in DISK_FULL and e.filename is None):
        return
    places = [f"{value} ({flag})" for attr, flag in (("output", "--output"), ("report", "--report"),
                                                     ("save_dir", "--save-dir"))
              for value in [getattr(args, attr, None)] if isinstance(value, str) and value]
    try:
        places.append(f"{work_dir()} (the work directory, where indexes are built; $PYTERRIER_SCI_HOME moves it)")
    except Exception:  # noqa: BLE001 - no work directory either
        pass
    if places:
        e.filename = "while writing to " + " or ".join(places)


def _ours(e: BaseException) -> bool:
    """An error of the toolkit (:class:`~pyterrier_sci.errors.SciError`, or raised by one of its plugins):
    its message is written for the user."""
    return isinstance(e, SciError) or type(e).__module__.split(".")[0] == "pyterrier_sci"


def _plain_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one plain line, ``pyterrier-sci: warning: ...`` (no source path and line)."""
    try:
        print(f"pyterrier-sci: warning: {one_line(message)}", file=file or sys.stderr)
    except OSError:
        pass


def main(argv: Optional[List[str]] = None) -> int:
    """Runs a command; every failure of user input or of the environment is one line on stderr
    (plus the expression and a caret under its offending part, for pipeline expressions) and exit
    status 2; an exception the toolkit did not raise on purpose is one line calling it a bug
    (:func:`is_bug`).  ``--debug`` shows the traceback as well; warnings are one plain line each."""
    command_started(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _plain_warning
        return _main(argv)


def _main(argv: Optional[List[str]]) -> int:
    debug, argv = _split_debug(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    args.debug = debug
    prog = f"pyterrier-sci {args.command}"
    try:
        dataset = getattr(args, "dataset", None)
        if isinstance(dataset, str) and args.command in ("run", "evaluate"):
            args.dataset = as_dataset(dataset)   # a file or folder of your own papers: registered first
            check_dataset(args.dataset, where="--dataset")  # before anything is downloaded
        rc = args.fn(args) or 0
        sys.stdout.flush()   # a closed pipe fails here, inside the handler below, not at exit
        return rc
    except BrokenPipeError:   # the reader went away (``pyterrier-sci datasets | head``): stop quietly
        _drop_stdout()
        return 141   # 128 + SIGPIPE, as a command killed by the signal
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (finished runs and indexes are kept)", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line per failure; --debug shows the traceback
        _name_what_was_written(e, args)
        if debug:
            traceback.print_exc()
        lines = [f"{prog}: {command_error(e)}"]
        if isinstance(e, PipelineError):
            lines += e.picture()
        if not debug and not isinstance(e, PipelineError):
            lines[0] += "  [--debug shows the traceback]" if _unexpected(e) or is_bug(e) else ""
        try:
            print("\n".join(lines), file=sys.stderr)
        except OSError:
            pass
        return 2


def command_error(e: BaseException) -> str:
    """The command line's line for a failure (after ``pyterrier-sci COMMAND: ``): ``error: <what went wrong>``, or
    the internal-error line of an exception the toolkit did not raise on purpose (:func:`is_bug`)."""
    if is_bug(e):
        return (f"internal error (a bug in pyterrier-sci, not your input; please report it with the traceback): "
                f"{type(e).__name__}: {one_line(e) or '(no message)'}")
    return f"error: {describe_error(e)}"


def _drop_stdout() -> None:
    """Points the standard output at /dev/null, so that the interpreter's last flush does not fail
    again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):   # no file descriptor (a captured stdout)
        pass


#: failures of the environment (a file, the disk, memory, an optional package), not of the toolkit's code
_ENVIRONMENT = (OSError, UnicodeError, MemoryError, RecursionError, ImportError)


def _innermost_frame(e: BaseException):
    tb, last = e.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last


def _library_file(filename: str) -> bool:
    """Whether ``filename`` is Python's own or an installed package's (not the toolkit's, not the user's)."""
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    real = os.path.realpath(filename)
    return any(real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def is_bug(e: BaseException) -> bool:
    """An exception the toolkit did not raise on purpose, which the CLI calls a bug: not one of its errors
    (:class:`~pyterrier_sci.errors.SciError`, or a class of its modules), not a failure of the environment
    (:data:`_ENVIRONMENT`), not raised by a ``raise`` statement of its code (a message written for the user),
    and not raised by the user's own code (a component they registered): a missing key, an index out of range,
    pandas or numpy refusing what the toolkit handed them."""
    if _ours(e) or isinstance(e, _ENVIRONMENT):
        return False
    last = _innermost_frame(e)
    if last is None:
        return False
    frame = last.tb_frame
    if str(frame.f_globals.get("__name__", "")).split(".")[0] == "pyterrier_sci":
        return not linecache.getline(frame.f_code.co_filename, last.tb_lineno).lstrip().startswith("raise")
    return _library_file(frame.f_code.co_filename)


def _unexpected(e: BaseException) -> bool:
    """Failures that are not plainly the user's input or the environment (worth a traceback)."""
    return isinstance(e, (AssertionError, AttributeError, TypeError, RuntimeError, IndexError, NameError)) \
        and not isinstance(e, RecursionError) and not _ours(e)


if __name__ == "__main__":
    sys.exit(main())
