"""Host syncs per decode step: a greedy speculative step reads the device ONCE, and timing never waits.

Every ``.item()``, ``.tolist()``, ``bool(t)``, 0-dim or boolean index … in a step is a stall on a GPU: the
queue drains and the host waits (gpt-fast's loop has one per token). :class:`specdec_core.bench.syncs.HostSyncs`
counts them in the real loops with real transformers models, transformers' own code included. On this
CPU-only machine it counts every read as if its tensor were on an accelerator, so the counts bound a GPU
run's from above. Before issue 44 a greedy speculative step made 4 reads and 2 timing waits; now it makes
1 (the accept test's result, the guesses in the same transfer) and phase times come from marks read after
the run (CUDA events on a GPU). The other loops' counts are pinned as ceilings so none can creep back up.
"""

from __future__ import annotations

import pytest
import torch

from specdec_core import ar, generation, lookahead, speculative
from specdec_core.bench.syncs import HostSyncs, cuda_sync_warnings
from specdec_core.drafters import ModelDrafter, NGramDrafter
from specdec_core.lookahead import lookahead_generate
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama
from specdec_core.tree import tree_generate

VOCAB = 32
PROMPT = torch.tensor([[2, 5, 3, 7, 2, 5, 3]])


@pytest.fixture(scope="module")
def pair():
    return tiny_llama(vocab_size=VOCAB, seed=0), tiny_llama(vocab_size=VOCAB, seed=1)


def counted(run, *starts: tuple[object, str], where: str = "any") -> HostSyncs:
    """``run()`` under HostSyncs; every call of a ``starts`` (owner, name) begins a step, the run's
    ``Clock.stop`` ends them (its wait for the device is the run's, not a step's)."""
    with HostSyncs(where) as syncs:
        for owner, name in starts:
            syncs.step_at(owner, name)
        syncs.step_at(generation.Clock, "stop", end=True)
        run()
    assert syncs.steps >= 3, "the run should make several steps"
    return syncs


def spec_run(target, drafter, n: int = 16, **kw):
    out = {}
    syncs = counted(lambda: out.update(g=speculative_generate(target, drafter, PROMPT, n, gamma=3, **kw)),
                    (speculative, "draft"))
    return syncs, out["g"]


# --- the counter -----------------------------------------------------------------------------------

X, MASK, AT = torch.arange(6.0), torch.arange(6) > 2, torch.tensor(1)


def _assign_masked():
    X.clone()[MASK] = 0.0


READS = {  # each makes exactly one host read on a GPU
    "item": lambda: X.sum().item(), "tolist": lambda: X.tolist(), "cpu": lambda: X.cpu(), "numpy": lambda: X.numpy(),
    "bool": lambda: bool(X.sum() > 0), "int": lambda: int(X.sum()), "float": lambda: float(X[0]),
    "0-dim index": lambda: X[AT], "as a Python index": lambda: [0, 1, 2][AT], "bool-mask index": lambda: X[MASK],
    "bool-mask assign": _assign_masked, "nonzero": lambda: X.nonzero(), "masked_select": lambda: X.masked_select(MASK),
    "equal": lambda: torch.equal(X, X), "in": lambda: 3.0 in X, "format": lambda: f"{X.sum():.2f}",
    "unique": lambda: torch.unique(X), "a read inside a C++ op": lambda: torch.repeat_interleave(X, MASK.long()),
}
FREE = {  # none reads the device
    "argmax": lambda: X.argmax(), "gather": lambda: X.gather(0, AT.view(1)), "slice": lambda: X[1:3],
    "list index": lambda: X[[0, 2]], "where": lambda: torch.where(MASK, X, 0.0), "to its own device": lambda: X.to(X.device),
    "cat": lambda: torch.cat([X, X]), "repeat_interleave with output_size": lambda: X.repeat_interleave(MASK.long(), output_size=3),
}


@pytest.mark.parametrize("name", READS)
def test_the_counter_sees_each_kind_of_read_once(name):
    with HostSyncs() as syncs:
        READS[name]()
    assert len(syncs.events) == 1, syncs.report(0)
    with HostSyncs(where="device") as on_device:  # a host tensor is no transfer
        READS[name]()
    assert on_device.events == []


@pytest.mark.parametrize("name", FREE)
def test_the_counter_ignores_what_stays_on_the_device(name):
    with HostSyncs() as syncs:
        FREE[name]()
    assert syncs.events == [], syncs.report(0)


