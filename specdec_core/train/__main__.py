"""``python -m specdec_core.train``: reproduce every trained file the course ships.

    python -m specdec_core.train draft --kind feature      # the EAGLE-style feature head   (train/distill.py)
    python -m specdec_core.train draft --kind model        # the standalone 4-layer draft
    python -m specdec_core.train draft --kind medusa       # the Medusa heads (≤ 10 min)    (train/medusa.py)
    python -m specdec_core.train ablation                  # lesson 04's appendix: the feature head's ablation (train/eagle.py)
    python -m specdec_core.train cllm collect --shard 0/2  # Jacobi trajectories            (train/trajectories.py)
    python -m specdec_core.train cllm train                # the CLLM's LoRA fine-tune      (train/cllm_finetune.py)
    python -m specdec_core.train cllm evaluate             # held-out evaluation → eval.json (bench/cllm_eval.py)
    python -m specdec_core.train cllm compare --adapter cllm=DIR --adapter jf=DIR --out report.json
                                                           # base vs fine-tunes, speed + quality (bench/jf_eval.py)
    python -m specdec_core.train cllm train --objective jf --fraction 0.25 --out DIR   # one point of the data curve
    python -m specdec_core.train cllm curve --adapter DIR --adapter DIR --out curve.json  # its tokens/iteration

Every stage is cached under ``$SPECDEC_CACHE`` and resumes where an interrupted run stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from .. import code_prompts
from ..assets import CLLM_DIR, cache_dir, ensure_target_dir
from ..cllm import ANCHOR_LEN, BLOCK, MAX_NEW_TOKENS, SEED


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.train", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    d = sub.add_parser("draft", help="distil one of the offline drafts from the target (resumable)")
    d.add_argument("--kind", choices=["feature", "model", "medusa"], required=True)
    d.add_argument("--steps", type=int, default=None, help="training steps (default: the shipped recipe)")
    d.add_argument("--out", type=Path, default=None, help="where to write the weights (default: the package)")
    a = sub.add_parser("ablation", help="the feature head's ablation and data curve (resumable)")
    a.add_argument("--steps", type=int, default=400, help="training steps of every variant")
    a.add_argument("--only", action="append", default=None, help="train only this variant (repeatable)")
    a.add_argument("--reference", action="store_true", help="only measure the shipped head the same way")
    a.add_argument("--head", type=Path, default=None,
                   help="with --reference: measure this head (from `draft --kind feature --out FILE`) instead")
    a.add_argument("--name", default="", help="with --head: the table's name for it (default: the file's stem)")
    c = sub.add_parser("cllm", help="the consistency-LLM fine-tune of lesson 08")
    cs = c.add_subparsers(dest="cmd", required=True)
    col = cs.add_parser("collect", help="Jacobi trajectories of the training prompts (cached, resumable)")
    col.add_argument("--shard", default="0/1", help="i/k: this process collects prompts i, i+k, … (run k at once)")
    t = cs.add_parser("train", help="the LoRA fine-tune on the collected trajectories (resumable)")
    t.add_argument("--shards", type=int, default=2, help="how many shards the collection was split into")
    t.add_argument("--steps", type=int, default=None, help="training steps (default: the reference recipe)")
    t.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the reference recipe)")
    t.add_argument("--ar-weight", type=float, default=None, help="w, the AR loss weight (default: the reference recipe)")
    t.add_argument("--anchors", type=int, default=None, help="anchor sequences per step (drafts' corpus; 0: none)")
    t.add_argument("--objective", choices=["cllm", "jf"], default=None,
                   help="cllm: the consistency loss; jf: Jacobi Forcing (noisy context, one packed forward)")
    t.add_argument("--anchor-text", action="store_true",
                   help="anchor on Python's docs and source (no generation) instead of the drafts' corpus")
    t.add_argument("--anchor-kl", action="store_true",
                   help="anchor with the KL to the base model's distribution instead of its greedy tokens (LoRA)")
    t.add_argument("--fraction", type=float, default=1.0,
                   help="train on this share of the trajectories (a fixed, nested subset: the data curve)")
    t.add_argument("--out", type=Path, default=None, help="adapter folder (default: the package's)")
    t.add_argument("--full", action="store_true", help="fine-tune every weight instead of LoRA (on a GPU)")
    t.add_argument("--device", default="cpu", help="cpu, cuda or mps (training only; collection runs on the CPU)")
    e = cs.add_parser("evaluate", help="held-out evaluation of the shipped adapter (writes its eval.json)")
    e.add_argument("--humaneval", type=int, default=20, help="HumanEval problems to unit-test (0: none)")
    e.add_argument("--adapter", type=Path, default=None, help="adapter folder (default: the package's)")
    cmp = cs.add_parser("compare", help="the base model and fine-tunes side by side: speed and quality")
    cmp.add_argument("--adapter", action="append", required=True, metavar="NAME=DIR",
                     help="a fine-tune to compare (repeatable): a name and its adapter folder")
    cmp.add_argument("--out", type=Path, required=True, help="the report (JSON)")
    cmp.add_argument("--repeats", type=int, default=2, help="interleaved timing rounds per prompt")
    cmp.add_argument("--humaneval", type=int, default=20, help="HumanEval problems whose code must parse (0: none)")
    cur = cs.add_parser("curve", help="tokens per iteration against trajectory tokens (untimed): the data curve")
    cur.add_argument("--adapter", action="append", required=True, metavar="DIR",
                     help="an adapter trained with --fraction (repeatable); its training log gives its data")
    cur.add_argument("--out", type=Path, required=True, help="the curve (JSON)")
    return ap


def cllm_main(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from ..models import PRESETS, load_model
    from .trajectories import answer_tokens, collect, data_path, load_trajectories, share

    torch.manual_seed(SEED)
    target = load_model(PRESETS["offline"].target, args.device if args.cmd == "train" else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(ensure_target_dir())
    if args.cmd == "collect":
        i, k = (int(x) for x in args.shard.split("/"))
        if not 0 <= i < k:
            raise SystemExit(f"--shard must be i/k with 0 <= i < k, got {args.shard}")
        items = collect(target, tokenizer, code_prompts.train(), shard=(i, k))
        print(f"{len(items)} trajectories in {data_path(code_prompts.train(), MAX_NEW_TOKENS, BLOCK, (i, k))}")
        return 0
    if args.cmd == "evaluate":
        from ..bench.cllm_eval import evaluate

        return evaluate(target, tokenizer, args.humaneval, args.adapter)
    if args.cmd == "compare":
        return compare_main(target, tokenizer, args)
    if args.cmd == "curve":
        return curve_main(target, tokenizer, args)
    from .cllm_finetune import Recipe, save_adapter, train

    trajs = share(load_trajectories(code_prompts.train(), args.shards), args.fraction)
    changes = {"steps": args.steps, "lr": args.lr, "ar_weight": args.ar_weight, "anchors": args.anchors,
               "lora": False if args.full else None, "objective": args.objective,
               "anchor_source": "text" if args.anchor_text else None, "anchor_kind": "kl" if args.anchor_kl else None}
    recipe = Recipe(**{k: v for k, v in changes.items() if v is not None})
    tag = (f"{recipe.objective}-{recipe.steps}-{recipe.lr:g}-{recipe.ar_weight:g}-{recipe.anchors}"
           f"-{recipe.anchor_source}" + ("-kl" if recipe.anchor_kind == "kl" else "")
           + (f"-{args.fraction:g}" if args.fraction < 1 else ""))  # one checkpoint per recipe
    ckpt = cache_dir() / "cllm" / f"train-checkpoint-{tag}.pt"
    anchors = None
    if recipe.anchors and recipe.anchor_source == "text":
        from .cllm_finetune import text_anchors

        anchors = text_anchors(target, tokenizer)
    elif recipe.anchors:  # the drafts' corpus: the target's chat answers, Python docs and code (cached)
        from . import corpus as corpus_data

        corpus = corpus_data.build(target, tokenizer)
        anchors = [(x[:ANCHOR_LEN], top[:ANCHOR_LEN, 0]) for x, top in zip(corpus.tokens, corpus.top_ids)]
        del corpus
    peft_model, log = train(target, trajs, recipe, tokenizer.pad_token_id or 0, ckpt, anchors=anchors)
    out = args.out or CLLM_DIR
    meta = {"trajectories": len(trajs), "trajectory_tokens": answer_tokens(trajs), "fraction": args.fraction,
            "recipe": recipe.__dict__, "threads": torch.get_num_threads()}
    save_adapter(peft_model, out, log, meta)
    first, last = sum(log["after_error_acc"][:20]) / 20, sum(log["after_error_acc"][-20:]) / 20
    print(f"wrote {out} after {log['seconds'] / 60:.1f} min; accuracy after an error {first:.3f} (first 20 steps)"
          f" → {last:.3f} (last 20)")
    return 0


def curve_main(target, tokenizer, args: argparse.Namespace) -> int:
    """``cllm curve``: tokens per iteration on the held-out code requests (one block, greedy, untimed) of
    the base model and of each adapter, against the trajectory tokens it trained on → a JSON report."""
    import json

    from ..bench.jf_eval import tokens_per_iteration
    from ..files import write_json
    from ..models import load_cllm
    from .trajectories import answer_tokens, load_trajectories, share

    held, trajs = code_prompts.heldout(), load_trajectories(code_prompts.train())
    points = []
    for folder in args.adapter:
        log = json.loads((Path(folder) / "training-log.json").read_text())
        tpi = tokens_per_iteration(load_cllm(folder=Path(folder)), tokenizer, held)
        fraction = log.get("fraction", 1.0)  # logs written before --fraction trained on every trajectory
        points.append({"adapter": Path(folder).name, "fraction": fraction, "steps": len(log["step"]),
                       "trajectory_tokens": log.get("trajectory_tokens", answer_tokens(share(trajs, fraction))),
                       "objective": log["recipe"]["objective"], "tokens_per_iteration": round(tpi, 3)})
        print(points[-1])
    report = {"base": round(tokens_per_iteration(target, tokenizer, held), 3), "prompts": len(held),
              "points": sorted(points, key=lambda p: p["trajectory_tokens"] or 0)}
    write_json(report, args.out, indent=1)
    return 0


def compare_main(target, tokenizer, args: argparse.Namespace) -> int:
    """``cllm compare``: the base model and each adapter side by side (bench/jf_eval.py) → a JSON report."""
    import json

    from ..bench import jf_eval
    from ..files import write_json
    from ..models import load_cllm
    from .corpus import heldout_prose

    models = {"base": target}
    for spec in args.adapter:
        name, sep, folder = spec.partition("=")
        if not sep or not name or name == "base":
            raise SystemExit(f"--adapter takes NAME=DIR (NAME not 'base'), got {spec!r}")
        models[name] = load_cllm(folder=Path(folder))
    rows = jf_eval.speed(target, models, tokenizer, code_prompts.heldout(), repeats=args.repeats)
    report = {"speed": jf_eval.speed_summary(rows), "threads": torch.get_num_threads(), "rows": rows}
    write_json(report, args.out, indent=1)  # the timed part first: the quality pass takes longer
    report["quality"] = jf_eval.quality(target, models, tokenizer, heldout_prose(tokenizer), args.humaneval)
    write_json(report, args.out, indent=1)
    print(json.dumps(report["speed"], indent=1))
    print(json.dumps({k: {m: v for m, v in q.items() if not m.endswith("answers")} if isinstance(q, dict) else q
                      for k, q in report["quality"].items()}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.what == "draft" and args.kind == "medusa":
        from .medusa import medusa_main

        return medusa_main(args.steps, args.out)
    if args.what == "draft":
        from .distill import distill_main

        return distill_main(args.kind, args.steps, args.out)
    if args.what == "ablation":
        from .distill import ablation_main

        return ablation_main(args.steps, args.only, args.reference, args.head, args.name)
    return cllm_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
