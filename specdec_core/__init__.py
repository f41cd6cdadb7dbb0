"""specdec_core: the library behind the course on fast LLM decoding.

The concepts, one file each, read top to bottom (every module of the package, one line each):

    generation.py        Generation (what every method returns), Output (budget and EOS), common prefix, clocks
    records.py           what a run records: one dataclass per method family, read by field
    lm.py                Decoder: a model, its KV cache (dynamic or static), prefill / step / rollback; step_masked / keep
    kv_dynamic.py        the dynamic KV cache (DynamicCache): grows by concatenation, the model masks itself
    kv_static.py         the static KV cache (StaticCache): one preallocated buffer, positions and a mask over it
    kv_batch.py          the batched KV cache: B rows in one buffer, each written at its own length (a [B] offset)
    batch.py             BatchDecoder (B rows: prefill / step / rollback per row), the batched AR loop
    sampling.py          logits → probabilities (temperature, top-k, top-p) → a token
    ar.py                the autoregressive baseline                                    lesson 01
    costmodel.py         this machine's step, v(n) (causal and tree-masked), the loop's overhead, predictions  01–09
    load_costs.py        the cost model under load: t(B, n), speculation's gain at batch B, crossover, roofline's turn, AdaptiveGamma  10
    fast.py              prepacked oneDNN linears (f32, and bf16 where the CPU has it): an inference-only twin  01, 01b
    engines.py           our AR and the speculation engine, chosen by measurement on this machine  01b, 09
    memory.py            weight bytes, the bytes a step reads, the KV cache's size      lessons 01, 01b, 05, 06
    precision.py         precision rungs: bf16 / f16 weights, int8 weight-only, what each costs  lesson 01b
    naive.py             the tutorial's "draft, then score by log-likelihood"           lesson 02
    drafters.py          Drafter (the hooks), ModelDrafter, NGramDrafter, LookupFirst   lessons 03, 04b
    speculative.py       speculative_step (one draft-verify step), speculative_generate  lesson 03
    accept.py            the chain's accept / residual / bonus rule (verify, verify_greedy)  lesson 03
    batch_speculative.py speculative sampling for a batch: one verify for all rows, each its own count, a γ per step
    scheduler.py         continuous batching: Poisson arrivals, a finished row's slot refilled next step, TTFT/TPOT  10
    exactness.py         exact laws, chi-square, total variation                        lesson 03
    width_drift.py       greedy exactness on a rounding engine: same tokens, or a near-tie its width rounding flips
    bug_zoo.py           deliberately broken variants the tests (and lesson 03) must catch
    theory.py            Leviathan's formulas: E(α, γ), S, the best γ, the Chooser interface, AutoGamma  03–04
    feature_drafter.py   the EAGLE-style feature head with FR-Spec's reduced output     lesson 04
    frspec.py            FR-Spec: a draft that guesses among the S most frequent tokens  lesson 04
    medusa.py            Medusa heads: k residual heads on the target's last hidden state, chain and tree  04c
    self_draft.py        self-speculation: a subset of the target's own layers drafts (early exit, SWIFT's skips)
    tree.py              token trees: structure, mask, verification (greedy, sampled), tree_generate  lesson 04b
    tree_shapes.py       Sequoia's programme: the tree shape for this machine's v(n)    lesson 04b
    widths.py            the menu of forward widths (1, 2, 4, …, 64): a varying forward pads to the next one
    compiled.py          the compiled step: torch.compile of decode and verify, one graph per menu width  01b
    tree_drafters.py     how a draft model, prompt lookup and the feature head (EAGLE-2) grow trees  lesson 04b
    calibration.py       how far a drafter's own q can be trusted: reliability curve, ECE (the dynamic tree's ranking)
    nf4.py               NF4 from scratch, bit-exact with bitsandbytes                  lessons 05–06
    jacobi.py            Jacobi decoding (one block or several in flight) and its trajectories  lesson 07
    ngram_pool.py        the n-grams Jacobi iterations make (recycling, lookahead)      lessons 07b, 08b
    lookahead.py         lookahead decoding: window, pool, candidates in one forward    lesson 07b
    lookahead_shapes.py  which lookahead shape (W, N, G) pays: the run's hits priced by the cost model  07b
    cllm.py              consistency-LLM trajectories and losses                        lesson 08
    jacobi_forcing.py    Jacobi Forcing's noise schedule, packing and loss              lesson 08b

The plumbing, which the concepts use and a reader can skip:

    peers.py             the same algorithms in transformers and llama.cpp (optional), for comparison
    models.py            presets, model pairs, load_pair / load_drafter / load_cllm
    assets.py            the offline model files and every shipped file's path
    prompts.py           prompt sets (the tutorial's, chat, copy-heavy, HumanEval)
    code_prompts.py      lesson 08's narrow domain: Python requests, the held-out ones and their checks
    toy.py               tiny random causal LMs: the test models
    envinfo.py           the machine's table and lesson 00's set-up check
    machine.py           the machine's name, its one memory bandwidth, whether a measurement may be kept
    files.py             the one atomic writer
    progress.py          tqdm whose notebook bars are stored finished (every progress bar of the course)
    __main__.py          python -m specdec_core prepare|where (make setup)

The tooling, in packages of their own that the concepts never import: ``train/`` (makes the shipped
drafts and the CLLM and Jacobi Forcing adapters), ``bench/`` (timing harness, benchmark, comparisons),
``viz/`` (figures and widgets), ``course/`` (exercises and their checkers); ``drafts/`` holds the
shipped weights and their logs (no code). Between them the imports run one way, course → train → bench
→ viz (viz draws plain data; bench measures and draws its report; train evaluates what it trains with
bench), with no string import (``tests/test_structure.py``). Every name has one import path: the module
that defines it.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["Generation", "__version__"]


def __getattr__(name: str):
    """``specdec_core.Generation``, imported on first use: importing the package needs no torch, so lesson
    00's set-up check (:func:`specdec_core.envinfo.setup_check`) can say that torch is missing."""
    if name == "Generation":
        from .generation import Generation

        return Generation
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
