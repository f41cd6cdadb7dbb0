"""Batches (issue 58 items 1 and 4): B rows of different lengths in one step, each row exactly its own batch-1 run.

Greedy: every row's tokens and per-step accept counts equal its batch-1 run's (f32 toys on the static engine).
Sampled with one generator per row: the same tokens as the row's batch-1 run at that seed. The sampled rule keeps
the target's law per row (χ², fixed seeds), and a broken variant — one row's rollback applied to all rows — fails
the same test. A γ per step (a policy, 0 = an AR step) keeps all of it: greedy rows equal AR, the law per row
holds, and a verify that reads each guess's logits one column late fails both. Bad input raises with a message
that says what to do. (Refilled slots and the scheduler: tests/test_scheduler.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec_core import ar, batch_speculative, generation
from specdec_core.batch import BatchDecoder
from specdec_core.batch_speculative import check_gamma
from specdec_core.bench.syncs import HostSyncs
from specdec_core.drafters import LookupFirst, ModelDrafter, NGramDrafter
from specdec_core.exactness import chi_square_pvalue, exact_law
from specdec_core.jacobi import jacobi_generate
from specdec_core.lm import Decoder, on_static_engine
from specdec_core.speculative import speculative_generate
from specdec_core.toy import perturbed, tiny_llama
from specdec_core.tree import tree_generate

VOCAB = 32
PROMPTS = [torch.tensor([[2, 5, 3, 7, 2, 5, 3]]), torch.tensor([[4]]), torch.tensor([[9, 8, 7, 6, 5, 4, 3, 2, 9, 8, 7]])]


@pytest.fixture(scope="module")
def target():
    return on_static_engine(tiny_llama(vocab_size=VOCAB, seed=0))


@pytest.fixture(scope="module")
def near_draft():
    """The target with noisy weights: it agrees often, not always, so rows accept different numbers of guesses."""
    return perturbed(tiny_llama(vocab_size=VOCAB, seed=0))


DRAFTERS = {"model": lambda d: ModelDrafter(d), "ngram": lambda d: NGramDrafter(VOCAB)}


def test_batch_decoder_rows_equal_their_own_decoder(target):
    """Prefill of rows of different lengths, a step, a per-row rollback, another step: each row's logits are its
    batch-1 Decoder's (to rounding: a B-row matmul is not blocked like a 1-row one)."""
    rows = [p[0] for p in PROMPTS]
    batch = BatchDecoder(target, len(rows), 64)
    first = batch.prefill(rows)
    step = batch.step(torch.tensor([[3, 4], [5, 6], [7, 8]]))
    batch.rollback([len(r) + k for r, k in zip(rows, (2, 0, 1))])  # each row keeps its own count
    last = batch.step(torch.tensor([[1], [2], [3]]))
    for b, (r, ids, k, nxt) in enumerate(zip(rows, ([3, 4], [5, 6], [7, 8]), (2, 0, 1), (1, 2, 3))):
        dec = Decoder(target)
        torch.testing.assert_close(first[b], dec.prefill(r[None])[0, -1], rtol=0, atol=1e-5)
        torch.testing.assert_close(step[b], dec.step(torch.tensor([ids]))[0], rtol=0, atol=1e-5)
        dec.rollback(len(r) + k)
        torch.testing.assert_close(last[b], dec.step(torch.tensor([[nxt]]))[0], rtol=0, atol=1e-5)
    assert batch.lengths == [len(r) + k + 1 for r, k in zip(rows, (2, 0, 1))]


def test_ar_rows_equal_their_batch1_runs(target):
    outs = ar.generate(target, PROMPTS, 12)
    assert isinstance(outs, list) and len(outs) == len(PROMPTS)
    for prompt, out in zip(PROMPTS, outs):
        alone = ar.generate(target, prompt, 12)
        assert out.new_tokens == alone.new_tokens == ar.generate(tiny_llama(vocab_size=VOCAB, seed=0), prompt, 12).new_tokens
        assert out.stats.target_calls == alone.stats.target_calls
    same = torch.tensor([[2, 5, 3], [7, 7, 1]])  # the [B, T] form
    assert [o.new_tokens for o in ar.generate(target, same, 6)] == [ar.generate(target, r[None], 6).new_tokens for r in same]


