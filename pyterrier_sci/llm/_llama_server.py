"""Launcher of llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``, options
passed through) with llama.cpp's extra buffer types off (``PYTERRIER_SCI_LLAMA_EXTRA_BUFTS=1`` turns
them on) and log-probabilities without ``logits_all`` (``PYTERRIER_SCI_LLAMA_FAST_LOGPROBS=0`` turns
that off); why: ``docs/llm.md``.
"""
import os
import sys

import numpy as np


def _disable_extra_bufts() -> None:
    import llama_cpp.llama_cpp as lib
    orig = lib.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lib.llama_model_default_params = params


def _fast_logprobs() -> None:
    from llama_cpp import llama as L  # noqa: N812

    Llama = L.Llama  # noqa: N806
    orig_init = Llama.__init__
    orig_l2l = Llama.logits_to_logprobs

    def __init__(self, *args, **kwargs):  # noqa: N807
        kwargs["logits_all"] = False
        orig_init(self, *args, **kwargs)
        self._logits_all = True          # lets requests with logprobs through
        # one row per context position, as with logits_all (uninitialised: only rows written are used)
        self.scores = np.empty((self._n_ctx, self._n_vocab), dtype=np.single)
        self._pt_sci_last_only = True

    def eval(self, tokens):
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        for i in range(0, len(tokens), self.n_batch):
            batch = tokens[i: min(len(tokens), i + self.n_batch)]
            n_past, n_tokens = self.n_tokens, len(batch)
            self._batch.set_batch(batch=batch, n_past=n_past, logits_all=False)
            self._ctx.decode(self._batch)
            self.input_ids[n_past: n_past + n_tokens] = batch
            logits = np.ctypeslib.as_array(self._ctx.get_logits(), shape=(self._n_vocab,))
            self.scores[n_past + n_tokens - 1, :] = logits
            self.n_tokens += n_tokens
            self._requires_eval = False

    class _Rows:
        """``logits_to_logprobs(matrix)`` computed only for the rows that are read."""
        def __init__(self, scores):
            self.scores = scores

        def __getitem__(self, key):
            return orig_l2l(self.scores[key])

    def logits_to_logprobs(logits, axis=-1):
        if isinstance(logits, np.ndarray) and logits.ndim == 2 and axis == -1:
            return _Rows(logits)
        return orig_l2l(logits, axis=axis)

    Llama.__init__ = __init__
    Llama.eval = eval
    Llama.logits_to_logprobs = staticmethod(logits_to_logprobs)


def main() -> None:
    if os.environ.get("PYTERRIER_SCI_LLAMA_EXTRA_BUFTS", "0") != "1":
        _disable_extra_bufts()
    if os.environ.get("PYTERRIER_SCI_LLAMA_FAST_LOGPROBS", "1") != "0":
        _fast_logprobs()
    from llama_cpp.server.__main__ import main as server_main
    sys.argv = ["llama_cpp.server", *sys.argv[1:]]
    server_main()


if __name__ == "__main__":
    main()
