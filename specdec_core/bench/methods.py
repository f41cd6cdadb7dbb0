"""The decoding methods the benchmark compares, as one registry: name → ``fn(pair, input_ids,
max_new_tokens) → Generation`` plus what the benchmark needs to know about each (greedy or sampled,
which models it uses, a one-off set-up). ``runner.py`` runs them side by side.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from .. import assets, medusa, self_draft
from ..ar import generate as ar_generate
from ..drafters import ModelDrafter, NGramDrafter
from ..generation import Generation
from ..jacobi import jacobi_generate
from ..lookahead import lookahead_generate
from ..models import OFFLINE, PRESETS, Pair, chat_ids, load_cllm, load_drafter, lookup_first
from ..naive import naive_generate
from ..nf4 import quantize_model
from ..peers import hf_generate, transformers_assisted
from ..prompts import HELDOUT
from ..speculative import speculative_generate
from ..tree import tree_generate
from . import llamacpp
from .quantized import load_bnb_variant

MethodFn = Callable[[Pair, torch.Tensor, int], Generation]  # (pair, input_ids [1, T], max_new_tokens)


@dataclass(frozen=True)
class Method:
    """One entry of the registry: ``fn(pair, input_ids, max_new_tokens) → Generation``.

    greedy: its output is compared with our AR's greedy output (False for a sampling method).
    models: the models it runs, for the weights column (None: not reported).
    prepare: one-off set-up (e.g. quantizing a copy of the target), run before its warm-up, untimed.
    """

    fn: MethodFn
    label: str
    greedy: bool = True
    models: Callable[[Pair], list[torch.nn.Module]] | None = None
    prepare: Callable[[Pair], object] | None = None


# Methods that cannot run here, each with a one-line reason that says how to get it: the llama.cpp rows
# without the optional extra (`make llama-cpp`).
NOT_AVAILABLE: dict[str, str] = llamacpp.not_available()


# ---- the methods ------------------------------------------------------------------------------


def eos_id(pair: Pair) -> int | None:
    return pair.tokenizer.eos_token_id


def _naive(pair: Pair, input_ids: torch.Tensor, max_new_tokens: int) -> Generation:
    """The tutorial's method takes text: the prompt's ids are decoded (special tokens kept) and re-tokenized."""
    return naive_generate(pair.draft, pair.target, pair.tokenizer.decode(input_ids[0]), max_new_tokens,
                          tokenizer=pair.tokenizer, eos_token_id=eos_id(pair))


def nf4_copies() -> Callable[[Pair], torch.nn.Module]:
    """``get(pair)``: our NF4 copy of the pair's target (``nf4.quantize_model`` on a deep copy), made once."""
    made: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(pair: Pair) -> torch.nn.Module:
        if pair.target not in made:
            made[pair.target] = copy.deepcopy(pair.plain().target)  # NF4 replaces plain nn.Linear layers
            quantize_model(made[pair.target])  # every Linear but the output head → NF4, block 64
        return made[pair.target]
    return get


def bnb_targets() -> Callable[[Pair], torch.nn.Module]:
    """``get(pair)``: the pair's target as bitsandbytes' NF4 (the tutorial's config, lesson 06), loaded once.
    bitsandbytes quantizes while loading, so it needs the preset's files, not a model in memory."""
    made: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(pair: Pair) -> torch.nn.Module:
        if pair.preset not in PRESETS:
            raise ValueError(f"bitsandbytes quantizes a model while loading it: bnb_nf4_ar needs a preset's target "
                             f"(offline or a Hub preset), not a {pair.preset!r} pair built in memory")
        if pair.target not in made:
            made[pair.target] = load_bnb_variant(pair.preset, pair.device).target
        return made[pair.target]
    return get


def cllm_copies(folder: Path = assets.CLLM_DIR) -> Callable[[Pair], torch.nn.Module]:
    """``get(pair)``: the CLLM — a copy of the offline target with the shipped adapter in ``folder`` merged in
    (default: lesson 08's; ``assets.JF_ADAPTER``: lesson 08b's Jacobi Forcing adapter)."""
    made: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(pair: Pair) -> torch.nn.Module:
        if pair.preset != OFFLINE:
            raise ValueError("the CLLM adapter ships for the offline target only: train one with "
                             "python -m specdec_core.train cllm")
        if pair.target not in made:  # LoRA merges into plain nn.Linear layers; then on the pair's own engine
            made[pair.target] = pair.on_its_engine(load_cllm(copy.deepcopy(pair.plain().target), folder))
        return made[pair.target]
    return get


