"""A point's results as typed values: each figure an `Estimate` (`speculab.stats`), a point's figures
by the one name table (`names`), computed once from its records and timings (`figures`), and the
point's shape and whole result (`point`). No MLflow, no console: the tracking and the report render
these."""
