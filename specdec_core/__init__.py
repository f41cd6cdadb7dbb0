"""specdec_core: the library behind the course on fast LLM decoding.

The concepts, one file each, read top to bottom:

    generation.py       Generation (what every method returns), EOS, common prefix, timer
    lm.py               Decoder: a model, its KV cache, prefill / step / rollback; step_masked / keep
    sampling.py         logits → probabilities (temperature, top-k, top-p) → a token
    ar.py               the autoregressive baseline                                    lesson 01
    naive.py            the tutorial's "draft, then score by log-likelihood"           lesson 02
    speculative.py      Drafter, ModelDrafter, NGramDrafter, LookupFirst, speculative_generate  lesson 03
    accept.py           the chain's accept / residual / bonus rule (verify, verify_greedy)  lesson 03
    theory.py           Leviathan's formulas: E(α, γ), S(α, γ, c, v), the best γ, S = τ/(dc + v + o)  lessons 03–04
    costmodel.py        this machine's step, v(n) (causal and tree-masked), the loop's overhead, predictions
    fast.py frspec.py   prepacked oneDNN linears (the twin); FR-Spec's reduced output layer  lessons 01, 04
    tree.py             token trees: structure, mask, verification (greedy, sampled), tree_generate
    tree_shapes.py      Sequoia's programme: the tree shape for this machine's v(n)
    tree_drafters.py    how a draft model and prompt lookup grow trees
    ngram_pool.py       the n-grams Jacobi iterations make                             lesson 07
    exactness.py        exact laws, chi-square, total variation                         lesson 03
    feature_drafter.py  the EAGLE-style feature head with FR-Spec's reduced output      lesson 04
    nf4.py              NF4 from scratch, bit-exact with bitsandbytes                  lessons 05–06
    memory.py           weight bytes and the KV cache's size                           lessons 01, 06
    jacobi.py           Jacobi decoding and its trajectories                            lesson 07
    cllm.py             consistency-LLM trajectories and losses                         lesson 08
    jacobi_forcing.py   Jacobi Forcing's noise schedule, packing and loss               lesson 08b
    bug_zoo.py          deliberately broken variants the tests must catch
    peers.py            the same algorithms in transformers, for comparison
    models.py assets.py the model pairs, drafters and every shipped file
    prompts.py code_prompts.py toy.py envinfo.py files.py   prompt sets, toy models, the machine, atomic writes

The tooling, in packages of their own that the concepts never import: ``train/`` (makes the shipped
drafts and the CLLM adapter), ``bench/`` (timing harness, benchmark, comparisons), ``viz/`` (figures
and widgets), ``course/`` (exercises and their checkers).
"""

from __future__ import annotations

from . import _legacy

_legacy.install()  # old module paths (e.g. specdec_core.distill) keep working for one release

__version__ = "0.1.0"
__all__ = ["Generation", "__version__"]


def __getattr__(name: str):
    """``specdec_core.Generation``, imported on first use: importing the package needs no torch, so lesson
    00's set-up check (:func:`specdec_core.envinfo.setup_check`) can say that torch is missing."""
    if name == "Generation":
        from .generation import Generation

        return Generation
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
