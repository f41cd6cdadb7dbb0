"""Our engines, chosen by measurement on the machine the course runs on: "our AR" and the engine speculation runs on.

    choice = engines.choose(pair)           # measured once per machine and cached; pinned under SPECDEC_QUICK
    ours = engines.ours(pair)               # the pair on our AR's engine: every speed-up is measured against its AR
    spec = engines.for_speculation(pair)    # the pair the speculative methods run on
    print(choice.line())                    # which engines, and why, in one line

A fixed engine is fast on one CPU and slow on the next (the same prepacked f32 twin ran 1.24× eager on one
machine and 0.86× on another), so nothing here is fixed. The candidates (:data:`CANDIDATES`) are the rungs of
lesson 01b's ladder: eager f32, prepacked f32, and the static KV cache at f32, bf16 (prepacked where oneDNN takes
bf16, ``fast.packs``), f16, int8 (f32 rows) and int8-bf16 (the same int8 weights on bf16 rows); and the compiled step at f32, bf16 and f16 (:data:`COMPILED`,
``compiled.py``) once ``make compile`` has warmed it on this machine. Each is measured on the pair, round-robin in shuffled rounds after a warm-up:

- its **AR step**: ``ar.generate``'s seconds per token after the prefill (the loop itself, host syncs included);
- its **forward over n** new tokens for n = 1 … :data:`MAX_WIDTH` on a cache of :data:`CONTEXT` tokens: v(n) =
  forward(n) ÷ forward(1), the price of a verify of γ = n − 1 guesses (flat on a kernel that reads each weight
  once for all rows, growing on one that serves one row at a time);
- the **draft's** one-token forward on the same engine: c = draft ÷ target forward;
- **quality**, untimed: perplexity on the course's held-out chat prompts (``prompts.HELDOUT``, joined, teacher-forced)
  against eager f32's (``precision.quality``), and the share of positions whose argmax equals f32's.

**Our AR** is the engine with the shortest AR step among those within the quality line (perplexity at most
:data:`QUALITY_LINE` above f32's). **The speculation engine** is the one where the cost model predicts chain
speculation with the course's draft model fastest in tokens/s: step · (γ·c + v(γ + 1)) ÷ E(α, γ) per token,
minimised over γ ≤ :data:`MAX_WIDTH` − 1, with α measured once (greedy, γ = 4: rounding hardly moves it). It may
differ from our AR's: one kernel has the fastest single row, another the flattest verify. A target never mixes
formats across widths: the one-row step and the verify read the same weights in the same layout.

The choice is cached as JSON under ``$SPECDEC_CACHE/engines/`` (atomically), keyed by the machine
(``machine.key``), the preset and :data:`VERSION`. Under ``SPECDEC_QUICK``, in tests and in the graders the
engine is pinned (:data:`PINNED`) and nothing is timed; ``SPECDEC_ENGINE="static bf16"`` pins another.
"""

from __future__ import annotations

import json
import os
import random
import statistics
from dataclasses import asdict, dataclass, field

import torch

from . import compiled, machine, precision, theory
from .ar import generate
from .drafters import ModelDrafter
from .files import write_json
from .generation import Timer
from .lm import Decoder
from .models import Pair, chat_ids
from .progress import tqdm
from .prompts import CHAT, HELDOUT
from .speculative import speculative_generate

VERSION = 1  # bump when the way of choosing changes: cached choices are then measured again
CANDIDATES = ("eager f32", "prepacked f32", "static f32", "static bf16", "static f16", "static int8", "static int8-bf16")
COMPILED = ("compiled f32", "compiled bf16", "compiled f16")  # candidates once `make compile` warmed them
PINNED = "static f32"  # the engine of quick runs, tests and graders: exact to f32, nothing timed
QUALITY_LINE = 0.01  # an engine's perplexity may be at most 1 % above eager f32's
MAX_WIDTH = 9  # forwards over 1 … 9 new tokens: verifies of γ ≤ 8
CONTEXT = 64  # tokens in the cache under the timed forwards
AR_TOKENS = 12


def on_engine(pair: Pair, name: str) -> Pair:
    """``pair`` on the engine ``name`` (one of :data:`CANDIDATES` or :data:`COMPILED`), made once and kept."""
    if name not in CANDIDATES + COMPILED:
        raise ValueError(f"unknown engine {name!r}: choose one of {', '.join(CANDIDATES + COMPILED)}")
    if name == "eager f32":
        return pair.plain()
    kind, rung = name.split()
    return pair.engine(rung, static=kind != "prepacked", compiled=kind == "compiled")


def warm_name(pair: Pair, engine: str, role: str) -> str:
    """The name ``compiled.warm`` records a compiled engine's ``role`` ("target" or "draft") under."""
    return f"{pair.preset} {engine} {role}"


def candidates(pair: Pair) -> tuple[str, ...]:
    """The engines :func:`choose` measures: :data:`CANDIDATES`, and each of :data:`COMPILED` whose target and draft
    ``make compile`` warmed on this machine (compiling inside a lesson would take minutes)."""
    warm = tuple(name for name in COMPILED if all(compiled.is_warm(warm_name(pair, name, role))
                                                   for role in ("target", "draft")))
    return CANDIDATES + warm


