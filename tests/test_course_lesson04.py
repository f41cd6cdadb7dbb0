"""Lesson 04's checkers accept the reference and reject wrong answers."""

import math

import pytest
import torch

from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson04 import (
    _toy_reduced,
    check_prompt_lookup,
    check_reduced_distribution,
    reference_prompt_lookup,
    reference_reduced_distribution,
)
from specdec_core.sampling import logits_to_probs

# ----------------------------------------------------------------------------- prompt lookup


def lookup(context: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1, *, latest: bool = True,
           longest_first: bool = True, fallback: bool = True, overlap: bool = True) -> list[int]:
    """A plain-Python prompt lookup; the keyword switches turn it into the mutants below."""
    ns = list(range(max_ngram, min_ngram - 1, -1)) if fallback else [max_ngram]
    for n in ns if longest_first else ns[::-1]:
        if len(context) <= n:
            continue
        tail = context[-n:]
        last = len(context) - n - 1 if overlap else len(context) - 2 * n
        starts = range(last, -1, -1) if latest else range(0, last + 1)
        for start in starts:
            if context[start : start + n] == tail:
                return context[start + n : start + n + k]
    return []


def earliest_match(context, k, max_ngram=3, min_ngram=1):
    return lookup(context, k, max_ngram, min_ngram, latest=False)


def no_fallback(context, k, max_ngram=3, min_ngram=1):
    return lookup(context, k, max_ngram, min_ngram, fallback=False)


def shortest_first(context, k, max_ngram=3, min_ngram=1):
    return lookup(context, k, max_ngram, min_ngram, longest_first=False)


def no_overlap(context, k, max_ngram=3, min_ngram=1):
    return lookup(context, k, max_ngram, min_ngram, overlap=False)


def counts_the_tail(context, k, max_ngram=3, min_ngram=1):  # finds the tail itself: nothing follows it
    for n in range(max_ngram, min_ngram - 1, -1):
        tail = context[-n:]
        for start in range(len(context) - n, -1, -1):
            if context[start : start + n] == tail:
                return context[start + n : start + n + k]
    return []


def pads_to_k(context, k, max_ngram=3, min_ngram=1):
    found = lookup(context, k, max_ngram, min_ngram)
    return found + [found[-1]] * (k - len(found)) if found else found


def test_plain_lookup_is_the_reference():
    assert lookup([3, 4, 1, 3, 4, 2, 3, 4], 3) == reference_prompt_lookup([3, 4, 1, 3, 4, 2, 3, 4], 3) == [2, 3, 4]


@pytest.mark.parametrize("answer", [lookup, reference_prompt_lookup, lambda *a: torch.tensor(lookup(*a))])
def test_prompt_lookup_reference_passes(answer, capsys):
    check_prompt_lookup(answer)
    out = capsys.readouterr().out
    assert "✗" not in out and "All 8 checks of prompt_lookup passed." in out


@pytest.mark.parametrize(
    "mutant", [earliest_match, no_fallback, shortest_first, no_overlap, counts_the_tail, pads_to_k]
)
def test_prompt_lookup_mutants_fail(mutant, capsys):
    with pytest.raises(CheckFailed):
        check_prompt_lookup(mutant)
    assert "✗" in capsys.readouterr().out


def test_prompt_lookup_names_the_failing_case(capsys):
    with pytest.raises(CheckFailed):
        check_prompt_lookup(earliest_match)
    out = capsys.readouterr().out
    assert "✗ the latest earlier occurrence wins, not the earliest — hint:" in out
    assert "max_ngram=2, min_ngram=1) should be [2, 3, 4], got [1, 3, 4]" in out


def test_prompt_lookup_stub_fails(capsys):
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(CheckFailed):
        check_prompt_lookup(stub)
    assert "replace `raise NotImplementedError`" in capsys.readouterr().out


# ----------------------------------------------------------------------------- reduced output set


def reduced(sub_logits, vocab_ids, vocab_size, temperature):
    """The same answer written differently: softmax on S, scattered into zeros."""
    probs = torch.zeros(vocab_size)
    if temperature == 0:
        probs[vocab_ids[sub_logits.argmax()]] = 1.0
    else:
        probs[vocab_ids] = torch.softmax(sub_logits / temperature, -1)
    return probs


def normalised_over_full_vocab(sub_logits, vocab_ids, vocab_size, temperature):
    full = torch.zeros(vocab_size).index_copy_(0, vocab_ids, sub_logits)  # 0, not -inf: mass leaks outside S
    return logits_to_probs(full, temperature)


def forgets_temperature(sub_logits, vocab_ids, vocab_size, temperature):
    return reference_reduced_distribution(sub_logits, vocab_ids, vocab_size, 1.0 if temperature else 0.0)


def sorts_the_ids(sub_logits, vocab_ids, vocab_size, temperature):
    return reference_reduced_distribution(sub_logits, vocab_ids.sort().values, vocab_size, temperature)


def greedy_on_the_index_in_s(sub_logits, vocab_ids, vocab_size, temperature):
    if temperature == 0:
        return torch.nn.functional.one_hot(sub_logits.argmax(), vocab_size).float()
    return reference_reduced_distribution(sub_logits, vocab_ids, vocab_size, temperature)


def divides_by_zero(sub_logits, vocab_ids, vocab_size, temperature):
    full = torch.full((vocab_size,), -math.inf).index_copy_(0, vocab_ids, sub_logits / temperature)
    return full.softmax(-1)


def naive_exp(sub_logits, vocab_ids, vocab_size, temperature):
    if temperature == 0:
        return reference_reduced_distribution(sub_logits, vocab_ids, vocab_size, 0.0)
    e = (sub_logits / temperature).exp()
    return torch.zeros(vocab_size).index_copy_(0, vocab_ids, e / e.sum())


@pytest.mark.parametrize("answer", [reference_reduced_distribution, reduced])
def test_reduced_distribution_reference_passes(answer, capsys):
    check_reduced_distribution(answer)
    out = capsys.readouterr().out
    assert "✗" not in out and "All 6 checks of reduced_distribution passed." in out


@pytest.mark.parametrize(
    "mutant",
    [
        normalised_over_full_vocab, forgets_temperature, sorts_the_ids,
        greedy_on_the_index_in_s, divides_by_zero, naive_exp,
    ],
)
def test_reduced_distribution_mutants_fail(mutant, capsys):
    with pytest.raises(CheckFailed):
        check_reduced_distribution(mutant)
    assert "✗" in capsys.readouterr().out


def test_reduced_distribution_stub_fails(capsys):
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(CheckFailed):
        check_reduced_distribution(stub)
    assert "replace `raise NotImplementedError`" in capsys.readouterr().out


def test_toy_reduced_set_is_unsorted_and_its_greedy_id_differs_from_its_index():
    sub, ids, vocab = _toy_reduced()
    assert ids.unique().numel() == ids.numel() and not bool((ids[1:] >= ids[:-1]).all())
    assert int(ids[sub.argmax()]) != int(sub.argmax()) and ids.max() < vocab
