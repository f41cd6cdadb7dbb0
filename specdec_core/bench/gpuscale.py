"""gpu-check's scale section: what a decode step costs at the GPU presets' real shapes, random bf16 weights.

    report = run_section("cuda")                     # the five architectures, about three minutes on an H200
    report = run_section("cpu", tiny=True)           # the same code on two-layer models, seconds (the CPU test)

No download: each model is its architecture's hyperparameters (:data:`ARCHS`, written from the models'
published configs) made into a transformers config and filled with random bf16 weights on the device,
one model at a time (a 9B model is 18 GB), freed before the next. Per model:

    step_s           one decode step as our AR runs it: ``ar.generate``'s decode time ÷ its steps (each step
                     reads its token back to the host)
    chained_s        the same step fed the previous step's argmax on the device (no readback, one sync at
                     the end): what the host's per-step readback costs is step_s − chained_s
    alone_s          one one-token forward timed alone (synchronised on both ends; ``costmodel.forward_times``)
    v, v_tree        v(n) to 64 new tokens on a cache of ``context`` tokens, causal and tree-masked
                     (``costmodel.forward_times`` and ``ratios``)
    overhead_s       the speculative loop's own cost per step (``costmodel.loop_overhead``)
    floor_s          weight bytes ÷ the device's read bandwidth (``machine.stream_read``): the step's
                     memory floor — a memory-bound step reads every weight once
    ar/hf_s_per_token  our AR and transformers' ``generate``, greedy, the same prompt (prefill included),
                     interleaved (``harness.interleaved``); ``same_tokens``: whether they agree token for token

and per pair (the presets' target and draft): c = draft step ÷ target step, and the best γ with its S for a
few α (``theory``), from the target's measured v(n). A time budget guards the section: past it, the
remaining models or phases are skipped, each with a note in the report.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial

import torch
from transformers import AutoModelForCausalLM, Gemma2Config, LlamaConfig, PretrainedConfig, PreTrainedModel
from transformers.utils import logging as hf_logging

from .. import costmodel, theory
from ..ar import generate
from ..generation import Timer, common_prefix
from ..lm import Decoder
from ..machine import stream_read
from ..memory import weight_bytes
from ..models import PRESETS
from ..peers import hf_generate
from .gpureport import as_json, failure_site, machine
from .harness import interleaved


@dataclass(frozen=True)
class Arch:
    """A decoder's shape, as its Hub config states it (``family``: the transformers model type)."""

    hub_id: str
    family: str  # "gemma2" or "llama"
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    rope_theta: float


