"""What the capstones' autograder tests use: tripwires on the library's own answers, and counters.

    with blocked("specdec_core.speculative.speculative_generate", "specdec_core.ar.generate"):
        out = student_function(...)          # a RuntimeError if it calls either, however imported

    with counting(model) as calls:           # forward passes of a model, and the tokens they read
        student_function(model, ...)
    calls.forwards, calls.tokens

A capstone asks the student to *write* something the library already has. Its hidden tests run the
student's code with the library's version blocked: :func:`blocked` swaps the function's code object
for one that raises, so every reference to it — ``import specdec_core.speculative as s``, ``from …
import speculative_generate as sg``, a method bound earlier — hits the tripwire, and restores it
afterwards. Calls are counted with forward hooks, so a student's own count (``stats``) can be checked
against what really ran; :func:`recording` keeps what a library function returned to the student's
code (capstone 2 checks c and v against the AR run the student really timed).

Hidden inputs come from :func:`grading_rng`, seeded by ``SPECDEC_GRADING_SEED`` (an instructor's own
secret), otter's per-grading seed when there is one (:data:`OTTER_SEED_LINE`: one seed per student) and
the test's name: change either, and every hidden prompt, toy model and sampler seed changes.

**χ² tests and false failures.** Each χ² test compares counts with an exact law, pooling cells whose
expected count is below 5 so that Pearson's statistic follows its χ² law closely, and fails below
:data:`P_MIN` = 10⁻⁵: two-token samples of a loop on toy models (:func:`sampled_pvalue`, 1,000;
:func:`drafter_sampled_pvalue`, 800); capstone 1's law tests (:mod:`.grading_laws`: the first three tokens of
1,000 runs at γ = 2, T = 0.8, top-k 4, on a toy chosen so that every classic error of the sampled step,
:mod:`.sampled_mutants`, fails with computed probability ≥ 0.999; a draw the target never makes fails at
once); capstone 3's contract test (:mod:`.grading_guesses`: 400 or 600 proposals of three guesses after
:data:`TOY_PROMPT`, each guess against the q row reported for it; every drafter of :mod:`.drafter_mutants`
fails it with computed probability ≥ 0.9999). For a correct answer the p-value is uniform on [0, 1] — its
random draws are its own, so a fixed seed does not make it pass — and a test fails it once in 100,000
gradings. A capstone has at most six χ² tests, so a correct answer loses points less than 6 × 10⁻⁵ < 1 in
10,000 of the time (union bound), while the catalogues' wrong answers fail them with the power their
modules compute (``tests/test_assignments_laws.py``, ``…_mutations_c3.py`` assert it).
"""

from __future__ import annotations

import importlib
import math
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

BLOCKED = "blocked while grading"  # in the message of the error a blocked function raises
P_MIN = 1e-5  # a χ² test fails below this p-value (see the module's docstring: < 1 in 10,000 false failures)
SEED_VARIABLE = "SPECDEC_GRADING_SEED"


# otter's ``seed_variable`` (each master's ASSIGNMENT CONFIG): otter puts ``<it> = <seed>`` at the top of every
# code cell when an autograder's otter_config.json has a ``seed``, which sets OTTER_SEED on this module. The
# module never assigns OTTER_SEED itself, so ``importlib.reload`` (the hidden tests') keeps it.
OTTER_SEED_LINE = "__import__('specdec_core.course.grading').course.grading.OTTER_SEED"


def grading_seed() -> str:
    """``$SPECDEC_GRADING_SEED`` (default: the course's own), then ``/seed-N`` when otter set a seed N."""
    base = os.environ.get(SEED_VARIABLE, "specdec-course")
    student = globals().get("OTTER_SEED")
    return base if student is None else f"{base}/seed-{student}"


def grading_rng(name: str) -> random.Random:
    """The random source of one hidden test: seeded by :func:`grading_seed` and ``name``, so each test draws
    its own inputs and an instructor's seed, or a student's own, changes all of them."""
    return random.Random(f"{grading_seed()}/{name}")


