"""Jacobi decoding: exactly greedy AR, cached = uncached, the iteration bound, EOS, statistics."""

from __future__ import annotations

import pytest
import torch

from specdec_core import jacobi
from specdec_core.ar import generate
from specdec_core.jacobi import (
    INITS,
    accuracy_after_error,
    converged_count,
    fixed_counts,
    initial_guess,
    jacobi_generate,
    jacobi_generate_nocache,
    jacobi_iteration,
    ngrams_seen_early,
    summarize,
)
from specdec_core.lm import Decoder
from specdec_core.records import JacobiStats, JacobiStep
from specdec_core.toy import tiny_llama

PROMPT = torch.tensor([[3, 5, 7, 9]])
# (layers, seed): seeds whose greedy output falls into repeats, so Jacobi fixes several tokens per
# iteration (fast-forward) and keeps some right tokens behind wrong ones (stationary) — and a plain one.
# logit_scale does not move the argmax; it widens the gaps between logits, so the argmax of a
# 16-token forward and of a 1-token forward cannot differ by rounding.
TOYS = [(2, 1), (1, 6), (2, 0)]


@pytest.fixture(scope="module", params=TOYS, ids=lambda t: f"layers{t[0]}-seed{t[1]}")
def toy(request):
    layers, seed = request.param
    return tiny_llama(num_layers=layers, seed=seed, logit_scale=10.0)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("block_size", [1, 3, 8, 16])
@pytest.mark.parametrize("init", INITS)
def test_equals_greedy_ar(toy, block_size, init):
    ref = generate(toy, PROMPT, 30).new_tokens
    out = jacobi_generate(toy, PROMPT, 30, block_size=block_size, init=init, generator=_gen())
    assert out.new_tokens == ref
    assert set(out.stats.widths) == {block_size}  # every forward has the block's width …
    assert block_size == 1 or any(u < block_size for u in out.stats.used)  # … padded as the block's rest shrinks
    nocache = jacobi_generate_nocache(toy, PROMPT, 30, block_size=block_size, init=init, generator=_gen())
    assert nocache.new_tokens == ref


@pytest.mark.parametrize("block_size", [3, 8, 16])
@pytest.mark.parametrize("init", INITS)
def test_cached_and_nocache_give_the_same_trajectory(toy, block_size, init):
    a = jacobi_generate(toy, PROMPT, 30, block_size=block_size, init=init, generator=_gen(1))
    b = jacobi_generate_nocache(toy, PROMPT, 30, block_size=block_size, init=init, generator=_gen(1))
    assert a.stats.trajectory == b.stats.trajectory
    for key in ("iterations", "target_calls", "fixed", "fast_forward", "stationary"):
        assert getattr(a.stats, key) == getattr(b.stats, key), key


def test_the_toys_give_nontrivial_trajectories():
    """Guard for the tests above: some runs fix several tokens at once and keep stationary tokens."""
    fast = stationary = 0
    for layers, seed in TOYS:
        model = tiny_llama(num_layers=layers, seed=seed, logit_scale=10.0)
        for init in INITS:
            s = jacobi_generate(model, PROMPT, 30, block_size=8, init=init, generator=_gen()).stats
            fast += sum(s.fast_forward)
            stationary += sum(s.stationary)
    assert fast >= 10 and stationary >= 2


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_iteration_bound_and_bookkeeping(toy, block_size):
    g = jacobi_generate(toy, PROMPT, 30, block_size=block_size, init="random", generator=_gen(2))
    s = g.stats
    blocks = s.trajectory
    assert [len(states[0]) for states in blocks] == [min(block_size, 30 - i) for i in range(0, 30, block_size)]
    for b, states in enumerate(blocks):
        n = len(states[0])
        assert 1 <= len(states) - 1 <= n  # at most n iterations for n tokens
        assert states[-1] == g.new_tokens[b * block_size : b * block_size + n]  # the fixed point
    assert s.iterations == sum(len(states) - 1 for states in blocks) == len(s.fixed)
    assert s.target_calls == s.iterations  # every iteration emits a token (the first ran with the prefill)
    assert sum(s.fixed) == 30 and min(s.fixed) >= 1
    assert s.fast_forward == [f - 1 for f in s.fixed]
    assert s.tokens_per_iteration == pytest.approx(30 / s.iterations)
    if block_size == 1:
        assert s.iterations == 30  # one token per block: Jacobi is AR


