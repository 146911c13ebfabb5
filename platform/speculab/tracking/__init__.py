"""MLflow runs (or a no-op tracker) with the metric names of docs/architecture.md: a point's run and what it
logs, a sweep's parent run and its Hydra callback, the spool that keeps them through an outage, the UI's links."""
