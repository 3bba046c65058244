"""Declarative pipeline files (YAML) shipped with the package; load one with
``pyterrier_sci.load_config("csfcube.yaml")`` or pass its path to ``pyterrier-sci experiment``."""
