"""Citations of the course's own reference (docs/reference.md#<anchor>) point to anchors that exist,
and nothing cites a file students do not have."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference.md"
CITATION = re.compile(r"reference\.md#([A-Za-z0-9_-]+)")


def anchors(markdown: str) -> set[str]:
    """Explicit ``<a id="…">`` anchors and the GitHub slugs of the headings."""
    ids = set(re.findall(r'<a id="([^"]+)"></a>', markdown))
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        ids.add(re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-"))
    return ids


def texts() -> dict[str, str]:
    """Every place a citation can stand: notebook cells, the library, the docs, the README, the tests."""
    out = {}
    for nb in sorted([*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("exercises/*.ipynb")]):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            out[f"{nb.relative_to(ROOT)} cell {i}"] = "".join(cell["source"])
    for path in [*ROOT.glob("specdec_core/**/*.py"), *ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("tests/*.py")]:
        if path.name != "test_reference.py":  # this file plants broken citations on purpose
            out[str(path.relative_to(ROOT))] = path.read_text()
    return out


def broken(places: dict[str, str], known: set[str]) -> list[str]:
    """Citations of a missing anchor, and citations of the old REFERENCE file."""
    bad = [f"{where}: #{a}" for where, text in places.items() for a in CITATION.findall(text) if a not in known]
    old = "REFERENCE" + " §"  # split so that this file does not cite it itself
    return bad + [f"{where}: cites {old}N, a file students do not have" for where, text in places.items() if old in text]


def test_every_citation_points_to_an_existing_anchor():
    known = anchors(REFERENCE.read_text())
    assert {"notation", "units", "speedup", "exactness", "nf4", "jacobi", "cllm"} <= known
    assert not broken(texts(), known)


def test_the_check_fails_on_a_planted_bad_citation():
    known = anchors(REFERENCE.read_text())
    planted = {"lessons/99.ipynb cell 1": "see [reference](../docs/reference.md#no-such-anchor)",
               "x.py": "Leviathan (" + "REFERENCE" + " §1)"}
    assert len(broken(planted, known)) == 2
    assert not broken({"ok": "docs/reference.md#speedup"}, known)
