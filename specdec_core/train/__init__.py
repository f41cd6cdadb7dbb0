"""Training: everything that makes the files the course ships (``python -m specdec_core.train``).

    corpus.py         the drafts' distillation data: the target's own work, cached
    distill.py        the feature head and the standalone draft, distilled from it
    trajectories.py   Jacobi trajectories for the CLLM (cached, sharded, resumable)
    cllm_finetune.py  the CLLM's LoRA fine-tune
    loop.py           the one resumable training loop both use, and its learning-rate schedule

Nothing in the concept modules imports this package: the shipped files' paths live in ``assets``.
"""