def feature_drafters() -> Callable[[Pair], object]:
    """``get(pair)``: the pair's feature (EAGLE) drafter, loaded once (untimed, in ``prepare``)."""
    made: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(pair: Pair):
        if pair.target not in made:
            made[pair.target] = load_drafter(pair, "feature")
        return made[pair.target]
    return get


def medusa_drafters() -> Callable[[Pair], medusa.MedusaDrafter]:
    """``get(pair)``: the pair's Medusa heads as a drafter (:func:`~specdec_core.medusa.load_heads`), loaded once."""
    made: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(pair: Pair) -> medusa.MedusaDrafter:
        if pair.target not in made:
            made[pair.target] = medusa.load_heads(pair)
        return made[pair.target]
    return get


def build_methods(gamma: int, lookup_tokens: int = 4, temperature: float = 0.7, seed: int = 0,
                  block_size: int = 16, feature_gamma: int = 2, costs=None) -> dict[str, Method]:
    """The registry: name → :class:`Method`. ``gamma``: draft tokens per step of the model-draft
    methods (ours and transformers'); ``feature_gamma``: the same for the feature drafter;
    ``lookup_tokens``: tokens per step of prompt lookup; ``temperature`` and ``seed``: the sampled
    speculative runs (a fresh generator per call); ``costs``: the machine's cost model (``costmodel.CostModel``),
    with which ``spec_best`` chooses its γ step by step (``gamma="auto"``; without it, ``feature_gamma``)."""
    nf4 = nf4_copies()
    bnb = bnb_targets()
    feature, heads = feature_drafters(), medusa_drafters()
    cllm, jacobi_forcing = cllm_copies(), cllm_copies(assets.JF_ADAPTER)

    def spec(pair: Pair, ids: torch.Tensor, n: int, temperature: float = 0.0) -> Generation:
        gen = torch.Generator().manual_seed(seed) if temperature > 0 else None  # host: sampled paths draw from a seeded host generator
        return speculative_generate(pair.target, ModelDrafter(pair.draft), ids, n, gamma=gamma,
                                    temperature=temperature, eos_token_id=eos_id(pair), generator=gen)

    chosen_layers: dict[int, dict] = {}  # id(target) → the self-draft subset its search chose (on the warm-up)

    def self_layers(pair: Pair) -> dict:
        """Self-speculation's subset and γ, searched once per target on a held-out prompt (self_draft.choose)."""
        if id(pair.target) not in chosen_layers:
            ids = chat_ids(pair.tokenizer, HELDOUT[0], pair.device)
            chosen_layers[id(pair.target)] = self_draft.choose(pair.target, ids, costs.v if costs else lambda n: 1.0)
        return chosen_layers[id(pair.target)]

    def spec_self(pair: Pair, ids: torch.Tensor, n: int) -> Generation:
        best = self_layers(pair)
        drafter = ModelDrafter(self_draft.layer_subset(pair.target, best["keep"]))
        return speculative_generate(pair.target, drafter, ids, n, gamma=best["gamma"], eos_token_id=eos_id(pair))

    def spec_feature(pair: Pair, ids: torch.Tensor, n: int, temperature: float = 0.0) -> Generation:
        gen = torch.Generator().manual_seed(seed) if temperature > 0 else None  # host: sampled paths draw from a seeded host generator
        return speculative_generate(pair.target, feature(pair), ids, n, gamma=feature_gamma,
                                    temperature=temperature, eos_token_id=eos_id(pair), generator=gen)

    def spec_best(pair: Pair, ids: torch.Tensor, n: int) -> Generation:
        return speculative_generate(pair.target, lookup_first(pair, feature(pair)), ids, n, gamma="auto" if costs else feature_gamma, costs=costs,
                                    eos_token_id=eos_id(pair))

    def lookup(pair: Pair, ids: torch.Tensor, n: int) -> Generation:
        drafter = NGramDrafter(pair.target.get_output_embeddings().out_features, max_ngram=3)
        return speculative_generate(pair.target, drafter, ids, n, gamma=lookup_tokens, eos_token_id=eos_id(pair))

    def tree(pair: Pair, ids: torch.Tensor, n: int, temperature: float = 0.0, lookup_drafter: bool = False) -> Generation:
        gen = torch.Generator().manual_seed(seed) if temperature > 0 else None  # host: sampled paths draw from a seeded host generator
        drafter = NGramDrafter(pair.target.config.vocab_size) if lookup_drafter else ModelDrafter(pair.draft)
        return tree_generate(pair.target, drafter, ids, n, shape="auto" if costs else TREE_SHAPE, costs=costs,
                             temperature=temperature, eos_token_id=eos_id(pair), generator=gen)

    def tree_feature(pair: Pair, ids: torch.Tensor, n: int, temperature: float = 0.0) -> Generation:
        """EAGLE-2's dynamic tree from the feature head: the shape gives the node budget and the depth."""
        gen = torch.Generator().manual_seed(seed) if temperature > 0 else None  # host: sampled paths draw from a seeded host generator
        return tree_generate(pair.target, feature(pair), ids, n, shape="auto" if costs else TREE_SHAPE, costs=costs,
                             temperature=temperature, eos_token_id=eos_id(pair), generator=gen)

    def spec_medusa(pair: Pair, ids: torch.Tensor, n: int, temperature: float = 0.0) -> Generation:
        """Medusa's chain: γ = its number of heads (head i guesses the i-th token after the context)."""
        gen = torch.Generator().manual_seed(seed) if temperature > 0 else None  # host: sampled paths draw from a seeded host generator
        return speculative_generate(pair.target, heads(pair), ids, n, gamma=heads(pair).k, temperature=temperature,
                                    eos_token_id=eos_id(pair), generator=gen)

    def tree_medusa(pair: Pair, ids: torch.Tensor, n: int, temperature: float = 0.0) -> Generation:
        """Medusa's tree (each head's ranked tokens in the shape's rank paths), the course's exact tree verify."""
        gen = torch.Generator().manual_seed(seed) if temperature > 0 else None  # host: sampled paths draw from a seeded host generator
        return tree_generate(pair.target, heads(pair), ids, n, shape="auto" if costs else TREE_SHAPE, costs=costs,
                             temperature=temperature, eos_token_id=eos_id(pair), generator=gen)

    chosen: dict[tuple[int, bool], tuple[int, int, int]] = {}  # (model, seeded) → the shape "auto" chose

    def look(model: torch.nn.Module, pair: Pair, ids: torch.Tensor, n: int, prompt_ngrams: bool = False) -> Generation:
        """Lookahead; with a cost model its shape is chosen once, on the first (untimed warm-up) call, as γ is
        chosen by the calibration: the timed calls then pay no exploration."""
        key = (id(model), prompt_ngrams)
        shape = chosen.get(key, "auto") if costs else LOOKAHEAD_SHAPE
        gen = lookahead_generate(model, ids, n, shape=shape, costs=costs, prompt_ngrams=prompt_ngrams,
                                 eos_token_id=eos_id(pair))
        if shape == "auto" and "table" in gen.stats.search:
            chosen[key] = gen.stats.shape
        return gen

    look_shape = "shape chosen on the warm-up" if costs else f"shape {LOOKAHEAD_SHAPE}"

    def target(pair: Pair) -> list[torch.nn.Module]:
        return [pair.target]

    def both(pair: Pair) -> list[torch.nn.Module]:
        return [pair.target, pair.draft]

    peers = {name: Method(**row) for name, row in llamacpp.rows(lookup_tokens).items()} if llamacpp.installed() else {}
    return {
        "hf_ar": Method(lambda p, ids, n: hf_generate(p.target, ids, n, eos_token_id=eos_id(p)),
                        "transformers generate (greedy)", models=target),
        "ar": Method(lambda p, ids, n: ar_generate(p.target, ids, n, eos_token_id=eos_id(p)), "our AR (greedy)",
                     models=target),
        # the reference row: the same loop on the plain model (eager f32), whatever engine our AR runs on
        "ar_eager": Method(lambda p, ids, n: ar_generate(p.plain().target, ids, n, eos_token_id=eos_id(p)),
                           "AR on eager f32 (reference)", models=lambda p: [p.plain().target]),
        # the sampled methods' baseline: the same target sampling at the same T (its tokens cost what greedy ones do)
        "ar_sampled": Method(lambda p, ids, n: ar_generate(p.target, ids, n, temperature=temperature,
                                                           generator=torch.Generator().manual_seed(seed),  # host: sampled paths draw from a seeded host generator
                                                           eos_token_id=eos_id(p)),
                             f"our AR, T={temperature}", greedy=False, models=target),
        "naive": Method(_naive, "tutorial's naive method (draft's text)", models=both),
        "spec": Method(spec, f"our speculative, model draft, γ={gamma}", models=both),
        "spec_sampled": Method(partial(spec, temperature=temperature),
                               f"our speculative, model draft, γ={gamma}, T={temperature}", greedy=False, models=both),
        "spec_self": Method(spec_self, "our speculative, self-drafted (a subset of the target's own layers, searched), "
                            "γ from the search", models=target, prepare=self_layers),
        "spec_feature": Method(spec_feature, f"our speculative, feature drafter (EAGLE), γ={feature_gamma}",
                               models=lambda p: [p.target, feature(p).head], prepare=feature),
        "spec_best": Method(spec_best, "our speculative, best drafter (lookup, else feature), γ auto" if costs else
                            f"our speculative, best drafter (lookup, else feature), γ={feature_gamma}",
                            models=lambda p: [p.target, feature(p).head], prepare=feature),
        "spec_feature_sampled": Method(partial(spec_feature, temperature=temperature),
                                       f"our speculative, feature drafter, γ={feature_gamma}, T={temperature}",
                                       greedy=False, models=lambda p: [p.target, feature(p).head], prepare=feature),
        "tree": Method(tree, f"our token tree, model draft, {'shape auto' if costs else TREE_SHAPE}", models=both),
        "tree_sampled": Method(partial(tree, temperature=temperature),
                               f"our token tree, model draft, {'shape auto' if costs else TREE_SHAPE}, T={temperature}",
                               greedy=False, models=both),
        "tree_lookup": Method(partial(tree, lookup_drafter=True),
                              f"our token tree, prompt lookup (a trie of earlier matches), {'shape auto' if costs else TREE_SHAPE}",
                              models=target),
        "tree_feature": Method(tree_feature, "our token tree, feature drafter (EAGLE-2's dynamic tree), "
                               f"{'budget and depth auto' if costs else f'budget and depth of {TREE_SHAPE}'}",
                               models=lambda p: [p.target, feature(p).head], prepare=feature),
        "tree_feature_sampled": Method(partial(tree_feature, temperature=temperature),
                                       "our token tree, feature drafter (EAGLE-2's dynamic tree), "
                                       f"{'budget and depth auto' if costs else f'budget and depth of {TREE_SHAPE}'}, "
                                       f"T={temperature}", greedy=False,
                                       models=lambda p: [p.target, feature(p).head], prepare=feature),
        "spec_medusa": Method(spec_medusa, "our speculative, Medusa heads (a chain), γ = heads",
                              models=lambda p: [p.target, heads(p).heads], prepare=heads),
        "spec_medusa_sampled": Method(partial(spec_medusa, temperature=temperature),
                                      f"our speculative, Medusa heads (a chain), γ = heads, T={temperature}", greedy=False,
                                      models=lambda p: [p.target, heads(p).heads], prepare=heads),
        "tree_medusa": Method(tree_medusa, f"our token tree, Medusa heads, {'shape auto' if costs else TREE_SHAPE}",
                              models=lambda p: [p.target, heads(p).heads], prepare=heads),
        "tree_medusa_sampled": Method(partial(tree_medusa, temperature=temperature),
                                      f"our token tree, Medusa heads, {'shape auto' if costs else TREE_SHAPE}, "
                                      f"T={temperature}", greedy=False,
                                      models=lambda p: [p.target, heads(p).heads], prepare=heads),
        "hf_assisted": Method(lambda p, ids, n: transformers_assisted(p.target, p.draft, ids, n, gamma=gamma,
                                                                      eos_token_id=eos_id(p)),
                              f"transformers assisted, γ={gamma}", models=both),
        "lookup": Method(lookup, f"our prompt lookup (n-gram), k={lookup_tokens}", models=target),
        "hf_lookup": Method(lambda p, ids, n: hf_generate(p.target, ids, n, eos_token_id=eos_id(p),
                                                          max_matching_ngram_size=3,
                                                          prompt_lookup_num_tokens=lookup_tokens),
                            f"transformers prompt lookup, k={lookup_tokens}", models=target),
        "jacobi": Method(lambda p, ids, n: jacobi_generate(p.target, ids, n, block_size=block_size,
                                                           eos_token_id=eos_id(p)),
                         f"Jacobi, block {block_size}", models=target),
        "lookahead": Method(lambda p, ids, n: look(p.target, p, ids, n), f"lookahead decoding, {look_shape}",
                            models=target),
        "lookahead_prompt": Method(lambda p, ids, n: look(p.target, p, ids, n, prompt_ngrams=True),
                                   f"lookahead decoding, pool seeded from the prompt, {look_shape}", models=target),
        "nf4_ar": Method(lambda p, ids, n: ar_generate(nf4(p), ids, n, eos_token_id=eos_id(p)),
                         "our AR on our NF4 target", models=lambda p: [nf4(p)], prepare=nf4),
        "bnb_nf4_ar": Method(lambda p, ids, n: ar_generate(bnb(p), ids, n, eos_token_id=eos_id(p)),
                             "our AR on bitsandbytes' NF4 target", models=lambda p: [bnb(p)], prepare=bnb),
        # greedy: its output is compared with the target's, which shows the fine-tune's drift
        "cllm": Method(lambda p, ids, n: jacobi_generate(cllm(p), ids, n, block_size=block_size, eos_token_id=eos_id(p)),
                       f"CLLM (Jacobi on the consistency fine-tune), block {block_size}",
                       models=lambda p: [cllm(p)], prepare=cllm),
        "jacobi_forcing": Method(lambda p, ids, n: jacobi_generate(jacobi_forcing(p), ids, n, block_size=block_size,
                                                                   eos_token_id=eos_id(p)),
                                 f"Jacobi Forcing (Jacobi on its KL-anchored fine-tune), block {block_size}",
                                 models=lambda p: [jacobi_forcing(p)], prepare=jacobi_forcing),
        "jf_ar": Method(lambda p, ids, n: ar_generate(jacobi_forcing(p), ids, n, eos_token_id=eos_id(p)),
                        "our AR on the Jacobi Forcing fine-tune (its own baseline)",
                        models=lambda p: [jacobi_forcing(p)], prepare=jacobi_forcing),
        "lookahead_jf": Method(lambda p, ids, n: look(jacobi_forcing(p), p, ids, n),
                               f"lookahead decoding on the Jacobi Forcing fine-tune, {look_shape}",
                               models=lambda p: [jacobi_forcing(p)], prepare=jacobi_forcing),
        **peers,  # llama.cpp on the same target (bench/llamacpp.py), with the optional extra
    }