def test_the_counter_restores_what_it_patched():
    before = (generation.synchronize, speculative.draft, torch.cuda.synchronize, vars(torch.cuda.Event).get("synchronize"))
    with HostSyncs() as syncs:
        syncs.step_at(speculative, "draft")
        assert speculative.draft is not before[1]
    after = (generation.synchronize, speculative.draft, torch.cuda.synchronize, vars(torch.cuda.Event).get("synchronize"))
    assert after == before


# --- the greedy speculative step -------------------------------------------------------------------

def test_a_greedy_speculative_step_reads_the_device_once_and_never_waits(pair):
    target, draft = pair
    syncs, out = spec_run(target, ModelDrafter(draft))
    assert syncs.per_step() == [1] * syncs.steps, syncs.report(1)
    assert all(e.where.startswith("specdec_core/accept.py") for e in syncs.events if e.step > 0 and e.what != "synchronize")
    assert syncs.per_step("synchronize") == [0] * syncs.steps  # timing: marks, read after the run
    assert syncs.counts(0)["synchronize"] == syncs.counts(-1)["synchronize"] == 1  # one wait at each end of the run
    assert out.new_tokens == ar.generate(target, PROMPT, 16).new_tokens
    assert all(s.draft_s >= 0 and s.verify_s >= 0 for s in out.stats.steps)
    assert out.stats.draft_time == sum(s.draft_s for s in out.stats.steps)
    assert any(len(s.drafted) < s.gamma for s in out.stats.steps)  # the budget's end: a padded verify, no read more


def test_an_eos_costs_the_greedy_step_no_read(pair):
    target, draft = pair
    reference = ar.generate(target, PROMPT, 16).new_tokens
    eos = max(reference, key=reference.index)  # the token that first appears latest
    syncs, out = spec_run(target, ModelDrafter(draft), eos_token_id=eos)
    assert max(syncs.per_step()) == 1
    assert out.new_tokens == ar.generate(target, PROMPT, 16, eos_token_id=eos).new_tokens
    assert out.new_tokens[-1] == eos


def _indexed_verify_greedy(drafted, logits):
    """The accept test before issue 44: ``choice[n]`` with a 0-dim device tensor (a hidden .item()), then
    .tolist(); the loop then read the guesses again."""
    k = drafted.numel()
    choice = logits.argmax(-1)
    n = (drafted == choice[:k]).int().cumprod(0).sum()
    n, token = torch.stack([n, choice[n]]).tolist()
    return n, token, "bonus" if n == k else "resampled"


def test_the_count_fails_for_the_old_accept_test(pair, monkeypatch):
    target, draft = pair
    monkeypatch.setattr(speculative, "verify_greedy", _indexed_verify_greedy)
    syncs, out = spec_run(target, ModelDrafter(draft))
    assert out.new_tokens == ar.generate(target, PROMPT, 16).new_tokens  # same tokens, three reads a step
    assert syncs.per_step() == [3] * syncs.steps
    assert {"__getitem__ with a tensor index", "tolist"} <= set(syncs.counts())


def test_the_count_reaches_into_the_models_code(pair, monkeypatch):
    target, draft = pair
    norm = target.model.norm
    forward = norm.forward
    monkeypatch.setattr(norm, "forward", lambda h: (h.abs().max().item(), forward(h))[1])  # a hidden read
    syncs, _ = spec_run(target, ModelDrafter(draft))
    assert syncs.per_step() == [2] * syncs.steps
    assert syncs.counts(1)["item"] == 1


def test_the_count_fails_for_a_timing_wait_in_the_step(pair, monkeypatch):
    target, draft = pair
    step = speculative.speculative_step

    def timed_step(dec, *args):
        result = step(dec, *args)
        generation.synchronize(dec.device)  # the old loop's wait before reading the clock
        return result

    monkeypatch.setattr(speculative, "speculative_step", timed_step)
    syncs, _ = spec_run(target, ModelDrafter(draft))
    assert syncs.per_step("synchronize") == [1] * syncs.steps


# --- the other loops: today's counts, pinned as ceilings (issue 44 measured them; the next issue lowers them)

def _spec(temperature, ngram):
    def run(target, draft):
        drafter = NGramDrafter(VOCAB) if ngram else ModelDrafter(draft)
        gen = torch.Generator().manual_seed(0)
        return counted(lambda: speculative_generate(target, drafter, PROMPT, 12, gamma=3, temperature=temperature,
                                                    generator=gen), (speculative, "draft"))
    return run


