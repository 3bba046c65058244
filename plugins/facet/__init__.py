"""SciFACE: facet-aware cross-encoder re-rankers (Background, Method)."""