TREE_SHAPE = (3, 2, 1)  # branching per depth of the tree rows when no cost model is given
LOOKAHEAD_SHAPE = (3, 3, 3)  # (W, N, G) of the lookahead rows when no cost model is given

# For the up-front run-time estimate only: each method's rough cost per token relative to our AR, and
# its one-off preparation in target decode steps (quantizing the offline target takes ~25 s on 2 cores).
COST_GUESS = {"hf_ar": 1.1, "ar": 1.0, "ar_sampled": 1.05, "naive": 0.5, "spec": 1.2, "spec_self": 1.3, "ar_eager": 1.5, "spec_sampled": 1.4, "hf_assisted": 1.2,
              "spec_feature": 0.8, "spec_feature_sampled": 1.0, "spec_best": 0.8,
              "tree": 1.2, "tree_sampled": 1.4, "tree_lookup": 1.3, "tree_feature": 1.0, "tree_feature_sampled": 1.2,
              "spec_medusa": 0.9, "spec_medusa_sampled": 1.0, "tree_medusa": 0.9, "tree_medusa_sampled": 1.1,
              "lookup": 1.3, "hf_lookup": 1.3, "jacobi": 2.0, "lookahead": 1.3, "lookahead_prompt": 1.3, "jf_ar": 1.0,
              "lookahead_jf": 1.3, "cllm": 1.2, "jacobi_forcing": 1.2, "nf4_ar": 5.0, "bnb_nf4_ar": 2.0}
PREPARE_GUESS = {"nf4_ar": 500, "cllm": 60, "jacobi_forcing": 60, "jf_ar": 60, "lookahead_jf": 60, "bnb_nf4_ar": 200}


def estimate_seconds(step_s: float, names: Sequence[str], n_prompts: int, repeats: int, max_new_tokens: int,
                     warmup_tokens: int) -> float:
    """Expected run time: one target step × (tokens × calls × relative costs + preparation steps)."""
    per_token = sum(COST_GUESS.get(name, 1.0) for name in names)
    prepare = sum(PREPARE_GUESS.get(name, 0) for name in names)
    return step_s * (per_token * (max_new_tokens * n_prompts * repeats + warmup_tokens) + prepare)
