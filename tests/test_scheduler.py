"""Continuous batching (issue 58 item 4): requests arrive, a finished row's slot is refilled at the next step, and
every request's tokens are its own batch-1 greedy run's (f32 toys on the static engine).

Each check is shown failing on a broken variant: a verify that reads a newcomer's logits one column early, a
slot refilled without resetting its cache (the decoder's logits, the scheduler's guard), a draft whose slot
keeps its predecessor's cache, evenly spaced "Poisson" arrivals, TTFT counted from admission instead of
arrival. Steps are priced by a fixed ``step_time`` where a test reads the clock: nothing here is timed.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from specdec_core import ar, batch_speculative, scheduler
from specdec_core.batch import BatchDecoder
from specdec_core.batch_speculative import BatchModelDraft, SpecBatch
from specdec_core.bench.syncs import HostSyncs
from specdec_core.drafters import ModelDrafter, NGramDrafter
from specdec_core.lm import Decoder, on_static_engine
from specdec_core.sampling import Warp
from specdec_core.scheduler import poisson_arrivals, run_load
from specdec_core.speculative import speculative_generate
from specdec_core.toy import perturbed, tiny_llama

VOCAB = 32
PROMPTS = [[2, 5, 3, 7, 2, 5, 3], [4], [9, 8, 7, 6, 5, 4, 3, 2, 9, 8, 7], [6, 6, 1, 9], [3, 8, 3, 8, 3], [7, 2]]
STEP = 0.01  # s: the price of every step where a test needs a repeatable clock


@pytest.fixture(scope="module")
def target():
    return on_static_engine(tiny_llama(vocab_size=VOCAB, seed=0))


@pytest.fixture(scope="module")
def near_draft():
    """The target with noisy weights: it agrees often, not always, so rows finish at different steps."""
    return perturbed(tiny_llama(vocab_size=VOCAB, seed=0))


@pytest.fixture(scope="module")
def alone(target):
    """Each prompt's batch-1 greedy run: the reference every served request must equal."""
    return [ar.generate(target, torch.tensor([p]), 12).new_tokens for p in PROMPTS]


class Cycle:
    """A stub γ policy: γ = 0, 2, 5, 0, 2, 5, … whatever the batch; records what it observes."""

    def __init__(self, gammas=(0, 2, 5)) -> None:
        self.gammas, self.calls, self.seen = gammas, 0, []

    def __call__(self, batch: int) -> int:
        self.calls += 1
        return self.gammas[(self.calls - 1) % len(self.gammas)]

    def observe(self, drafted: int, accepted: int) -> None:
        self.seen.append((drafted, accepted))


MODES = {
    "off": lambda d: ("off", None, None),
    "on-model": lambda d: ("on", 3, ModelDrafter(d)),
    "on-ngram": lambda d: ("on", 3, NGramDrafter(VOCAB)),
    "adaptive": lambda d: ("adaptive", Cycle(), ModelDrafter(d)),
}


def serve(target, drafter, mode, gamma, rate=60.0, slots=2):
    return run_load((target, drafter), PROMPTS, rate, slots, mode, gamma, seed=5, max_new_tokens=12,
                    step_time=lambda shape: STEP)


def a_newcomer_joined_a_running_row(result) -> bool:
    return any(s.shape.joined and s.shape.rows > s.shape.joined for s in result.steps)


@pytest.mark.parametrize("kind", sorted(MODES))
def test_every_request_equals_its_batch1_run(target, near_draft, alone, kind):
    mode, gamma, drafter = MODES[kind](near_draft)
    result = serve(target, drafter, mode, gamma)
    assert result.tokens == alone
    assert a_newcomer_joined_a_running_row(result)  # a slot was refilled while the other row decoded
    assert max(s.shape.rows for s in result.steps) == 2 and len(PROMPTS) > 2
    if mode == "adaptive":
        assert [s.shape.gamma for s in result.steps][:3] == [0, 2, 5]
        assert sum(d for d, _ in gamma.seen) == result.drafted and sum(a for _, a in gamma.seen) == result.accepted


@pytest.mark.parametrize("mode, gamma", [("off", None), ("on", 3)])
def test_sampled_requests_equal_their_batch1_runs_at_their_seeds(target, near_draft, mode, gamma, monkeypatch):
    """Request i draws from a generator seeded 5 · 1,000,003 + i, exactly as its batch-1 run at that seed. Broken:
    a refilled slot that keeps its predecessor's generator."""
    def run() -> list[list[int]]:
        return run_load((target, ModelDrafter(near_draft)), PROMPTS, 60.0, 2, mode, gamma, seed=5, max_new_tokens=12,
                        temperature=0.9, top_k=20, step_time=lambda shape: STEP).tokens

    def alone(i: int, prompt: list[int]) -> list[int]:
        gen = torch.Generator().manual_seed(5 * 1_000_003 + i)
        if mode == "off":
            return ar.generate(target, torch.tensor([prompt]), 12, temperature=0.9, top_k=20, generator=gen).new_tokens
        return speculative_generate(target, ModelDrafter(near_draft), torch.tensor([prompt]), 12, gamma=gamma,
                                    temperature=0.9, top_k=20, generator=gen).new_tokens

    reference = [alone(i, p) for i, p in enumerate(PROMPTS)]
    assert run() == reference
    right = SpecBatch.admit
    monkeypatch.setattr(SpecBatch, "admit", lambda self, row, prompt, generator=None:
                        right(self, row, prompt, self.generators[row] or generator))
    assert run() != reference


