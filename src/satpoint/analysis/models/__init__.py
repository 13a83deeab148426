"""Per-model analysis: a model mix's figures, model memory, overcommit, cold starts."""