def test_ar_one_prompt_is_unchanged(target):
    one = ar.generate(target, PROMPTS[0], 5)
    assert not isinstance(one, list) and one.new_tokens == ar.generate(target, PROMPTS[0], 5).new_tokens
    assert len(ar.generate(target, [PROMPTS[0]], 5)) == 1  # a list is a batch, even of one


@pytest.mark.parametrize("kind", sorted(DRAFTERS))
def test_greedy_rows_equal_their_batch1_runs(target, near_draft, kind):
    outs = speculative_generate(target, DRAFTERS[kind](near_draft), PROMPTS, 30, gamma=4)
    for prompt, out in zip(PROMPTS, outs):
        alone = speculative_generate(target, DRAFTERS[kind](near_draft), prompt, 30, gamma=4)
        assert out.new_tokens == alone.new_tokens == ar.generate(target, prompt, 30).new_tokens
        assert out.stats.accepted_lengths == alone.stats.accepted_lengths
        assert [s.drafted for s in out.stats.steps] == [s.drafted for s in alone.stats.steps]
    # rows diverged: in some step two rows accepted different numbers of guesses
    assert any(len({o.stats.accepted_lengths[i] for o in outs if i < len(o.stats.steps)}) > 1
               for i in range(max(len(o.stats.steps) for o in outs)))


def test_rows_stop_at_their_own_eos(target, near_draft):
    reference = ar.generate(target, PROMPTS[0], 20).new_tokens
    eos = reference[5]
    outs = speculative_generate(target, ModelDrafter(near_draft), PROMPTS, 20, gamma=3, eos_token_id=eos)
    for prompt, out in zip(PROMPTS, outs):
        assert out.new_tokens == speculative_generate(target, ModelDrafter(near_draft), prompt, 20, gamma=3,
                                                      eos_token_id=eos).new_tokens
    assert outs[0].new_tokens[-1] == eos and len(outs[0]) <= 6


@pytest.mark.parametrize("kind", sorted(DRAFTERS))
def test_sampled_rows_with_their_generators_equal_their_batch1_runs(target, near_draft, kind):
    seeds = [11, 12, 13]
    outs = speculative_generate(target, DRAFTERS[kind](near_draft), PROMPTS, 24, gamma=3, temperature=0.9, top_k=20,
                                generator=[torch.Generator().manual_seed(s) for s in seeds])
    for prompt, out, seed in zip(PROMPTS, outs, seeds):
        alone = speculative_generate(target, DRAFTERS[kind](near_draft), prompt, 24, gamma=3, temperature=0.9,
                                     top_k=20, generator=torch.Generator().manual_seed(seed))
        assert out.new_tokens == alone.new_tokens
        assert out.stats.accepted_lengths == alone.stats.accepted_lengths


def test_sampled_ar_rows_equal_their_batch1_runs(target):
    outs = ar.generate(target, PROMPTS, 10, temperature=1.0, generator=[torch.Generator().manual_seed(s) for s in range(3)])
    for s, (prompt, out) in enumerate(zip(PROMPTS, outs)):
        assert out.new_tokens == ar.generate(target, prompt, 10, temperature=1.0,
                                             generator=torch.Generator().manual_seed(s)).new_tokens


# --- the target's law, per row ---------------------------------------------------------------------

LAW_VOCAB = 8
LAW_PROMPTS = [torch.tensor([[2, 5, 3]]), torch.tensor([[4, 1]])]


@pytest.fixture(scope="module")
def law_pair():
    return (on_static_engine(tiny_llama(vocab_size=LAW_VOCAB, seed=0, logit_scale=20.0)),
            tiny_llama(vocab_size=LAW_VOCAB, seed=1, logit_scale=20.0))


def row_counts(target, draft, n: int, seed: int, gamma=lambda: 1) -> list[np.ndarray]:
    """n batched draws of 2 tokens for both rows (γ = 1: a rejection needs a second step), counted per row.
    ``gamma()`` gives each run its γ (an int, or a fresh policy)."""
    gens = [torch.Generator().manual_seed(seed + b) for b in range(len(LAW_PROMPTS))]
    counts = [np.zeros((LAW_VOCAB, LAW_VOCAB)) for _ in LAW_PROMPTS]
    drafter = ModelDrafter(draft)
    for _ in range(n):
        for row, out in zip(counts, speculative_generate(target, drafter, LAW_PROMPTS, 2, gamma=gamma(),
                                                         temperature=1.0, generator=gens)):
            row[tuple(out.new_tokens)] += 1
    return counts


