"""The loopback OpenAI-compatible test server, kept importable as ``llm_server`` for the tests; it
lives in the package as :mod:`pyterrier_sci.llm.loopback`."""
from pyterrier_sci.llm.loopback import Reply, ScriptedServer, choice_reply, prompt_of, yes_no

__all__ = ["Reply", "ScriptedServer", "choice_reply", "prompt_of", "yes_no"]