def _tree(temperature):
    def run(target, draft):
        drafter, gen = ModelDrafter(draft), torch.Generator().manual_seed(0)
        return counted(lambda: tree_generate(target, drafter, PROMPT, 12, shape=(2, 2, 1), temperature=temperature,
                                             generator=gen), (drafter, "propose_tree"))
    return run


def _lookahead(temperature):
    def run(target, draft):
        gen = torch.Generator().manual_seed(0)
        return counted(lambda: lookahead_generate(target, PROMPT, 12, shape=(3, 3, 3), temperature=temperature,
                                                  generator=gen), (lookahead, "candidate_tree"))
    return run


# most reads in one step: pinned (before issue 44, reads + timing waits, in a comment)
CEILINGS = {
    "speculative, sampled": (_spec(1.0, False), 4),  # 5 + 2: accept.verify's int()/bool(), the guesses
    "speculative, n-gram, greedy": (_spec(0.0, True), 2),  # 5 + 2: NGramDrafter reads the context
    "speculative, n-gram, sampled": (_spec(1.0, True), 5),  # 6 + 2
    # trees and lookahead (issue 45): greedy, ONE transfer (tree.accept: argmaxes and tokens together) plus
    # Decoder.step_masked's check of each host-built mask (the draft's 2 depths and the target's forward:
    # host tensors, counted here, no transfer on a GPU — see test_on_a_gpu_a_greedy_tree_step_transfers_once)
    "tree, greedy": (_tree(0.0), 4),  # 7 + 2 before issue 45
    "tree, sampled": (_tree(1.0), 10),  # 12 + 2: verify_tree's per-sibling reads
    "lookahead, greedy": (_lookahead(0.0), 2),  # 7 + 1
    "lookahead, sampled": (_lookahead(1.0), 8),  # 12 + 1
}


@pytest.mark.parametrize("name", CEILINGS)
def test_no_steps_reads_creep_up(pair, name):
    run, ceiling = CEILINGS[name]
    syncs = run(*pair)
    worst = max(range(syncs.steps), key=lambda i: syncs.per_step()[i]) + 1
    assert max(syncs.per_step()) <= ceiling, f"{name}: step {worst} reads the device more than {ceiling} times:\n" \
                                              + syncs.report(worst)
    assert syncs.per_step("synchronize") == [0] * syncs.steps  # no loop waits to time a phase


# --- clocks ----------------------------------------------------------------------------------------

def test_a_timer_waits_on_entry_only_and_clock_marks_never_wait():
    with HostSyncs() as syncs:
        with generation.Timer("cpu") as t:
            torch.ones(3).sum()
        clock = generation.Clock("cpu")
        a, b = clock.mark(), clock.mark()
        between = clock.seconds(a, b)
    assert syncs.counts()["synchronize"] == 2  # the Timer's entry, the Clock's start
    assert t.seconds >= 0 and between >= 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: counts the transfers of device tensors only")
def test_on_a_gpu_the_greedy_step_transfers_once(pair):
    target, draft = (m.to("cuda") for m in pair)
    out = {}
    syncs = counted(lambda: out.update(g=speculative_generate(target, ModelDrafter(draft), PROMPT.cuda(), 16, gamma=3)),
                    (speculative, "draft"), where="device")
    assert max(syncs.per_step()) <= 1, syncs.report(1)
    with cuda_sync_warnings() as found:
        torch.ones(2, device="cuda").sum().item()
    assert found  # the sync debug mode is on inside the block


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: counts the transfers of device tensors only")
@pytest.mark.parametrize("method", ["tree", "lookahead"])
def test_on_a_gpu_a_greedy_tree_step_transfers_once(pair, method):
    target, draft = (m.to("cuda") for m in pair)
    drafter = ModelDrafter(draft)
    run = (lambda: tree_generate(target, drafter, PROMPT.cuda(), 12, shape=(2, 2, 1))) if method == "tree" else \
        (lambda: lookahead_generate(target, PROMPT.cuda(), 12, shape=(3, 3, 3)))
    syncs = counted(run, (drafter, "propose_tree") if method == "tree" else (lookahead, "candidate_tree"), where="device")
    assert max(syncs.per_step()) <= 1, syncs.report(1)
