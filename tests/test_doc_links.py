"""The documents' links land: every relative link in the project's markdown names a file that exists and,
after a `#`, a heading of that file (by GitHub's anchors); a section of benchmarks/RESULTS.md or
ARCHIVE.md named in quotes after the file's name is a heading there. A section moved or renamed fails
here rather than in a reader's browser."""

from __future__ import annotations

import re
from pathlib import Path

from speculab.config import PROJECT_ROOT

DOCUMENTS = [
    PROJECT_ROOT / "README.md",
    *sorted((PROJECT_ROOT / "docs").glob("*.md")),
    *sorted((PROJECT_ROOT / "benchmarks").glob("*.md")),
    *sorted((PROJECT_ROOT / "assets").glob("*/README.md")),
    PROJECT_ROOT / "cluster" / "README.md",
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# `RESULTS.md, "Current figures"` or `RESULTS.md#contents), "DFlash on the tiny pair"`: a section by its title
QUOTED = re.compile(r"\b(RESULTS|ARCHIVE)\.md\b[^\"\n]{0,40}\"([^\"]+)\"")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, code and emphasis marks dropped, every character but
    letters, digits, `_`, `-` and spaces dropped, spaces to `-`."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> list[str]:
    """The file's headings, outside code blocks."""
    found, fenced = [], False
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (match := re.match(r"#+ (.+)", line)):
            found.append(match.group(1))
    return found


def anchors(path: Path) -> set[str]:
    """Every anchor of the file: its headings' (a repeated one gets `-1`, `-2`, ... as GitHub numbers
    them) and the `<a id="...">` tags that mark a paragraph."""
    found = set(re.findall(r'<a id="([^"]+)"></a>', path.read_text()))
    seen: dict[str, int] = {}
    for heading in headings(path):
        base = anchor(heading)
        count = seen.get(base, 0)
        found.add(f"{base}-{count}" if count else base)
        seen[base] = count + 1
    return found


def broken_links(document: Path) -> list[str]:
    found = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        landing = (document.parent / path).resolve() if path else document
        if not landing.exists():
            found.append(f"{target}: no such file")
        elif fragment and landing.suffix == ".md" and fragment not in anchors(landing):
            found.append(f"{target}: no such heading")
    return found


def test_every_relative_link_in_the_documents_lands() -> None:
    found = [f"{doc.relative_to(PROJECT_ROOT)}: {hit}" for doc in DOCUMENTS for hit in broken_links(doc)]
    assert found == []


def test_a_results_section_named_in_quotes_is_a_heading_of_its_file() -> None:
    """In the documents and the code: "see RESULTS.md, "<section>"" names a section that is there."""
    sources = [*DOCUMENTS, *sorted((PROJECT_ROOT / "platform").rglob("*.py"))]
    titles = {name: headings(PROJECT_ROOT / "benchmarks" / f"{name}.md") for name in ("RESULTS", "ARCHIVE")}
    found = [
        f"{source.relative_to(PROJECT_ROOT)}: {name}.md, {title!r}"
        for source in sources
        for name, title in QUOTED.findall(source.read_text())
        if not any(heading.startswith(" ".join(title.split())) for heading in titles[name])
    ]
    assert found == []


def test_the_link_check_finds_a_missing_heading_and_a_missing_file(tmp_path: Path) -> None:
    """The check itself can fail; a repeated heading's second anchor is numbered, as GitHub numbers it."""
    (tmp_path / "a.md").write_text(
        '# Top\n\n## `x_y`: T = 1, 2026-11-21\n\n## Notes\n\n## Notes\n\n<a id="p"></a>Text\n'
    )
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#x_y-t--1-2026-11-21) [ok](a.md#notes-1) [ok](a.md#p) [no](a.md#gone) [no](c.md) [ok](#b)\n# B\n"
    )
    assert broken_links(page) == ["a.md#gone: no such heading", "c.md: no such file"]
