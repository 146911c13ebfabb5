"""One row of the table of a point's figures (`results.names`): a figure's key, its MLflow name, what it
means and how its spread is found. Its own module so that the table's parts (`results.names`,
`results.names_acceptance`) share it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speculab.stats import BOOTSTRAP_T, MEDIAN


@dataclass(frozen=True)
class Metric:
    key: str  # the code's and the console's name; `<j>`, `<n>`, `<verifier>`, `<category>`, `<what>`: a family
    mlflow: str  # the name logged to MLflow
    meaning: str
    spread: str = ""  # how its interval is found (`speculab.stats`); `results.names` spells its ends
    over: str = ""  # the count it is a figure over (`units` or `prompts`), where it has a spread
    floor: int = 0  # the count its interval needs, where not `stats.MIN_CLUSTERS` (its own coverage simulation)


Spread = dict[str, Any]  # a Metric's spread and what it is over, as keywords
PER_PROMPT: Spread = dict(spread=BOOTSTRAP_T, over="prompts")  # an acceptance figure: a ratio of sums over prompts
PER_UNIT: Spread = dict(spread=BOOTSTRAP_T, over="units")  # a speed figure: a ratio of totals over units
TYPICAL: Spread = dict(spread=MEDIAN, over="units")  # a typical unit's figure: a median over units
