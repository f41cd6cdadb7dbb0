"""Training: everything that makes the files the course ships (``python -m specdec_core.train``).

    requests.py       requests the target writes itself (Magpie): plain, steered, follow-ups
    answers.py        the target's greedy answers to them, in resumable shards
    features.py       its features and top-32 on every position, memory-mapped
    corpus.py         the drafts' distillation data: the recipe that puts these together
    eagle.py          the feature head's two recipes (two passes; training-time test) and evaluation
    distill.py        the feature head and the standalone draft, distilled from it; the ablation
    medusa.py         the Medusa heads, on the target's teacher-forced distributions (≤ 10 minutes)
    trajectories.py   Jacobi trajectories for the CLLM (cached, sharded, resumable)
    cllm_finetune.py  the CLLM's LoRA fine-tune
    loop.py           the one resumable training loop both use, and its learning-rate schedule

Nothing in the concept modules imports this package: the shipped files' paths live in ``assets``.
"""