def test_a_newcomers_logits_read_one_column_early_are_caught(target, near_draft, alone, monkeypatch):
    """Broken: the verify reads a newcomer's logits one column before its last prompt token."""
    right = batch_speculative.window

    def early(starts, lengths, counts, width, live):
        sizes, keep = right(starts, lengths, counts, width, live)
        return sizes, [[max(c - 1, 0) for c in row] if size > width + 1 else row for row, size in zip(keep, sizes)]

    monkeypatch.setattr(batch_speculative, "window", early)
    for kind in ("off", "on-model"):
        mode, gamma, drafter = MODES[kind](near_draft)
        assert serve(target, drafter, mode, gamma).tokens != alone


# --- a refilled slot -------------------------------------------------------------------------------

def refill_error(target, decoder=BatchDecoder) -> float:
    """Row 0 decodes a long sequence, is reset, and takes a short prompt in a ragged forward beside row 1's one
    decode token: the largest difference of either row's logits from a fresh batch-1 Decoder's."""
    old, new, other = torch.arange(2, 26) % VOCAB, torch.tensor([5, 9, 4]), torch.tensor([7, 3, 8, 1])
    dec = decoder(target, 2, 40)
    dec.prefill([old, other[:3]])
    dec.reset(0)
    ids = torch.stack([new, torch.tensor([other[3], 0, 0])])  # row 1: one real token, two pads
    logits = dec.step(ids, sizes=[3, 1], keep=[[2], [0]])[:, 0]
    want0 = Decoder(target).prefill(new[None])[0, -1]
    want1 = Decoder(target).prefill(other[None])[0, -1]
    return max((logits[0] - want0).abs().max().item(), (logits[1] - want1).abs().max().item())


class ForgetsToReset(BatchDecoder):
    """BROKEN: reset keeps the row's length, so a newcomer is written after its predecessor and sees it."""

    def reset(self, row: int) -> None:
        pass


def test_a_refilled_slot_never_sees_its_predecessor(target):
    assert refill_error(target) < 1e-5
    dec = BatchDecoder(target, 2, 40)
    dec.prefill([torch.arange(2, 26), torch.tensor([7, 3])])
    dec.reset(0)
    dec.step(torch.tensor([[5, 9, 4], [8, 0, 0]]), sizes=[3, 1])
    assert dec.lengths == [3, 3]  # the pads left no trace
    assert refill_error(target, ForgetsToReset) > 1e-2


def test_the_scheduler_refuses_a_slot_that_was_not_reset(target, near_draft, monkeypatch):
    monkeypatch.setattr(BatchDecoder, "reset", ForgetsToReset.reset)
    with pytest.raises(RuntimeError, match="refilled without BatchDecoder.reset"):
        serve(target, None, "off", None)


def test_the_draft_follows_refills_and_ar_steps(target, monkeypatch):
    """A draft equal to the target guesses what the target picks, so every guess is accepted — only if its cache
    of each slot is right after refills and after γ = 0 steps (which it does not run). Broken: a draft slot that
    keeps its predecessor's cache."""
    same = tiny_llama(vocab_size=VOCAB, seed=0)
    result = serve(target, ModelDrafter(same), "adaptive", Cycle((0, 3)))
    assert result.drafted > 20 and result.accepted == result.drafted
    monkeypatch.setattr(BatchModelDraft, "reset", lambda self, row: None)
    broken = serve(target, ModelDrafter(same), "adaptive", Cycle((0, 3)))
    assert broken.accepted < broken.drafted


# --- the clock: arrivals, TTFT, TPOT, throughput ---------------------------------------------------

def looks_poisson(times: list[float], rate: float) -> bool:
    """Exponential gaps: mean 1 / rate and a coefficient of variation of 1 (both within 5 % at 4,000 gaps)."""
    gaps = [b - a for a, b in zip([0.0] + times, times)]
    mean = statistics.fmean(gaps)
    return abs(mean * rate - 1) < 0.05 and abs(statistics.pstdev(gaps) / mean - 1) < 0.05


def test_poisson_arrivals_are_reproducible_by_seed():
    times = poisson_arrivals(4000, 2.5, seed=7)
    assert times == poisson_arrivals(4000, 2.5, seed=7) and times != poisson_arrivals(4000, 2.5, seed=8)
    assert all(b > a for a, b in zip(times, times[1:])) and looks_poisson(times, 2.5)
    assert not looks_poisson([(i + 1) / 2.5 for i in range(4000)], 2.5)  # broken: evenly spaced arrivals