# From the models' config.json on the Hub (Gemma 2: google/gemma-2-{9b,2b}-it; SmolLM2: HuggingFaceTB/*-Instruct).
ARCHS: dict[str, Arch] = {
    "gemma-2-9b": Arch("google/gemma-2-9b-it", "gemma2", 42, 3584, 14336, 16, 8, 256, 256000, 10000.0),
    "gemma-2-2b": Arch("google/gemma-2-2b-it", "gemma2", 26, 2304, 9216, 8, 4, 256, 256000, 10000.0),
    "smollm2-1.7b": Arch("HuggingFaceTB/SmolLM2-1.7B-Instruct", "llama", 24, 2048, 8192, 32, 32, 64, 49152, 130000.0),
    "smollm2-135m": Arch("HuggingFaceTB/SmolLM2-135M-Instruct", "llama", 30, 576, 1536, 9, 3, 64, 49152, 100000.0),
    "smollm2-360m": Arch("HuggingFaceTB/SmolLM2-360M-Instruct", "llama", 32, 960, 2560, 15, 5, 64, 49152, 100000.0),
}
EXTRA_PAIRS = [("smollm2-1.7b", "smollm2-360m")]  # shares the tokenizer (docs/reference.md#model-pairs), not a preset
ALPHAS = (0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class Settings:
    """How much the section measures (``budget_s``: past it, what is left is skipped with a note)."""

    context: int = 256  # tokens in the cache for v(n), the chained steps and o
    prompt: int = 128  # prompt tokens of our AR against transformers' generate
    new_tokens: int = 64
    ns: tuple[int, ...] = (1, 2, 3, 4, 5, 8, 16, 32, 64)
    repeats: int = 5  # timed rounds of costmodel.forward_times (after one warm-up round)
    runs: int = 3  # timed rounds of AR against generate (after one warm-up)
    chained: int = 32  # back-to-back steps without readback
    overhead_steps: int = 8
    copy_mb: int = 2000  # the device-to-device copy that prices a byte of weights
    budget_s: float = 200.0


FULL = Settings()
TINY = Settings(context=32, prompt=16, new_tokens=16, repeats=1, runs=1, chained=8, overhead_steps=2, copy_mb=8,
                budget_s=120.0)


def config_of(arch: Arch, tiny: bool = False) -> PretrainedConfig:
    """The architecture as a transformers config; ``tiny``: the same model type and head layout scaled down
    to 2 layers, 4 heads of 16, vocabulary 512 (for the CPU test). No EOS: random weights then decode
    every token asked for, in our AR and in transformers' generate alike."""
    shape = dict(vocab_size=arch.vocab, hidden_size=arch.hidden, intermediate_size=arch.intermediate,
                 num_hidden_layers=arch.layers, num_attention_heads=arch.heads, num_key_value_heads=arch.kv_heads,
                 head_dim=arch.head_dim)
    if tiny:
        kv = max(1, 4 * arch.kv_heads // arch.heads)  # keep grouped-query attention grouped (and 1.7B's not)
        shape = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=kv, head_dim=16)
    common = dict(max_position_embeddings=8192, rope_theta=arch.rope_theta, bos_token_id=None, eos_token_id=None,
                  pad_token_id=0, **shape)
    if arch.family == "gemma2":  # softcapping, query scale 1/sqrt(256), alternating 4096-token sliding windows
        return Gemma2Config(query_pre_attn_scalar=shape["head_dim"], sliding_window=4096, attn_logit_softcapping=50.0,
                            final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                            tie_word_embeddings=True, **common)
    return LlamaConfig(rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu", **common)


def planned_parameters(config: PretrainedConfig) -> int:
    """The model's parameter count (tied weights once), from a copy built on the meta device (no memory)."""
    with torch.device("meta"):
        return sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())


def build(config: PretrainedConfig, device: str, seed: int = 0) -> PreTrainedModel:
    """Random bf16 weights (transformers' own initialisation), made on ``device`` directly, in eval mode."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.eval()


def free(device: str) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _prompt(model: PreTrainedModel, length: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)  # host: the same prompt on every device
    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=gen)  # host: drawn once, then moved
    return ids.to(model.device)


def ar_against_generate(model: PreTrainedModel, s: Settings) -> dict:
    """Our AR and transformers' generate, greedy, interleaved, on one random prompt: seconds per new token
    (prefill included, medians over rounds), AR's decode step alone (its wall time after the first token ÷
    the steps), and how far the two agree."""
    ids = _prompt(model, s.prompt)
    calls = {"ar": partial(generate, model, ids, s.new_tokens), "hf": partial(hf_generate, model, ids, s.new_tokens)}
    runs = interleaved(calls, repeats=s.runs, warmup=1, device=model.device)
    ours, theirs = runs["ar"][0].result.new_tokens, runs["hf"][0].result.new_tokens
    steps = [(r.result.stats.wall_time - r.result.stats.ttft) / (len(r.result) - 1) for r in runs["ar"]]
    per_token = {name: statistics.median(r.seconds / len(r.result) for r in rs) for name, rs in runs.items()}
    return {"step_s": statistics.median(steps), "ar_s_per_token": per_token["ar"], "hf_s_per_token": per_token["hf"],
            "same_tokens": ours == theirs, "agree": common_prefix(ours, theirs), "compared": len(ours)}


@torch.inference_mode()
def chained_step(model: PreTrainedModel, s: Settings) -> float:
    """Seconds per decode step when each step is fed the previous one's argmax [1, 1] on the device: the host
    queues the steps without reading a token back, and the device is synchronised once at each end."""
    decoder = Decoder(model)
    token = decoder.prefill(_prompt(model, s.context))[:, -1].argmax(-1, keepdim=True)
    token = decoder.step(token)[:, -1].argmax(-1, keepdim=True)  # warm-up
    with Timer(model.device) as t:
        for _ in range(s.chained):
            token = decoder.step(token)[:, -1].argmax(-1, keepdim=True)
    return t.seconds / s.chained


def verify_costs(model: PreTrainedModel, s: Settings) -> dict:
    """v(n), causal and tree-masked, and the one-token forward timed alone (``costmodel.forward_times``)."""
    times = costmodel.forward_times(model, ns=s.ns, contexts=(s.context,), repeats=s.repeats)
    return {"alone_s": statistics.median(times[("causal", s.context, 1)]),
            "v": costmodel.ratios(times, "causal"), "v_tree": costmodel.ratios(times, "tree")}


def measure_model(model: PreTrainedModel, s: Settings, bandwidth: float | None, deadline: float,
                  report: dict, name: str) -> dict:
    """Every figure of one model. A phase that would start past ``deadline`` is skipped with a note in
    ``report["notes"]``; a phase that fails is recorded in ``report["errors"]`` (with its specdec_core
    file:line) and the next one still runs."""
    row: dict = {"weight_bytes": weight_bytes(model), "layers": model.config.num_hidden_layers,
                 "hidden": model.config.hidden_size, "vocab": model.config.vocab_size,
                 "architecture": type(model).__name__}
    row["floor_s"] = row["weight_bytes"] / bandwidth if bandwidth else None
    phases = [("AR against generate", lambda: ar_against_generate(model, s)),
              ("chained steps", lambda: {"chained_s": chained_step(model, s)}),
              ("v(n)", lambda: verify_costs(model, s)),
              ("loop overhead", lambda: {"overhead_s": costmodel.loop_overhead(model, gamma=3, context=s.context,
                                                                              steps=s.overhead_steps)})]
    for phase, run in phases:
        if time.perf_counter() > deadline:
            report["notes"].append(f"{name}: {phase} not measured (the section's budget of {s.budget_s:.0f} s was spent)")
            continue
        try:
            row |= run()
        except Exception as err:  # record it, run the next phase
            report["errors"][f"{name}: {phase}"] = f"{type(err).__name__}: {err} (at {failure_site(err)})"
    if "step_s" in row:
        row["floor_ratio"] = row["step_s"] / row["floor_s"] if row["floor_s"] else None
        row["overhead"] = row["overhead_s"] / row["step_s"] if "overhead_s" in row else None
        row["ar_vs_hf"] = row["hf_s_per_token"] / row["ar_s_per_token"]  # > 1: our AR is faster
    return row


def pairs_of(models: dict[str, dict]) -> list[dict]:
    """c = draft step ÷ target step for each preset pair (and :data:`EXTRA_PAIRS`) whose two models were
    measured; with the target's v(n), the best γ and its S for each α in :data:`ALPHAS`."""
    by_hub = {arch.hub_id: name for name, arch in ARCHS.items()}
    wanted = [(by_hub[p.target], by_hub[p.draft], preset) for preset, p in PRESETS.items()
              if p.target in by_hub and p.draft in by_hub]
    wanted += [(t, d, None) for t, d in EXTRA_PAIRS]
    out = []
    for target, draft, preset in wanted:
        t, d = models.get(target, {}), models.get(draft, {})
        if "step_s" not in t or "step_s" not in d:
            continue
        pair = {"target": target, "draft": draft, "preset": preset, "c": d["step_s"] / t["step_s"],
                "c_chained": d["chained_s"] / t["chained_s"] if "chained_s" in t and "chained_s" in d else None,
                "by_alpha": {}}
        if "v" in t:
            cm = costmodel.CostModel({}, t["step_s"], t["v"], (t["step_s"], t["step_s"]), 1.0, t["weight_bytes"])
            for alpha in ALPHAS:
                gamma = theory.best_gamma(alpha, pair["c"], cm.v)
                pair["by_alpha"][str(alpha)] = {"gamma": gamma, "speedup": theory.speedup(alpha, gamma, pair["c"], cm.v)}
        out.append(pair)
    return out


