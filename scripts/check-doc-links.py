#!/usr/bin/env python3
"""Every relative link in README.md and docs/*.md points at a file that exists, and every #anchor
at a heading of its file (GitHub's slugs). Links listed after the README's "being written now"
marker may name pages still on their way: those are listed, not failed. Run by .ci/run."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PENDING_MARKER = "<!-- Add one line"


def slug(heading):
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # backticks, dots, colons, parentheses, apostrophes
    return text.replace(" ", "-")


def prose(path):
    """(line number, line) outside fenced code blocks."""
    fence = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            yield number, line


def anchors(path):
    found, seen = set(), {}
    for _, line in prose(path):
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def main():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken, pending = [], []
    for page in files:
        after_marker = False
        for number, line in prose(page):
            after_marker = after_marker or PENDING_MARKER in line
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue  # https:, mailto:
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if not dest.exists():
                    (pending if after_marker else broken).append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{where}: no such heading in {dest.relative_to(ROOT)}")
    for line in pending:
        print(f"pending: {line}")
    for line in broken:
        print(f"broken: {line}")
    print(f"{len(files)} pages, {len(broken)} broken links, {len(pending)} pages on their way")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
