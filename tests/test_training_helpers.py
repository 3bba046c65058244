"""pyterrier_sci.training's shared helpers: saving a trained model draws no library progress bar (it happens
inside a step with its own progress), and the keys and places of models trained on first use."""
import pytest
from sentence_transformers import SentenceTransformer

from pyterrier_sci.models import DEFAULT_MODEL, load_sentence_transformer
from pyterrier_sci.training import save_model, settings_key, trained_model_dir


@pytest.fixture(scope="module")
def minilm():
    return load_sentence_transformer(DEFAULT_MODEL, "cpu")


def test_saving_draws_no_bars_and_keeps_the_model(minilm, tmp_path, capfd):
    from transformers.utils import logging as hf_logging
    before = hf_logging.is_progress_bar_enabled()
    save_model(minilm, tmp_path / "m")
    err = capfd.readouterr().err
    assert "Writing model shards" not in err and "Computing widget examples" not in err
    assert hf_logging.is_progress_bar_enabled() == before  # put back as it was
    again = SentenceTransformer(str(tmp_path / "m"), device="cpu")
    assert again.encode(["a test"]).tolist() == minilm.encode(["a test"]).tolist()
    # the library still draws its bars outside save_model
    minilm.save(str(tmp_path / "plain"))
    assert "Writing model shards" in capfd.readouterr().err


def test_settings_keys_and_places(tmp_path):
    a = settings_key({"base_model": DEFAULT_MODEL, "seed": 0})
    assert a == settings_key({"seed": 0, "base_model": DEFAULT_MODEL}) != settings_key({"base_model": DEFAULT_MODEL,
                                                                                       "seed": 1})
    assert trained_model_dir("mir", "irds:sci/mir-multicite/dev/chrono-train", a, tmp_path) == \
        tmp_path / "models" / "mir" / f"sci__mir-multicite__dev__chrono-train-{a}"
