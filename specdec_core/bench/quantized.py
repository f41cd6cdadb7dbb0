"""Quantized speculative decoding: the source tutorial's NF4 experiment, measured (lesson 06).

The tutorial loads its target and draft with

    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                       bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_use_double_quant=False)

and reports memory and latency. Here the same pair runs in three precisions — plain (fp32 on a CPU,
bf16 on a GPU), NF4 through bitsandbytes, NF4 through our :func:`specdec_core.nf4.quantize_model` —
and for each we measure

    weight bytes      what the weights occupy (:func:`weight_bytes`, shared tensors counted once)
    latency, tok/s    autoregressive and speculative, interleaved, medians (bench.harness)
    peak memory       each variant ALONE in a fresh process (:func:`fresh_peaks`, bench.fresh): its target
                      and draft decoding speculatively, nothing else loaded (CPU peak RSS or CUDA max allocated)
    α                 greedy acceptance: how often the draft's argmax equals the target's

and, without running every combination, predict the others with Leviathan's formula
(:class:`PrecisionTable`, :func:`predict`): tokens per second = E(α, γ) / (γ·t_draft + t_verify).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import BitsAndBytesConfig, PreTrainedModel

from .. import ar, costmodel, nf4, theory
from ..drafters import ModelDrafter
from ..memory import weight_bytes
from ..models import OFFLINE, PRESETS, Pair, load_model, load_pair, pick_device
from ..speculative import speculative_generate
from .fresh import FreshPeak, Job, Loaded, measure
from .harness import Measurement, interleaved, measurement, noise_band

PLAIN, BNB, OURS = "plain", "NF4 (bitsandbytes)", "NF4 (ours)"


def nf4_config(compute_dtype: torch.dtype = torch.bfloat16, double_quant: bool = False) -> BitsAndBytesConfig:
    """The tutorial's config (docs/reference.md#the-tutorials-method); only the compute dtype may differ (float32 on a CPU,
    where bf16 matmuls are slower). ``bnb_4bit_quant_type`` is explicit: bitsandbytes defaults to fp4."""
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_compute_dtype=compute_dtype, bnb_4bit_use_double_quant=double_quant)


@dataclass
class Variant:
    """One precision of a target/draft pair. ``report``: what quantize_model did (ours only)."""

    name: str
    target: PreTrainedModel
    draft: PreTrainedModel
    report: nf4.MemoryReport | None = None


def _draft_for(preset: str, load: Callable[[str], PreTrainedModel]) -> PreTrainedModel:
    """The preset's draft, loaded by ``load`` (so in the same precision as the target's variant)."""
    return load(PRESETS[preset].draft)


def _check_preset(preset: str) -> None:
    if preset not in PRESETS:
        raise KeyError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")


def plain_variant(pair: Pair) -> Variant:
    """The pair as loaded by ``load_pair`` (fp32 on a CPU, bf16 on a GPU), named after its dtype."""
    short = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
    return Variant(f"{PLAIN} ({short.get(pair.target.dtype, str(pair.target.dtype))})", pair.target, pair.draft)


def load_bnb_variant(preset: str = OFFLINE, device: str | torch.device | None = None,
                     compute_dtype: torch.dtype | None = None, double_quant: bool = False) -> Variant:
    """Target and draft quantized to NF4 by transformers + bitsandbytes while loading.

    ``compute_dtype`` None: bf16 on CUDA (the tutorial's), float32 elsewhere. The output layer stays
    in float (transformers skips it). On a CPU the weights are placed with ``device_map="cpu"``.
    """
    _check_preset(preset)
    dev = pick_device(device)
    if compute_dtype is None:
        compute_dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    config = nf4_config(compute_dtype, double_quant)

    def load(model_id: str) -> PreTrainedModel:
        with warnings.catch_warnings():  # bitsandbytes' CPU backend warns about optional kernels
            warnings.simplefilter("ignore")
            return load_model(model_id, dev, quantization_config=config)

    target = load(PRESETS[preset].target)
    return Variant(BNB, target, _draft_for(preset, load))


def load_ours_variant(preset: str = OFFLINE, device: str | torch.device | None = None,
                      dtype: torch.dtype | None = None, double_quant: bool = False,
                      skip: Sequence[str] = ("lm_head",)) -> Variant:
    """A fresh copy of the pair with every ``nn.Linear`` but ``skip`` replaced by our ``NF4Linear``.

    The draft is quantized the same way. ``report`` is the target's :class:`nf4.MemoryReport`.
    """
    _check_preset(preset)
    dev = pick_device(device)

    def load(model_id: str) -> PreTrainedModel:
        model = load_model(model_id, dev, dtype)
        nf4.quantize_model(model, "nf4", double_quant=double_quant, skip=skip)
        return model

    target = load_model(PRESETS[preset].target, dev, dtype)
    report = nf4.quantize_model(target, "nf4", double_quant=double_quant, skip=skip)
    return Variant(OURS, target, _draft_for(preset, load), report)


def load_variants(preset: str = OFFLINE, device: str | torch.device | None = None) -> tuple[dict[str, Variant], Pair]:
    """The three variants of the lesson: plain, NF4 by bitsandbytes, NF4 by quantize_model."""
    pair = load_pair(preset, device)
    plain = plain_variant(pair)
    variants = {plain.name: plain,
                BNB: load_bnb_variant(preset, pair.device),
                OURS: load_ours_variant(preset, pair.device)}
    return variants, pair


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------


def bnb_parity(ours: nn.Module, theirs: nn.Module) -> dict[str, int]:
    """Compare our NF4 layers with a bitsandbytes-quantized copy of the same model, layer by layer.

    Call it before ``theirs`` runs a forward pass (bitsandbytes repacks weights for its CPU kernel
    on the first call). Returns counts: layers compared, packed bytes identical, absmax identical.
    """
    mine = {name: m for name, m in ours.named_modules() if isinstance(m, nf4.NF4Linear)}
    result = {"layers": 0, "packed_equal": 0, "absmax_equal": 0}
    for name, module in theirs.named_modules():
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is None or name not in mine:
            continue
        q = mine[name].quantized()
        result["layers"] += 1
        result["packed_equal"] += torch.equal(module.weight.data.view(torch.uint8).reshape(-1), q.packed.reshape(-1))
        result["absmax_equal"] += state.absmax.dtype == torch.float32 and torch.equal(state.absmax, q.scales())
    return result


# ---------------------------------------------------------------------------------------------
# Greedy agreement: α at temperature 0 without running speculative decoding
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def greedy_choices(model: PreTrainedModel, sequence: torch.Tensor, start: int) -> torch.Tensor:
    """The model's argmax for positions start..T-1 of ``sequence`` [1, T], each given the true
    tokens before it (teacher forcing, one forward pass) → [T - start] token ids (on the CPU)."""
    if not 1 <= start < sequence.shape[1]:
        raise ValueError(f"start must be in [1, {sequence.shape[1] - 1}] (a prompt token before it), got {start}")
    logits = model(input_ids=sequence.to(model.device), use_cache=False).logits[0, start - 1 : -1]
    return logits.argmax(-1).cpu()  # host: choices of many variants are compared on the host


def agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of positions where two argmax sequences [n] agree.

    With ``a`` a target's choices and ``b`` a draft's, on the target's greedy path, this is greedy
    speculative decoding's α: every draft token the target examines sits on that path, and it is
    accepted exactly when the two argmaxes agree.
    """
    if a.shape != b.shape or a.numel() == 0:
        raise ValueError(f"need two non-empty argmax sequences of the same length, got {tuple(a.shape)} and {tuple(b.shape)}")
    return float((a == b).float().mean())


# ---------------------------------------------------------------------------------------------
# The tutorial's measurement, for each variant
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One variant measured: weights, and autoregressive / speculative runs on the same prompt."""

    name: str
    weight_bytes: int
    ar: Measurement
    speculative: Measurement

    @property
    def alpha(self) -> float:
        return self.speculative.result.stats.alpha

    @property
    def exact(self) -> bool:
        """Speculative decoding gave the same tokens as this variant's target alone."""
        return self.ar.result.new_tokens == self.speculative.result.new_tokens

    @property
    def speedup(self) -> float:
        return self.speculative.tokens_per_s / self.ar.tokens_per_s


def compare(variants: dict[str, Variant], input_ids: torch.Tensor, max_new_tokens: int, gamma: int = 4,
            repeats: int = 3, eos_token_id: int | None = None, warmup_tokens: int = 4,
            device: torch.device | str | None = None) -> list[Row]:
    """For each variant: its target alone (``ar.generate``) and speculative decoding with its draft,
    greedy. All of them interleaved: each of ``repeats`` rounds runs every variant's AR and speculative
    call once, in turn, so both the speculative/AR ratio and one variant against another are measured
    side by side (medians over rounds).

    Before timing, one short run of each (``warmup_tokens`` new tokens) warms up the same code
    paths — prefill, single-token steps, the γ+1-token verify; bitsandbytes repacks its weights for
    the CPU kernel on the first forward — so the long runs are not repeated just to warm up.
    """
    def runs(n: int) -> dict:
        out = {}
        for name, v in variants.items():
            out[f"{name}: ar"] = lambda v=v: ar.generate(v.target, input_ids, n, eos_token_id=eos_token_id)
            out[f"{name}: speculative"] = lambda v=v: speculative_generate(
                v.target, ModelDrafter(v.draft), input_ids, n, gamma=gamma, eos_token_id=eos_token_id)
        return out

    dev = device if device is not None else next(iter(variants.values())).target.device
    interleaved(runs(warmup_tokens), repeats=1, warmup=0)
    timed = interleaved(runs(max_new_tokens), repeats=repeats, warmup=0, device=dev, memory=True)
    return [Row(name, weight_bytes(v.target, v.draft), measurement(timed[f"{name}: ar"], dev),
                measurement(timed[f"{name}: speculative"], dev)) for name, v in variants.items()]


def noise_band_of(rows: Sequence[Row]) -> float:
    """The comparison's noise band (:func:`harness.noise_band`): the spread of each call's tokens/s over
    its interleaved rounds (NaN with one round: no verdict)."""
    return noise_band([[m.new_tokens / t for t in m.latencies] for r in rows for m in (r.ar, r.speculative)])


def format_rows(rows: Sequence[Row], fresh: dict[str, FreshPeak] | None = None) -> str:
    """The comparison as a fixed-width text table (MB = 10^6 bytes, as the tutorial's). With ``fresh``
    (:func:`fresh_peaks`): ``peak``, each variant's peak alone in a fresh process, and ``+run``, what its
    generation added to the loaded state. Without it there is no memory column: the process that ran
    :func:`compare` holds every variant at once, so its peak would be the same for all of them."""
    mem = fresh is not None
    lines = [f"{'':20s} {'weights':>8s} {'AR':>7s} {'spec.':>7s} {'AR lat.':>8s} {'spec lat':>8s} "
             + (f"{'peak':>7s} {'+run':>6s} " if mem else "") + f"{'α':>5s} {'spec=AR':>7s}",
             f"{'':20s} {'MB':>8s} {'tok/s':>7s} {'tok/s':>7s} {'s':>8s} {'s':>8s}" + (f" {'MB':>7s} {'MB':>6s}" if mem else "")]
    for r in rows:
        f = fresh.get(r.name) if mem else None
        memory = ((f"{f.peak_mb:7,.0f} {f.added_mb:6,.0f} " if f else f"{'–':>7s} {'–':>6s} ") if mem else "")
        lines.append(f"{r.name:20s} {r.weight_bytes / 1e6:8,.1f} {r.ar.tokens_per_s:7.2f} "
                     f"{r.speculative.tokens_per_s:7.2f} {r.ar.latency:8.2f} {r.speculative.latency:8.2f} "
                     f"{memory}{r.alpha:5.2f} {str(r.exact):>7s}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Each variant's memory alone, in a fresh process (bench.fresh)
# ---------------------------------------------------------------------------------------------


def variant_kind(name: str) -> str:
    """A variant's name (``plain (fp32)``, :data:`BNB`, :data:`OURS`) → its loader's key: plain, bnb, ours."""
    kinds = {BNB: "bnb", OURS: "ours"}
    if name in kinds or name.startswith(PLAIN):
        return kinds.get(name, "plain")
    raise KeyError(f"no loader for a variant named {name!r}: fresh_peaks knows {PLAIN}, {BNB} and {OURS}")


def variant_recipe(variant: str, preset: str, prompt_ids: list[int], max_new_tokens: int, gamma: int,
                   eos_token_id: int | None, warmup_tokens: int, device: str | None, label: str) -> Loaded:
    """A fresh process's recipe (bench.fresh): load ONE variant (ours: the fp32 model, quantized in place,
    so its float matrices are freed), and decode speculatively with its target and draft."""
    loaders = {"plain": lambda: plain_variant(load_pair(preset, device)),
               "bnb": lambda: load_bnb_variant(preset, device), "ours": lambda: load_ours_variant(preset, device)}
    v = loaders[variant]()
    ids = torch.tensor([prompt_ids], device=v.target.device)

    def go(n: int):
        return speculative_generate(v.target, ModelDrafter(v.draft), ids, n, gamma=gamma, eos_token_id=eos_token_id)

    return Loaded(lambda: go(max_new_tokens), [v.target, v.draft], v.target.device,
                  (lambda: go(warmup_tokens)) if warmup_tokens else None,
                  f"{v.name}: its target and draft, speculative decoding at γ = {gamma}")


def fresh_peaks(preset: str, names: Sequence[str], input_ids: torch.Tensor, max_new_tokens: int, gamma: int = 4,
                eos_token_id: int | None = None, warmup_tokens: int = 4,
                device: torch.device | str | None = None) -> dict[str, FreshPeak]:
    """Each variant of ``names`` measured alone (:func:`bench.fresh.measure`): a fresh process loads only
    that variant's target and draft, warms up with ``warmup_tokens`` (bitsandbytes repacks its weights on
    the first forward), resets the peak and decodes ``max_new_tokens`` speculatively. Untimed."""
    ids = [int(i) for i in input_ids[0]]
    return {name: measure(Job("specdec_core.bench.quantized:variant_recipe",
                              {"variant": variant_kind(name), "preset": preset, "prompt_ids": ids,
                               "max_new_tokens": max_new_tokens, "gamma": gamma, "eos_token_id": eos_token_id,
                               "warmup_tokens": warmup_tokens, "device": None if device is None else str(device),
                               "label": name}))
            for name in names}


# ---------------------------------------------------------------------------------------------
# Every target × draft precision, predicted from measured costs (the widget's table)
# ---------------------------------------------------------------------------------------------


@dataclass
class PrecisionTable:
    """Measured ingredients for any (target precision, draft precision) combination.

    Times in seconds: ``target_step`` one decode step of the target, ``verify`` one target forward
    over γ+1 tokens, ``draft_step`` one decode step of the draft; ``alpha[(t, d)]`` greedy agreement
    of draft d with target t; ``bytes[(t, d)]`` weights of both (shared tensors once); ``measured``
    optional speculative tokens/s actually measured for some combinations.
    """

    names: list[str]
    gamma: int
    target_step: dict[str, float]
    verify: dict[str, float]
    draft_step: dict[str, float]
    alpha: dict[tuple[str, str], float]
    bytes: dict[tuple[str, str], int]
    measured: dict[tuple[str, str], float] = field(default_factory=dict)


def predict(table: PrecisionTable, target: str, draft: str) -> dict[str, float]:
    """Memory, α and tokens/s of one combination (a pure function: the widget calls it).

    AR: one token per target step. Speculative (Leviathan, docs/reference.md#speedup): a step costs γ draft steps
    and one verify and emits E(α, γ) = (1 − α^(γ+1)) / (1 − α) tokens on average.
    """
    for role, name in (("target", target), ("draft", draft)):
        if name not in table.names:
            raise KeyError(f"unknown {role} precision {name!r}; choose one of {table.names}")
    alpha, gamma = table.alpha[(target, draft)], table.gamma
    tokens_per_step = theory.expected_tokens(theory.alpha_for_theory(alpha), gamma)
    step_time = gamma * table.draft_step[draft] + table.verify[target]
    ar_rate = 1.0 / table.target_step[target]
    spec_rate = tokens_per_step / step_time
    return {"memory_mb": table.bytes[(target, draft)] / 1e6, "alpha": alpha, "tokens_per_step": tokens_per_step,
            "ar_tokens_per_s": ar_rate, "spec_tokens_per_s": spec_rate, "speedup": spec_rate / ar_rate,
            "measured_spec_tokens_per_s": table.measured.get((target, draft), float("nan"))}


def precision_table(variants: dict[str, Variant], sequences: Sequence[tuple[torch.Tensor, int]],
                    gamma: int = 4, repeats: int = 7, rows: Sequence[Row] = ()) -> PrecisionTable:
    """Measure the ingredients of :class:`PrecisionTable` for every variant.

    ``sequences``: (ids [1, T], start) pairs — prompts with a reference continuation from ``start``
    (e.g. the plain target's greedy answers); α is the agreement of each draft's argmax with each
    target's on them. Costs come from the machine's cost model of each variant's target and draft
    (``costmodel.load_or_measure`` over n = 1 and γ + 1 only: one step, and a verify = one step × v(γ + 1),
    all the table needs; our NF4 layers make every timed forward slow). ``rows`` from
    :func:`compare` fill in the measured speculative tokens/s of each variant's own pair.
    """
    names = list(variants)
    choices = {(role, n): torch.cat([greedy_choices(getattr(v, role), ids, start) for ids, start in sequences])
               for n, v in variants.items() for role in ("target", "draft")}
    models = {n: {role: costmodel.load_or_measure(getattr(v, role), f"{n} {role}", engine=n, repeats=repeats,
                                                      ns=(1, gamma + 1), contexts=costmodel.CONTEXTS[:1])
                  for role in ("target", "draft")} for n, v in variants.items()}
    combos = [(t, d) for t in names for d in names]
    return PrecisionTable(
        names=names, gamma=gamma,
        target_step={n: m["target"].step_s for n, m in models.items()},
        verify={n: m["target"].step_s * m["target"].v(gamma + 1) for n, m in models.items()},
        draft_step={n: m["draft"].step_s for n, m in models.items()},
        alpha={(t, d): agreement(choices["target", t], choices["draft", d]) for t, d in combos},
        bytes={(t, d): weight_bytes(variants[t].target, variants[d].draft) for t, d in combos},
        measured={(r.name, r.name): r.speculative.tokens_per_s for r in rows},
    )


def target_agreement(variants: dict[str, Variant], sequences: Sequence[tuple[torch.Tensor, int]],
                     reference: str) -> dict[str, float]:
    """How often each variant's target picks the same greedy token as the ``reference`` variant's
    target, position by position on ``sequences`` (1.0 for the reference itself)."""
    ref = torch.cat([greedy_choices(variants[reference].target, ids, s) for ids, s in sequences])
    return {n: agreement(ref, torch.cat([greedy_choices(v.target, ids, s) for ids, s in sequences]))
            for n, v in variants.items()}


def reference_sequences(model: PreTrainedModel, prompts: Sequence[torch.Tensor], max_new_tokens: int,
                        eos_token_id: int | None = None) -> list[tuple[torch.Tensor, int]]:
    """Each prompt [1, T] followed by ``model``'s greedy answer: (ids [1, T + n], T)."""
    out = []
    for ids in prompts:
        new = ar.generate(model, ids, max_new_tokens, eos_token_id=eos_token_id).new_tokens
        out.append((torch.cat([ids, torch.tensor([new], device=ids.device)], dim=1), ids.shape[1]))
    return out
