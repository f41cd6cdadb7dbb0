"""``python -m specdec_core.bench``: every decoding method side by side (``make bench``).

    python -m specdec_core.bench --out results/       # make bench: offline pair, 5 chat prompts × 64 tokens
    python -m specdec_core.bench --preset smollm2 --prompts humaneval --n-prompts 10 --max-new-tokens 128
    python -m specdec_core.bench --methods ar,spec,jacobi --gamma 3 --n-prompts 1 --max-new-tokens 16
    python -m specdec_core.bench --list               # the methods
    python -m specdec_core.bench --summarize results/cpu-offline-{chat,copy,heldout,code}.json  # per category

How it measures: ``specdec_core/bench/runner.py``; the reports: ``specdec_core/bench/report.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from ..models import Pair
from .methods import NOT_AVAILABLE, Method, build_methods
from .report import categories, load_report, markdown, write_report
from .runner import parse_args, run, select_methods


def main(argv: Sequence[str] | None = None, pair: Pair | None = None, methods: dict[str, Method] | None = None,
         prompt_texts: Sequence[str] | None = None, progress: bool = True) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--summarize":  # one table over several reports, Spec-Bench style
        reports = {load_report(path)["settings"]["prompts"]: load_report(path) for path in argv[1:]}
        print(categories(reports))
        return 0
    args = parse_args(argv)
    registry = methods if methods is not None else build_methods(gamma=4, lookup_tokens=args.lookup_tokens)
    if args.list:
        print("\n".join(f"{name:14s} {method.label}" for name, method in registry.items()))
        print("\n".join(f"{name:14s} {why}: not available yet" for name, why in NOT_AVAILABLE.items()))
        return 0
    try:  # check the method names before loading anything
        select_methods(registry, args.methods)
    except ValueError as err:
        print(f"error: {err}")
        return 2
    report = run(args, pair, methods, prompt_texts, progress)
    paths = write_report(report, Path(args.out), args.name)
    print(markdown(report))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
