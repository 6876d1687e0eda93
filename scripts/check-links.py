#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Fails when a relative link in the project's Markdown pages points at nothing.

Reads README.md, CONTRIBUTING.md, SECURITY.md, CHANGELOG.md and every docs/**/*.md. For each
Markdown link `[text](path)`, `[text](path#anchor)`, `[text](#anchor)` and each reference
definition `[label]: path`, outside fenced code blocks and inline code: the path must name an
existing file or folder (relative to the page), and where an anchor is given for a Markdown
page, a heading of that page must produce it by GitHub's rules (lowercase; punctuation other
than hyphens, underscores and spaces dropped; spaces become hyphens; a repeated heading gets
-1, -2, ...). http(s) and mailto links are not checked. Prints each broken link as
file:line and exits 1; exits 0 when all resolve. Run from anywhere:
python3 scripts/check-links.py"""
import pathlib
import re
import sys
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOP_PAGES = ("README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target); the target has no spaces, an optional "title" may follow.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^\s()<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
SKIPPED_SCHEMES = ("http://", "https://", "mailto:")


def pages():
    found = [ROOT / name for name in TOP_PAGES if (ROOT / name).is_file()]
    found += sorted((ROOT / "docs").rglob("*.md"))
    return found


def lines_outside_fences(text):
    """(line number, line) for every line that is not inside a fenced code block."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None:
            if opened:
                fence = opened.group(1)
                continue
            yield number, line
        elif opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) \
                and not line.strip()[len(opened.group(1)):].strip():
            fence = None


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML shows nothing
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*)", "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


ANCHORS = {}


def anchors(path):
    """Every anchor a Markdown page defines: its headings' slugs and explicit HTML anchors."""
    if path not in ANCHORS:
        found, seen = set(), {}
        for _, line in lines_outside_fences(path.read_text(encoding="utf-8")):
            heading = HEADING.match(line)
            if heading:
                base = slug(heading.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(HTML_ANCHOR.findall(line))
        ANCHORS[path] = found
    return ANCHORS[path]


def targets(line):
    """The link targets of one line outside code."""
    stripped = INLINE_CODE.sub("", line)
    found = [match.group(1) for match in LINK.finditer(stripped)]
    reference = REFERENCE.match(stripped)
    if reference:
        found.append(reference.group(1))
    return found


def check(page):
    problems = []
    for number, line in lines_outside_fences(page.read_text(encoding="utf-8")):
        for target in targets(line):
            if target.lower().startswith(SKIPPED_SCHEMES):
                continue
            where = f"{page.relative_to(ROOT)}:{number}"
            path_part, _, anchor = target.partition("#")
            path_part = urllib.parse.unquote(path_part)
            destination = (page.parent / path_part).resolve() if path_part else page
            if not destination.exists():
                problems.append(f"{where}: {target}: no such file")
                continue
            if anchor and destination.suffix.lower() == ".md":
                if urllib.parse.unquote(anchor).lower() not in anchors(destination):
                    problems.append(f"{where}: {target}: no heading "
                                    f"'#{anchor}' in {destination.relative_to(ROOT)}")
    return problems


def main():
    checked = pages()
    problems = [problem for page in checked for problem in check(page)]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} broken link(s)", file=sys.stderr)
        return 1
    print(f"links: every relative link of {len(checked)} pages resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
