"""examples/mir_validation.py: the validation protocol that chose the MIR fine-tuning defaults
(docs/mir.md), on the real dev split: its split, its corpora (pinned by the documented base
figures) and the weight interpolation it scores."""
import pytest
import torch
from conftest import load_example


@pytest.fixture(scope="module")
def example():
    return load_example("mir_validation")


def test_validation_slice_is_the_chronological_head_of_the_training_proposals(example, mir_dev):
    from pyterrier_sci.datasets import mir_multicite as M
    train_q, test_q = M.chrono_parts(mir_dev)
    sub, val = example.validation_parts(train_q)
    assert (len(sub), len(val)) == (31, 21) and sub + val == train_q
    assert not set(val) & set(test_q)
    assert max(M.proposal_date(q) for q in sub) <= min(M.proposal_date(q) for q in val)


def test_interpolation_endpoints_and_midpoint(example):
    base = {"w": torch.tensor([0.0, 2.0]), "ids": torch.tensor([1, 2])}
    tuned = {"w": torch.tensor([1.0, 4.0]), "ids": torch.tensor([1, 2])}
    assert torch.equal(example.interpolate(base, tuned, 0.0)["w"], base["w"])
    assert torch.equal(example.interpolate(base, tuned, 1.0)["w"], tuned["w"])
    assert torch.allclose(example.interpolate(base, tuned, 0.25)["w"], torch.tensor([0.25, 2.5]))
    assert example.interpolate(base, tuned, 0.5)["ids"].dtype == torch.int64


def test_one_step_run_reproduces_the_documented_base_figures(example, mir_dev, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_SCI_HOME", str(tmp_path))
    out = tmp_path / "val.json"
    table = example.main(["--seeds", "0", "--max-steps", "1", "--wise-ft", "0", "--json", str(out)])
    base = table.loc["base (MiniLM)"].round(2)
    # docs/mir.md, "First search" and "Second search": the base model on the 21 validation proposals
    assert base.tolist() == [68.25, 73.02, 63.46, 68.25, 74.21, 64.75, 68.66]
    # w = 0 is the base model again, whatever the training did
    assert (table.loc["seed 0, WiSE-FT w=0"] - table.loc["base (MiniLM)"]).abs().max() < 1e-6
    assert "seed 0" in table.index and out.exists()
    assert len(list((tmp_path / "models" / "mir-validation").iterdir())) == 1