def _tripwire_code(like):
    """A code object that raises, with the same free variables as ``like`` (a function's code can
    only be swapped for one with as many: a decorated function is a closure over what it wraps)."""
    names = like.co_freevars
    body = "    def tripwire(*args, **kwargs):\n"
    if names:
        body += f"        {', '.join(names)}\n"  # reference each, so the closure has exactly these
    # only builtins may be named: the code runs with the blocked function's module globals
    body += "        raise RuntimeError('this assignment asks you to write it yourself: the library\\'s version is blocked while grading')\n"
    source = "def outer():\n" + "".join(f"    {n} = None\n" for n in names) + body + "    return tripwire\n"
    scope: dict = {}
    exec(source, scope)  # noqa: S102 (a fixed template; names come from a code object)
    return scope["outer"]().__code__.replace(co_name=like.co_name)


def _resolve(dotted: str):
    """The object at a dotted path: the longest importable module, then attributes (e.g. a class's method)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            owner = getattr(owner, part)
        return owner
    raise ImportError(f"cannot resolve {dotted}")


@contextmanager
def blocked(*functions: str) -> Iterator[None]:
    """Make the named functions (dotted paths, e.g. ``specdec_core.speculative.verify``) raise a
    RuntimeError saying :data:`BLOCKED` inside the ``with`` block, wherever they are referenced from."""
    targets = [_resolve(f) for f in functions]
    targets += [fn.__wrapped__ for fn in targets if hasattr(fn, "__wrapped__")]  # what a decorator wraps, too
    saved = [fn.__code__ for fn in targets]
    try:
        for fn in targets:
            fn.__code__ = _tripwire_code(fn.__code__)
        yield
    finally:
        for fn, code in zip(targets, saved):
            fn.__code__ = code


@contextmanager
def recording(*functions: str) -> Iterator[dict[str, list]]:
    """Inside the block, the named functions (dotted paths) work as usual and what each call returns
    is kept: ``{dotted path: [return values, in call order]}`` — however the student imported them."""
    seen: dict[str, list] = {f: [] for f in functions}
    swapped = []
    for dotted in functions:
        fn = _resolve(dotted)
        while hasattr(fn, "__wrapped__"):  # a decorator's closure calls the function it wraps: swap that one
            fn = fn.__wrapped__
        if fn.__code__.co_freevars:
            raise ValueError(f"cannot record {dotted}: it is a closure")
        original = type(fn)(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        key = f"_recorded_while_grading_{len(swapped)}_{fn.__name__}"

        def kept(*args, _original=original, _log=seen[dotted], **kwargs):
            out = _original(*args, **kwargs)
            _log.append(out)
            return out

        fn.__globals__[key] = kept  # the swapped code runs with the function's module globals
        scope: dict = {}
        exec(f"def trampoline(*args, **kwargs):\n    return {key}(*args, **kwargs)\n", scope)  # noqa: S102
        swapped.append((fn, fn.__code__, key))
        fn.__code__ = scope["trampoline"].__code__.replace(co_name=fn.__code__.co_name)
    try:
        yield seen
    finally:
        for fn, code, key in swapped:
            fn.__code__ = code
            fn.__globals__.pop(key, None)


@dataclass
class Calls:
    forwards: int = 0  # forward passes of the model
    tokens: int = 0  # input positions they read (batch 1), summed


@contextmanager
def counting(model: torch.nn.Module) -> Iterator[Calls]:
    """Count ``model``'s forward passes and the input positions they read, inside the block."""
    calls = Calls()

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        calls.forwards += 1
        calls.tokens += 0 if ids is None else int(ids.shape[-1])

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield calls
    finally:
        handle.remove()


# --- capstone 1: the speculative loop ---------------------------------------------------------------

