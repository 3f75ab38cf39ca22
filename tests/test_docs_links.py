"""Every relative link in README.md and docs/ resolves: the file exists (relative to the linking file) and,
for an anchor into a Markdown file, that heading exists under GitHub's slug rule (lowercase, punctuation
other than '-' and '_' dropped, each space a '-', a repeated heading suffixed -1, -2, ...).
Links to other sites (http, https, mailto) are not checked; links inside code are not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target), with an optional "title"; reference definitions [id]: target.
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def _prose_lines(text: str, *, blank_code: bool = True) -> list[str]:
    """The file's lines outside fenced code blocks, with inline code spans blanked unless told not to."""
    lines, fenced = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fenced is None and m:
            fenced = m.group(1)
            continue
        if fenced is not None:
            if line.lstrip().startswith(fenced):
                fenced = None
            continue
        lines.append(_CODE_SPAN.sub("", line) if blank_code else line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose_lines(path.read_text(encoding="utf-8"), blank_code=False):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(1).replace("`", ""))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    found = []
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        found += _INLINE.findall(line)
        m = _REFERENCE.match(line)
        if m:
            found.append(m.group(1))
    return found


def broken_links(path: Path) -> list[str]:
    """One line per relative link of ``path`` that does not resolve."""
    broken = []
    for target in links(path):
        if not target or _EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file {dest}")
            continue
        if anchor and dest.is_file() and dest.suffix.lower() == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading with the anchor #{anchor}")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_relative_links_resolve(doc: Path):
    broken = broken_links(doc)
    assert not broken, f"{doc.relative_to(REPO)}:\n" + "\n".join(broken)


def test_the_docs_are_found():
    assert REPO / "README.md" in DOCS and len(DOCS) > 1


def test_a_broken_link_is_found(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other page\n\n## The `x` section (two)\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md) [ok](other.md#the-x-section-two) [ok](#page) ![img](other.md) [web](https://x.org/y#z)\n"
        "[missing](nowhere.md) [bad anchor](other.md#no-such-heading) [here](#nothing)\n"
        "`[in code](absent.md)`\n```\n[in a block](absent.md)\n```\n",
        encoding="utf-8",
    )
    broken = broken_links(page)
    assert [b.split(":")[0] for b in broken] == ["nowhere.md", "other.md#no-such-heading", "#nothing"]


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("When a run fails on a cluster", "when-a-run-fails-on-a-cluster"),
        ("The CPU demo (make demo)", "the-cpu-demo-make-demo"),
        ("The Ascend images' Python set", "the-ascend-images-python-set"),
        ("CPU pods (smoke tests of the multi-node path)", "cpu-pods-smoke-tests-of-the-multi-node-path"),
        ("Set-up a test needs", "set-up-a-test-needs"),
        ("snake_case and 2-node", "snake_case-and-2-node"),
    ],
)
def test_github_slug(heading: str, anchor: str):
    assert slug(heading) == anchor


def test_the_readme_starts_with_the_two_commands_and_stays_short():
    # The front page: `make demo` and `make test` first, the rest in docs/ (at most 200 lines).
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)
    first = [ln.split("#")[0].strip() for ln in lines[:6] if ln.startswith("make ")]
    assert first == ["make demo", "make test"], lines[:6]
