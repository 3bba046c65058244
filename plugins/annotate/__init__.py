"""LLM annotation: Anno-GPT (DORIS-MAE), facet labelling (SciFACE) and proposal extraction (MIR)."""
from typing import Optional

from pyterrier_sci.llm.text import load_template


def annotate_template(spec: Optional[str], default: str, sandbox=None) -> str:
    """A prompt template of the annotators: ``None`` -> the shipped ``default``; else a template
    shipped in ``templates/``, a file path or the template text
    (:func:`pyterrier_sci.llm.text.load_template`); any other string is taken as the text itself.
    ``sandbox``: the settings' sandbox of a component an untrusted pipeline configured (a file
    outside it is refused)."""
    try:
        return load_template(default if spec is None else spec, package=__name__, sandbox=sandbox)
    except FileNotFoundError:
        return spec
