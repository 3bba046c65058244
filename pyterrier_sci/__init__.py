"""pyterrier-sci: the methods of five scientific-retrieval papers as PyTerrier transformers."""
__version__ = "0.1.0"

from pyterrier_sci import data, measures  # noqa: F401
