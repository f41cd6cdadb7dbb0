"""Measuring: the timing harness, memory probes, the method registry and the benchmark
(``python -m specdec_core.bench``), and the comparisons the lessons run. Every name is imported from its
module (``from specdec_core.bench.harness import interleaved``); this package re-exports nothing.

    harness.py         the one interleaved timing harness (warm-up, rounds, medians, min–max), measure_latency_and_memory
    probes.py          memory probes (CUDA max allocated, CPU peak RSS) and lesson 01's step timer
    fresh.py           one method's memory alone, in a fresh Python process (the report's peak column, lessons 01 and 06)
    methods.py         every decoding method as one registry: name → fn(pair, input_ids, max_new_tokens)
    runner.py          the benchmark run (interleaved over prompts and methods) and its summary
    engine.py          the engine ladder (lesson 01b) and the benchmark's engine rows (AR and the best method on it)
    compile.py         python -m specdec_core.bench.compile (make compile): the compiled step built for the chosen engines
    kernels.py         the kernel probe: y = x Wᵀ at a model's shapes, every kernel here, M = 1 … 17, weights rotated
    synthetic.py       synthetic acceptance: an oracle drafter right with probability α (c, v, o at a known τ)
    batch_forwards.py  the cost model under load measured: t(B, n), d(B), a compute rate (load_costs.LoadCosts)
    serving.py         python -m specdec_core.bench.serving (make serving): throughput against B, speculation under load (lesson 10)
    load_sweep.py      make serving's load sweep: requests at a few rates, continuous batching, speculation off / on / adaptive
    serving_view.py    lesson 10's reading of that report: machine and date, verdicts in its noise band, the live batched run
    report.py          its JSON (schema-versioned), Markdown table and PNG
    conclusion.py      lesson 09's closing table: per category the fastest exact method, the engine, llama.cpp, the GPU
    __main__.py        python -m specdec_core.bench (make bench)
    llamacpp.py        llama.cpp, the optional peer (make llama-cpp): the target's GGUF and the benchmark's llama.cpp rows
    vllm_env.sh        vLLM's CPU build in its own environment, .venv-vllm (make vllm; lesson 10's optional peer)
    vllm_serve.py      the offline pair served by vLLM at 1 and 16 requests, with and without speculation (runs in .venv-vllm)
    vllm.py            vllm_serve's results read back beside the course's τ and α, each method's vLLM / SGLang name
    drafters.py        drafters side by side (lesson 04)
    quantized.py       precisions side by side (lesson 06)
    trees.py           token trees' acceptance by rank and τ by budget (lesson 04b)
    in_model.py        drafters inside the model side by side: α per position, τ, c, speed, training cost (lesson 04c)
    lookahead_eval.py  lookahead shapes swept and priced (lesson 07b)
    cllm_eval.py       base vs CLLM (lesson 08)
    jf_eval.py         base, CLLM and Jacobi Forcing side by side, speed and quality (lesson 08b)
    quality.py         perplexity and code checks
    syncs.py           counting device→host transfers (host syncs), transformers' code included
    gpucheck.py        python -m specdec_core.bench.gpucheck (make gpu-check): the course's core on a CUDA GPU
    gpuscale.py        gpu-check's scale section: a decode step at the GPU presets' real shapes
    gpureport.py       gpu-check's report files and the README's GPU section
    gpu_run.sh         the whole gpu-check on a lent GPU machine, in one call

Layers (``tests/test_structure.py``): bench/ imports the concepts and viz/ (its report's figure), never
train/ or course/; train/ and course/ import bench/.
"""