SPECULATIVE_LIBRARY = ("specdec_core.speculative.speculative_generate", "specdec_core.speculative.verify",
                       "specdec_core.speculative.verify_greedy", "specdec_core.accept.verify",
                       "specdec_core.accept.verify_greedy", "specdec_core.tree.tree_generate",
                       "specdec_core.tree.verify_tree", "specdec_core.tree.verify_tree_greedy", "specdec_core.ar.generate",
                       "specdec_core.ar.next_token", "specdec_core.peers.hf_generate",
                       "specdec_core.peers.transformers_assisted", "transformers.GenerationMixin.generate")


def greedy_matches(loop, target, drafter, ids: torch.Tensor, n: int, gamma: int, eos=None) -> bool:
    """Whether ``loop(target, drafter, ids, n, gamma=…, eos_token_id=…)`` returns, with the library's
    loop blocked, exactly the target's greedy tokens (computed here first, unblocked)."""
    from ..ar import generate

    reference = generate(target, ids, n, eos_token_id=eos).new_tokens
    with blocked(*SPECULATIVE_LIBRARY):
        got, _ = loop(target, drafter, ids, n, gamma=gamma, eos_token_id=eos)
    return list(got) == reference


def sampled_pvalue(loop, seed: int, temperature: float, top_p: float | None = None, draws: int = 1000,
                   gamma: int = 2, top_k: int | None = None, prompt: list[int] | None = None) -> float:
    """χ² p-value of ``draws`` 2-token samples of ``loop`` (library blocked) on a pair of toy models
    with an 8-token vocabulary (made from ``seed``), against the target's exact law at the same warp.
    With γ = 1 the second token is the bonus token whenever the guess is kept."""
    from ..drafters import ModelDrafter
    from ..exactness import chi_square_pvalue, empirical_law, exact_law
    from ..toy import tiny_llama

    target = tiny_llama(8, hidden_size=32, seed=seed, logit_scale=20.0)
    draft = tiny_llama(8, hidden_size=32, seed=seed + 50, num_layers=1, logit_scale=4.0)
    ids = torch.tensor([prompt or [2, 5, 3]])
    gen = torch.Generator().manual_seed(seed)

    def draw() -> list[int]:
        return list(loop(target, ModelDrafter(draft), ids, 2, gamma=gamma, temperature=temperature,
                         top_k=top_k, top_p=top_p, generator=gen)[0])

    with blocked(*SPECULATIVE_LIBRARY):
        counts = empirical_law(draw, (8, 8), draws)
    return chi_square_pvalue(counts, exact_law(target, ids, 2, temperature, top_k=top_k, top_p=top_p))


class Watched:
    """Wraps a drafter and logs each proposal as (context length, guesses): what really ran."""

    def __init__(self, drafter) -> None:
        self.inner, self.log = drafter, []

    def begin(self, warp, generator) -> None:
        self.inner.begin(warp, generator)

    def propose(self, context: torch.Tensor, k: int):
        tokens, q = self.inner.propose(context, k)
        self.log.append((int(context.shape[1]), tokens.tolist()))
        return tokens, q

    def accepted(self, n_accepted: int, n_drafted: int) -> None:
        self.inner.accepted(n_accepted, n_drafted)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def greedy_alphas(log: list[tuple[int, list[int]]], sequence: list[int]) -> list[float]:
    """The α (accepted ÷ examined guesses) a greedy run could truly report, from its proposals ``log``
    (:class:`Watched`) and the whole ``sequence`` (prompt + output): a guess is kept while it equals the
    output there. The last step is ambiguous where the output ends inside its guesses (cut by
    ``max_new_tokens`` or EOS): every count it allows is returned. [] when nothing was proposed."""
    steps = []  # (the accepted counts this step allows, its number of guesses)
    for length, guesses in log:
        if not guesses:
            continue
        there = sequence[length : length + len(guesses)]
        n = next((i for i, (g, t) in enumerate(zip(guesses, there)) if g != t), len(there))
        steps.append((list(range(n, len(guesses) + 1)) if n == len(there) < len(guesses) else [n], len(guesses)))
    if not steps:
        return []
    accepted = sum(options[0] for options, _ in steps[:-1])
    examined = sum(min(options[0] + 1, k) for options, k in steps[:-1])
    options, k = steps[-1]
    return [(accepted + m) / (examined + min(m + 1, k)) for m in options]


