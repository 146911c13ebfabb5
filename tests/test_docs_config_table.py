"""The configuration reference (docs/configuration.md) against the schema and conf/.

The table ("## Configuration reference") lists every key of `Config`: a group row (`model=`) stands
for the group's option, and so for its `name` key (`runtime.kind` for `runtime=`). Its defaults are
those of the default options (conf/config.yaml's defaults list, each option's YAML over the
dataclasses), and a note that names options, such as "(`gbv`, `spectr`: 2)", gives their values.
This file checks all of it against `speculab.config.Config` and conf/, reading YAML only (no Hydra
run): every listed key exists, every key of `Config` is listed, and the defaults and noted values
are those of conf/.
"""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from speculab.config import Config

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SECTION = "## Configuration reference"
CODE = re.compile(r"`([^`]+)`")
VALUE = r"(`[^`]*`|[^,;)\s]+)"
# a note naming options: "`gbv`, `spectr`: 2", "`block`: `assets/tiny-pycode/parallel`"; and "others: null"
NAMED_NOTE = re.compile(r"((?:`[\w.-]+`(?:, )?)+): " + VALUE)
OTHERS_NOTE = re.compile(r"others: " + VALUE)


def table_rows() -> list[tuple[list[str], str, str]]:
    """(keys, default cell, values cell) of every row of the configuration table."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert SECTION in text, f"docs/configuration.md has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert lines[:2] == ["| key | default | values |", "|---|---|---|"], lines[:2]
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"a row of three cells: {line}"
        rows.append((CODE.findall(cells[0]), cells[1], cells[2]))
    return rows


def schema_keys(node: Any, prefix: str = "") -> list[str]:
    """Every leaf key of the dataclass `node`, dotted (`algorithm.K`)."""
    keys = []
    for f in fields(node):
        value = getattr(node, f.name)
        keys += schema_keys(value, f"{prefix}{f.name}.") if is_dataclass(value) else [prefix + f.name]
    return keys


def chosen_options() -> dict[str, str]:
    """group -> the option conf/config.yaml's defaults list picks (Hydra's own groups, `override hydra/...`,
    left out: they hold no key of `Config`)."""
    entries = OmegaConf.load(CONF / "config.yaml").defaults
    picked = {str(k): str(v) for entry in entries if isinstance(entry, DictConfig) for k, v in entry.items()}
    return {group: name for group, name in picked.items() if not group.startswith("override ")}


def option(group: str, name: str) -> dict[str, Any]:
    """conf/<group>/<name>.yaml over the group's dataclass defaults."""
    path = CONF / group / f"{name}.yaml"
    assert path.is_file(), f"{path.relative_to(ROOT)} does not exist"
    node = OmegaConf.merge(OmegaConf.structured(Config)[group], OmegaConf.load(path))
    container = OmegaConf.to_container(node)
    assert isinstance(container, dict)
    return container


def composed_defaults() -> dict[str, Any]:
    """The config `speculab` runs with no override: the chosen options, then config.yaml's own keys."""
    tree = OmegaConf.to_container(OmegaConf.structured(Config))
    assert isinstance(tree, dict)
    for group, name in chosen_options().items():
        tree[group] = option(group, name)
    main = OmegaConf.load(CONF / "config.yaml")
    own = OmegaConf.to_container(main)
    assert isinstance(own, dict)
    merged = OmegaConf.to_container(
        OmegaConf.merge(tree, {k: v for k, v in own.items() if k not in ("defaults", "hydra")})
    )
    assert isinstance(merged, dict)
    return merged


