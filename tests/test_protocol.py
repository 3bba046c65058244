"""The component protocol (pyterrier_sci/protocol.py, issue 32 item 2): manifests, usage accounting and dry
runs find what a pipeline uses by walking it with ``pt.inspect.subtransformers`` and asking each transformer;
a third-party component written only against the documented methods shows up in all of them."""
import hashlib

import conftest  # noqa: F401 (its environment)
import pandas as pd
import pyterrier as pt

from pyterrier_sci import manifest as mf
from pyterrier_sci import protocol
from pyterrier_sci.llm import LLMSettings, Usage
from pyterrier_sci.llm.accounting import llm_components, usage_report
from pyterrier_sci.llm.dryrun import DryRun


class ThirdPartyScorer(pt.Transformer):
    """A component from another package: no toolkit base class, its model under an attribute named nothing
    the toolkit knows (``brain``), only the protocol's methods."""

    def __init__(self, brain_dir, prompt="Score {query} against {text}."):
        self.brain_dir = brain_dir
        self.prompt = prompt
        self.counters = Usage(model="tp-llm")
        self.llm_conf = LLMSettings(model="tp-llm", base_url="http://127.0.0.1:9/v1",
                                    prices={"tp-llm": {"prompt": 1.0, "completion": 2.0}})

    def transform(self, inp):
        return inp.assign(score=1.0)

    def sci_models(self):
        return [protocol.ModelRef("tp/brain", "brain", str(self.brain_dir)),
                protocol.ModelRef("tp-llm", "llm", None, "served elsewhere")]

    def sci_templates(self):
        return {"ThirdPartyScorer:prompt": self.prompt}

    def sci_seeds(self):
        return {"seed": 7}

    def sci_usage(self):
        return self.counters

    def sci_llm_settings(self):
        return self.llm_conf


class Holder(pt.Transformer):
    """A wrapper declaring its inner transformer through PyTerrier's HasSubtransformers protocol."""

    def __init__(self, inner):
        self.wrapped = inner

    def transform(self, inp):
        return self.wrapped(inp)

    def subtransformers(self):
        return {"wrapped": self.wrapped}


def _component(tmp_path):
    brain = tmp_path / "brain"
    brain.mkdir(exist_ok=True)
    (brain / "weights.safetensors").write_bytes(b"\x00" * 64)
    return ThirdPartyScorer(brain), brain


def test_the_walk_follows_pyterrier_operators_and_subtransformers(tmp_path):
    tp, _ = _component(tmp_path)
    first = pt.Transformer.from_df(pd.DataFrame({"qid": ["1"], "docno": ["d"], "score": [0.0]}))
    pipe = first >> Holder(tp % 3)
    found = protocol.walk([pipe, pipe])
    assert tp in found and sum(x is tp for x in found) == 1
    assert [c for c in found if isinstance(c, protocol.HasUsage)] == [tp]
    assert llm_components([pipe]) == [tp]
    # the same component outside any wrapper that declares it is not reachable: nothing is guessed
    class Hidden(pt.Transformer):
        def __init__(self):
            self._inner = tp

        def transform(self, inp):
            return inp
    assert tp not in protocol.walk(Hidden())


def test_a_third_party_component_shows_up_in_manifests(tmp_path):
    tp, brain = _component(tmp_path)
    pipe = pt.apply.generic(lambda df: df) >> Holder(tp)
    m = mf.pipeline_manifest({"tp": pipe})
    weights = hashlib.sha256(b"\x00" * 64).hexdigest()
    expected = hashlib.sha256(f"weights.safetensors\0{weights}\n".encode()).hexdigest()
    assert m["models"]["tp/brain"] == {"kind": "brain", "used_by": "ThirdPartyScorer", "path": str(brain),
                                       "sha256": expected, "weight_files": 1, "bytes": 64}
    assert m["models"]["llm:tp-llm"] == {"kind": "llm", "used_by": "ThirdPartyScorer", "path": None,
                                         "sha256": None, "note": "served elsewhere"}
    assert m["templates"] == {"ThirdPartyScorer:prompt": hashlib.sha256(tp.prompt.encode()).hexdigest()}
    assert m["seeds"]["ThirdPartyScorer.seed"] == 7
    # a changed prompt or weights is a difference the manifest diff names
    tp.prompt = "Another prompt."
    (brain / "weights.safetensors").write_bytes(b"\x01" * 64)
    changes = mf.diff_manifests(m, mf.pipeline_manifest({"tp": pipe}))
    assert {(c.section, c.key) for c in changes} >= {("templates", "ThirdPartyScorer:prompt"),
                                                      ("models", "tp/brain.sha256")}


def test_a_third_party_component_shows_up_in_usage_and_dry_runs(tmp_path):
    tp, _ = _component(tmp_path)
    tp.counters.add(calls=2, prompt_tokens=1000, completion_tokens=500)
    pipe = Holder(tp)
    rep = usage_report([pipe], ["tp"])
    assert rep[["name", "component", "model", "calls"]].values.tolist() == [["tp", "ThirdPartyScorer", "tp-llm", 2]]
    assert abs(rep["cost"].iloc[0] - (1000 * 1.0 + 500 * 2.0) / 1e6) < 1e-12
    dry = DryRun().report([pipe], ["tp"], dataset="d", notes=False)
    assert dry.table[["name", "component", "model", "calls"]].values.tolist() == [["tp", "ThirdPartyScorer",
                                                                                   "tp-llm", 0]]
