"""The round loop: draft, score, verify, commit and record a round, and what a decode measures."""
