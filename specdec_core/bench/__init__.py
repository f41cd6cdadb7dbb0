"""Measuring: the timing harness, memory probes, the method registry and the benchmark
(``python -m specdec_core.bench``), and the comparisons the lessons run.

    harness.py    the one interleaved timing harness (warm-up, rounds, medians, min–max), measure_latency_and_memory
    probes.py     memory probes (CUDA max allocated, CPU peak RSS) and lesson 01's step timer
    fresh.py      one method's memory alone, in a fresh Python process (the report's peak column, lessons 01 and 06)
    methods.py    every decoding method as one registry: name → fn(pair, input_ids, max_new_tokens)
    runner.py     the benchmark run (interleaved over prompts and methods) and its summary
    report.py     its JSON (schema-versioned), Markdown table and PNG
    llamacpp.py   llama.cpp, the optional peer (make llama-cpp): the target's GGUF and the benchmark's llama.cpp rows
    drafters.py   drafters side by side (lesson 04), quantized.py precisions (lesson 06),
    cllm_eval.py  base vs CLLM (lesson 08), quality.py perplexity and code checks
"""

# The public names of the old single-file ``specdec_core.bench`` (kept for one release; new code
# imports them from their modules: specdec_core.bench.harness, .probes, specdec_core.memory).
from ..memory import MB, cache_tensor_bytes, filled_cache, kv_cache_bytes, weight_bytes
from .harness import Measurement, Spread, interleaved, measure_latency_and_memory
from .probes import cpu_threads, current_rss_bytes, peak_rss_bytes, reset_peak_rss, step_latency

__all__ = ["MB", "Measurement", "Spread", "cache_tensor_bytes", "cpu_threads", "current_rss_bytes", "filled_cache",
           "interleaved", "kv_cache_bytes", "measure_latency_and_memory", "peak_rss_bytes", "reset_peak_rss",
           "step_latency", "weight_bytes"]
