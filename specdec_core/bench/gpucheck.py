"""``python -m specdec_core.bench.gpucheck`` (``make gpu-check``): the core of the course on a CUDA GPU, a short bench, real shapes.

It needs only what a bare GPU machine has — PyTorch, transformers (and peft for the CLLM step) — no
network, no model weights, no pytest: the models are tiny Llamas made on the spot, the tokenizer is
built in memory. Each check is a function of the device, so ``tests/test_cuda.py`` runs the same
checks under pytest (marked ``cuda``), and the CPU runs them too (``--device cpu``) to keep them honest.

    check_greedy_paths       AR, speculative with every drafter (model, lookup, feature, lookup-first,
                             γ auto) and Jacobi give the same greedy tokens
    check_sampled_exactness  speculative sampling at T = 1 and at T = 0.7 with top-p follows the target's
                             exact law (chi-square), with the generator on the device
    check_bf16               a bf16 pair decodes, its distributions warped in float32
    check_nf4                our NF4 packs and dequantizes like bitsandbytes (where it is installed)
    check_cllm_step          one CLLM training step (LoRA through peft) lowers nothing to NaN and moves the adapter
    check_parallel_decoding  Jacobi with rejection recycling and with two blocks in flight = AR; Jacobi
                             Forcing's packed forward (noise-aware mask) = the separate forwards, one step
    check_trees              token trees (model draft, prompt-lookup trie, EAGLE-2's dynamic tree from a
                             feature head) and lookahead decoding = AR: the tree mask, explicit positions
                             and Decoder.keep's compaction of the cache on the device
    check_nf4_double_quant   NF4 with double quantization on the device = on the host (codes, scales), as a
                             layer and as a whole model that decodes
    check_jf_eval            the Jacobi Forcing evaluation (bench/jf_eval.py) with its models on the device:
                             side-by-side speed rows, greedy answers, answer perplexity
    check_bandwidth          the bandwidth probe (machine.stream_read) reads the device's own memory

A failing check prints the innermost specdec_core file:line of its error. On CUDA every check runs under
``torch.cuda.set_sync_debug_mode("warn")``, and the line of each check says how many host syncs it made and
where most of them were. Then a short bench, then the scale section (:mod:`.gpuscale`: the GPU presets'
real shapes with random weights), which writes ``results/gpu-<device>.{json,md}`` (:mod:`.gpureport`);
``--device cpu --tiny`` runs it all on the CPU, the scale section with two-layer stand-ins (seconds). The
whole run keeps to ``--budget`` (330 s): the scale section gets what the checks and the bench left.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..ar import generate
from ..drafters import LookupFirst, ModelDrafter, NGramDrafter
from ..exactness import chi_square_pvalue, empirical_law, exact_law
from ..jacobi import jacobi_generate
from ..models import Pair, truncated_model
from ..speculative import speculative_generate
from ..theory import AutoGamma
from ..toy import tiny_llama, toy_tokenizer
from . import gpureport, gpuscale

VOCAB = 32
PROMPT = [[5, 6, 7, 8, 5, 6, 7, 9]]


def _toys(device: str, dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, torch.nn.Module]:
    target = tiny_llama(VOCAB, seed=0, logit_scale=3.0).to(device, dtype)
    return target, tiny_llama(VOCAB, seed=1, num_layers=1, logit_scale=3.0).to(device, dtype)


def check_greedy_paths(device: str) -> str:
    from ..feature_drafter import FeatureDrafter, FeatureHead

    target, draft = _toys(device)
    ids = torch.tensor(PROMPT, device=device)
    reference = generate(target, ids, 24).new_tokens
    torch.manual_seed(0)
    head = FeatureHead(d=target.config.hidden_size, n_heads=4, ffn=64).eval()
    drafters = {"model": ModelDrafter(draft), "lookup": NGramDrafter(VOCAB),
                "feature": FeatureDrafter(target, head, torch.arange(0, VOCAB, 2, device=device)),
                "lookup-first": LookupFirst(NGramDrafter(VOCAB, 3, 3), ModelDrafter(draft))}
    for name, drafter in drafters.items():
        out = speculative_generate(target, drafter, ids, 24, gamma=3)
        assert out.new_tokens == reference, f"speculative ({name}) differs from AR on {device}"
    auto = speculative_generate(target, ModelDrafter(draft), ids, 24, gamma=AutoGamma(lambda n: 1.0, 0.01))
    assert auto.new_tokens == reference, f"speculative (γ auto) differs from AR on {device}"
    assert jacobi_generate(target, ids, 24, block_size=8).new_tokens == reference, f"Jacobi differs from AR on {device}"
    return f"greedy: AR = speculative ({', '.join(drafters)}, γ auto) = Jacobi, 24 tokens"


def check_sampled_exactness(device: str, draws: int = 3000) -> str:
    target, draft = _toys(device)
    ids = torch.tensor(PROMPT, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    out = []
    for warp in ({"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}):
        law = exact_law(target, ids, n_tokens=2, **warp)

        def draw(warp=warp) -> list[int]:
            return speculative_generate(target, ModelDrafter(draft), ids, 2, gamma=2, generator=gen, **warp).new_tokens

        p = chi_square_pvalue(empirical_law(draw, law.shape, draws), law)
        assert p > 1e-3, f"speculative sampling at {warp} does not follow the target's law on {device} (p = {p:.2g})"
        out.append(f"{warp}: p = {p:.2f}")
    return "sampled exactness (chi-square, " + str(draws) + " draws): " + "; ".join(out)


def check_bf16(device: str) -> str:
    target, draft = _toys(device, torch.bfloat16)
    ids = torch.tensor(PROMPT, device=device)
    reference = generate(target, ids, 16).new_tokens
    assert speculative_generate(target, ModelDrafter(draft), ids, 16, gamma=3).new_tokens == reference
    gen = torch.Generator(device=device).manual_seed(0)
    sampled = speculative_generate(target, ModelDrafter(draft), ids, 16, gamma=3, temperature=0.7, generator=gen)
    assert len(sampled) == 16
    return "bf16: greedy speculative = AR; sampled runs (warped in float32)"


def check_nf4(device: str) -> str:
    from .. import nf4

    try:
        import bitsandbytes.functional as bnbF
    except ImportError:
        return "nf4: bitsandbytes is not installed here, comparison skipped"
    torch.manual_seed(0)
    x = torch.randn(128, 64, device=device)  # rows of whole blocks (bitsandbytes 0.50 CPU dequantizes [64, 96] wrongly)
    packed, state = bnbF.quantize_4bit(x, blocksize=64, quant_type="nf4")
    ours = nf4.quantize_4bit(x, "nf4", blocksize=64)
    assert torch.equal(ours.packed, packed) and torch.equal(ours.absmax, state.absmax), \
        f"NF4 codes or scales differ from bitsandbytes' on {device}"
    theirs = bnbF.dequantize_4bit(packed, state)
    assert torch.equal(nf4.dequantize_4bit(ours).reshape(-1).to(theirs.dtype), theirs.reshape(-1)), \
        f"NF4 dequantized values differ from bitsandbytes' on {device}"
    return "nf4: our codes = bitsandbytes' codes, dequantized values equal"


def check_cllm_step(device: str) -> str:
    from ..cllm import ar_and_teacher, consistency_loss, jacobi_trajectory, samples_of
    from ..models import with_lora

    model = tiny_llama(VOCAB, seed=0, logit_scale=3.0).to(device)
    traj = jacobi_trajectory(model, torch.tensor(PROMPT, device=device), max_new_tokens=16, block=8)
    batch = samples_of(traj)[:4]
    assert batch, "the toy's trajectory has no state to learn from"
    peft_model = with_lora(model, r=4, alpha=8)
    lora = [p for n, p in peft_model.named_parameters() if p.requires_grad]
    before = [p.detach().clone() for p in lora]
    opt = torch.optim.AdamW(lora, lr=1e-2)
    ar_loss, teachers, _ = ar_and_teacher(peft_model, batch, pad=1)
    loss = consistency_loss(peft_model, batch, teachers, pad=1)[0] + ar_loss
    loss.backward()
    opt.step()
    assert torch.isfinite(loss), f"CLLM loss is {loss} on {device}"
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, lora)), "the LoRA adapter did not move"
    return f"cllm: one LoRA step, loss {loss.item():.3f}, adapter moved"


def check_parallel_decoding(device: str) -> str:
    from .. import jacobi_forcing as jf

    target, _ = _toys(device)
    ids = torch.tensor(PROMPT, device=device)
    reference = generate(target, ids, 24).new_tokens
    assert jacobi_generate(target, ids, 24, block_size=8, recycle=3).new_tokens == reference, f"recycling differs on {device}"
    multi = jacobi_generate(target, ids, 24, block_size=6, blocks=2, activation=0.5, recycle=3)
    assert multi.new_tokens == reference, f"multi-block Jacobi differs from AR on {device}"
    prompt = torch.tensor(PROMPT[0], device=device)
    clean = [torch.tensor(reference[:8], device=device), torch.tensor(reference[8:14], device=device)]
    noisy = [torch.full((8,), reference[0], device=device), clean[1].roll(1)]
    packed, positions, mask = jf.pack(prompt, noisy, clean)
    with torch.no_grad():
        rows = target(input_ids=packed.to(device), position_ids=positions.to(device),
                      attention_mask=jf.additive(mask, target.dtype).to(device)).logits[0]
        alone = target(input_ids=torch.cat([prompt, *noisy])[None].to(device)).logits[0]
    assert torch.allclose(rows[: len(alone)], alone, atol=1e-4), f"the packed forward differs on {device}"
    loss, parts = jf.jacobi_forcing_loss(target, prompt, noisy, clean, ar_weight=0.5)
    loss.backward()
    assert torch.isfinite(loss) and parts["consistency"] > 0, f"Jacobi Forcing loss {loss} on {device}"
    return (f"parallel: recycling = multi-block (K = 2, widths up to {max(multi.stats.widths[1:])}) = AR; "
            f"Jacobi Forcing packed forward = separate forwards, loss {loss.item():.3f}")


def check_trees(device: str) -> str:
    from ..feature_drafter import FeatureDrafter, FeatureHead
    from ..lookahead import lookahead_generate
    from ..tree import tree_generate
    from ..tree_shapes import budget_shape

    target, draft = _toys(device)
    ids = torch.tensor(PROMPT, device=device)
    reference = generate(target, ids, 24).new_tokens
    torch.manual_seed(0)
    head = FeatureHead(d=target.config.hidden_size, n_heads=4, ffn=64).to(device).eval()
    runs = {"model draft (3, 2, 1)": (ModelDrafter(draft), (3, 2, 1)), "lookup trie (2, 2)": (NGramDrafter(VOCAB), (2, 2)),
            "dynamic tree (8 nodes, depth 3)": (FeatureDrafter(target, head, torch.arange(0, VOCAB, 2, device=device)),
                                                budget_shape(8, 3, 3))}
    widths = []
    for name, (drafter, shape) in runs.items():
        out = tree_generate(target, drafter, ids, 24, shape=shape)
        assert out.new_tokens == reference, f"token tree ({name}) differs from AR on {device}"
        widths += out.stats.verify_widths
    look = lookahead_generate(target, ids, 24, shape=(3, 3, 2))
    assert look.new_tokens == reference, f"lookahead differs from AR on {device}"
    return f"trees: {', '.join(runs)} = lookahead (3, 3, 2) = AR, verify widths up to {max(widths)}"


def check_nf4_double_quant(device: str) -> str:
    from .. import nf4

    torch.manual_seed(0)
    x = torch.randn(96, 80)  # host: the reference input; 120 blocks of 64 fill one partial block of 256
    host = nf4.quantize_4bit(x, "nf4", 64, double_quant=True)
    dev = nf4.quantize_4bit(x.to(device), "nf4", 64, double_quant=True)
    assert dev.packed.device == x.to(device).device and dev.double.qabsmax.device == dev.packed.device, \
        f"double quantization left its result off {device}"
    back = [t.cpu() for t in (dev.packed, dev.scales(), nf4.dequantize_4bit(dev))]  # host: compared with the host's
    assert torch.equal(back[0], host.packed), f"NF4 codes differ between {device} and the host"
    # the mean absmax (the offset) may differ by rounding between devices, and move a scale by one 8-bit step
    step = 0.02 * float(host.double.absmax2.max())
    assert torch.allclose(back[1], host.scales(), rtol=0, atol=step), f"double-quantized scales differ on {device}"
    assert torch.allclose(back[2], nf4.dequantize_4bit(host), rtol=0, atol=step), f"dequantized values differ on {device}"
    linear = torch.nn.Linear(80, 96).to(device)
    layer = nf4.NF4Linear.from_linear(linear, double_quant=True)
    inputs = torch.randn(3, 80, device=device)
    expected = torch.nn.functional.linear(inputs, layer.dequantize(), linear.bias)
    assert torch.allclose(layer(inputs), expected, atol=1e-5), f"NF4Linear (double quantization) differs on {device}"
    model, _ = _toys(device)
    report = nf4.quantize_model(model, double_quant=True)
    out = generate(model, torch.tensor(PROMPT, device=device), 8)
    assert len(out) == 8, f"the double-quantized model did not decode on {device}"
    return (f"nf4 double quantization ({dev.bits_per_parameter:.3f} bits per weight): codes = the host's, scales "
            f"within one 8-bit step; NF4Linear = its dequantized matmul; a model with {len(report.replaced)} such layers decodes")


def check_jf_eval(device: str) -> str:
    from . import jf_eval

    base, other = _toys(device)
    tokenizer = toy_tokenizer(VOCAB)
    prompts = ["w3 w4 w5 w6 w3 w4 w5", "w9 w10 w11 w9 w10"]
    rows = jf_eval.speed(base, {"base": base, "other": other}, tokenizer, prompts, max_new_tokens=12, block=4, repeats=1)
    for row in rows:
        for name in ("base", "base ×2"):  # Jacobi decoding of the base model is its greedy AR
            m = row["methods"][name]
            assert m["drift"] == m["tokens"] == row["ar_tokens"], f"Jacobi ({name}) drifts from AR on {device}: {m}"
    summary = jf_eval.speed_summary(rows)
    answers = jf_eval.greedy_answers(base, tokenizer, prompts, 8, "answers")
    ppl = jf_eval.answer_perplexity(base, tokenizer, prompts, answers)
    assert math.isfinite(ppl) and ppl >= 1, f"answer perplexity {ppl} on {device}"
    tpi = summary["methods"]["other ×2"]["tokens_per_iteration"]
    return f"jf_eval: speed rows (base Jacobi = AR, other ×2 {tpi} tokens/iteration), greedy answers, perplexity {ppl:.2f}"


def check_bandwidth(device: str) -> str:
    from .. import machine

    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    rate = machine.stream_read(megabytes=64, repeats=3, device=device)
    assert math.isfinite(rate) and rate > 0, f"bandwidth {rate} on {device}"
    if cuda:  # its two buffers lived in the GPU's memory, not the host's
        assert torch.cuda.max_memory_allocated() - before >= 64 * 10**6 * 0.99, "the stream did not run in GPU memory"
    return f"bandwidth probe: a read-only stream in {device} memory ({rate / 1e9:.0f} GB/s)"


CHECKS = [check_greedy_paths, check_sampled_exactness, check_bf16, check_nf4, check_cllm_step, check_parallel_decoding,
          check_trees, check_nf4_double_quant, check_jf_eval, check_bandwidth]


@contextmanager
def host_syncs(device: str) -> Iterator[list[str]]:
    """On CUDA, the block under ``torch.cuda.set_sync_debug_mode("warn")``: yields a list that, after the
    block, holds ``file:line`` of every synchronizing call it made; elsewhere an empty list."""
    found: list[str] = []
    if torch.device(device).type != "cuda":
        yield found
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield found
        finally:
            torch.cuda.set_sync_debug_mode(0)
    found += [f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]


def run_check(check, device: str) -> bool:
    """Run one check and print its line: ok (time, what it showed, host syncs on CUDA) or FAIL at file:line."""
    start = time.perf_counter()
    try:
        with host_syncs(device) as syncs:
            said = check(device)
    except Exception as err:  # report every check, then fail
        print(f"FAIL {check.__name__} at {gpureport.failure_site(err)}: {type(err).__name__}: {err}", flush=True)
        return False
    top = ", ".join(f"{site} ×{k}" for site, k in Counter(syncs).most_common(3))
    where = f" [host syncs: {len(syncs)}{'; most at ' + top if top else ''}]" if torch.device(device).type == "cuda" else ""
    print(f"ok   {check.__name__} ({time.perf_counter() - start:.1f} s): {said}{where}", flush=True)
    return True


def short_bench(device: str) -> str:
    """Our AR, transformers' generate, speculative (ours and transformers' assisted), a token tree, prompt lookup,
    Jacobi and lookahead on a small random Llama (8 layers, 512 wide) and a draft made of its first two layers."""
    from .report import markdown
    from .runner import parse_args, run

    target = tiny_llama(VOCAB, hidden_size=512, num_layers=8, seed=0, logit_scale=3.0, max_position_embeddings=512)
    pair = Pair(target.to(device), truncated_model(target, 2).to(device), toy_tokenizer(VOCAB), "toy", torch.device(device))
    prompts = [" ".join(f"w{(7 * i + j) % 20}" for j in range(24)) for i in range(3)]
    args = parse_args(["--methods", "ar,hf_ar,spec,tree,hf_assisted,lookup,hf_lookup,jacobi,lookahead", "--n-prompts", "3",
                       "--max-new-tokens", "64", "--repeats", "3", "--gamma", "4", "--engine", "plain"])
    return markdown(run(args, pair, prompt_texts=prompts, progress=False, log=lambda _: None))


def scale_section(args: argparse.Namespace, left_s: float) -> int:
    """The scale section (:mod:`.gpuscale`) within ``--scale-budget``, else within what is ``left_s`` of the
    whole run's ``--budget`` (less a margin: a phase already started runs to its end); writes its report after
    each model and at the end, prints it; returns the number of its phases that failed."""
    if torch.device(args.device).type == "cpu" and not args.tiny:
        print("scale section skipped: the real shapes (up to 18 GB of weights) are for a GPU; --tiny runs it on stand-ins")
        return 0
    default = gpuscale.settings_for(args.tiny).budget_s
    budget = args.scale_budget if args.scale_budget is not None else max(30.0, min(default, left_s - 40.0))
    print(f"scale section: {budget:.0f} s budget", flush=True)
    report = gpuscale.run_section(args.device, tiny=args.tiny, settings=gpuscale.settings_for(args.tiny, budget),
                                  checkpoint=lambda partial_report: gpureport.write(partial_report, args.out))
    paths = gpureport.write(report, args.out)
    print(gpureport.markdown(report))
    print("written: " + ", ".join(str(p) for p in paths), flush=True)
    return len(report["errors"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu, to check the checks")
    p.add_argument("--no-bench", action="store_true", help="skip the short bench")
    p.add_argument("--no-scale", action="store_true", help="skip the scale section")
    p.add_argument("--checks-only", action="store_true", help="the checks only (no bench, no scale section)")
    p.add_argument("--tiny", action="store_true", help="the scale section on two-layer stand-ins of each architecture "
                   "(seconds, on a CPU too; its report is named gpu-<device>-tiny and never shown in the README)")
    p.add_argument("--budget", type=float, default=330.0, metavar="SECONDS",
                   help="time for the whole run (default 330): the scale section gets what the checks and the bench left")
    p.add_argument("--scale-budget", type=float, default=None, metavar="SECONDS",
                   help=f"time for the scale section (default: what --budget leaves, at most {gpuscale.FULL.budget_s:.0f}): "
                   "past it, the models and phases left are skipped, each with a note in the report")
    p.add_argument("--out", default=str(gpureport.ROOT / "results"), help="where the scale report goes (default results/)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU here (torch.cuda.is_available() is False): run this on a GPU machine, "
              "or with --device cpu to check the checks")
        return 2
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # exactness checks compare float32 results
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    start = time.perf_counter()
    failed = sum(not run_check(check, args.device) for check in CHECKS)
    if not (args.no_bench or args.checks_only):
        try:
            print(short_bench(args.device), flush=True)
        except Exception as err:  # the scale section still runs
            failed += 1
            print(f"FAIL short_bench at {gpureport.failure_site(err)}: {type(err).__name__}: {err}", flush=True)
    if not (args.no_scale or args.checks_only):
        failed += scale_section(args, args.budget - (time.perf_counter() - start))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