def test_ttft_counts_the_queue_and_tpot_the_steps(target, monkeypatch):
    """One slot, three requests arriving together, 3 tokens each, 1 s a step: request k is admitted when k − 1
    finishes, so its first token comes 3k + 1 s after the first arrival."""
    prompts = PROMPTS[:3]
    first = poisson_arrivals(3, 100.0, seed=1)

    def check(result) -> bool:
        t0 = first[0]
        return (result.ttft == pytest.approx([t0 + 3 * k + 1 - first[k] for k in range(3)])
                and result.tpot == pytest.approx([1.0] * 3) and result.throughput == pytest.approx(1.0)
                and result.waits == pytest.approx([t0 + 3 * k - first[k] for k in range(3)]))

    def run():
        return run_load((target, None), prompts, 100.0, 1, seed=1, max_new_tokens=3, step_time=lambda shape: 1.0)

    result = run()
    assert check(result) and result.clock == "step_time" and result.median_tpot == pytest.approx(1.0)
    assert [s.shape.width for s in result.steps[:2]] == [len(prompts[0]), 1]  # a prefill rides in the first step
    monkeypatch.setattr(scheduler.Request, "ttft", property(lambda r: r.stamps[0] - r.admitted))  # broken
    assert not check(run())


def test_a_measured_run_reports_its_own_clock(target):
    result = run_load((target, None), PROMPTS[:2], 50.0, 2, max_new_tokens=2)
    assert result.clock == "measured" and all(s.seconds > 0 for s in result.steps)
    assert all(t > 0 for t in result.ttft) and not math.isnan(result.throughput)


# --- bad input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    ({"rate": 0.0}, ValueError, "rate must be"),
    ({"rate": -1.0}, ValueError, "rate must be"),
    ({"rate": math.nan}, ValueError, "rate must be"),
    ({"slots": 0}, ValueError, "slots"),
    ({"prompts": [[1, 2], []]}, ValueError, r"rows \[1\] of the batch are empty"),
    ({"prompts": [[1, 2], [3] * 250]}, ValueError, r"rows \[1\].*context of 256"),
    ({"prompts": []}, ValueError, "batch size 0"),
    ({"mode": "fast"}, ValueError, "mode must be one of"),
    ({"mode": "on", "gamma": None}, ValueError, "fixed γ"),
    ({"mode": "on", "gamma": Cycle()}, ValueError, "mode 'adaptive'"),
    ({"mode": "adaptive", "gamma": 3}, ValueError, "mode 'on'"),
    ({"mode": "off", "gamma": 3}, ValueError, "leave gamma out"),
    ({"mode": "adaptive", "gamma": lambda b: -1}, ValueError, "returned -1"),
    ({"mode": "adaptive", "gamma": lambda b: 1.5}, ValueError, "returned 1.5"),
])
def test_bad_input_says_what_to_do(target, near_draft, kwargs, error, match):
    args = {"prompts": PROMPTS, "rate": 10.0, "slots": 2, "mode": "off", "gamma": None} | kwargs
    drafter = ModelDrafter(near_draft)
    with pytest.raises(error, match=match):
        run_load((target, drafter), args["prompts"], args["rate"], args["slots"], args["mode"], args["gamma"],
                 max_new_tokens=12)


def test_speculation_needs_a_drafter_and_the_static_engine(target):
    with pytest.raises(ValueError, match="a drafter"):
        run_load((target, None), PROMPTS, 10.0, 2, "on", 3)
    with pytest.raises(ValueError, match="static engine"):
        run_load((tiny_llama(vocab_size=VOCAB, seed=0), None), PROMPTS, 10.0, 2)
    with pytest.raises(TypeError, match="pair"):
        run_load(target, PROMPTS, 10.0, 2)


def test_a_step_reads_the_device_once(target, near_draft, monkeypatch):
    """Admission writes a newcomer's prompt up from the host; the step's one read is the accept result. Broken: an
    admission that reads the prompt back from the device (two reads in a refill's step)."""
    def reads(mode, gamma, drafter) -> list[int]:
        with HostSyncs() as syncs:
            syncs.step_at(SpecBatch, "step")
            serve(target, drafter, mode, gamma)
        return syncs.per_step()[1:]  # step 0: the prompts, read once before the first step

    assert max(reads("on", 3, ModelDrafter(near_draft))) == 1 and max(reads("off", None, None)) == 1
    right = SpecBatch.admit

    def admit_and_read(self, row, prompt, generator=None):
        right(self, row, prompt, generator)
        self.host[row] = self.ids[row, : len(prompt)].tolist()

    monkeypatch.setattr(SpecBatch, "admit", admit_and_read)
    assert max(reads("off", None, None)) == 2


def test_a_slot_refuses_a_prompt_it_cannot_hold(target):
    state = SpecBatch(target, None, 2, 8, Warp(0.0), [None, None])
    with pytest.raises(ValueError, match="at least one token"):
        state.admit(0, [])
    with pytest.raises(ValueError, match="capacity"):
        state.admit(1, list(range(9)))
    state.admit(1, list(range(8)))