def run_section(device: str = "cuda", tiny: bool = False, settings: Settings | None = None,
                names: list[str] | None = None, log: Callable[[str], None] = print,
                checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Measure every architecture of :data:`ARCHS` (or ``names``) on ``device``; returns the report (see
    :mod:`specdec_core.bench.gpureport` for its files). A model or phase that fails is recorded in
    ``errors`` with its error and the failing ``specdec_core`` file:line; the rest still runs. ``checkpoint(report so far)`` is called
    after each model (gpu-check writes the files there, so a run cut short still leaves its models)."""
    s = settings or (TINY if tiny else FULL)
    start = time.perf_counter()
    deadline = start + s.budget_s
    report = {"kind": "gpu-scale", "tiny": tiny, "machine": machine(device), "settings": asdict(s),
              "bandwidth": None, "models": {}, "pairs": [], "notes": [], "errors": {}}
    try:
        report["bandwidth"] = stream_read(megabytes=s.copy_mb, device=device)
    except Exception as err:  # noqa: BLE001 — the section goes on without floors
        report["notes"].append(f"no memory floor: the copy failed at {failure_site(err)}: {type(err).__name__}: {err}")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # generate's notes about random models' configs are noise here
    try:
        for name in names or list(ARCHS):
            if time.perf_counter() > deadline:
                report["notes"].append(f"{name}: not measured (the section's budget of {s.budget_s:.0f} s was spent)")
                continue
            began, model = time.perf_counter(), None
            try:
                config = config_of(ARCHS[name], tiny)
                need = 2 * planned_parameters(config)  # bf16
                if torch.device(device).type == "cuda" and need > 0.8 * torch.cuda.mem_get_info(device)[0]:
                    report["notes"].append(f"{name}: not measured ({need / 1e9:.1f} GB of weights do not fit in the "
                                           "free memory of this GPU)")
                    continue
                model = build(config, device)
                report["models"][name] = measure_model(model, s, report["bandwidth"], deadline, report, name)
                report["models"][name]["seconds"] = time.perf_counter() - began
            except Exception as err:  # record it, measure the others
                report["errors"][f"{name}: build"] = f"{type(err).__name__}: {err} (at {failure_site(err)})"
            finally:
                del model
                free(device)
            failed = [k for k in report["errors"] if k.startswith(f"{name}: ")]
            log(f"scale: {name} {'FAILED in ' + ', '.join(failed) if failed else 'measured'}"
                f" ({time.perf_counter() - began:.0f} s)")
            if checkpoint is not None:
                checkpoint(as_json(report | {"pairs": pairs_of(report["models"]), "elapsed_s": time.perf_counter() - start}))
    finally:
        hf_logging.set_verbosity(verbosity)
    report["pairs"] = pairs_of(report["models"])
    report["elapsed_s"] = time.perf_counter() - start
    return as_json(report)


def settings_for(tiny: bool, budget_s: float | None = None) -> Settings:
    s = TINY if tiny else FULL
    return replace(s, budget_s=budget_s) if budget_s is not None else s
