"""Launcher of llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) that
turns off llama.cpp's *extra buffer types* (weight repacking and the AMX kernels) unless
``PYTERRIER_SCI_LLAMA_EXTRA_BUFTS=1``.

Why: on CPUs with AMX inside containers or VMs that do not grant the AMX tile state, a source
build of llama.cpp crashes (segmentation fault in ``llama_decode``) on the first request.  Without
the extra buffer types llama.cpp uses its portable CPU kernels: a little slower, same results.
The server's own command-line options are passed through unchanged.
"""
import os
import sys


def _disable_extra_bufts() -> None:
    import llama_cpp.llama_cpp as lib
    orig = lib.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lib.llama_model_default_params = params


def main() -> None:
    if os.environ.get("PYTERRIER_SCI_LLAMA_EXTRA_BUFTS", "0") != "1":
        _disable_extra_bufts()
    from llama_cpp.server.__main__ import main as server_main
    sys.argv = ["llama_cpp.server", *sys.argv[1:]]
    server_main()


if __name__ == "__main__":
    main()
