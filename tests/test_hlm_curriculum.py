"""HLM-Cite's curriculum on a tiny BERT built from scratch (no hub, seconds on CPU)."""

import json

import numpy as np
import pyterrier as pt
import pytest
import torch

from pyterrier_sci.plugins.hlm_cite.curriculum import (
    NeuralNDCGLoss,
    freeze_lower_layers,
    stage1_examples,
    stage2_examples,
    train_curriculum,
)

WORDS = "quark gluon string brane duality anomaly soliton lattice gauge boson fermion vacuum".split()


def _toy():
    """Core and superficial citations both share the query's topic word (a lexical trap for an
    untrained model); core ones read "model results", superficial ones "brief note"."""
    texts, cands, queries = {}, {}, []
    for i in range(12):
        topic = WORDS[i % len(WORDS)]
        q = f"q{i}"
        queries.append(q)
        texts[q] = f"{topic} {topic} theory of {topic} fields"
        items = []
        for j in range(2):
            texts[f"c{i}_{j}"] = f"{topic} model {topic} results {j}"
            items.append((f"c{i}_{j}", 2))
            texts[f"s{i}_{j}"] = f"{topic} brief note {j}"
            items.append((f"s{i}_{j}", 1))
        for j in range(4):
            texts[f"n{i}_{j}"] = f"{WORDS[(i + 3 + j) % len(WORDS)]} unrelated {j}"
            items.append((f"n{i}_{j}", 0))
        cands[q] = items
    return queries, cands, texts


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny-bert")
    _, _, texts = _toy()
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        list(texts.values()),
        trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
    )
    from tokenizers.processors import TemplateProcessing

    tok.post_processor = TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=fast.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    ).save_pretrained(path / "bert")
    fast.save_pretrained(path / "bert")
    st = Transformer(str(path / "bert"), max_seq_length=32)
    SentenceTransformer(modules=[st, Pooling(st.get_word_embedding_dimension(), "mean")]).save(str(path / "st"))
    return str(path / "st")


def test_examples_follow_the_curriculum():
    queries, cands, texts = _toy()
    s1 = stage1_examples(queries, cands, texts, n_negatives=2)
    assert len(s1["anchor"]) == 24  # two core citations per query, superficial ones excluded
    assert all("note" not in p for p in s1["positive"]) and all("unrelated" in n for n in s1["negative_1"])
    s2 = stage2_examples(queries, cands, texts, list_size=10)
    assert len(s2["query"]) == 12 and all(len(l) == 10 for l in s2["label"])
    assert sorted(s2["label"][0]) == [-1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0]


def test_frozen_layers_do_not_move_and_the_curriculum_improves_ranking(tiny_model, tmp_path):
    from sentence_transformers import SentenceTransformer

    queries, cands, texts = _toy()
    before = SentenceTransformer(tiny_model, device="cpu")
    out = train_curriculum(
        tiny_model,
        queries,
        cands,
        texts,
        str(tmp_path / "model"),
        frozen_layers=1,
        stage1_epochs=8,
        stage2_epochs=8,
        batch_size=8,
        list_size=8,
        lr=5e-3,
        max_seq_length=24,
    )
    after = SentenceTransformer(str(out), device="cpu")
    meta = json.loads((out / "pt_meta.json").read_text())
    assert meta["type"] == "dense_model" and meta["stages"] == [1, 2] and meta["frozen_layers"] == 1
    # trained on 24 tokens per text, saved to encode like its base (32)
    assert meta["train_max_seq_length"] == 24 and after.max_seq_length == before.max_seq_length == 32
    assert meta["train_seconds"] > 0
    b_layers = before[0].auto_model.encoder.layer
    a_layers = after[0].auto_model.encoder.layer
    for p, q in zip(b_layers[0].parameters(), a_layers[0].parameters()):
        assert torch.equal(p, q)  # frozen
    assert any(not torch.equal(p, q) for p, q in zip(b_layers[1].parameters(), a_layers[1].parameters()))
    assert torch.equal(
        before[0].auto_model.embeddings.word_embeddings.weight, after[0].auto_model.embeddings.word_embeddings.weight
    )

    def mean_ndcg(model):
        import ir_measures
        import pandas as pd

        rows, runs = [], []
        for q in queries:
            docs = [d for d, _ in cands[q]]
            qv = model.encode([texts[q]])
            dv = model.encode([texts[d] for d in docs])
            for d, s in zip(docs, (dv @ qv.T).ravel()):
                runs.append((q, d, float(s)))
            rows += [(q, d, g) for d, g in cands[q]]
        from pyterrier_sci import measures

        m = measures.get("hlm.NDCG@3")
        return ir_measures.calc_aggregate(
            [m],
            pd.DataFrame(rows, columns=["query_id", "doc_id", "relevance"]),
            pd.DataFrame(runs, columns=["query_id", "doc_id", "score"]),
        )[m]

    untrained, trained = mean_ndcg(before), mean_ndcg(after)
    assert untrained < 0.95  # the lexical trap works on the untrained model
    assert trained > untrained + 0.05
    # the dense component loads the artifact, and so does pt.Artifact.load - in the old format too
    from pyterrier_sci.plugins.dense import DenseRetriever
    from pyterrier_sci.plugins.dense import SentenceTransformerModel as ContrastiveModel

    assert DenseRetriever(str(out), verbose=False).encode(["quark"]).shape == (1, 32)
    loaded = pt.Artifact.load(str(out))
    assert isinstance(loaded, ContrastiveModel) and loaded.training["stages"] == [1, 2]
    meta["format"] = "sentence-transformers"  # what HLM-Cite models were saved with before
    (out / "pt_meta.json").write_text(json.dumps(meta))
    assert isinstance(pt.Artifact.load(str(out)), ContrastiveModel)