# --- capstone 2: measuring --------------------------------------------------------------------------

MEASURING_LIBRARY = ("specdec_core.bench.harness.interleaved", "specdec_core.theory.speedup",
                     "specdec_core.theory.predicted_speedup", "specdec_core.theory.expected_tokens",
                     "specdec_core.bench.drafters._costs", "specdec_core.bench.drafters.compare_drafters", "specdec_core.bench.drafters.speedup_point",
                     "specdec_core.bench.drafters.gamma_sweep", "specdec_core.bench.drafters.acceptance")


# --- capstone 3: a drafter of the student's own design ---------------------------------------------

LIBRARY_DRAFTERS = ("specdec_core.drafters.NGramDrafter.propose", "specdec_core.drafters.ModelDrafter.propose",
                    "specdec_core.drafters.LookupFirst.propose", "specdec_core.feature_drafter.FeatureDrafter.propose")
TOY_PROMPT = [2, 5, 3, 2, 5, 1, 2, 5]  # repeats itself, so drafters that copy from the context find something


def proposal_problem(tokens, q, k: int, vocab_size: int, greedy: bool) -> str:
    """'' when ``propose(context, k)`` returned a valid ``(tokens [k'], q [k', V] or None)``, else what is wrong."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long or tokens.dim() != 1:
        return "tokens must be a 1-D torch.long tensor"
    if tokens.numel() > k:
        return f"{tokens.numel()} guesses for k = {k}"
    if tokens.numel() and not (0 <= int(tokens.min()) and int(tokens.max()) < vocab_size):
        return "a guess outside the vocabulary"
    if q is None:
        return "" if greedy else "q may be None only at temperature 0"
    if not isinstance(q, torch.Tensor) or tuple(q.shape) != (tokens.numel(), vocab_size):
        return f"q must be [k', V] = [{tokens.numel()}, {vocab_size}], got {getattr(q, 'shape', type(q))}"
    if tokens.numel() == 0:
        return ""
    if bool((q < 0).any()) or not torch.allclose(q.sum(-1), torch.ones(len(q), dtype=q.dtype), atol=1e-4):
        return "every row of q must be a probability distribution (non-negative, summing to 1)"
    if bool((q[torch.arange(len(tokens)), tokens] <= 0).any()):
        return "a guess that its own q gives probability 0: it was not drawn from q"
    return ""


def first_guess_pvalue(drafter, vocab_size: int, draws: int = 600, seed: int = 0) -> float:
    """χ² p-value of ``draws`` first guesses after :data:`TOY_PROMPT` (T = 1) against the q the drafter
    returns for them: a drafter whose guesses are not drawn from its q gets a small p-value. Two rules
    the notebook states: q of the first guess depends only on the context, and something is proposed
    after :data:`TOY_PROMPT`. A q with one token in its support (a deterministic drafter) has no χ²
    (zero degrees of freedom): it passes (1.0) when every guess is that token, else 0.0; so does any
    guess outside q's support."""
    from ..exactness import chi_square_pvalue
    from ..sampling import Warp

    context = torch.tensor([TOY_PROMPT])
    gen = torch.Generator().manual_seed(seed)
    counts, law = np.zeros(vocab_size), None
    for _ in range(draws):
        drafter.begin(Warp(1.0, None, None), gen)
        tokens, q = drafter.propose(context, 1)
        if tokens.numel() == 0:
            raise AssertionError("✗ the drafter proposed nothing after grading.TOY_PROMPT, a context that repeats "
                                 "itself: propose something there (a rule of the assignment)")
        if law is not None and not torch.allclose(q[0].double(), law):
            raise AssertionError("✗ q of the first guess changed between calls with the same context: it must "
                                 "depend only on the context (a rule of the assignment)")
        law = q[0].double()
        counts[int(tokens[0])] += 1
    support = law.numpy() > 0
    if counts[~support].sum() > 0:
        return 0.0
    if support.sum() == 1:
        return 1.0
    return chi_square_pvalue(counts, law.numpy())