def test_sampled_rows_follow_the_target_law(law_pair):
    """At these seeds p = 0.61 and 0.67 (row 0, row 1). Broken variants: one row's rollback for all, refused below;
    a verify reading late, p ≈ 3e-25 in test_a_gamma_per_step_keeps_the_law."""
    target, draft = law_pair
    for prompt, counts in zip(LAW_PROMPTS, row_counts(target, draft, 800, seed=2024)):
        assert chi_square_pvalue(counts, exact_law(target, prompt, n_tokens=2)) > 0.001


class OneRollbackForAll(BatchDecoder):
    """BROKEN: every row rolls back as many tokens as row 0 does (a shared write pointer's mistake)."""

    def rollback(self, lengths):
        drop = self.lengths[0] - lengths[0]
        super().rollback([min(max(length - drop, 0), length) for length in self.lengths])


def test_one_rows_rollback_for_all_is_refused(law_pair, monkeypatch):
    """A row's verify window starts where the target's cache of it ends: a row rolled back too far re-reads what it
    lost (still exact), and a row that kept too much is refused before its law can drift."""
    target, draft = law_pair
    monkeypatch.setattr(batch_speculative, "BatchDecoder", OneRollbackForAll)
    with pytest.raises(RuntimeError, match="a rollback kept too much"):
        row_counts(target, draft, 300, seed=99)


# --- a γ per step ----------------------------------------------------------------------------------

class Cycle:
    """A stub γ policy: γ = gammas[0], gammas[1], … in turn, whatever the batch; records what it observes."""

    def __init__(self, gammas=(0, 2, 5)) -> None:
        self.gammas, self.asked, self.seen = gammas, [], []

    def __call__(self, batch: int) -> int:
        self.asked.append(batch)
        return self.gammas[(len(self.asked) - 1) % len(self.gammas)]

    def observe(self, drafted: int, accepted: int) -> None:
        self.seen.append((drafted, accepted))


class CycleExamined(Cycle):
    """The same, with an ``observe`` that also takes the guesses the rule examined."""

    def observe(self, drafted: int, accepted: int, examined: int | None = None) -> None:
        self.seen.append((drafted, accepted, examined))


def read_late(monkeypatch) -> None:
    """BROKEN: the verify reads each guess's logits one column late (the guess's own instead of its context's)."""
    right = batch_speculative.window

    def late(starts, lengths, counts, width, live):
        sizes, keep = right(starts, lengths, counts, width, live)
        return sizes, [[min(c + 1, max(size - 1, 0)) for c in row] for row, size in zip(keep, sizes)]

    monkeypatch.setattr(batch_speculative, "window", late)


@pytest.mark.parametrize("kind", sorted(DRAFTERS))
def test_a_gamma_per_step_keeps_every_row_exact(target, near_draft, kind, monkeypatch):
    reference = [ar.generate(target, prompt, 30).new_tokens for prompt in PROMPTS]
    policy = Cycle()
    outs = speculative_generate(target, DRAFTERS[kind](near_draft), PROMPTS, 30, gamma=policy)
    assert [o.new_tokens for o in outs] == reference
    assert outs[0].stats.gammas[:3] == [0, 2, 5] and policy.asked[0] == 3  # asked with the live rows
    assert sum(d for d, _ in policy.seen) == sum(len(s.drafted) for o in outs for s in o.stats.steps)
    assert sum(a for _, a in policy.seen) == sum(sum(o.stats.accepted_lengths) for o in outs) > 0
    assert [o.new_tokens for o in speculative_generate(target, DRAFTERS[kind](near_draft), PROMPTS, 30, gamma=0)] == reference
    examined = CycleExamined()
    outs = speculative_generate(target, DRAFTERS[kind](near_draft), PROMPTS, 30, gamma=examined)
    assert sum(e for _, _, e in examined.seen) == sum(min(s.accepted + 1, len(s.drafted))
                                                      for o in outs for s in o.stats.steps)
    read_late(monkeypatch)
    assert [o.new_tokens for o in speculative_generate(target, DRAFTERS[kind](near_draft), PROMPTS, 30,
                                                       gamma=Cycle())] != reference


