"""A `speculation_profile.json` another tool wrote (specdec_bench, ar_validate, speculab itself), read into a
`results.profile.SpeculationProfile` and checked field by field: a bad file is refused in one line naming the
file, the field and what the schema allows. The schema's own checks (`Checks`) are not refusals: a profile
that fails them is still laid out, with the failure beside it, as its producer emits one."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from speculab.results.profile import MEASURED_PER_K, SCHEMA_VERSION, SpeculationProfile, checkpoint_id


class ProfileError(ValueError):
    """A profile that cannot be read: names the file, the field and what is allowed."""


def _number(where: str, name: str, value: Any, least: float = -math.inf, most: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not least <= value <= most:
        raise ProfileError(f"{where}: `{name}` must be a number in [{least}, {most}]; got {value!r}")
    return float(value)


def _rates(where: str, name: str, value: Any, required: bool) -> list[float]:
    if value is None and not required:
        return []
    if not isinstance(value, list) or not value:
        raise ProfileError(f"{where}: `{name}` must be a non-empty list of probabilities in [0, 1]; got {value!r}")
    return [_number(where, f"{name}[{i}]", v, 0.0, 1.0) for i, v in enumerate(value)]


def _histogram(where: str, value: Any) -> dict[str, int]:
    """{acceptance length (1 = no draft accepted): steps}, keys as JSON writes them (strings) or numbers."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: `acceptance_length_histogram` must map acceptance lengths to step counts")
    found: dict[str, int] = {}
    for key, count in value.items():
        if not str(key).isdigit() or int(key) < 1 or isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ProfileError(
                f"{where}: `acceptance_length_histogram` entry {key!r}: {count!r} must be a length >= 1 and a "
                "count >= 0"
            )
        found[str(int(key))] = count
    return dict(sorted(found.items(), key=lambda item: int(item[0])))


def _identity(value: Any) -> dict[str, Any] | None:
    """A model or checkpoint as the profile names it (a dict with an id, a name or a path; or a string)."""
    if isinstance(value, str):
        return {"id": checkpoint_id(value)}
    if isinstance(value, dict):
        named = next((value[k] for k in ("id", "name", "checkpoint", "path") if isinstance(value.get(k), str)), None)
        return value | ({"id": checkpoint_id(named)} if named else {})
    return None


def read_profile(path: Path) -> SpeculationProfile:
    """The profile at ``path``; ProfileError naming the file and the field for anything the schema refuses."""
    where = str(path)
    try:
        found = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(f"{where}: cannot be read ({err})") from None
    except json.JSONDecodeError as err:
        raise ProfileError(f"{where}: not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(found, dict):
        raise ProfileError(f"{where}: a speculation profile is a JSON object; got {type(found).__name__}")
    version = str(found.get("schema_version", ""))
    if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise ProfileError(
            f"{where}: `schema_version` must be {SCHEMA_VERSION} (1.x); got {found.get('schema_version')!r}"
        )
    if found.get("measured") is False or found.get("mean_accept_length") is None:
        raise ProfileError(f"{where}: `measured` is false or `mean_accept_length` null: a stub holds no measurement")
    return _fields(where, found)


def _fields(where: str, found: dict[str, Any]) -> SpeculationProfile:
    marginals = _rates(where, "marginal_accept_rates", found.get("marginal_accept_rates"), required=True)
    k = found.get("num_speculative_tokens", len(marginals))
    per_request = found.get("mean_accept_length_per_request")
    by_k = found.get("accept_length_by_k") or {}
    if not isinstance(by_k, dict):
        raise ProfileError(f"{where}: `accept_length_by_k` must map K to an acceptance length; got {by_k!r}")
    categories = found.get("per_category")
    if categories is not None and not (
        isinstance(categories, dict) and all(isinstance(v, dict) for v in categories.values())
    ):
        raise ProfileError(f"{where}: `per_category` must map a category to its figures ({{category: {{...}}}})")
    conditions = found.get("measurement_conditions")
    return SpeculationProfile(
        method=found.get("method") if isinstance(found.get("method"), str) else None,
        target_model=_identity(found.get("target_model")),
        draft_checkpoint=_identity(found.get("draft_checkpoint")),
        num_speculative_tokens=int(_number(where, "num_speculative_tokens", k, 1)),
        block_size=found.get("block_size") if isinstance(found.get("block_size"), int) else None,
        max_supported_k=int(_number(where, "max_supported_k", found.get("max_supported_k", k), 1)),
        verification_method=str(found.get("verification_method") or "longest_prefix"),
        conditional_accept_rates=_rates(
            where, "conditional_accept_rates", found.get("conditional_accept_rates"), False
        ),
        marginal_accept_rates=marginals,
        mean_accept_length=_number(where, "mean_accept_length", found.get("mean_accept_length"), 1.0),
        mean_accept_length_per_request=None
        if per_request is None
        else _number(where, "mean_accept_length_per_request", per_request, 1.0),
        accept_length_model=str(found.get("accept_length_model") or MEASURED_PER_K),
        accept_length_by_k={str(key): _number(where, f"accept_length_by_k[{key}]", v, 1.0) for key, v in by_k.items()},
        acceptance_length_histogram=_histogram(where, found.get("acceptance_length_histogram")),
        per_category=categories,
        measurement_conditions=conditions if isinstance(conditions, dict) else None,
        notes={str(k): str(v) for k, v in notes.items()} if isinstance(notes := found.get("notes"), dict) else {},
        schema_version=str(found["schema_version"]),
    )
