"""The core goals of each capstone, and the gate that makes a test's points wait for them.

    with goals.waiting_for("c1", speculative_generate_mine):   # in a test cell, around the test's body
        assert grading.greedy_matches(...)                     # runs only once capstone 1's core goals are met

A capstone is about one or two ideas (:data:`CORE_GOALS`). Many of its tests check properties that hold
without them: a plain autoregressive loop is exactly the target's law, a drafter that guesses at random
is valid. Graded one by one, such an answer collected most of the points (capstone 1's AR loop 12/14, a
random drafter 8/10 on capstone 3). So every test that does not itself check a core goal runs inside
:func:`waiting_for`: a cheap check of the core goals (toy models where the goal allows it) runs first,
and when one is unmet the test fails at once — its points are 0, its message says which goal it waits
for and why, and its own body (a χ² test of a minute) never runs. A gate, not a reweighting: whatever
else a submission gets right, without the core goal only the tests of the core goal itself can score.

Each ``*_problems`` function returns one message per core goal ('' when met) and is deterministic given
the grading seed (:func:`.grading.grading_rng`); an exception raised by the student's code is reported as
the unmet goal's reason, so an unsolved notebook's first message is its first real failure.
"""

from __future__ import annotations

import copy
import math
import statistics
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from . import grading

CORE_GOALS: dict[str, tuple[str, ...]] = {
    "c1": ("the target verifies the draft's guesses, several tokens per target call",
           "the rejection rule at T > 0: a guess is kept with probability min(1, p/q)"),
    "c2": ("the measurement is interleaved: every function timed once per round, each call alone",
           "the prediction uses the run's own α, c and v (from the runs it timed)"),
    "c3": ("the drafter is useful where it claims to be: on copy-heavy prompts it adds at least half "
           "the extra tokens per target call that prompt lookup adds",),
    "c4": ("the tree is verified: every child tried in order, an accepted child's own children next",),
}
TOKENS, GAMMA, VOCAB = 20, 4, 12  # capstone 1's gate: 20 tokens at γ = 4 on toys with a 12-token vocabulary


def _raised(fn: Callable[[], str]) -> str:
    """``fn()``, or what the student's code raised, as a message."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 (any error of the student's code is the reason the goal is unmet)
        return f"your code raised {type(err).__name__}: {str(err)[:200]}"


# --- capstone 1 ---------------------------------------------------------------------------------------

def _unlikely_drafter(twin: torch.nn.Module):
    """A drafter proposing, at every call, k copies of the token the target finds LEAST likely after the
    context, with a one-hot q: the rejection rule keeps such a guess with probability p(x), almost never.
    Its ``log`` holds (context length, guesses) per call, as :class:`.grading.Watched`'s does."""
    from ..drafters import Drafter

    class Unlikely(Drafter):
        def __init__(self) -> None:
            self.log: list[tuple[int, list[int]]] = []

        def propose(self, context: torch.Tensor, k: int):
            with torch.no_grad():
                x = int(twin(context).logits[0, -1].argmin())
            tokens = torch.full((k,), x, dtype=torch.long)
            self.log.append((int(context.shape[1]), tokens.tolist()))
            return tokens, torch.nn.functional.one_hot(tokens, VOCAB).float()

    return Unlikely()


def c1_problems(loop: Callable) -> list[str]:
    """(speculation, rejection rule) for ``loop(target, drafter, ids, n, gamma=…, temperature=…, generator=…)``
    on a toy target whose twin (the same weights) drafts: every guess is right, so 20 tokens take 4–5
    verifies greedy and at T = 1 (p = q: min(1, p/q) = 1); a drafter proposing the target's least likely
    token (one-hot q) must see its first guess rejected in most steps at T = 1."""
    from ..drafters import ModelDrafter
    from ..toy import tiny_llama

    rng = grading.grading_rng("c1-core-goals")
    seed = rng.randrange(10**6)
    target = tiny_llama(VOCAB, seed=seed, logit_scale=6.0)
    twin = copy.deepcopy(target)
    ids = torch.tensor([[rng.randrange(VOCAB) for _ in range(4)]])

    def run(drafter, temperature: float) -> tuple[list[int], int]:
        gen = torch.Generator().manual_seed(rng.randrange(10**6))
        with grading.blocked(*grading.SPECULATIVE_LIBRARY), grading.counting(target) as calls:
            got, _ = loop(target, drafter, ids, TOKENS, gamma=GAMMA, temperature=temperature, generator=gen)
        return list(got), calls.forwards

    def verifies(temperature: float) -> str:
        watched = grading.Watched(ModelDrafter(twin))
        got, forwards = run(watched, temperature)
        at = "greedy" if temperature == 0 else f"at T = {temperature:g}"
        if not any(guesses for _, guesses in watched.log):
            return f"{at}, your loop never asked the drafter for guesses (drafter.propose): that is plain decoding"
        if len(got) != TOKENS:
            return f"{at}, {len(got)} tokens for max_new_tokens = {TOKENS}"
        if forwards > TOKENS / 2.5:  # 4–5 verifies (+ the prefill) when every guess is kept
            return (f"{at}, with the target as its own draft (every guess right) the target ran {forwards} forwards "
                    f"for {TOKENS} tokens at γ = {GAMMA}: verify all γ guesses in ONE forward and keep the right ones "
                    "(about 5 forwards)")
        return ""

    speculation = _raised(lambda: verifies(0.0))
    if speculation:
        return [speculation, ""]  # the second is checked once the first is met

    def rejection() -> str:
        kept_all = verifies(1.0)
        if kept_all:
            return kept_all + " (where p = q, min(1, p/q) = 1 keeps every guess)"
        unlikely = _unlikely_drafter(twin)
        got, _ = run(unlikely, 1.0)
        sequence = ids[0].tolist() + got
        firsts = [(at, g[0]) for at, g in unlikely.log if g and at < len(sequence)]
        kept = sum(sequence[at] == g for at, g in firsts)
        if not firsts or kept > len(firsts) / 2:
            return (f"at T = 1 a drafter guessing the target's least likely token (one-hot q) had its first guess "
                    f"kept in {kept} of {len(firsts)} steps: keep a guess x with probability min(1, p(x)/q(x)), "
                    "else draw from the residual")
        return ""

    return [speculation, _raised(rejection)]


