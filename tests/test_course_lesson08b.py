"""Lesson 08b's checkers pass the library's functions and reject wrong ones, naming the mistake."""

from __future__ import annotations

import pytest
import torch

from specdec_core import jacobi_forcing
from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson08b import _wrong_masks, check_noise_aware_mask, check_progressive_levels


def test_the_library_passes(capsys):
    check_progressive_levels(jacobi_forcing.progressive_levels)
    check_noise_aware_mask(jacobi_forcing.noise_aware_mask)
    out = capsys.readouterr().out
    assert "✗" not in out
    assert "All 6 checks of progressive_levels passed." in out and "All 8 checks of noise_aware_mask passed." in out


@pytest.mark.parametrize("levels, hint", [
    (lambda n, w: [(b % w) / w for b in range(n)], "the +1"),
    (lambda n, w: [(b % n + 1) / w for b in range(n)], "block b gets"),
    (lambda n, w: [(b % w + 1) / n for b in range(n)], "divide by W"),
    (lambda n, w: [1.0] * n, "block b gets"),
    (lambda n, w: [0.25, 0.5, 0.75, 1.0, 0.25, 0.5, 0.75, 1.0], "with one block per window"),  # hard-coded
])
def test_wrong_schedules_fail(levels, hint, capsys):
    with pytest.raises(CheckFailed):
        check_progressive_levels(levels)
    assert hint in capsys.readouterr().out


@pytest.mark.parametrize("which", range(6))
def test_each_common_wrong_mask_fails_with_its_own_hint(which, capsys):
    name = list(_wrong_masks(3, [2, 2]))[which]

    def student(prompt_len, lengths):
        return _wrong_masks(prompt_len, lengths)[name]

    with pytest.raises(CheckFailed):
        check_noise_aware_mask(student)
    out = capsys.readouterr().out
    assert f"you built {name}" in out or "✗ clean rows never see" in out or "✗ the prompt is plain" in out


def test_a_mask_by_index_hard_coded_for_the_example_fails_on_random_cases(capsys):
    example = jacobi_forcing.noise_aware_mask(3, [2, 2])
    with pytest.raises(CheckFailed):
        check_noise_aware_mask(lambda p, lengths: example)
    assert "✗ a square mask" not in capsys.readouterr().out  # it fails on the random cases' shapes
    with pytest.raises(CheckFailed):
        check_noise_aware_mask(lambda p, lengths: jacobi_forcing.noise_aware_mask(p, lengths).int())  # not bool


def test_a_crash_or_not_implemented_fails(capsys):
    def todo(p, lengths):
        raise NotImplementedError

    with pytest.raises(CheckFailed):
        check_noise_aware_mask(todo)
    assert "replace `raise NotImplementedError`" in capsys.readouterr().out
    torch.manual_seed(0)


def test_the_reference_logs_pick_up_further_runs_and_a_missing_file_says_how_to_restore_it(tmp_path):
    import json

    from specdec_core.viz import jacobi_forcing as viz_jf

    for name, content in (("cllm-training-log.json", {"run": "cllm"}), ("training-log.json", {"run": "jf"}),
                          ("compare.json", {"speed": {}}), ("jf-q-training-log.json", {"run": "jf-q"}),
                          ("jf-kl/training-log.json", {"run": "jf-kl"})):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(json.dumps(content))
    logs, report = viz_jf.load_reference(tmp_path)
    assert {k: v["run"] for k, v in logs.items()} == {"cllm": "cllm", "jf": "jf", "jf-q": "jf-q", "jf-kl": "jf-kl"}
    assert report == {"speed": {}}
    (tmp_path / "compare.json").unlink()
    with pytest.raises(FileNotFoundError, match="git checkout -- specdec_core/drafts"):
        viz_jf.load_reference(tmp_path)
