"""docs/architecture.md's layout and layer picture against the code: the layout names every component of
the package (each module as `name.py`, each package as `name/`) and nothing else at its top level, every
file it names inside a component is there, and its layer picture is `tests/test_structure.py`'s LAYERS,
row for row. A package moved or a layer changed fails here until the doc says so too."""

from __future__ import annotations

import re

from test_structure import LAYERS

from speculab.config import PROJECT_ROOT

DOC = PROJECT_ROOT / "docs" / "architecture.md"
PACKAGE = PROJECT_ROOT / "platform" / "speculab"
PLUGINS = "(hydra_plugins)"  # how the picture marks the first row: Hydra's entries, outside the package


def blocks_after(marker: str) -> list[str]:
    """The lines of the first code block after the line holding `marker`."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    return lines[opening + 1 : closing]


def layout_entries() -> dict[str, str]:
    """The layout block's entries under `platform/speculab/`: the name at two spaces' indent (`registry.py`,
    `models/`) -> its description, continuation lines included."""
    entries: dict[str, str] = {}
    name = None
    for line in blocks_after("## Layout"):
        if not line.startswith(" "):  # `platform/speculab/` itself, or a folder beside it (conf/, jobs/, ...)
            name = None
        elif match := re.match(r"  (\S+)\s+(.*)", line):
            name = match.group(1)
            entries[name] = match.group(2)
        elif name is not None:
            entries[name] += " " + line.strip()
    return entries


def components() -> dict[str, str]:
    """Each component of LAYERS (the Hydra plugins' row aside) as the layout names it."""
    names = [name for row in LAYERS[1:] for name in row]
    return {name: f"{name}/" if (PACKAGE / name).is_dir() else f"{name}.py" for name in names}


def test_the_layout_names_every_component_and_nothing_else() -> None:
    entries = layout_entries()
    named = set(entries) | {m for text in entries.values() for m in re.findall(r"\b(\w+\.py)\b", text)}
    missing = sorted(set(components().values()) - named)
    assert missing == [], f"components docs/architecture.md's layout does not name: {missing}"
    unknown = sorted(set(entries) - set(components().values()))
    assert unknown == [], f"layout entries that are no component of the package: {unknown}"


def test_every_file_the_layout_names_exists() -> None:
    """`tree.py` in `drafting/`'s entry is a module of drafting (any depth); in a module's entry, one of
    the package (`runs.py` beside `registry.py` is tracking's); a path with a slash is from the
    repository's root."""
    missing = []
    for name, text in layout_entries().items():
        for mentioned in re.findall(r"[\w/]+\.py\b", text):
            if "/" in mentioned:
                found = (PROJECT_ROOT / mentioned).exists()
            elif name.endswith("/"):
                found = any((PACKAGE / name).rglob(mentioned))
            else:
                found = any(PACKAGE.rglob(mentioned))
            if not found:
                missing.append(f"{name}: {mentioned}")
    assert missing == []


def test_the_layer_picture_is_the_structure_tests_layers() -> None:
    rows = [line.replace(PLUGINS, "").split("·") for line in blocks_after("tests/test_structure.py::LAYERS")]
    assert [tuple(name.strip() for name in row) for row in rows] == list(LAYERS)
