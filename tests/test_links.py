"""Every relative link in the course resolves from the folder `make lab` serves (the repository's root):
Markdown links in the lessons, exercises, solutions and capstones, the README and docs/ point to a file
that exists inside the repository, so a student clicking one in JupyterLab lands on it."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
NOTEBOOK_FOLDERS = ("lessons", "exercises", "solutions", "assignments")


def markdown_texts() -> dict[Path, str]:
    """Each file's Markdown: the notebooks' Markdown cells, the README and docs/*.md."""
    out: dict[Path, str] = {}
    for folder in NOTEBOOK_FOLDERS:
        for nb in sorted((ROOT / folder).glob("*.ipynb")):
            cells = json.loads(nb.read_text())["cells"]
            out[nb] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        out[path] = path.read_text()
    return out


def broken_links(texts: dict[Path, str]) -> list[str]:
    """Relative links whose file is missing or lies outside the served root."""
    bad = []
    for path, text in texts.items():
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):  # http:, mailto:, an anchor in the page
                continue
            file = (path.parent / target.split("#")[0]).resolve()
            if not file.is_relative_to(ROOT) or not file.exists():
                bad.append(f"{path.relative_to(ROOT)}: ({target})")
    return bad


def test_every_relative_link_resolves_from_the_served_root():
    texts = markdown_texts()
    assert sum(len(LINK.findall(t)) for t in texts.values()) > 30  # the lesson map, the README's tables, citations
    assert broken_links(texts) == []


def test_the_check_fails_on_planted_broken_links():
    planted = {ROOT / "lessons" / "99.ipynb": "[next](10_missing.ipynb) [up](../../outside.md) [ok](00_welcome.ipynb)",
               ROOT / "README.md": "[report](results/nope.md) [web](https://example.org) [here](#for-students)"}
    assert broken_links(planted) == ["lessons/99.ipynb: (10_missing.ipynb)", "lessons/99.ipynb: (../../outside.md)",
                                     "README.md: (results/nope.md)"]