def drafter_greedy_matches(make_drafter, target, ids: torch.Tensor, n: int, gamma: int, eos=None) -> bool:
    """Whether the library's loop with ``make_drafter()`` (the library's drafters blocked) returns the
    target's greedy tokens (computed first, unblocked)."""
    from ..ar import generate
    from ..speculative import speculative_generate

    reference = generate(target, ids, n, eos_token_id=eos).new_tokens
    with blocked(*LIBRARY_DRAFTERS):
        got = speculative_generate(target, make_drafter(), ids, n, gamma=gamma, eos_token_id=eos).new_tokens
    return got == reference


def drafter_sampled_pvalue(make_drafter, seed: int, temperature: float, top_p: float | None = None,
                           draws: int = 800, gamma: int = 3) -> float:
    """χ² p-value of ``draws`` 2-token samples of the library's loop with ``make_drafter(vocab_size)``
    (library drafters blocked) on a toy target with an 8-token vocabulary, against its exact law."""
    from ..exactness import chi_square_pvalue, empirical_law, exact_law
    from ..speculative import speculative_generate
    from ..toy import tiny_llama

    target = tiny_llama(8, hidden_size=32, seed=seed, logit_scale=8.0)
    prompt = torch.tensor([TOY_PROMPT])
    gen = torch.Generator().manual_seed(seed)
    drafter = make_drafter(8)

    def draw() -> list[int]:
        return speculative_generate(target, drafter, prompt, 2, gamma=gamma, temperature=temperature,
                                    top_p=top_p, generator=gen).new_tokens

    with blocked(*LIBRARY_DRAFTERS):
        counts = empirical_law(draw, (8, 8), draws)
    return chi_square_pvalue(counts, exact_law(target, prompt, 2, temperature, top_p=top_p))


def acceptance_against_lookup(make_drafter, target, tokenizer, prompts: list[str], n: int = 32,
                              gamma: int = 4) -> dict[str, dict[str, float]]:
    """Greedy, deterministic: ``{"yours" | "prompt lookup": {"alpha", "tokens_per_call", "extra"}}`` of the
    library's loop on ``prompts`` (``extra``: tokens per target call − 1, what guessing adds, summed over
    prompts as total tokens ÷ total calls − 1). Prompt lookup is the library's ``NGramDrafter``; yours
    runs with the library's drafters blocked."""
    from ..drafters import NGramDrafter
    from ..models import chat_ids
    from ..speculative import speculative_generate

    vocab = target.config.vocab_size
    eos = tokenizer.eos_token_id
    inputs = [chat_ids(tokenizer, p, target.device) for p in prompts]

    def run(make) -> dict[str, float]:
        outs = [speculative_generate(target, make(), ids, n, gamma=gamma, eos_token_id=eos) for ids in inputs]
        tokens, calls = sum(len(o.new_tokens) for o in outs), sum(o.stats.target_calls for o in outs)
        alphas = [o.stats.alpha for o in outs if not math.isnan(o.stats.alpha)]  # NaN: no guess examined
        return {"alpha": float(np.mean(alphas)) if alphas else 0.0, "tokens_per_call": tokens / calls,
                "extra": tokens / calls - 1}

    lookup = run(lambda: NGramDrafter(vocab))
    with blocked(*LIBRARY_DRAFTERS):
        yours = run(lambda: make_drafter(vocab))
    return {"yours": yours, "prompt lookup": lookup}