def test_stage2_on_lists_shorter_than_list_size_keeps_the_model_finite(tiny_model, tmp_path):
    """Queries with fewer candidates than list_size are padded with -1: one such step used to turn half
    of the parameters into NaN without an error."""
    from sentence_transformers import SentenceTransformer

    queries, cands, texts = _toy()
    short = {q: c[:5] for q, c in cands.items()}  # 5 candidates per query, lists of 12
    s2 = stage2_examples(queries, short, texts, list_size=12)
    assert all(l.count(-1.0) == 7 for l in s2["label"])
    out = train_curriculum(
        tiny_model,
        queries,
        short,
        texts,
        str(tmp_path / "short"),
        frozen_layers=0,
        stages=(2,),
        stage2_epochs=1,
        batch_size=8,
        list_size=12,
        lr=1e-3,
        max_steps=2,
        max_seq_length=24,
    )
    after = SentenceTransformer(str(out), device="cpu")
    assert all(torch.isfinite(p).all() for p in after.parameters())
    assert np.isfinite(after.encode(["quark gluon"])).all()


def test_training_stops_on_a_non_finite_loss(tiny_model, tmp_path):
    from pyterrier_sci.training import NonFiniteTrainingError

    queries, cands, texts = _toy()
    with pytest.raises(NonFiniteTrainingError, match="became"):
        # a learning rate of 1e30 overflows the parameters at the first step
        train_curriculum(
            tiny_model,
            queries,
            cands,
            texts,
            str(tmp_path / "nan"),
            frozen_layers=0,
            stages=(1,),
            stage1_epochs=1,
            batch_size=8,
            lr=1e30,
            max_steps=3,
            max_seq_length=24,
        )
    assert not (tmp_path / "nan").exists()  # nothing saved
    assert not list(tmp_path.glob("*nan.partial-*"))


def test_freezing_too_many_layers_is_an_error(tiny_model):
    from sentence_transformers import SentenceTransformer

    with pytest.raises(ValueError, match="has 2 layers"):
        freeze_lower_layers(SentenceTransformer(tiny_model, device="cpu"), 3)


def test_neural_ndcg_loss_prefers_the_right_order(tiny_model):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model, device="cpu")
    loss = NeuralNDCGLoss(model, tau=0.1, in_batch=False)
    feats = [model.tokenize(["quark quark"]), model.tokenize(["quark model"]), model.tokenize(["vacuum note"])]
    good = loss(feats, torch.tensor([[2.0, 0.0]])).item()
    bad = loss(feats, torch.tensor([[0.0, 2.0]])).item()
    # whichever candidate the untrained model scores higher, labelling it relevant gives the lower loss
    assert good != bad and min(good, bad) >= -1.0 - 1e-6 and max(good, bad) <= 0.0


def test_columns_embedded_in_one_pass_equal_separate_passes(tiny_model):
    from sentence_transformers import SentenceTransformer

    from pyterrier_sci.plugins.hlm_cite.curriculum import _embed_columns

    model = SentenceTransformer(str(tiny_model), device="cpu")
    model.eval()
    cols = [["quark"], ["gluon string brane duality anomaly"], ["soliton lattice"]]
    cols = [c * 2 for c in cols]  # batch of 2, columns of different token lengths
    feats = [model.preprocess(c) if hasattr(model, "preprocess") else model.tokenize(c) for c in cols]
    with torch.no_grad():
        joint = _embed_columns(model, feats)
        separate = torch.stack([model(dict(f))["sentence_embedding"] for f in feats])
    assert joint.shape == separate.shape == (3, 2, separate.shape[-1])
    assert torch.allclose(joint, separate, atol=1e-5)
