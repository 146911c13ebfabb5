"""Launching runs: the `speculab` command, a sweep's replicas side by side, and a racing sweep's stages."""