def test_a_gamma_per_step_keeps_the_law(law_pair, monkeypatch):
    """γ = 0 then 1 (an AR step, then a speculative one): at these seeds p = 0.68 and 0.04 in 400 draws (0.77 and
    0.86 in 1,500 at seed 33); reading late gives p ≈ 3e-25 in 150."""
    target, draft = law_pair
    for prompt, counts in zip(LAW_PROMPTS, row_counts(target, draft, 400, seed=31, gamma=lambda: Cycle((0, 1)))):
        assert chi_square_pvalue(counts, exact_law(target, prompt, n_tokens=2)) > 0.001
    read_late(monkeypatch)
    counts = row_counts(target, draft, 150, seed=32, gamma=lambda: Cycle((0, 1)))[1]
    assert chi_square_pvalue(counts, exact_law(target, LAW_PROMPTS[1], n_tokens=2)) < 0.001


@pytest.mark.parametrize("gamma, match", [("auto", "fixed γ"), (-1, "int >= 0"), (1.5, "int >= 0"), (True, "int >= 0")])
def test_a_batch_gamma_is_an_int_or_a_policy(gamma, match):
    with pytest.raises(ValueError, match=match):
        check_gamma(gamma)
    check_gamma(0), check_gamma(3), check_gamma(Cycle())


def test_a_policys_bad_gamma_is_refused(target, near_draft):
    with pytest.raises(ValueError, match="returned -2 for a batch of 3"):
        speculative_generate(target, ModelDrafter(near_draft), PROMPTS, 4, gamma=lambda batch: -2)


# --- one read per step, bad input ------------------------------------------------------------------

def test_a_greedy_batch_step_reads_the_device_once(target, near_draft):
    with HostSyncs() as syncs:
        syncs.step_at(batch_speculative.BatchModelDraft, "propose")
        syncs.step_at(generation.Clock, "stop", end=True)  # the run's final wait is the run's, not a step's
        speculative_generate(target, ModelDrafter(near_draft), PROMPTS, 16, gamma=3)
    assert syncs.steps >= 3
    assert syncs.per_step("synchronize") == [0] * syncs.steps
    assert max(syncs.per_step()) == 1, syncs.report(1)


@pytest.mark.parametrize("ids, match", [
    (torch.zeros(0, 4, dtype=torch.long), "batch size 0"),
    ([], "batch size 0"),
    ([torch.tensor([[1, 2]]), torch.empty(1, 0, dtype=torch.long)], r"rows \[1\] of the batch are empty"),
    ([torch.tensor([[1, 2]]), torch.zeros(1, 250, dtype=torch.long)], r"rows \[1\].*context of 256"),
    (torch.zeros(2, 3, 1, dtype=torch.long), "must have shape"),
])
def test_bad_batches_raise(target, ids, match):
    with pytest.raises(ValueError, match=match):
        ar.generate(target, ids, 10)
    with pytest.raises(ValueError, match=match):
        speculative_generate(target, NGramDrafter(VOCAB), ids, 10)


def test_what_runs_batch_1_says_so(target, near_draft):
    plain = tiny_llama(vocab_size=VOCAB, seed=0)
    with pytest.raises(ValueError, match="on_static_engine"):
        ar.generate(plain, PROMPTS, 4)
    with pytest.raises(ValueError, match="static engine"):
        speculative_generate(plain, ModelDrafter(near_draft), torch.zeros(2, 3, dtype=torch.long), 4)
    with pytest.raises(TypeError, match="ModelDrafter or an NGramDrafter"):
        speculative_generate(target, LookupFirst(NGramDrafter(VOCAB), ModelDrafter(near_draft)), PROMPTS, 4)
    with pytest.raises(ValueError, match="fixed γ"):
        speculative_generate(target, ModelDrafter(near_draft), PROMPTS, 4, gamma="auto")
    with pytest.raises(ValueError, match="one per row"):
        ar.generate(target, PROMPTS, 4, temperature=1.0, generator=[torch.Generator()])
    with pytest.raises(ValueError, match="token trees, lookahead and Jacobi"):
        tree_generate(target, NGramDrafter(VOCAB), torch.zeros(2, 3, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="runs one sequence"):
        jacobi_generate(target, PROMPTS, 4)
