"""The course's offline pair served by vLLM's CPU build, with and without speculation (make vllm; lesson 10).

Runs under vLLM's own environment (``.venv-vllm``, built by ``vllm_env.sh``), so it never imports the course's
package: vLLM pins an older transformers than the course's. It finds the offline target where ``make setup``
put it (``$SPECDEC_CACHE/models/smollm2-135m-instruct``) and the standalone draft in the checkout
(``specdec_core/drafts/standalone``); the one atomic writer (``specdec_core/files.py``, standard library only)
is loaded from its file.

    .venv-vllm/bin/python specdec_core/bench/vllm_serve.py --out results/vllm-cpu.json
    .venv-vllm/bin/python specdec_core/bench/vllm_serve.py --max-new-tokens 8 --concurrency 2 --out /tmp/v.json

Each method gets a fresh ``LLM`` in a child process (one engine at a time; the next starts clean): f32,
greedy, ``max_new_tokens`` new tokens with ``ignore_eos``, the prompts through the target's chat template.
Per concurrency c the first c prompts (cycled) go to one ``LLM.generate`` call after an untimed warm-up; its
wall time gives tokens/s (summed over the c sequences). vLLM's spec-decode counters (``LLM.get_metrics``,
read before and after that call) give drafts, draft tokens, accepted tokens and accepted tokens per position;
from them vLLM's own figures: mean acceptance length 1 + accepted / drafts (the course's τ) and acceptance
per position accepted_i / drafts. One timed call per cell, not the course's interleaved harness (it cannot
be imported here): run it on a quiet machine. The JSON is read by ``specdec_core.bench.vllm``.

Threads: vLLM's defaults (``VLLM_CPU_OMP_THREADS_BIND=auto``) keep one core for its own processes and bind the
model's threads to the rest — on a 2-core machine ONE core (its log: ``reserved_cpus=[1]``, ``core ids=[0]``);
``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` gives the model every core. The JSON records which was used.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]
# Run as a script, Python puts this folder first on sys.path, where kernels.py, compile.py … would shadow the
# packages of those names that transformers and vLLM probe for: drop it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
SCHEMA = 1
METHODS = ("ar", "ngram", "draft_model", "eagle")
# Why the course's EAGLE-style head is not served: read from vLLM 0.32.0's model file for EAGLE on Llama
# (vllm/model_executor/models/llama_eagle.py) beside specdec_core/feature_drafter.py's FeatureHead.
EAGLE_NOT_RUN = (
    "vLLM's CPU build has EAGLE kernels, but its EAGLE-1 Llama head cannot hold the course's head without "
    "changing what it computes: vLLM's fc has no bias (ours has one), vLLM drops the first layer's input norm "
    "(ours normalises before attention) and puts no norm before the output layer (ours has norm_out), and our "
    "head guesses among FR-Spec's 8,192 tokens (vocab_ids), which only vLLM's eagle3 format maps (d2t); eagle3 "
    "reads three of the target's layers (a 3·d-wide fc), ours the last one. Serving it means retraining a head "
    "in vLLM's format (e.g. with vllm-project/speculators)."
)


def files_module() -> Any:
    """``specdec_core/files.py`` loaded from its file (standard library only): the course's atomic writer
    without importing the package, whose transformers differs from vLLM's."""
    spec = importlib.util.spec_from_file_location("specdec_files", PACKAGE / "files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def default_prompts() -> list[str]:
    """16 prompts from ``specdec_core/data/prompts.json``: held-out chat and copy-heavy requests, alternating
    (the n-gram drafter needs text to copy; chat shows what it does without)."""
    data = json.loads((PACKAGE / "data" / "prompts.json").read_text(encoding="utf-8"))
    copy = [p for kind in data["copy_heavy"].values() for p in kind]
    mixed = [p for pair in zip(data["heldout"], copy) for p in pair]
    return mixed[:16]


def read_prompts(path: str | None) -> list[str]:
    if path is None:
        return default_prompts()
    prompts = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise SystemExit(f"--prompts {path}: expected a JSON list of non-empty strings, e.g. [\"Write a haiku\"]")
    return prompts


def speculative_config(method: str, args: argparse.Namespace) -> dict | None:
    """vLLM's ``speculative_config`` for one of :data:`METHODS` (None: plain autoregressive decoding)."""
    if method == "ar":
        return None
    if method == "ngram":  # the course's NGramDrafter: the longest match of 3 … 1 tokens, k guesses
        return {"method": "ngram", "num_speculative_tokens": args.ngram_k, "prompt_lookup_max": 3,
                "prompt_lookup_min": 1}
    if method == "draft_model":
        return {"method": "draft_model", "model": str(args.draft), "num_speculative_tokens": args.draft_k}
    raise ValueError(f"no speculative_config for {method!r}")


def counters(llm: Any) -> dict[str, Any]:
    """vLLM's spec-decode counters now (cumulative since the engine started; zeros without speculation)."""
    found = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": []}
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:spec_decode_")
        if name == "num_accepted_tokens_per_pos":
            found["accepted_per_pos"] = [int(v) for v in metric.values]
        elif name in found:
            found[name] += int(metric.value)
    return found


def difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out = {k: after[k] - before[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    prev = before["accepted_per_pos"] + [0] * (len(after["accepted_per_pos"]) - len(before["accepted_per_pos"]))
    out["accepted_per_pos"] = [a - b for a, b in zip(after["accepted_per_pos"], prev)]
    return out


def serve_one(method: str, args: argparse.Namespace, prompts: list[str]) -> dict[str, Any]:
    """One method at every concurrency, on a fresh LLM (runs in the child process)."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    tokenizer = AutoTokenizer.from_pretrained(args.target)
    ids = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                         return_dict=True)["input_ids"] for p in prompts]
    llm = LLM(model=str(args.target), dtype="float32", seed=0, disable_log_stats=False,
              max_model_len=args.max_model_len, speculative_config=speculative_config(method, args))
    greedy = SamplingParams(temperature=0.0, max_tokens=args.max_new_tokens, ignore_eos=True)
    warm = SamplingParams(temperature=0.0, max_tokens=min(4, args.max_new_tokens), ignore_eos=True)
    llm.generate([{"prompt_token_ids": ids[0]}], warm, use_tqdm=False)  # untimed: allocation, first kernels
    runs = []
    for c in args.concurrency:
        batch = [{"prompt_token_ids": ids[i % len(ids)]} for i in range(c)]
        before = counters(llm)
        t0 = time.perf_counter()
        outputs = llm.generate(batch, greedy, use_tqdm=False)
        seconds = time.perf_counter() - t0
        spec = difference(counters(llm), before)
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
        n = sum(len(t) for t in tokens)
        drafts = spec["num_drafts"]
        runs.append({
            "method": method, "concurrency": c, "seconds": seconds, "new_tokens": n,
            "tokens_per_s": n / seconds, "tokens_per_s_per_sequence": n / seconds / c, **spec,
            # vLLM's own figures (vllm/v1/spec_decode/metrics.py): τ and the share of drafts accepted at each position
            "mean_acceptance_length": 1 + spec["num_accepted_tokens"] / drafts if drafts else None,
            "acceptance_per_pos": [a / drafts for a in spec["accepted_per_pos"]] if drafts else [],
            "token_ids": tokens, "first_text": outputs[0].outputs[0].text[:80],
        })
    return {"speculative_config": speculative_config(method, args), "runs": runs}


def machine() -> dict[str, Any]:
    import cpuinfo  # py-cpuinfo, a dependency of vLLM's CPU build
    import torch
    import transformers
    import vllm

    return {"cpu": cpuinfo.get_cpu_info().get("brand_raw", platform.processor()),
            "cores": len(os.sched_getaffinity(0)), "platform": platform.platform(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "vllm": vllm.__version__,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
            "reserved_cpus": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "vLLM's default"),
            "ld_preload": {**os.environ, **preload()}.get("LD_PRELOAD", "")}


def exact_against_ar(report: dict[str, Any]) -> None:
    """Each speculative run's share of rows whose tokens equal AR's at the same concurrency (greedy: all, up
    to f32 rounding where two tokens are within a rounding of each other)."""
    ar = {r["concurrency"]: r["token_ids"] for r in report["methods"].get("ar", {}).get("runs", [])}
    for result in report["methods"].values():
        for run in result.get("runs", []):
            ref = ar.get(run["concurrency"])
            run["rows_equal_ar"] = (sum(a == b for a, b in zip(ref, run["token_ids"])) / len(ref)) if ref else None


def preload() -> dict[str, str]:
    """``LD_PRELOAD`` with the Intel OpenMP that vllm-cpu installs (``<venv>/lib/libiomp5.so``): without it vLLM
    warns that speculative decoding on CPU loses much of its speed (its CPU installation guide, "set LD_PRELOAD")."""
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    if not iomp.is_file() or "libiomp5" in os.environ.get("LD_PRELOAD", ""):
        return {}
    return {"LD_PRELOAD": ":".join(filter(None, [str(iomp), os.environ.get("LD_PRELOAD")]))}


def run_child(method: str, argv: list[str]) -> dict[str, Any]:
    """:func:`serve_one` in a fresh process (vLLM's engine holds a process and memory until it exits)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "one.json"
        cmd = [sys.executable, __file__, *argv, "--child", method, "--child-out", str(out)]
        proc = subprocess.run(cmd, text=True, env={**os.environ, **preload()})
        if proc.returncode != 0 or not out.is_file():
            return {"error": f"vLLM failed for {method} (exit {proc.returncode}); its log is above"}
        return json.loads(out.read_text())


def parse(argv: list[str] | None) -> argparse.Namespace:
    cache = Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec_core")).expanduser()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="results/vllm-cpu.json", help="the JSON written (atomically)")
    p.add_argument("--target", type=Path, default=cache / "models" / "smollm2-135m-instruct",
                   help="the offline target's HF folder (make setup puts it in $SPECDEC_CACHE/models)")
    p.add_argument("--draft", type=Path, default=PACKAGE / "drafts" / "standalone", help="the standalone draft")
    p.add_argument("--prompts", help="a JSON list of prompts (default: 16 from specdec_core/data/prompts.json)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 16])
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--ngram-k", type=int, default=4)
    p.add_argument("--draft-k", type=int, default=2)
    p.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not (args.target / "config.json").is_file():
        p.error(f"no model at {args.target}: run `make setup` (it converts the offline target into "
                "$SPECDEC_CACHE/models), or pass --target <its folder>")
    if "draft_model" in args.methods and not (args.draft / "config.json").is_file():
        p.error(f"no draft at {args.draft}: restore it with `git checkout -- specdec_core/drafts`, or pass --draft")
    if min(args.concurrency) < 1 or args.max_new_tokens < 1:
        p.error("--concurrency and --max-new-tokens must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache: plenty for 16 × 2k tokens of this model
    prompts = read_prompts(args.prompts)
    files = files_module()
    if args.child:
        files.write_json(serve_one(args.child, args, prompts), args.child_out)
        return 0
    report = {"schema": SCHEMA, "kind": "vllm-cpu", "machine": machine(),
              "settings": {"dtype": "float32", "temperature": 0.0, "max_new_tokens": args.max_new_tokens,
                           "ignore_eos": True, "concurrency": args.concurrency, "ngram_k": args.ngram_k,
                           "draft_k": args.draft_k, "target": args.target.name, "draft": args.draft.name,
                           "prompts": prompts},
              "methods": {}, "not_run": {}}
    for method in args.methods:
        if method == "eagle":
            report["not_run"]["eagle"] = EAGLE_NOT_RUN
            continue
        print(f"vllm_serve: {method} at concurrency {args.concurrency}", flush=True)
        result = run_child(method, argv)
        if "error" in result:
            report["not_run"][method] = result["error"]
        else:
            report["methods"][method] = result
        gc.collect()
    exact_against_ar(report)
    files.write_json(report, args.out, indent=1)
    print(f"vllm_serve: wrote {args.out}" + ("" if report["methods"] else " (no method ran: see not_run)"))
    return 0 if report["methods"] else 1


if __name__ == "__main__":
    sys.exit(main())