@dataclass
class EngineRow:
    """What one candidate measured (seconds; v and c are ratios; None where it was not measured)."""

    engine: str
    ar_step_s: float
    forward_s: dict[int, float]  # n new tokens → seconds of one forward
    draft_s: float
    ppl_change: float  # perplexity ÷ eager f32's − 1
    agreement: float  # share of held-out positions whose argmax equals eager f32's
    spread: tuple[float, float] = (float("nan"), float("nan"))  # min, max of the AR step over rounds

    def v(self, n: int) -> float:
        return self.forward_s[n] / self.forward_s[1]

    @property
    def c(self) -> float:
        return self.draft_s / self.forward_s[1]

    @property
    def within_quality(self) -> bool:
        return self.ppl_change <= QUALITY_LINE

    def speculation(self, alpha: float) -> tuple[float, int]:
        """(seconds per token, γ) of chain speculation on this engine as the cost model predicts it: the γ
        that minimises step · (γ·c + v(γ + 1)) ÷ E(α, γ)."""
        best = min(range(1, MAX_WIDTH), key=lambda g: (g * self.c + self.v(g + 1)) / theory.expected_tokens(alpha, g))
        return self.ar_step_s * (best * self.c + self.v(best + 1)) / theory.expected_tokens(alpha, best), best


@dataclass
class Choice:
    """Which engine is our AR's and which the speculative methods', and the measurements behind it."""

    ar: str
    spec: str
    why: str
    alpha: float | None = None
    gamma: int | None = None
    rows: list[EngineRow] = field(default_factory=list)
    key: dict = field(default_factory=dict)

    def line(self) -> str:
        """One line: the two engines and why."""
        return f"our AR: {self.ar}; speculation: {self.spec} — {self.why}"

    def as_json(self) -> dict:
        out = asdict(self)
        for row in out["rows"]:
            row["forward_s"] = {str(n): s for n, s in row["forward_s"].items()}
        return out

    @classmethod
    def from_json(cls, data: dict) -> Choice:
        rows = [EngineRow(**(r | {"forward_s": {int(n): s for n, s in r["forward_s"].items()},
                                  "spread": tuple(r["spread"])})) for r in data.get("rows", [])]
        return cls(**(data | {"rows": rows}))


def decide(rows: list[EngineRow], alpha: float) -> Choice:
    """The choice from measured rows (pure: no timing). Our AR: the shortest AR step within the quality line;
    speculation: the shortest predicted time per token within it (:meth:`EngineRow.speculation`)."""
    ok = [r for r in rows if r.within_quality]
    if not ok:
        raise ValueError("no engine is within the quality line, not even f32: the reference itself is missing")
    ours = min(ok, key=lambda r: r.ar_step_s)
    spec = min(ok, key=lambda r: r.speculation(alpha)[0])
    t_spec, gamma = spec.speculation(alpha)
    left_out = [r.engine for r in rows if not r.within_quality]
    why = (f"{ours.engine} has the shortest AR step ({ours.ar_step_s * 1e3:.1f} ms); speculation is predicted "
           f"fastest on {spec.engine} (γ = {gamma}, v({gamma + 1}) = {spec.v(gamma + 1):.2f}, c = {spec.c:.2f}, "
           f"α = {alpha:.2f}: {ours.ar_step_s / t_spec:.2f}× our AR)")
    if left_out:
        why += f"; outside the quality line (perplexity > +{QUALITY_LINE:.0%}): {', '.join(left_out)}"
    return Choice(ours.engine, spec.engine, why, alpha, gamma, rows)


def pinned() -> Choice | None:
    """The pinned choice where nothing may be timed (quick runs, tests, CI) or ``SPECDEC_ENGINE`` names one."""
    name = os.environ.get("SPECDEC_ENGINE")
    if name:
        if name not in CANDIDATES + COMPILED:
            raise ValueError(f"SPECDEC_ENGINE={name!r} is not an engine: choose one of {', '.join(CANDIDATES + COMPILED)}")
        return Choice(name, name, f"pinned by SPECDEC_ENGINE={name!r}")
    if not machine.may_cache():
        return Choice(PINNED, PINNED, "pinned: a quick run, a test or CI times nothing (SPECDEC_QUICK, CI)")
    return None


