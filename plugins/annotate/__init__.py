"""LLM annotation: Anno-GPT (DORIS-MAE) and facet labelling (SciFACE)."""
