"""specdec_core: the library behind the course on fast LLM decoding.

The concepts, one file each, read top to bottom:

    generation.py       Generation (what every method returns), EOS, common prefix, timer
    lm.py               Decoder: a model, its KV cache, prefill / step / rollback
    sampling.py         logits → probabilities (temperature, top-k, top-p) → a token
    ar.py               the autoregressive baseline                                    lesson 01
    naive.py            the tutorial's "draft, then score by log-likelihood"           lesson 02
    speculative.py      Drafter, ModelDrafter, NGramDrafter, verify, speculative_generate  lesson 03
    theory.py           Leviathan's formulas: E(α, γ), S(α, γ, c, v), the best γ       lessons 03–04
    exactness.py        exact laws, chi-square, total variation                         lesson 03
    feature_drafter.py  the EAGLE-style feature head with FR-Spec's reduced output      lesson 04
    nf4.py              NF4 from scratch, bit-exact with bitsandbytes                  lessons 05–06
    memory.py           weight bytes and the KV cache's size                           lessons 01, 06
    jacobi.py           Jacobi decoding and its trajectories                            lesson 07
    cllm.py             consistency-LLM trajectories and losses                         lesson 08
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
