"""Metrics with the names of docs/architecture.md, MLflow runs (or a no-op tracker), the Hydra sweep callback,
and what a person sees: the summary table, plots and per-prompt records."""
