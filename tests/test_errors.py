"""Every user-facing error of the core is defined in pyterrier_sci/errors.py under one base, SciError, which the
command line catches (issue 32, item 1); the old import paths and the standard exception bases still work."""
import importlib
import inspect
import pickle
import pkgutil

import conftest  # noqa: F401 (its environment)
import pytest

import pyterrier_sci
from pyterrier_sci import errors
from pyterrier_sci.cli import describe_error


def _core_modules():
    for info in pkgutil.walk_packages(pyterrier_sci.__path__, "pyterrier_sci."):
        if info.name.startswith(("pyterrier_sci.plugins", "pyterrier_sci.datasets")) or "._" in info.name:
            continue
        yield importlib.import_module(info.name)


def test_every_core_error_is_defined_in_errors_under_sci_error():
    defined_elsewhere, outside_base = [], []
    for module in _core_modules():
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__.startswith("pyterrier_sci"):
                if obj.__module__ != "pyterrier_sci.errors" and not name.startswith("_"):
                    defined_elsewhere.append(f"{module.__name__}.{name}")
                if not issubclass(obj, (errors.SciError, Warning)) and not name.startswith("_"):
                    outside_base.append(f"{module.__name__}.{name}")
    assert defined_elsewhere == [] and outside_base == []
    assert len([c for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, errors.SciError)]) >= 18


@pytest.mark.parametrize("old, name, std", [
    ("pyterrier_sci.registry", "PipelineError", ValueError),
    ("pyterrier_sci.data", "MissingDataError", FileNotFoundError),
    ("pyterrier_sci.data", "DamagedDataError", ValueError), ("pyterrier_sci.llm", "LLMError", RuntimeError),
    ("pyterrier_sci.llm.budget", "LLMBudgetExceeded", RuntimeError),
    ("pyterrier_sci.models", "BackendError", ValueError),
    ("pyterrier_sci.artifacts", "PathError", ValueError), ("pyterrier_sci.manifest", "ManifestError", ValueError),
    ("pyterrier_sci.registry", "UnknownComponentError", KeyError)])
def test_old_import_paths_and_standard_bases_still_work(old, name, std):
    cls = getattr(importlib.import_module(old), name)
    assert cls is getattr(errors, name) and issubclass(cls, std) and issubclass(cls, errors.SciError)


def test_errors_pickle_and_read_as_one_line():
    e = errors.DamagedDataError("/data/x.jsonl", "truncated", line=3, remedy="download it again")
    assert describe_error(e) == "damaged data file /data/x.jsonl, line 3: truncated. Download it again"
    budget = errors.LLMBudgetExceeded("over budget", {"calls": 1}, {"calls": 1}, {"calls": 0}, "calls 2 > 1")
    again = pickle.loads(pickle.dumps(budget))
    assert isinstance(again, errors.LLMError) and again.reason == "calls 2 > 1" and str(again) == "over budget"
    assert describe_error(errors.PipelineError("unknown component 'bm26'", where="pipeline")) == \
        "pipeline: unknown component 'bm26'"
    assert describe_error(errors.UnknownComponentError("no component 'x'")) == "no component 'x'"
