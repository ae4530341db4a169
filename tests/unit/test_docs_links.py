"""Local links in README.md and docs/*.md resolve.

Every markdown link `[text](target)` whose target is not a URL must name a file or folder that
exists, relative to the page that holds it; a `#fragment` on a markdown page (or a bare
`#fragment` on the same page) must name one of that page's headings, with the anchors GitHub
makes for them. Links inside fenced code blocks and inline code are not links and are skipped.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1 (CommonMark's fence rules: a
    backtick fence's info string holds no backtick; it closes on a bare run of the same
    character at least as long)."""
    lines, fence = [], ""
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1).startswith(fence) and not match.group(2).strip():
                fence = ""
            continue
        if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
            fence = match.group(1)
            continue
        lines.append((number, line))
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor the page's headings make (repeats get -1, -2, ... as on GitHub)."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = _slug(match.group(2))
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def local_links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every link on the page that is not a URL."""
    links = []
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        for match in _LINK.finditer(_INLINE_CODE.sub("``", line)):
            target = match.group(1).strip("<>")
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, mailto:, ...
                continue
            links.append((number, target))
    return links


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the page's local links, one line each (empty when all resolve)."""
    problems = []
    for number, target in local_links(page):
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(root)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{where}: no heading with anchor #{fragment}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_local_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_readme_links_every_doc() -> None:
    """The README's map of the docs names every page under docs/."""
    readme = ROOT / "README.md"
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in local_links(readme)}
    missing = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert missing == [], f"docs pages the README does not link: {missing}"


def test_checker_sees_breakage(tmp_path: Path) -> None:
    """The checker itself: a missing file, a missing anchor, and what must be ignored."""
    (tmp_path / "other.md").write_text("# Title\n\n## A `code` heading: yes\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n"
        "[ok](other.md#a-code-heading-yes) [self](#page) [url](https://example.com/x.md)\n"
        "[gone](missing.md) [bad anchor](other.md#nope)\n"
        "`[in code](nowhere.md)`\n"
        "```` ``` ```` is inline code, not a fence: [gone too](missing2.md)\n"
        "```\n[in a fence](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, root=tmp_path) == [
        "page.md:3: missing.md: no such file",
        "page.md:3: other.md#nope: no heading with anchor #nope",
        "page.md:5: missing2.md: no such file",
    ]
