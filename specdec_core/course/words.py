"""``python -m specdec_core.course.words`` (``make words``): how many words a reader of the course reads.

Counted over ``lessons/*.ipynb``: every Markdown cell and every Markdown output a code cell renders
(``display(Markdown(...))``), the way a reader meets them. Code (fenced blocks, inline code), HTML
comments, links' targets and table rules are not words. Lessons whose name contains ``appendix`` are
counted apart, as the course's budget treats them apart.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

_FENCED = re.compile(r"```.*?```", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}.*$", re.M)
_WORD = re.compile(r"[^\W_]+(?:['’.-][^\W_]+)*")  # letters or digits, joined by an apostrophe, dot or hyphen


def count_words(markdown: str) -> int:
    """Words in one piece of Markdown, code and markup left out."""
    for pattern in (_FENCED, _COMMENT, _INLINE_CODE, _TABLE_RULE):
        markdown = pattern.sub(" ", markdown)
    markdown = _LINK_TARGET.sub("]", markdown)
    return len(_WORD.findall(markdown))


@dataclass(frozen=True)
class LessonWords:
    name: str
    markdown: int  # in Markdown cells
    rendered: int  # in Markdown outputs of code cells

    @property
    def total(self) -> int:
        return self.markdown + self.rendered


def lesson_words(path: Path) -> LessonWords:
    """The words of one stored notebook: its Markdown cells and its rendered Markdown outputs."""
    cells = json.loads(path.read_text())["cells"]
    markdown = sum(count_words("".join(c["source"])) for c in cells if c["cell_type"] == "markdown")
    rendered = sum(count_words("".join(out.get("data", {}).get("text/markdown", "")))
                   for c in cells if c["cell_type"] == "code" for out in c.get("outputs", []))
    return LessonWords(path.stem, markdown, rendered)


def table(rows: list[LessonWords]) -> str:
    """A Markdown table, one lesson a row, the main lessons' and the appendices' totals last."""
    lines = ["| lesson | Markdown cells | rendered Markdown | words |", "|---|---:|---:|---:|"]
    lines += [f"| {r.name} | {r.markdown:,} | {r.rendered:,} | {r.total:,} |" for r in rows]
    main = [r for r in rows if "appendix" not in r.name]
    appendices = [r for r in rows if "appendix" in r.name]
    lines.append(f"| **lessons** | {sum(r.markdown for r in main):,} | {sum(r.rendered for r in main):,} | "
                 f"**{sum(r.total for r in main):,}** |")
    if appendices:
        lines.append(f"| **appendices** | {sum(r.markdown for r in appendices):,} | "
                     f"{sum(r.rendered for r in appendices):,} | **{sum(r.total for r in appendices):,}** |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_core.course.words", description=__doc__.split("\n")[0])
    parser.add_argument("folder", nargs="?", default="lessons", help="the folder of lesson notebooks (default: lessons)")
    args = parser.parse_args(argv)
    notebooks = sorted(Path(args.folder).glob("*.ipynb"))
    if not notebooks:
        print(f"error: no notebooks in {Path(args.folder).resolve()}; run this from the course's root folder")
        return 2
    print(table([lesson_words(nb) for nb in notebooks]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