def test_each_iteration_runs_only_the_unfixed_part_padded_to_the_block(monkeypatch):
    """The prompt's prefill, then ONE forward per iteration over [newest fixed token, unfixed guesses, pads]: always
    the block's width; the fixed prefix stays cached, the pads see only themselves and are never kept."""
    fed: list[tuple[int, int, int]] = []  # (cache length before, tokens fed, real tokens among them)

    class Recording(Decoder):
        def step_masked(self, new_ids, positions, mask):
            real = int((~torch.eye(mask.shape[0], dtype=torch.bool) & mask).any(0).sum()) + 1
            fed.append((self.length, new_ids.shape[1], real))
            assert torch.equal(mask[real:], torch.eye(mask.shape[0], dtype=torch.bool)[real:])  # pads: themselves
            return super().step_masked(new_ids, positions, mask)

    monkeypatch.setattr(jacobi, "Decoder", Recording)
    model = tiny_llama(num_layers=2, seed=1, logit_scale=10.0)
    g = jacobi_generate(model, PROMPT, 20, block_size=8, init="pad")
    assert len(fed) == g.stats.iterations and g.new_tokens == generate(model, PROMPT, 20).new_tokens
    done = 0  # tokens fixed before each iteration
    unfixed = []  # block size minus tokens of the block fixed, before each iteration
    for states in g.stats.trajectory:
        counts = fixed_counts(states)
        unfixed += [len(states[0]) - c for c in counts[:-1]]
    for i, ((cached, n_fed, real), left) in enumerate(zip(fed, unfixed)):
        assert cached == PROMPT.shape[1] + done - 1  # every fixed token but the newest
        assert n_fed == 8 and real == left == g.stats.used[i]  # the newest fixed token + all unfixed guesses but the last
        done += g.stats.fixed[i]
    assert any(real < 8 for _, _, real in fed)  # padded forwards happened


