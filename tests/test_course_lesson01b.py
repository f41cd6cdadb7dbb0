"""Lesson 01b's checkers pass the reference answers and reject wrong ones: a keep without the copy, a copy of
the keys alone, a hard-coded answer, a rollback that does not move the length or writes the buffer."""

from __future__ import annotations

import pytest
import torch

from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson01b import (
    check_static_keep,
    check_static_rollback,
    reference_static_keep,
    reference_static_rollback,
)


def test_rollback_reference_passes(capsys):
    check_static_rollback(reference_static_rollback)
    assert "All 4 checks of static_rollback passed." in capsys.readouterr().out


def test_keep_reference_passes(capsys):
    check_static_keep(reference_static_keep)
    assert "All 5 checks of static_keep passed." in capsys.readouterr().out


def test_keep_with_a_plain_loop_passes():
    """A correct answer written differently (slot by slot, front to back: a source is never overwritten
    before it is read, since indices[j] >= j) also passes."""

    def loop(keys, values, start, indices, length):
        for j, i in enumerate(indices):
            keys[:, :, start + j] = keys[:, :, start + i]
            values[:, :, start + j] = values[:, :, start + i]
        return start + len(indices)

    check_static_keep(loop)


def _keep_no_copy(keys, values, start, indices, length):
    return start + len(indices)  # the length moves, the wrong tokens stay


def _keep_keys_only(keys, values, start, indices, length):
    slots = torch.tensor([start + i for i in indices], dtype=torch.long)
    keys[:, :, start : start + len(indices)] = keys.index_select(2, slots)
    return start + len(indices)


def _keep_old_length(keys, values, start, indices, length):
    reference_static_keep(keys, values, start, indices, length)
    return length  # copied, but the length still counts the dropped tokens


def _keep_back_to_front(keys, values, start, indices, length):
    """Slot by slot from the last: a later copy can read a slot an earlier one overwrote."""
    for j in reversed(range(len(indices))):
        keys[:, :, start + j] = keys[:, :, start + indices[j]]
        values[:, :, start + j] = values[:, :, start + indices[j]]
    return start + len(indices)


def _keep_hard_coded(keys, values, start, indices, length):
    """Right for the notebook's visible case only (start 3, indices [0, 2, 5])."""
    for j, i in enumerate([0, 2, 5]):
        keys[:, :, 3 + j] = keys[:, :, 3 + i]
        values[:, :, 3 + j] = values[:, :, 3 + i]
    return 6


def _rollback_no_move(keys, values, length, to):
    if not 0 <= to <= length:
        raise ValueError(to)
    return length


def _rollback_zeroes(keys, values, length, to):
    if not 0 <= to <= length:
        raise ValueError(to)
    keys[:, :, to:] = 0
    values[:, :, to:] = 0
    return to


def _rollback_off_by_one(keys, values, length, to):
    if not 0 <= to <= length:
        raise ValueError(to)
    return to + 1 if to < length else to


def _rollback_unchecked(keys, values, length, to):
    return to


def _rollback_hard_coded(keys, values, length, to):
    if not 0 <= to <= length:
        raise ValueError(to)
    return 4  # the visible case: length 7, to 4


MUTANTS = [(check_static_keep, m) for m in (_keep_no_copy, _keep_keys_only, _keep_old_length, _keep_back_to_front,
                                             _keep_hard_coded)]
MUTANTS += [(check_static_rollback, m) for m in (_rollback_no_move, _rollback_zeroes, _rollback_off_by_one,
                                                 _rollback_unchecked, _rollback_hard_coded)]


@pytest.mark.parametrize("check, mutant", MUTANTS, ids=[m.__name__ for _, m in MUTANTS])
def test_keep_and_rollback_mutants_fail(check, mutant, capsys):
    with pytest.raises(CheckFailed):
        check(mutant)
    assert "✗" in capsys.readouterr().out


@pytest.mark.parametrize("check", [check_static_keep, check_static_rollback])
def test_a_stub_fails_with_one_line(check, capsys):
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(CheckFailed):
        check(stub)
    out = capsys.readouterr().out
    assert out.count("✗") == 1 and "raise NotImplementedError" in out
