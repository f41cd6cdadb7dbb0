"""``make compile``: the compiled step (``specdec_core/compiled.py``) built once on this machine, for the engines that
can use it, so the engine choice (``specdec_core.engines``) can measure it.

    python -m specdec_core.bench.compile                      # the precisions of the engines chosen here
    python -m specdec_core.bench.compile --precisions f32 bf16

For each precision, the target and the draft on the compiled engine compile every width of the menu
(``widths.WIDTHS``) once; inductor keeps the kernels on disk and ``compiled.warm`` records each model as warm. It
prints what each width took (trace + compile: the cost a lesson would otherwise pay) and, once done, the engines
measured again with the compiled ones among them (the choice's key lists its candidates, so the cached choice is
remade).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch

from .. import compiled, engines, fast
from ..models import PRESETS, load_pair

COMPILABLE = tuple(name.split()[1] for name in engines.COMPILED)  # inductor cannot lower torch's int8 kernel (2.13)


def precisions_to_compile(choice: engines.Choice) -> list[str]:
    """The precisions of the static engines in ``choice`` (our AR's and the speculation engine's) that compile, else
    bf16 where oneDNN packs it here, else f32."""
    rungs = [name.split()[1] for name in (choice.ar, choice.spec) if name.split()[0] in ("static", "compiled")]
    return sorted({r for r in rungs if r in COMPILABLE}) or ["bf16" if fast.packs(torch.bfloat16) else "f32"]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specdec_core.bench.compile", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="offline", choices=sorted(PRESETS))
    p.add_argument("--precisions", nargs="*", choices=["f32", "bf16", "f16"], default=None,
                   help="default: the precisions of the engines chosen on this machine")
    args = p.parse_args(argv)
    pair = load_pair(args.preset)
    precisions = args.precisions or precisions_to_compile(engines.choose(pair))
    started = time.perf_counter()
    for rung in precisions:
        on = pair.engine(rung, compiled=True)
        name = f"compiled {rung}"
        seconds = compiled.warm({engines.warm_name(pair, name, "target"): on.target,
                                 engines.warm_name(pair, name, "draft"): on.draft})
        total = sum(s for per in seconds.values() for s in per.values())
        print(f"{name}: target and draft ready, {total:.0f} s for {len(compiled.WIDTHS)} widths each")
    print(f"compiled in {(time.perf_counter() - started) / 60:.1f} min; the engines, measured again with them:")
    print(engines.choose(pair, refresh=True).line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