@pytest.mark.parametrize("where", ["first", "middle", "block_end"])
@pytest.mark.parametrize("block_size", [4, 8])
def test_eos_inside_a_block_stops_like_ar(toy, where, block_size):
    ref = generate(toy, PROMPT, 30).new_tokens
    index = {"first": 0, "middle": block_size + block_size // 2, "block_end": 2 * block_size - 1}[where]
    eos = ref[index]
    ar = generate(toy, PROMPT, 30, eos_token_id=eos).new_tokens
    assert ar[-1] == eos and len(ar) <= index + 1
    for fn in (jacobi_generate, jacobi_generate_nocache):
        for init in INITS:
            g = fn(toy, PROMPT, 30, block_size=block_size, init=init, eos_token_id=eos, generator=_gen())
            assert g.new_tokens == ar
            assert sum(g.stats.fixed) == len(ar)
    # several EOS ids, as transformers allows: the first one met stops
    g = jacobi_generate(toy, PROMPT, 30, block_size=block_size, eos_token_id=[eos, 999])
    assert g.new_tokens == ar


def test_zero_tokens_and_text():
    model = tiny_llama()
    g = jacobi_generate(model, PROMPT, 0)
    assert g.new_tokens == [] and g.stats.iterations == 0 and g.stats.target_calls == 0

    class Tok:
        pad_token_id = 4

        def decode(self, ids):
            return " ".join(map(str, ids))

    g = jacobi_generate(model, PROMPT, 5, block_size=4, init="pad", tokenizer=Tok())
    assert g.text == " ".join(map(str, g.new_tokens))
    assert g.stats.trajectory[0][0] == [4, 4, 4, 4]  # the tokenizer's pad token

    class NoPad(Tok):
        pad_token_id = None
        eos_token_id = 7

    g = jacobi_generate(model, PROMPT, 3, block_size=3, init="pad", tokenizer=NoPad())
    assert g.stats.trajectory[0][0] == [model.config.pad_token_id] * 3  # a pad token before any EOS

@pytest.mark.parametrize("fn", [jacobi_generate, jacobi_generate_nocache])
def test_bad_input_raises(fn):
    model = tiny_llama()
    with pytest.raises(ValueError, match="block_size"):
        fn(model, PROMPT, 5, block_size=0)
    with pytest.raises(ValueError, match="unknown init"):
        fn(model, PROMPT, 5, init="zeros")
    with pytest.raises(ValueError, match="batch size"):
        fn(model, PROMPT.repeat(2, 1), 5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        fn(model, PROMPT, -1)


def test_converged_count():
    assert converged_count([1, 2, 3], [1, 2, 3]) == 3  # nothing changed: all fixed
    assert converged_count([9, 9, 9], [1, 2, 3]) == 1  # the first is always right
    assert converged_count([1, 2, 9, 4], [1, 2, 3, 4]) == 3  # two unchanged, plus the next one
    assert converged_count([9, 2, 3, 4], [1, 2, 3, 4]) == 1  # only LEADING unchanged tokens count
    assert converged_count([5], [7]) == 1


def test_jacobi_iteration_first_token_and_fixed_point():
    model = tiny_llama(num_layers=2, seed=3)
    greedy = generate(model, PROMPT, 6).new_tokens
    new = jacobi_iteration(model, PROMPT, [0] * 6)
    assert len(new) == 6 and new[0] == greedy[0]  # position 1 only sees the prompt
    assert jacobi_iteration(model, PROMPT, greedy) == greedy  # the greedy output is a fixed point
    # a state right up to position 3 gets position 4 right as well
    assert jacobi_iteration(model, PROMPT, greedy[:3] + [0, 0, 0])[:4] == greedy[:4]


def test_initial_guess():
    assert initial_guess("repeat", 3, 7, 32, 1) == [7, 7, 7]
    assert initial_guess("pad", 2, 7, 32, 1) == [1, 1]
    a = initial_guess("random", 50, 7, 32, 1, _gen(5))
    assert a == initial_guess("random", 50, 7, 32, 1, _gen(5)) and len(set(a)) > 10
    assert all(0 <= t < 32 for t in a)
    with pytest.raises(ValueError, match="unknown init"):
        initial_guess("zeros", 2, 7, 32, 1)


# A hand-made block: truth [1, 2, 3, 4]; the guess has position 2 right by luck.
HAND = [[[9, 9, 3, 9], [1, 8, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]]


def _stats_of(trajectory: list[list[list[int]]], new_tokens: list[int], block_size: int = 4) -> JacobiStats:
    """The record a run with this one-block trajectory and these tokens would have made."""
    steps, done = [], 0
    for states in trajectory:
        start = done
        for old, new in zip(states, states[1:]):
            fixed = min(converged_count(old[done - start :], new[done - start :]), len(new_tokens) - done)
            steps.append(JacobiStep(old[done - start :], new[done - start :], fixed, block_size))
            done += fixed
    return JacobiStats(new_tokens=len(new_tokens), target_calls=len(steps), block_size=block_size, steps=steps)


def test_stats_on_a_hand_made_trajectory():
    s = _stats_of(HAND, [1, 2, 3, 4])
    assert s.trajectory == HAND and fixed_counts(HAND[0]) == [0, 1, 2, 4]
    assert s.fixed == [1, 1, 2] and s.fast_forward == [0, 0, 1]
    # positions 2 and 3 are right in y^(1) and stay right while position 1 is still wrong
    assert s.stationary == [2, 0, 0]
    assert s.iterations == 3 and s.target_calls == 3
    assert s.tokens_per_iteration == pytest.approx(4 / 3)
    assert accuracy_after_error(HAND, [1, 2, 3, 4]) == (2, 2)
    # bigrams (1,2) (2,3) (3,4): (2,3) was in y^(2) and (3,4) in y^(1) before iteration 3 fixed them
    assert ngrams_seen_early(HAND, [1, 2, 3, 4], n=2) == (2, 3)


def test_stats_of_a_block_cut_by_eos():
    # truth cut after 2 tokens (an EOS): nothing beyond it counts
    s = _stats_of([[[9, 9, 9, 9], [1, 9, 3, 4], [1, 2, 5, 6]]], [1, 2])
    assert s.fixed == [1, 1] and s.stationary == [0, 0]


def test_trajectory_needs_one_block_in_flight():
    with pytest.raises(ValueError, match="one block in flight"):
        _ = JacobiStats(blocks=2).trajectory


def test_summarize():
    model = tiny_llama(num_layers=2, seed=1, logit_scale=10.0)
    g = jacobi_generate(model, PROMPT, 12, block_size=6, init="repeat")
    out = summarize(g)
    assert out["tokens"] == 12 and out["blocks"] == 2 and out["iterations"] == g.stats.iterations
    assert out["fast_forwarded"] == 12 - out["iterations"]  # tokens = iterations + fast-forwarded


def test_widget_panel_builds_and_updates(capsys):
    widgets = pytest.importorskip("specdec_core.viz.widgets")
    model = tiny_llama(num_layers=2, seed=1, logit_scale=10.0)

    class Tok:
        eos_token_id = 1
        pad_token_id = 1

        def decode(self, ids):
            return "".join(chr(97 + i % 26) for i in ids)

    prompts = {"a": PROMPT, "b": torch.tensor([[2, 4]])}
    panel = widgets.jacobi_panel(model, Tok(), prompts, max_new_tokens=8, block_sizes=(4, 8))
    prompt, block = panel.children[0].children
    init = panel.children[1]
    # outside a kernel the Output widget does not capture: the panel's prints reach stdout
    assert "tokens 8, iterations 5" in capsys.readouterr().out
    block.value = 4
    assert "blocks 2" in capsys.readouterr().out
    prompt.value = "b"
    init.value = "random"
    expected = summarize(jacobi_generate(model, prompts["b"], 8, block_size=4, init="random", eos_token_id=1,
                                         generator=torch.Generator().manual_seed(0)))
    assert ", ".join(f"{k} {v}" for k, v in expected.items()) in capsys.readouterr().out


@pytest.mark.offline
def test_offline_target_equals_greedy_ar():
    from specdec_core.models import chat_ids, load_pair
    from specdec_core.prompts import CHAT

    pair = load_pair("offline", device="cpu")
    ids = chat_ids(pair.tokenizer, CHAT[0])
    eos = pair.tokenizer.eos_token_id
    ref = generate(pair.target, ids, 12, eos_token_id=eos).new_tokens
    for block_size, init in [(16, "repeat"), (5, "random")]:
        g = jacobi_generate(pair.target, ids, 12, block_size=block_size, init=init, eos_token_id=eos, generator=_gen())
        assert g.new_tokens == ref