def lookup(tree: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        tree = tree[part]
    return tree


def parse(text: str) -> Any:
    """A value as the table writes it: `null`, `true`, `[]`, `{}`, 64, 1.0, `best_first`."""
    text = text.strip().strip("`")
    words: dict[str, Any] = {"null": None, "true": True, "false": False, "[]": [], "{}": {}}
    if text in words:
        return words[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def split_default(cell: str, keys: list[str]) -> tuple[list[str], str]:
    """(the default of each key the row names, the notes in parentheses after them). A row of several
    keys gives one default each (`1.0, 0`) or one for all (`null`)."""
    head, _, notes = cell.partition(" (")
    shown = [value.strip() for value in head.split(", ")]
    return shown * len(keys) if len(shown) == 1 else shown, notes


def group_of(key: str) -> str | None:
    """`model=` -> model; `+experiment=` -> experiment; None for a key."""
    return key.lstrip("+")[:-1] if key.endswith("=") else None


ROWS = table_rows()
LISTED = [key for keys, _, _ in ROWS for key in keys]
SCHEMA = schema_keys(Config())
DEFAULTS = composed_defaults()
NAME_OF = {"runtime": "runtime.kind"}  # the group's option is written to this key (otherwise <group>.name)


def test_every_listed_key_is_in_the_schema() -> None:
    groups = {f.name for f in fields(Config) if is_dataclass(getattr(Config(), f.name))}
    wrong = []
    for key in LISTED:
        group = group_of(key)
        if group is None:
            wrong += [] if key in SCHEMA else [f"{key}: not a key of Config"]
        elif not (CONF / group).is_dir() or (group not in groups and key != "+experiment="):
            wrong.append(f"{key}: not a config group (conf/{group}/ and a field of Config)")
    assert not wrong, "\n".join(wrong)


def test_every_schema_key_is_listed() -> None:
    groups = {group_of(key) for key in LISTED} - {None}
    missing = []
    for key in SCHEMA:
        group, _, leaf = key.rpartition(".")
        named_by_group = group in groups and (NAME_OF.get(group) == key or (group not in NAME_OF and leaf == "name"))
        if key not in LISTED and not named_by_group:
            missing.append(key)
    assert not missing, f"keys of Config the configuration table (docs/configuration.md) lacks: {', '.join(missing)}"
    assert len(LISTED) == len(set(LISTED)), "a key listed twice"


@pytest.mark.parametrize(("keys", "cell", "values"), ROWS, ids=[", ".join(keys) for keys, _, _ in ROWS])
def test_defaults_are_those_of_the_default_options(keys: list[str], cell: str, values: str) -> None:
    shown, _ = split_default(cell, keys)
    assert len(shown) == len(keys), f"one default per key, or one for all: {cell!r}"
    for key, text in zip(keys, shown, strict=True):
        group = group_of(key)
        if group is None:
            assert parse(text) == lookup(DEFAULTS, key), (
                f"{key}: the table says {text}, conf/ gives {lookup(DEFAULTS, key)!r}"
            )
        else:
            expected = chosen_options().get(group, "none")
            assert parse(text) == expected, f"{key}: the table says {text}, conf/config.yaml picks {expected}"


@pytest.mark.parametrize(("keys", "cell", "values"), ROWS, ids=[", ".join(keys) for keys, _, _ in ROWS])
def test_group_rows_name_every_option(keys: list[str], cell: str, values: str) -> None:
    group = group_of(keys[0])
    if group is None:
        return
    offered = {path.stem for path in (CONF / group).glob("*.yaml")}
    named = set(CODE.findall(values))
    assert offered <= named, f"{keys[0]}: conf/{group}/ offers {', '.join(sorted(offered - named))}, not named"


@pytest.mark.parametrize(("keys", "cell", "values"), ROWS, ids=[", ".join(keys) for keys, _, _ in ROWS])
def test_values_noted_for_named_options(keys: list[str], cell: str, values: str) -> None:
    """A note that names options gives their values, and names every option that differs from the
    default (or an `others:` value for those it leaves out)."""
    shown, notes = split_default(cell, keys)
    noted = NAMED_NOTE.findall(notes)
    if not noted:
        return
    assert len(keys) == 1 and group_of(keys[0]) is None, f"options noted on a row of several keys or a group: {keys}"
    group, _, field = keys[0].partition(".")
    named = {name: text for names, text in noted for name in CODE.findall(names)}
    offered = sorted(path.stem for path in (CONF / group).glob("*.yaml"))
    assert set(named) <= set(offered), (
        f"{keys[0]}: a note names options conf/{group}/ lacks: {set(named) - set(offered)}"
    )
    others = OTHERS_NOTE.findall(notes)
    wrong = []
    for name in offered:
        actual = lookup(option(group, name), field)
        default = name == chosen_options()[group] or not others
        text = named.get(name, shown[0] if default else others[0])
        if parse(text) != actual:
            said = f"the table says {text}" if name in named or others else "the table names it not"
            wrong.append(f"{keys[0]} with {group}={name}: {said}, conf/ gives {actual!r}")
    assert not wrong, "\n".join(wrong)
