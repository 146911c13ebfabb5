"""Metrics with DESIGN.md's names, MLflow runs (or a no-op tracker), the Hydra sweep callback,
and what a person sees: the summary table, plots and per-prompt records."""