def choose(pair: Pair, text_ids: torch.Tensor | None = None, prompt_ids: torch.Tensor | None = None,
           rounds: int = 3, refresh: bool = False, force: bool = False, progress: bool = True) -> Choice:
    """The engines for ``pair`` on this machine: pinned (:func:`pinned`), cached, or measured now (and cached).
    ``text_ids`` [1, T]: held-out text for the quality line (default: :func:`heldout_ids`);
    ``prompt_ids`` [1, T]: the prompt α is measured on (default: the first chat prompt). ``force``: measure even
    where the choice is pinned (never cached then)."""
    fixed = None if force else pinned()
    if fixed is not None:
        return fixed
    key = machine.key(pair.device) | {"preset": pair.preset, "version": VERSION, "candidates": list(candidates(pair))}
    path = machine.cached_path("engines", key)
    if path.exists() and not refresh:
        data = json.loads(path.read_text())
        if data.get("key") == key:
            return Choice.from_json(data)
    choice = decide(*measure(pair, text_ids, prompt_ids, rounds, progress))
    choice.key = key
    if machine.may_cache():
        write_json(choice.as_json(), path, indent=1)
    return choice


def ours(pair: Pair) -> Pair:
    """``pair`` on our AR's engine (:func:`choose`)."""
    return on_engine(pair, choose(pair).ar)


def for_speculation(pair: Pair) -> Pair:
    """``pair`` on the engine the speculative methods run on (:func:`choose`)."""
    return on_engine(pair, choose(pair).spec)


def heldout_ids(tokenizer, tokens: int = 256) -> torch.Tensor:
    """[1, ≤ tokens] ids of the held-out chat prompts, joined: text no drafter of the course trained on."""
    return tokenizer("\n\n".join(HELDOUT), return_tensors="pt").input_ids[:, :tokens]


@torch.inference_mode()
def measure(pair: Pair, text_ids: torch.Tensor | None = None, prompt_ids: torch.Tensor | None = None,
            rounds: int = 3, progress: bool = True, seed: int = 0) -> tuple[list[EngineRow], float]:
    """Every candidate's row (:class:`EngineRow`: medians over the rounds of :func:`timings`, and its quality) and
    α from one greedy speculative run on the pinned engine (γ = 4, 24 tokens)."""
    text_ids = heldout_ids(pair.tokenizer) if text_ids is None else text_ids
    prompt_ids = chat_ids(pair.tokenizer, CHAT[0], pair.device) if prompt_ids is None else prompt_ids
    engines = {name: on_engine(pair, name) for name in candidates(pair)}
    times = timings(engines, prompt_ids, rounds, progress, seed)
    reference, rows = pair.plain().target, []
    for name, p in engines.items():
        q, t = precision.quality(reference, p.target, text_ids), times[name]
        rows.append(EngineRow(name, statistics.median(t["ar"]),
                              {n: statistics.median(t[n]) for n in range(1, MAX_WIDTH + 1)},
                              statistics.median(t["draft"]), q["ppl"] / q["ppl_reference"] - 1, q["agreement"],
                              (min(t["ar"]), max(t["ar"]))))
    spec = on_engine(pair, PINNED)
    run = speculative_generate(spec.target, ModelDrafter(spec.draft), prompt_ids, 24, gamma=4)
    return rows, theory.alpha_for_theory(run.stats.alpha)


def timings(engines: dict[str, Pair], prompt_ids: torch.Tensor, rounds: int, progress: bool = True,
            seed: int = 0) -> dict[str, dict]:
    """Raw seconds per engine, one entry a round after an untimed first round, the engines and the widths in a
    shuffled order each round: "ar" (an ``ar.generate`` run's seconds per token after the prefill), n = 1 …
    :data:`MAX_WIDTH` (one target forward over n new tokens on a :data:`CONTEXT`-token cache, then rolled back)
    and "draft" (one draft forward over one token on the same cache)."""
    first = next(iter(engines.values()))
    gen = torch.Generator().manual_seed(seed)  # host: the same context on every engine
    context = torch.randint(0, first.target.config.vocab_size, (1, CONTEXT + MAX_WIDTH),  # host: drawn from gen
                            generator=gen).to(first.device)
    decoders = {name: (Decoder(p.target), Decoder(p.draft)) for name, p in engines.items()}
    for target, draft in decoders.values():
        target.prefill(context[:, :CONTEXT])
        draft.prefill(context[:, :CONTEXT])
    times: dict[str, dict] = {name: {"ar": [], "draft": [], **{n: [] for n in range(1, MAX_WIDTH + 1)}} for name in engines}
    rng, order, widths = random.Random(seed), list(engines), list(range(1, MAX_WIDTH + 1))
    for round_ in tqdm(range(rounds + 1), desc="choosing our engines", disable=not progress):
        rng.shuffle(order)
        for name in order:
            target, draft = decoders[name]
            steps = generate(engines[name].target, prompt_ids, AR_TOKENS).stats.token_times[1:]
            rng.shuffle(widths)
            forwards = {}
            for n in widths:
                with Timer(first.device) as t:
                    target.step(context[:, CONTEXT : CONTEXT + n])
                target.rollback(CONTEXT)
                forwards[n] = t.seconds
            with Timer(first.device) as t:
                draft.step(context[:, CONTEXT : CONTEXT + 1])
            draft.rollback(CONTEXT)
            if round_:  # the first round warms every engine up
                times[name]["ar"].append(sum(steps) / len(steps))
                times[name]["draft"].append(t.seconds)
                for n, seconds in forwards.items():
                    times[name][n].append(seconds)
    return times
