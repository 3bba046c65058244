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


def test_a_base_model_keys_by_its_weights_not_where_it_is_installed(tmp_path):
    """The offline model installed elsewhere (another environment, a fresh clone's) keys its trained models
    alike; the slug of before hashed the path, so it moved with the installation."""
    import os
    import shutil

    from pyterrier_sci.models import model_slug, resolve_model
    elsewhere = tmp_path / "venv2" / "all-MiniLM-L6-v2"
    shutil.copytree(resolve_model(DEFAULT_MODEL), elsewhere, copy_function=os.link)   # read only: hard links
    digits = model_slug(DEFAULT_MODEL).rsplit("-", 1)[1]
    assert model_slug(str(elsewhere)).rsplit("-", 1)[1] == digits
    assert model_slug(str(elsewhere), legacy=True).rsplit("-", 1)[1] != model_slug(DEFAULT_MODEL, legacy=True) \
        .rsplit("-", 1)[1]
    settings = {"base_model": DEFAULT_MODEL, "seed": 0}
    assert settings_key(settings) == settings_key({**settings, "base_model": str(elsewhere)})
    assert settings_key(settings, legacy=True) != settings_key({**settings, "base_model": str(elsewhere)},
                                                               legacy=True)
    # weights retrained in place key apart (a model of another size is hashed again)
    own = tmp_path / "own"
    own.mkdir()
    (own / "model.safetensors").write_bytes(b"weights v1")
    before = settings_key({**settings, "base_model": str(own)})
    (own / "model.safetensors").write_bytes(b"weights v2, retrained")
    assert settings_key({**settings, "base_model": str(own)}) != before
    # a hub id (nothing local): its name, as before
    assert model_slug("org/not-downloaded") == model_slug("org/not-downloaded", legacy=True)


def test_a_model_trained_under_the_key_of_before_is_found(tmp_path):
    ds = "irds:sci/mir-multicite/dev/chrono-train"
    new, old = "n" * 12, "o" * 12
    base = tmp_path / "models" / "mir"
    assert trained_model_dir("mir", ds, new, tmp_path, legacy_key=old) == base / f"{ds[5:].replace('/', '__')}-{new}"
    old_dir = base / f"sci__mir-multicite__dev__chrono-train-{old}"
    old_dir.mkdir(parents=True)
    # incomplete (no pt_meta.json: an interrupted training of before): not used
    assert trained_model_dir("mir", ds, new, tmp_path, legacy_key=old).name.endswith(new)
    (old_dir / "pt_meta.json").write_text("{}")
    assert trained_model_dir("mir", ds, new, tmp_path, legacy_key=old) == old_dir
    # a model under the new key wins
    (base / f"sci__mir-multicite__dev__chrono-train-{new}").mkdir()
    assert trained_model_dir("mir", ds, new, tmp_path, legacy_key=old).name.endswith(new)
    # a link under the old name is not followed
    link_to = tmp_path / "elsewhere"
    link_to.mkdir()
    (link_to / "pt_meta.json").write_text("{}")
    (base / f"sci__mir-multicite__dev__chrono-train-{'l' * 12}").symlink_to(link_to)
    assert trained_model_dir("mir", ds, "m" * 12, tmp_path, legacy_key="l" * 12).name.endswith("m" * 12)