# --- capstone 2 ---------------------------------------------------------------------------------------

def _interleaving(interleaved_times: Callable) -> str:
    rng = grading.grading_rng("c2-core-interleaved")
    now, log = [0.0], []
    costs = {name: [round(rng.uniform(0.1, 5.0), 3) for _ in range(5)] for name in ("x", "y", "z")}

    def work(name: str) -> Callable[[], None]:
        def fn() -> None:
            now[0] += costs[name][sum(n == name for n in log)]
            log.append(name)
        return fn

    with grading.blocked(*grading.MEASURING_LIBRARY):
        got = interleaved_times({n: work(n) for n in costs}, repeats=4, clock=lambda: now[0])
    timed = log[-12:]  # after an optional warm-up of each
    rounds = [timed[i:i + 3] for i in range(0, 12, 3)]
    if len(log) not in (12, 15) or any(sorted(r) != ["x", "y", "z"] for r in rounds):
        return (f"the calls ran in the order {log}: time each function once per round, round after round "
                "(x, y, z, x, y, z, …), so that a drift of the machine hits all of them alike")
    seen = {n: costs[n][(len(log) - 12) // 3:] for n in costs}  # the calls after the warm-up, if any
    if not isinstance(got, dict) or any(len(got.get(n, [])) != 4 or any(abs(a - b) > 1e-9 for a, b in zip(got[n], seen[n]))
                                        for n in costs):
        return f"expected each call timed alone, {seen}, got {got}"
    return ""


def _own_numbers(measure_point: Callable) -> str:
    """measure_point on a toy pair: α, c, v and the step must be those of the runs it timed."""
    from ..drafters import ModelDrafter
    from ..theory import speedup
    from ..toy import tiny_llama

    rng = grading.grading_rng("c2-core-own-numbers")
    seed = rng.randrange(10**6)
    target, draft = tiny_llama(32, seed=seed, logit_scale=3.0), tiny_llama(32, seed=seed + 1, num_layers=1, logit_scale=3.0)
    pair = types.SimpleNamespace(target=target, draft=draft, device=torch.device("cpu"),
                                 tokenizer=types.SimpleNamespace(eos_token_id=None))
    ids, gamma = torch.tensor([[rng.randrange(32) for _ in range(5)]]), rng.choice([2, 3])
    with grading.blocked(*grading.MEASURING_LIBRARY), grading.recording(
            "specdec_core.ar.generate", "specdec_core.speculative.speculative_generate") as seen:
        p = measure_point(pair, ModelDrafter(draft), ids, gamma=gamma, n=10, repeats=2)
    specs = [g.stats for g in seen["specdec_core.speculative.speculative_generate"]]
    s = p.get("stats") if isinstance(p, dict) else None
    if not any(s is x for x in specs):
        return "point['stats'] must be the stats of a speculative run that measure_point really made"
    steps = [statistics.median(g.stats.token_times[1:]) for g in seen["specdec_core.ar.generate"]]
    if not any(math.isclose(p["step"], st) for st in steps):
        return "step must be the median time per token (after the first) of an AR run you timed"
    drafted = sum(len(x.drafted) for x in s.steps)
    alpha = 0.0 if math.isnan(s.alpha) else s.alpha
    own = {"alpha": alpha, "c": s.draft_time / drafted / p["step"], "v": s.verify_time / s.target_calls / p["step"]}
    wrong = [k for k, v in own.items() if not math.isclose(p[k], v, rel_tol=1e-6)]
    if wrong:
        return (f"{', '.join(wrong)} differ from the run's own ({', '.join(f'{k} = {own[k]:.4g}' for k in wrong)}): α from "
                "its stats, c = draft time ÷ drafted tokens ÷ step, v = verify time ÷ target calls ÷ step")
    if not math.isclose(p["predicted"], speedup(p["alpha"], gamma, p["c"], p["v"]), rel_tol=1e-6):
        return "predicted must be S(α, γ, c, v) of these α, c and v"
    return ""


def c2_problems(interleaved_times: Callable, measure_point: Callable | None = None) -> list[str]:
    """Goal 1 from ``interleaved_times`` (q1); goal 2 from ``measure_point`` (q3), not checked without it: otter
    runs each question's tests at that question's check, so q2's tests cannot see q3's function yet."""
    own = "" if measure_point is None else _raised(lambda: _own_numbers(measure_point))
    return [_raised(lambda: _interleaving(interleaved_times)), own]


# --- capstone 3 ---------------------------------------------------------------------------------------

def c3_problems(make_drafter: Callable) -> list[str]:
    """Greedy on two hidden copy-heavy prompts (24 tokens, γ = 4), against the library's prompt lookup."""
    from ..prompts import COPY_HEAVY
    from .given import offline

    def useful() -> str:
        pair, tok, _ = offline(fast=True)
        prompts = grading.grading_rng("c3-core-useful").sample(COPY_HEAVY[1:], 2)
        got = grading.acceptance_against_lookup(make_drafter, pair.target, tok, prompts, n=24)
        yours, lookup = got["yours"]["extra"], got["prompt lookup"]["extra"]
        if yours < 0.5 * lookup:
            return (f"on copy-heavy prompts your drafter adds {yours:.2f} tokens per target call, prompt lookup "
                    f"{lookup:.2f}: a drafter that guesses no better than chance is exact but buys nothing")
        return ""

    return [_raised(useful)]


# --- capstone 4 ---------------------------------------------------------------------------------------

def c4_problems(verify_tree_sampled: Callable) -> list[str]:
    """The paths alone (not the next token) on seeded random trees: greedy targets, and p = q along the
    first children (:func:`.grading_trees.sure_paths_problem` without its next-token checks)."""
    from . import grading_trees as trees

    rng = grading.grading_rng("c4-core-walk")

    def walk() -> str:
        for t in range(8):
            iid = t % 2 == 0
            tokens, parents, q = trees._random_tree(rng, iid)
            if t % 4 < 2:  # a greedy target: one-hot rows, the chosen child's token where there is one
                choice = [tokens[rng.choice(trees.children(parents, n))] if trees.children(parents, n) else 0
                          for n in range(-1, len(tokens))]
                p = torch.nn.functional.one_hot(torch.tensor(choice), trees.V).float()
                node, want = -1, []
                while (nxt := next((c for c in trees.children(parents, node) if tokens[c] == choice[node + 1]), None)) is not None:
                    want.append(nxt)
                    node = nxt
            else:  # p = q along the first children (i.i.d.) / p one-hot on them (one-hot candidates)
                p = torch.softmax(torch.randn(len(tokens) + 1, trees.V, generator=torch.Generator().manual_seed(t)), -1)
                node, want = -1, []
                while kids := trees.children(parents, node):
                    p[node + 1] = q[kids[0]] if iid else torch.nn.functional.one_hot(torch.tensor(tokens[kids[0]]), trees.V).float()
                    want.append(kids[0])
                    node = kids[0]
            gen = torch.Generator().manual_seed(rng.randrange(10**6))
            with grading.blocked(*trees.TREE_LIBRARY):
                got = [trees.run_verify(verify_tree_sampled, tokens, parents, p, q, gen)[0] for _ in range(3)]
            if any(g != want for g in got):
                return (f"on tokens {tokens}, parents {parents}{'' if iid else ' (one-hot candidates)'}, with a target sure of "
                        f"its choices, the accepted path is {want}, got {got[0] if got[0] != want else got[-1]}: try every "
                        "child of a node in order, and after an accepted child, its own children")
        return ""

    return [_raised(walk)]


# --- the gate -----------------------------------------------------------------------------------------

PROBLEMS: dict[str, Callable[..., list[str]]] = {"c1": c1_problems, "c2": c2_problems, "c3": c3_problems,
                                                 "c4": c4_problems}


def unmet(capstone: str, *answers: Callable) -> list[str]:
    """One line per unmet core goal of ``capstone`` ('c1' … 'c4'), for the student's ``answers``: checked
    once per grading (the verdict is kept in :data:`.given.VERDICTS` for the same functions and seed)."""
    from .given import VERDICTS

    key = (capstone, grading.grading_seed(), *((a, getattr(a, "__code__", None)) for a in answers))
    if key not in VERDICTS:
        goals, problems = CORE_GOALS[capstone], PROBLEMS[capstone](*answers)
        VERDICTS[key] = [f"core goal {i} ({goal}): {why}" for i, (goal, why) in enumerate(zip(goals, problems), 1) if why]
    return VERDICTS[key]


@contextmanager
def waiting_for(capstone: str, *answers: Callable) -> Iterator[None]:
    """The block runs only when ``capstone``'s core goals are met; else an AssertionError that says
    which goal this test waits for and why it is unmet (the test scores 0)."""
    missing = unmet(capstone, *answers)
    if missing:
        raise AssertionError("✗ waits for " + "; and for ".join(missing) + " (this test scores once they are met)")
    yield
