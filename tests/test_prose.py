"""No measured figure typed into a Markdown cell: measured numbers live in outputs, or in Markdown a
code cell renders from computed values (docs/authoring.md, "Figures in prose").

A figure is a number with ×, ms, s, tok/s, tokens/s, MB, GB or %, or a value after α, c, v, p = / ≈.
Static Markdown may keep what does not depend on the machine, each kind told apart by its mark:
formulas, arithmetic, shapes and fixed sizes in math or code (``$4.5$ bits``, ``49,152 × 576``), a
cited paper's or reference's number in a sentence that names its source, hypothetical values in a
question (a sentence ending in ``?``), the limits α = 0 / α = 1, and the run-time line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUM = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(rf"(?<![\w.]){NUM}\s*(?:–\s*{NUM}\s*)?(?:×|ms\b|s\b|tok/s|tokens/s|MB\b|GB\b|%)")
SYMBOL = re.compile(rf"(?:α|\bc|\bv|\bp)\s*(?:=|≈)\s*(?!(?:0|1)(?!\.?\d)){NUM}")  # α = 0, α = 1: limits
SHAPE = re.compile(rf"{NUM}\s*×\s*(?:{NUM}|(?!a\b)[a-zA-Zγ]\b)|(?<![\d.])1×")  # a matrix shape; 1×: the no-gain line
# a source named in the sentence: a paper, the tutorial's own report, the course's reference — except its
# section on CPUs, which holds no numbers (a figure next to it was measured somewhere, not cited)
CITATION = re.compile(r"arXiv|reference\.md#(?!why-a-cpu-differs)|et al\.|\bblog\b|#\d{3,}|https?://|"
                      r"\bpaper\b|\breports?\b|\bpublished\b", re.I)


def _unmarked(markdown: str) -> str:
    """The Markdown without math, code spans and comments (where fixed quantities are written)."""
    for pattern in (r"\$\$.*?\$\$", r"\$[^$\n]*\$", r"`[^`\n]*`", r"<!--.*?-->"):
        markdown = re.sub(pattern, " ", markdown, flags=re.S)
    return markdown


def _sentences(markdown: str):
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*] |\d+\. |#))", markdown):
        if block.lstrip().startswith(("**Run time", "*Run time")):
            continue
        if block.lstrip().startswith("|"):  # a table: one row is one sentence
            yield from block.splitlines()
            continue
        yield from re.split(r"(?<=[.!?])\s+(?=[A-Z(*\[])", " ".join(block.split()))


def typed_figures(markdown: str) -> list[str]:
    """The sentences of one Markdown cell that state a measured-looking figure without a mark."""
    cited_table = bool(CITATION.search(markdown))
    bad = []
    for sentence in _sentences(_unmarked(markdown)):
        if sentence.rstrip().endswith("?") or CITATION.search(sentence) or sentence.lstrip().startswith("**Run time"):
            continue
        if sentence.lstrip().startswith("|") and cited_table:
            continue
        text = SHAPE.sub(" ", sentence)
        if FIGURE.search(text) or SYMBOL.search(text):
            bad.append(sentence.strip())
    return bad


def notebooks() -> list[Path]:
    return sorted([*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("exercises/*.ipynb")])


def test_no_markdown_cell_types_a_measured_figure():
    found = []
    for nb in notebooks():
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] == "markdown":
                found += [f"{nb.relative_to(ROOT)} cell {i}: {s[:140]}" for s in typed_figures("".join(cell["source"]))]
    assert not found, "typed figures (render them from outputs, or mark them):\n" + "\n".join(found)


def test_the_scan_fails_on_a_planted_stale_sentence_and_spares_the_marked_kinds():
    assert typed_figures("On this CPU a forward over 16 tokens costs about 1.6× a one-token step.")
    assert typed_figures("Lesson 03 measured v ≈ 1.4 here, so the draft must be good.")
    assert typed_figures("The feature drafter reaches α = 0.37 on held-out prompts.")
    assert typed_figures("- a list item: the run took 215 ms")
    assert typed_figures("A forward over 8 tokens costs ≈ 1.6× a one-token step.")  # "× a": not a shape
    spared = [
        "The formula $S = E / (\\gamma c + v)$ with $v = 1.6$ gives $0.93\\times$.",
        "Its output layer is a 49,152 × 576 matrix.",
        "Leviathan et al. report 3.4× on T5 ([reference](../docs/reference.md#published-results)).",
        "With α = 0.8 and c = 0.05, which γ maximises S?",
        "At α = 0 every step emits one token; at α = 1 all γ + 1.",
        "**Run time:** about 5 minutes on a 2-core CPU, 90 s under QUICK.",
        "The adapter is `7.4 MB` in fp16.",
    ]
    assert [s for s in spared if typed_figures(s)] == []
