"""Checkers for lesson 08's exercise: the consistency loss of a CLLM, on plain tensors.

    check_first_wrong_mask(first_wrong_mask)
        # first_wrong_mask(state [L], truth [L]) -> bool tensor [L]
        #   True at position i when its prefix state[:i] is wrong (some j < i has state[j] != truth[j])
    check_consistency_kl(consistency_kl)
        # consistency_kl(teacher_logp [L, V], student_logp [L, V], state [L], truth [L]) -> 0-dim tensor
        #   forward KL(teacher ‖ student), summed over the vocabulary, averaged over the masked-in positions

Both are compared with :func:`specdec_core.cllm.masked_kl` (the function the fine-tune uses) on
hand-made edge cases and on seeded random log-probabilities and Jacobi-like states, so the checks
need no model and run in well under a second. When ``consistency_kl`` gives a wrong number, the
hint names the mistake if the number equals that of a common one (reverse KL, no mask, a sum
instead of a mean, probabilities taken for log-probabilities, …).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..cllm import masked_kl
from ..generation import common_prefix
from .checks import Checks

RANDOM_CASES = 40


# ----------------------------------------------------------------------------- references


def reference_first_wrong_mask(state: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """The positions whose prefix is wrong: i > index of the first wrong token (``masked_kl``'s mask)."""
    return torch.arange(len(truth)) > common_prefix(state, truth)


def reference_consistency_kl(teacher_logp: torch.Tensor, student_logp: torch.Tensor, state: torch.Tensor,
                             truth: torch.Tensor) -> torch.Tensor:
    """``masked_kl`` summed over the block, divided by the number of masked-in positions (0 if none)."""
    kl, mask = masked_kl(teacher_logp, student_logp, state, truth)
    return kl.sum() / max(int(mask.sum()), 1)


# ----------------------------------------------------------------------------- test inputs


def _wrong(token: int, vocab: int, gen: torch.Generator) -> int:
    """A token id different from ``token``."""
    return (token + 1 + int(torch.randint(0, vocab - 1, (1,), generator=gen))) % vocab


def _state(truth: torch.Tensor, wrong: list[int], vocab: int, gen: torch.Generator) -> torch.Tensor:
    """``truth`` with the tokens at ``wrong`` replaced by other ids."""
    state = truth.clone()
    for i in wrong:
        state[i] = _wrong(int(truth[i]), vocab, gen)
    return state


def _jacobi_like(L: int, vocab: int, gen: torch.Generator, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(state, truth) as in a Jacobi trajectory: a right prefix of random length, then a mix of wrong
    tokens and tokens that are right by luck."""
    truth = torch.randint(0, vocab, (L,), generator=gen)
    m = int(torch.randint(0, L + 1, (1,), generator=gen))
    wrong = [i for i in range(m, L) if i == m or float(torch.rand(1, generator=gen)) < 0.6]
    return _state(truth, wrong, vocab, gen).to(dtype), truth.to(dtype)


def _logps(L: int, vocab: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher and student log-probabilities [L, V] (peaky enough that the variants below differ)."""
    teacher = (2.0 * torch.randn(L, vocab, generator=gen)).log_softmax(-1)
    student = (2.0 * torch.randn(L, vocab, generator=gen)).log_softmax(-1)
    return teacher, student


def _mask_of(out: Any, L: int) -> torch.Tensor | None:
    """The student's mask as a bool tensor [L] (an int/float 0-1 tensor or a list is converted), or None."""
    try:
        mask = out if isinstance(out, torch.Tensor) else torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError):
        return None
    if tuple(mask.shape) != (L,):
        return None
    return mask.bool()


def _value(out: Any) -> float | None:
    """The student's loss as a float (a tensor of one element or a number), or None."""
    if isinstance(out, torch.Tensor):
        return float(out.detach().reshape(-1)[0]) if out.numel() == 1 else None
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        return float(out)
    return None


def _close(got: float | None, expected: float) -> bool:
    return got is not None and abs(got - expected) <= 1e-4 * max(1.0, abs(expected))


# ----------------------------------------------------------------------------- part 1: the mask


def check_first_wrong_mask(fn: Callable) -> None:
    """Test ``fn(state, truth) -> bool tensor [L]`` on edge cases and seeded random states."""
    gen = torch.Generator().manual_seed(8)
    truth = torch.tensor([5, 3, 9, 1, 4, 7, 2, 8])
    L = len(truth)
    first_wrong = _state(truth, [0], 10, gen)
    last_wrong = _state(truth, [L - 1], 10, gen)
    middle = _state(truth, [3], 10, gen)  # one wrong token, every later one right again
    cases = []
    for _ in range(RANDOM_CASES):
        n = int(torch.randint(1, 13, (1,), generator=gen))
        cases.append(_jacobi_like(n, 6, gen, torch.int32 if len(cases) % 2 else torch.long))

    def ask(state, truth_):
        return c.call(fn, state.clone(), truth_.clone())

    with Checks("first_wrong_mask") as c:
        state = middle.clone()
        raw = c.call(fn, state, truth)
        out = _mask_of(raw, L)
        c.expect(isinstance(raw, torch.Tensor) and raw.dtype == torch.bool and out is not None,
                 "returns a bool tensor with one entry per position",
                 "return a tensor of shape [L] and dtype torch.bool, e.g. torch.arange(L) > m")
        if out is None:
            return
        c.expect(torch.equal(state, middle), "leaves the state unchanged", "compare; do not write into `state`")
        got = _mask_of(ask(truth, truth), L)
        c.expect(got is not None and not got.any(), "the fixed point itself: no position is masked in",
                 "if no token is wrong, no prefix is wrong (careful: argmax of an all-False tensor is 0, "
                 "as if position 0 were wrong)")
        got = _mask_of(ask(first_wrong, truth), L)
        c.expect(got is not None and got.tolist() == [False] + [True] * (L - 1),
                 "a wrong first token masks in every later position, but not position 0",
                 "position 0's prefix is empty (only the prompt): it is never wrong; every position AFTER a "
                 "wrong token has a wrong prefix")
        got = _mask_of(ask(last_wrong, truth), L)
        c.expect(got is not None and not got.any(), "a wrong last token masks in nothing",
                 "position i depends on state[:i], the tokens BEFORE it: a wrong token does not make its own "
                 "position count (off by one: use >, not >=)")
        got = _mask_of(ask(middle, truth), L)
        c.expect(got is not None and got.tolist() == [i > 3 for i in range(L)],
                 "after the first wrong token every position counts, even where the state is right again",
                 "only the FIRST wrong token matters: once a prefix is wrong it stays wrong, whatever follows; "
                 "the mask is not `state != truth`")
        one = [(torch.tensor([4]), torch.tensor([4])), (torch.tensor([2]), torch.tensor([4]))]
        got = [_mask_of(ask(s, t), 1) for s, t in one]
        c.expect(all(g is not None and g.tolist() == [False] for g in got), "a block of one token: never masked in",
                 "with L = 1 the only position's prefix is empty")
        ok = True
        for state, truth_ in cases:
            got = _mask_of(ask(state, truth_), len(truth_))
            ok = ok and got is not None and torch.equal(got, reference_first_wrong_mask(state, truth_))
        c.expect(ok, "matches the reference on random Jacobi-like states (int32 and int64 ids, L = 1..12)",
                 "find m, the index of the first wrong token (L if none), and return torch.arange(L) > m; "
                 "use len(truth), never a fixed length")


# ----------------------------------------------------------------------------- part 2: the loss


def _variants(teacher: torch.Tensor, student: torch.Tensor, state: torch.Tensor, truth: torch.Tensor) -> dict:
    """Common wrong answers and what each gives (the hint names the one the student's number equals)."""
    mask = reference_first_wrong_mask(state, truth).float()
    count = max(float(mask.sum()), 1.0)
    p = teacher.exp()
    forward = (p * (teacher - student)).sum(-1)
    reverse = (student.exp() * (student - teacher)).sum(-1)
    off_by_one = (torch.arange(len(truth)) >= common_prefix(state, truth)).float()
    wrongs = (state != truth).float()
    return {
        "KL(student ‖ teacher), the reverse KL: the teacher's probabilities weight the log-ratio, "
        "Σ_v p_teacher (log p_teacher − log p_student)": float((reverse * mask).sum() / count),
        "the KL of every position: the positions before and at the first wrong token must not count":
            float(forward.mean()),
        "the SUM over the masked-in positions: divide by how many there are": float((forward * mask).sum()),
        "a mean over all L positions: divide by the number of masked-in positions, not by L":
            float((forward * mask).sum() / len(truth)),
        "a mask off by one: the wrong token's own position has a right prefix, it does not count":
            float((forward * off_by_one).sum() / max(float(off_by_one.sum()), 1.0)),
        "a mask of the wrong tokens (state != truth): every position after the first wrong one counts":
            float((forward * wrongs).sum() / max(float(wrongs.sum()), 1.0)),
        "the log-probabilities used as probabilities: weight by teacher_logp.exp(), not teacher_logp":
            float(((teacher * (teacher - student)).sum(-1) * mask).sum() / count),
        "a mean over the vocabulary: sum over v, average only over positions":
            float(((p * (teacher - student)).mean(-1) * mask).sum() / count),
        "the cross-entropy −Σ_v p log q: the KL also adds Σ_v p log p (the teacher's negative entropy)":
            float(((-(p * student).sum(-1)) * mask).sum() / count),
    }


def _diagnose(got: float | None, variants: dict) -> str:
    for what, value in variants.items():
        if _close(got, value):
            return f"you computed {what}"
    return ("KL(teacher ‖ student) per position is Σ_v exp(t) · (t − s) over the vocabulary (t, s: the log-probs); "
            "sum it over the masked-in positions and divide by their number")


def check_consistency_kl(fn: Callable) -> None:
    """Test ``fn(teacher_logp, student_logp, state, truth) -> scalar`` against ``masked_kl``."""
    gen = torch.Generator().manual_seed(0)
    L, V = 6, 7
    teacher, student = _logps(L, V, gen)
    truth = torch.randint(0, V, (L,), generator=gen)
    state = _state(truth, [2, 4], V, gen)  # positions 3, 4, 5 are masked in
    cases = []
    for k in range(RANDOM_CASES):
        n, v = int(torch.randint(1, 13, (1,), generator=gen)), int(torch.randint(2, 60, (1,), generator=gen))
        s, t = _jacobi_like(n, v, gen, torch.int32 if k % 2 else torch.long)
        cases.append((*_logps(n, v, gen), s, t))

    def ask(t_logp, s_logp, s, t):
        return c.call(fn, t_logp.clone(), s_logp.clone(), s.clone(), t.clone())

    with Checks("consistency_kl") as c:
        inputs = [teacher.clone(), student.clone(), state.clone(), truth.clone()]
        raw = c.call(fn, *inputs)
        got = _value(raw)
        c.expect(isinstance(raw, torch.Tensor) and raw.numel() == 1, "returns a scalar tensor",
                 "return a 0-dim tensor such as total / count, not .item() or float(): training needs its gradient")
        if got is None:
            return
        c.expect(all(torch.equal(a, b) for a, b in zip(inputs, (teacher, student, state, truth))),
                 "leaves its inputs unchanged", "build new tensors; do not write into the arguments")
        zero = _value(ask(teacher, student, truth, truth))
        c.expect(zero is not None and abs(zero) < 1e-6, "zero at the fixed point (state == truth)",
                 "when no token of the state is wrong no position is masked in: return 0 (not 0 / 0 = nan)")
        same = _value(ask(teacher, teacher, state, truth))
        c.expect(same is not None and abs(same) < 1e-6, "zero when the student already predicts the teacher",
                 "KL(p ‖ p) = 0: per position Σ_v exp(t) · (t − s), with the TEACHER's probabilities exp(t)")
        one = [_value(ask(teacher[:1], student[:1], s, truth[:1])) for s in (truth[:1], _state(truth[:1], [0], V, gen))]
        c.expect(all(o is not None and abs(o) < 1e-6 for o in one), "zero for a block of one token (L = 1)",
                 "position 0 never counts, so with L = 1 nothing is masked in: return 0")
        expected = float(reference_consistency_kl(teacher, student, state, truth))
        right = c.expect(_close(got, expected), "forward KL(teacher ‖ student), averaged over the masked-in positions",
                         _diagnose(got, _variants(teacher, student, state, truth)))
        ok = True
        for t_logp, s_logp, s, t in cases:
            ok = ok and _close(_value(ask(t_logp, s_logp, s, t)), float(reference_consistency_kl(t_logp, s_logp, s, t)))
        c.expect(ok, "matches masked_kl on random blocks (L = 1..12, V = 2..59, int32 and int64 ids)",
                 "use the shapes of the arguments (L = len(truth), V = teacher_logp.shape[-1]), never fixed sizes, "
                 "and return 0 when nothing is masked in" if right else "fix the lines above first: the same "
                 "mistake shows on these blocks")
        s_logp = student.clone().requires_grad_(True)
        out = c.call(fn, teacher.clone(), s_logp, state.clone(), truth.clone())
        grad_ok = isinstance(out, torch.Tensor) and out.requires_grad
        if grad_ok:
            (grad,) = torch.autograd.grad(out.sum(), s_logp, allow_unused=True)
            mask = reference_first_wrong_mask(state, truth)
            grad_ok = grad is not None and bool((grad[~mask] == 0).all()) and bool((grad[mask] != 0).any(-1).all())
        c.expect(grad_ok, "its gradient reaches the student, at the masked-in positions only",
                 "keep it a tensor computation of student_logp (no .item(), .detach() or torch.tensor(...) of a "
                 "result), and zero the positions outside the mask before summing")
