"""`make words`: the course's word count leaves code and markup out and counts rendered Markdown."""

from __future__ import annotations

import json
from pathlib import Path

from specdec_core.course.words import count_words, lesson_words, main, table


def test_words_leave_code_and_markup_out():
    md = ("# Two words\n\nThe `step(ids)` is [fast](../docs/reference.md#speedup): 3.5× AR, don't guess.\n"
          "```python\nignored = code(here)\n```\n<!-- a comment -->\n| a | b |\n|---|---:|\n| one | two |")
    # Two words · The is fast 3.5 AR don't guess · a b · one two
    assert count_words(md) == 13


def test_a_lesson_counts_its_cells_and_its_rendered_markdown(tmp_path: Path):
    nb = {"cells": [
        {"cell_type": "markdown", "source": ["one two ", "three"], "metadata": {}},
        {"cell_type": "code", "source": ["print('not words')"], "metadata": {}, "outputs": [
            {"output_type": "display_data", "data": {"text/markdown": ["four five"], "text/plain": ["x"]}},
            {"output_type": "stream", "name": "stdout", "text": ["printed text is not Markdown"]}]}]}
    (tmp_path / "10_x.ipynb").write_text(json.dumps(nb))
    (tmp_path / "90_appendix_y.ipynb").write_text(json.dumps({"cells": nb["cells"][:1]}))
    rows = [lesson_words(p) for p in sorted(tmp_path.glob("*.ipynb"))]
    assert (rows[0].markdown, rows[0].rendered, rows[1].total) == (3, 2, 3)
    out = table(rows)
    assert "| **lessons** | 3 | 2 | **5** |" in out and "| **appendices** | 3 | 0 | **3** |" in out


def test_the_command_counts_the_lessons_and_refuses_an_empty_folder(capsys, tmp_path: Path):
    assert main(["lessons"]) == 0
    assert "00_welcome" in capsys.readouterr().out
    assert main([str(tmp_path)]) == 2
    assert "no notebooks" in capsys.readouterr().out
