"""The Methodology Adjacency Graph, MAG-guided sampling (Eqs. 2-4), the joint triplet loss
(Algorithm 1) and the saved MIR model, on a 28-row fixture of the real dev split."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_sci.plugins.mir import components
from pyterrier_sci.plugins.mir import training as mir
from pyterrier_sci.plugins.mir.mag import MethodologyAdjacencyGraph

FIXTURE = Path(__file__).parent / "fixtures" / "mir" / "tiny_mir.csv"
S2175, S1008, X1906, N1061, CID = (
    "ACL:S19-2175",
    "ACL:S19-1008",
    "ARXIV:1906.11085",
    "ACL:N19-1061",
    "CorpusID:118697759",
)
DF2B, F3EB, D5833 = (
    "df2b0e26d0599ce3e70df8a9da02e51594e0e992",
    "3febb2bed8865945e7fddc99efd791887bb7e14f",
    "5d833331b0e22ff359db05c62a8bca18c4f04b68",
)


@pytest.fixture(scope="module")
def graph():
    return MethodologyAdjacencyGraph.from_csv(FIXTURE)


def test_graph_queries(graph):
    assert len(graph.proposals) == 5 and len(graph.papers) == 11
    assert graph.methodological(S2175) == [DF2B]
    assert set(graph.non_methodological(S2175)) == {"2fe7dba5a58aee5156594b4d78634ecd6c7dcabd", F3EB}
    assert graph.methodological(S1008) == [D5833]  # intent "Extention" (sic) is methodological
    assert graph.methodological(N1061) == [] and graph.methodological(CID) == []
    assert set(graph.overlapping_proposals(S2175)) == {S1008, X1906, CID}
    assert set(graph.citing(DF2B)) == {S2175, X1906, CID}
    assert not set(graph.uncited(S2175)) & set(graph.cited(S2175)) and len(graph.uncited(S2175)) == 8
    e = graph.edge(S2175, DF2B)
    assert e.methodological and e.intents.count("Uses") == 2 and len(e.methodological_contexts()) == 2
    samples = graph.samples()
    assert {(s.proposal, s.paper) for s in samples} == {(S2175, DF2B), (X1906, DF2B), (S1008, D5833)}
    assert len(samples) == 5 and all(s.context for s in samples)
    st = graph.stats()
    assert st["citations"] == 28 and st["citations_mi"] == 5 and st["edges_mi"] == 3
    sub = graph.subgraph([S2175, X1906])
    assert set(sub.papers) == set(graph.cited(S2175)) | set(graph.cited(X1906))
    g = graph.to_networkx()
    assert g.number_of_edges() == len(graph.edges) and g.edges[("P", S2175), ("L", DF2B)]["methodological"]


def test_exemplar_frame_feeds_the_few_shot_selector(graph):
    from pyterrier_sci.plugins.mir import MIRPointwise

    frame = graph.exemplar_frame()
    assert set(frame.columns) >= {"qid", "query", "docno", "text", "label"} and frame["label"].sum() == 3
    judge = MIRPointwise({"base_url": "http://127.0.0.1:9/v1", "cache_dir": ""}, exemplars=frame, num_shots=1)
    block = judge.exemplar_block(graph.proposals[S2175] + " shared task", qid="new")
    assert "Relevant" in block and "Not relevant" in block


def test_keyword_extractor_is_a_sorted_phrase_list():
    ex = mir.KeywordExtractor(n_keywords=4)
    assert ex.phrases("We propose a novel neural machine translation model.") == [
        "neural",
        "machine",
        "translation",
        "neural machine",
        "machine translation",
        "neural machine translation",
    ]
    texts = [
        "Neural machine translation for low-resource languages.",
        "Speech recognition with neural networks.",
        "Sentiment analysis of product reviews.",
    ]
    kw = ex.fit(texts).keyword_text(texts)
    assert all(k.split(", ") == sorted(k.split(", ")) for k in kw)
    assert "low-resource languages" in kw[0].split(", ") and len(kw[1].split(", ")) == 4
    for text, k in zip(texts, kw):  # every keyword is a phrase of its own text
        assert set(k.split(", ")) <= set(ex.phrases(text))


@pytest.fixture(scope="module")
def domain(graph):
    return mir.DomainIndex(graph, "tfidf")


def test_hard_negatives_follow_eqs_2_to_4(graph, domain):
    s = mir.MAGSampler(graph, alpha=1.0, domain=domain, seed=1)
    rows = pd.concat([s.epoch(e) for e in range(4)], ignore_index=True)
    for r in rows.itertuples():
        cited = set(graph.cited(r.proposal))
        # Eq. 2: the uncited paper with the most similar domain representation
        assert r.t1_negative_kind == "hard" and r.t1_negative_id not in cited
        assert r.t1_negative_id == domain.most_similar_papers(r.proposal, cited, 1)[0]
        # Eq. 3: a proposal citing an overlapping paper
        assert r.t2_negative_id in graph.overlapping_proposals(r.proposal)
        # Eq. 4: a cited paper with no methodological context (S19-1008 and 1906.11085 have some)
        assert r.t3_negative_id in graph.non_methodological(r.proposal)
        assert r.t3_negative_id in cited and r.t3_negative_id not in graph.methodological(r.proposal)
    assert list(rows.columns[:5]) == ["proposal", "paper", "proposal_text", "paper_text", "context_text"]
    assert s.text_columns() == [
        "proposal_text",
        "paper_text",
        "context_text",
        "t1_negative",
        "t2_negative",
        "t3_negative",
    ]


def test_soft_negatives_and_the_ablation_switches(graph, domain):
    s = mir.MAGSampler(graph, alpha=0.0, domain=domain)
    rows = s.epoch(0)
    assert set(rows["t1_negative_kind"]) == set(rows["t2_negative_kind"]) == set(rows["t3_negative_kind"]) == {"soft"}
    for r in rows.itertuples():
        assert r.t1_negative_id not in graph.cited(r.proposal) and r.t3_negative_id not in graph.cited(r.proposal)
        assert r.t2_negative_id != r.proposal
    off = mir.MAGSampler(graph, alpha=1.0, sampling=False)
    assert off.domain is None and set(off.epoch(0)["t1_negative_kind"]) == {"soft"}
    t1 = mir.MAGSampler(graph, alpha=0.5, triplets="T1", domain=domain)
    assert t1.text_columns() == ["proposal_text", "paper_text", "t1_negative"]
    assert mir.triplet_types("T1+T3") == ("T1", "T3") and mir.triplet_types(["t3", "T1"]) == ("T1", "T3")
    with pytest.raises(ValueError):
        mir.triplet_types("T2")
    with pytest.raises(ValueError):
        mir.MAGSampler(graph, alpha=1.5)
    # one r per sample: with alpha=0.5 a sample's three negatives are all hard or all soft (no fallback here)
    mixed = mir.MAGSampler(graph, alpha=0.5, domain=domain, seed=3)
    rows = pd.concat([mixed.epoch(e) for e in range(6)])
    kinds = rows[["t1_negative_kind", "t2_negative_kind", "t3_negative_kind"]].nunique(axis=1)
    assert (kinds == 1).all() and set(rows["t1_negative_kind"]) == {"hard", "soft"}
    # epochs draw afresh but deterministically
    assert mixed.epoch(0).equals(mir.MAGSampler(graph, alpha=0.5, domain=domain, seed=3).epoch(0))


def test_missing_hard_negatives_fall_back_to_soft_and_are_counted():
    g = MethodologyAdjacencyGraph.from_citations(
        {"p": "graph parsing", "q": "speech synthesis"},
        {"a": "parsing graphs", "b": "speech", "c": "vision"},
        [("p", "a", "we use a", "Uses"), ("q", "b", "we extend b", "Extention")],
    )
    s = mir.MAGSampler(g, alpha=1.0, domain=mir.DomainIndex(g, "tfidf"))
    rows = s.epoch(0)
    assert set(rows["t2_negative_kind"]) == {"soft"} and set(rows["t3_negative_kind"]) == {"soft"}
    assert s.stats["T2_hard_missing"] == 2 and s.stats["T3_hard_missing"] == 2 and s.stats["T1_hard"] == 2


def test_sampling_does_not_depend_on_the_string_hash_seed():
    """The same seed draws the same triplets in every process (a graph built from a set of ids
    once ordered its papers by PYTHONHASHSEED, so the soft negatives changed from run to run)."""
    import os
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from pyterrier_sci.plugins.mir import training as mir\n"
        "from pyterrier_sci.plugins.mir.mag import MethodologyAdjacencyGraph\n"
        f"g = MethodologyAdjacencyGraph.from_csv({str(FIXTURE)!r})\n"
        "s = mir.MAGSampler(g, alpha=0.5, domain=mir.DomainIndex(g, 'tfidf'), seed=3)\n"
        "cols = ['t1_negative_id', 't2_negative_id', 't3_negative_id']\n"
        "print(json.dumps([list(g.papers)] + [s.epoch(e)[cols].values.tolist() for e in range(2)]))\n"
    )
    outs = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        outs.add(run.stdout.strip().splitlines()[-1])
    assert len(outs) == 1
    papers = json.loads(outs.pop())[0]
    from pyterrier_sci.datasets.mir_multicite import read_csv

    assert papers == list(dict.fromkeys(c.doc_id for c in read_csv(FIXTURE).citations))  # first-citation order


def test_epoch_batches_never_straddle_epochs():
    sampler = mir.EpochBatchSampler(list(range(10)), batch_size=4, drop_last=False, block=5)
    assert list(sampler) == [[0, 1, 2, 3], [4], [5, 6, 7, 8], [9]] and len(sampler) == 4


@pytest.fixture(scope="module")
def st_model():
    from pyterrier_sci.plugins.dense import load_sentence_transformer

    m = load_sentence_transformer("default", "cpu")
    m.max_seq_length = 64
    return m


def test_joint_loss_is_the_sum_of_three_euclidean_triplet_losses(st_model):
    import torch

    texts = {
        "P": ["graph parsing", "speech synthesis"],
        "L": ["a parser for graphs", "a vocoder"],
        "C": ["we use the parser of", "we extend the vocoder of"],
        "n1": ["image captioning", "translation"],
        "n2": ["question answering", "summarisation"],
        "n3": ["a tagger", "a treebank"],
    }
    loss = mir.JointTripletLoss(st_model, margin=1.0)
    feats = [st_model.tokenize(texts[k]) for k in ("P", "L", "C", "n1", "n2", "n3")]
    with torch.no_grad():
        value = float(loss(feats, None))
        e = {k: st_model.encode(v, convert_to_tensor=True) for k, v in texts.items()}
    d = lambda a, b: torch.norm(a - b, dim=1)
    expected = sum(
        float(torch.relu(d(e[a], e[p]) - d(e[a], e[n]) + 1.0).mean())
        for a, p, n in (("P", "L", "n1"), ("C", "P", "n2"), ("C", "L", "n3"))
    )
    assert value == pytest.approx(expected, rel=1e-4)
    with pytest.raises(ValueError):
        loss(feats[:5], None)


def test_train_save_load_and_retrieve(graph, tmp_path):
    out = tmp_path / "mir-model"
    model = mir.train_mir(
        graph,
        out,
        epochs=1,
        max_steps=2,
        batch_size=2,
        max_seq_length=48,
        domain_model="tfidf",
        learning_rate=1e-4,
        margin=1.0,
    )
    assert mir.MIRTrainingConfig().margin == 0.2  # the default (docs/mir.md); 1.0 keeps every toy triplet active
    assert isinstance(model, mir.MIRModel) and (out / "modules.json").exists()
    assert not list(tmp_path.glob("*.partial-*"))
    loaded = pt.Artifact.load(str(out))
    assert isinstance(loaded, mir.MIRModel)
    meta = loaded.training
    assert meta["steps"] == 2 and meta["triplet_types"] == ["T1", "T2", "T3"] and len(meta["loss_history"]) == 2
    assert meta["samples_per_epoch"] == 5 and meta["triplets_per_epoch"] == 15 and meta["margin"] == 1.0
    assert sum(v for k, v in meta["sampling_stats"].items() if not k.endswith("missing")) == 15
    # the weights moved, and the model works as mir_dense / dense (re-scoring a frame's text)
    from pyterrier_sci.plugins.dense import load_sentence_transformer

    base = load_sentence_transformer("default", "cpu").encode(["graph parsing"])
    tuned = loaded.sentence_transformer().encode(["graph parsing"])
    assert not np.allclose(base, tuned)
    t = components.mir_dense_component(model=str(out))
    frame = pd.DataFrame(
        {
            "qid": ["1", "1"],
            "query": ["graph parsing", "graph parsing"],
            "docno": ["a", "b"],
            "text": ["a parser for graphs", "a vocoder for speech"],
        }
    )
    res = t(frame)
    assert list(res["docno"]) == ["a", "b"] and list(res["rank"]) == [0, 1]
    assert loaded.retriever() == t  # the artifact hands out the mir_dense retriever
    # the factory moved to components.py (issue 32); its old path in training.py still works
    assert mir.mir_dense_component is components.mir_dense_component
    with pytest.raises(FileExistsError):
        mir.train_mir(graph, out, epochs=1, max_steps=1)
    with pytest.raises(FileNotFoundError):
        components.mir_dense_component(model=str(tmp_path / "nothing"))
    with pytest.raises(TypeError):
        components.mir_dense_component(model=str(out), epochs=2)


def test_lora_training_merges_the_adapters(graph, tmp_path):
    out = tmp_path / "mir-lora"
    model = mir.train_mir(
        graph,
        out,
        epochs=1,
        max_steps=1,
        batch_size=2,
        max_seq_length=32,
        sampling=False,
        triplets="T1",
        lora={"r": 4, "target_modules": ["query", "value"]},
        learning_rate=1e-3,
    )
    assert not (out / "adapter_config.json").exists()  # merged into the weights
    st = model.sentence_transformer()
    assert not any("lora" in n for n, _ in st.named_parameters())
    assert model.training["lora"] == {"r": 4, "target_modules": ["query", "value"]}


def test_frozen_layers_keep_the_base_weights_below_and_train_above(graph, tmp_path):
    from pyterrier_sci.plugins.dense import load_sentence_transformer

    base = load_sentence_transformer("default", "cpu").state_dict()
    out = tmp_path / "mir-frozen"
    model = mir.train_mir(
        graph,
        out,
        epochs=1,
        max_steps=2,
        batch_size=2,
        max_seq_length=32,
        domain_model="tfidf",
        learning_rate=1e-3,
        margin=1.0,
        frozen_layers=4,
    )
    tuned = model.sentence_transformer().state_dict()

    def moved(prefix):
        keys = [k for k in base if prefix in k and base[k].is_floating_point()]
        assert keys, prefix
        return any(not np.allclose(base[k].numpy(), tuned[k].numpy()) for k in keys)

    assert not moved("embeddings.")
    assert not any(moved(f"encoder.layer.{i}.") for i in range(4))
    assert moved("encoder.layer.4.") and moved("encoder.layer.5.")
    assert model.training["frozen_layers"] == 4
    # the setting is part of the cache key only when it is used (keys of older models stay valid)
    assert mir.MIRTrainingConfig(frozen_layers=0).key() != mir.MIRTrainingConfig(frozen_layers=4).key()
    # the key before frozen_layers existed (the model slug depends on where the offline model is installed)
    import hashlib
    from dataclasses import asdict

    old = asdict(mir.MIRTrainingConfig(triplets="T1+T2"))
    del old["device"], old["frozen_layers"]
    old["base_model"] = mir.model_slug(old["base_model"], legacy=True)
    assert (
        mir.MIRTrainingConfig(triplets="T1+T2").key(legacy=True)
        == hashlib.sha1(json.dumps(old, sort_keys=True, default=str).encode()).hexdigest()[:12]
    )
    with pytest.raises(ValueError, match="6 layers"):
        mir.train_mir(graph, tmp_path / "too-many", epochs=1, max_steps=1, domain_model="tfidf", frozen_layers=7)
    with pytest.raises(ValueError, match="exclude"):
        mir.train_mir(graph, tmp_path / "both", frozen_layers=2, lora=True)
    assert not list(tmp_path.glob("*.partial-*"))
