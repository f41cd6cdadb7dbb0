"""gpu-check's report: the machine it ran on, its files ``results/gpu-<device>.{json,md}``, and the README's
GPU section rendered from the latest of them.

    paths = write(report, "results")                         # JSON + Markdown, each written atomically
    python -m specdec_core.bench.gpureport --write-readme    # the README's block from the latest report
    python -m specdec_core.bench.gpureport --check           # exit 1 if the README's block is stale

A report made with ``--tiny`` (two-layer models, the CPU test's run) is named ``gpu-<device>-tiny`` and
never shown in the README: its figures say nothing about any machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers

from ..envinfo import cpu_model
from ..files import atomic_write, json_safe, write_json

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent
START = "<!-- gpu-report: rendered from results/gpu-*.json by `python -m specdec_core.bench.gpureport --write-readme` -->"
END = "<!-- /gpu-report -->"


def failure_site(err: BaseException) -> str:
    """The innermost frame of ``err``'s traceback inside specdec_core, as ``specdec_core/x.py:LINE (function)``:
    where the package met the error (a message such as "tensors on different devices" names no line)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).resolve().is_relative_to(PACKAGE)]
    if not frames:
        return "outside specdec_core"
    frame = frames[-1]
    return f"{Path(frame.filename).resolve().relative_to(ROOT)}:{frame.lineno} ({frame.name})"


def commit() -> str:
    """``$SPECDEC_COMMIT``, else git's short HEAD (noting uncommitted changes to the package), else "unknown"."""
    if os.environ.get("SPECDEC_COMMIT"):
        return os.environ["SPECDEC_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            dirty = subprocess.run(["git", "status", "--porcelain", "--", "specdec_core"], cwd=ROOT, capture_output=True,
                                   text=True, timeout=10).stdout.strip()
            return head.stdout.strip() + (" + local changes to specdec_core" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown (no git here: set SPECDEC_COMMIT)"


def source_hash() -> str:
    """SHA-256 (first 12 hex digits) of the package's Python sources: which code ran, even without git."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine(device: str) -> dict:
    """What a report's figures depend on: the device, the host, the versions, the date and the code."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    name = torch.cuda.get_device_name(dev) if cuda else f"CPU ({cpu_model()})"
    return {"device": str(dev), "name": name, "slug": slug(torch.cuda.get_device_name(dev)) if cuda else dev.type,
            "memory_bytes": torch.cuda.get_device_properties(dev).total_memory if cuda else None,
            "cpu": cpu_model(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit(), "source_sha256": source_hash()}


def as_json(report: dict) -> dict:
    """The report as its JSON file holds it (string keys, NaN → null), so a caller sees what is on disk."""
    return json.loads(json.dumps(json_safe(report), allow_nan=False))


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.2f}"


def _x(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def basename(report: dict) -> str:
    return f"gpu-{report['machine']['slug']}{'-tiny' if report['tiny'] else ''}"


def headline(report: dict) -> str:
    m = report["machine"]
    return (f"{m['name']}, torch {m['torch']}, transformers {m['transformers']}, {m['date'][:10]}, "
            f"commit {m['commit']} (sources {m['source_sha256']})")


def models_table(report: dict, long: bool = True) -> str:
    """One row per measured model: weights, the decode step (AR's loop, chained on the device, alone), its
    memory floor, the loop overhead, our AR against transformers' generate."""
    head = ["model", "weights (GB)", "step, AR loop (ms)", "memory floor (ms)", "step ÷ floor", "v(8)", "v(64)"]
    if long:
        head[3:3] = ["step, chained (ms)", "step alone (ms)"]
        head += ["v_tree(64)", "loop overhead o", "our AR (ms/token)", "generate (ms/token)"]
    head += ["our AR ÷ generate, speed", "same tokens"]
    rows = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + "---|"]
    for name, r in report["models"].items():
        v, vt = r.get("v", {}), r.get("v_tree", {})
        cells = [name, f"{r['weight_bytes'] / 1e9:.2f}", _ms(r.get("step_s")), _ms(r.get("floor_s")),
                 _x(r.get("floor_ratio"), 1), _x(v.get("8")), _x(v.get("64"))]
        if long:
            cells[3:3] = [_ms(r.get("chained_s")), _ms(r.get("alone_s"))]
            cells += [_x(vt.get("64")), _x(r.get("overhead")), _ms(r.get("ar_s_per_token")), _ms(r.get("hf_s_per_token"))]
        same = "–" if "compared" not in r else "yes" if r["same_tokens"] else f"first {r['agree']} of {r['compared']}"
        cells += [_x(r.get("ar_vs_hf")), same]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def pairs_table(report: dict) -> str:
    alphas = sorted({a for p in report["pairs"] for a in p["by_alpha"]})
    head = ["target / draft", "preset", "c", "c, chained"] + [f"α = {a}: best γ, S" for a in alphas]
    rows = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for p in report["pairs"]:
        cells = [f"{p['target']} / {p['draft']}", p["preset"] or "(not a preset)", _x(p["c"]), _x(p["c_chained"])]
        cells += [f"{p['by_alpha'][a]['gamma']}, {p['by_alpha'][a]['speedup']:.2f}×" if a in p["by_alpha"] else "–"
                  for a in alphas]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def v_table(report: dict) -> str:
    ns = sorted({int(n) for r in report["models"].values() for n in r.get("v", {})})
    rows = ["| model | kind | " + " | ".join(f"n = {n}" for n in ns) + " |", "|---|---|" + "---:|" * len(ns)]
    for name, r in report["models"].items():
        for kind in ("v", "v_tree"):
            if kind in r:
                rows.append(f"| {name} | {'causal' if kind == 'v' else 'tree mask'} | "
                            + " | ".join(_x(r[kind].get(str(n))) for n in ns) + " |")
    return "\n".join(rows)


def markdown(report: dict) -> str:
    """The report as Markdown: the machine, the tables, how each figure was measured, what was skipped."""
    s = report["settings"]
    bw = report["bandwidth"]
    out = [f"# GPU report: decode costs at the GPU presets' shapes, random bf16 weights{' (TINY models)' if report['tiny'] else ''}",
           "", f"Machine: {headline(report)}. Host CPU: {report['machine']['cpu']}. Section time "
           f"{report['elapsed_s']:.0f} s of a {s['budget_s']:.0f} s budget.", ""]
    if report["tiny"]:
        out += ["**Tiny run** (2-layer, 64-wide stand-ins of each architecture): it checks the code path, its figures "
                "describe no real model.", ""]
    out += ["## The decode step", "", models_table(report), "",
            f"Copy bandwidth (device to device, {s['copy_mb']} MB): "
            + (f"{bw / 1e9:.0f} GB/s." if bw else "not measured."), "",
            f"## v(n): a forward over n new tokens ÷ one step, on {s['context']} cached tokens", "", v_table(report), "",
            "## Pairs: c and what it allows", "", pairs_table(report) if report["pairs"] else "No pair had both models measured.",
            "", "## How it was measured", "",
            f"- Step, AR loop: `ar.generate`'s time after its first token ÷ its decode steps ({s['new_tokens']} new tokens "
            f"after a {s['prompt']}-token random prompt; median of {s['runs']} interleaved rounds after a warm-up); each step "
            "reads its token back to the host, as our AR does.",
            f"- Step, chained: {s['chained']} steps, each fed the previous argmax on the device, one synchronisation at each end.",
            f"- Step alone and v(n): `costmodel.forward_times` ({s['repeats']} rounds, n in shuffled order, each forward "
            "synchronised on both ends) and `costmodel.ratios`; the tree mask is `costmodel.tree_shape`'s binary tree.",
            f"- Loop overhead o: `costmodel.loop_overhead` (γ = 3, {s['overhead_steps']} steps) ÷ the AR-loop step.",
            "- Memory floor: the model's weight bytes ÷ the read bandwidth (`machine.stream_read`: a read-only stream in the GPU's memory).",
            "- Our AR ÷ generate: transformers' greedy `generate` seconds per token ÷ ours (> 1: ours is faster), same "
            "prompt, prefill included; same tokens: token for token.",
            "- c: the draft's AR-loop step ÷ the target's; best γ and S from `theory.best_gamma` / `theory.speedup` "
            "with the target's measured v(n)."]
    if report["notes"] or report["errors"]:
        out += ["", "## Skipped and failed", ""]
        out += [f"- {note}" for note in report["notes"]] + [f"- **{name} failed**: {e}" for name, e in report["errors"].items()]
    return "\n".join(out) + "\n"


def write(report: dict, out_dir: Path | str = ROOT / "results") -> tuple[Path, Path]:
    """``<out_dir>/gpu-<device>[-tiny].{json,md}``, each written atomically (:mod:`specdec_core.files`)."""
    base = Path(out_dir) / basename(report)
    return (write_json(report, base.with_suffix(".json"), indent=1),
            atomic_write(base.with_suffix(".md"), markdown(report)))


def latest(results: Path | str = ROOT / "results") -> tuple[Path, dict] | None:
    """The newest full (not tiny) report in ``results``, by its date; None when there is none."""
    found = []
    for path in Path(results).glob("gpu-*.json"):
        report = json.loads(path.read_text())
        if report.get("kind") == "gpu-scale" and not report.get("tiny"):
            found.append((report["machine"]["date"], path, report))
    if not found:
        return None
    _, path, report = max(found, key=lambda x: x[0])
    return path, report


def readme_block(results: Path | str = ROOT / "results") -> str:
    """The README's GPU-report block: the latest report's machine, date and main table, or that there is none."""
    found = latest(results)
    if found is None:
        return ("No GPU report yet: `make gpu-check` on a GPU machine writes `results/gpu-<device>.{json,md}`, "
                "then `python -m specdec_core.bench.gpureport --write-readme` shows it here.")
    path, report = found
    md = path.with_suffix(".md").name
    return "\n".join([
        f"Latest GPU report, [`results/{md}`](results/{md}): {headline(report)}. Random bf16 weights at the GPU "
        "presets' shapes, measured by `make gpu-check`'s scale section (`specdec_core/bench/gpuscale.py`); "
        "the report says how each figure was measured.", "", models_table(report, long=False), "",
        pairs_table(report) if report["pairs"] else "No pair had both models measured."])


def readme_with_gpu_report(readme: str, results: Path | str = ROOT / "results") -> str:
    """``readme`` with the text between :data:`START` and :data:`END` replaced by :func:`readme_block`."""
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise ValueError(f"the README has no GPU-report block: put the two lines {START!r} and {END!r} "
                         "in its GPU section")
    return pattern.sub(lambda _: f"{START}\n{readme_block(results)}\n{END}", readme, count=1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the README's GPU-report block, from the latest results/gpu-*.json")
    p.add_argument("--write-readme", action="store_true", help="render it into README.md")
    p.add_argument("--check", action="store_true", help="exit 1 if README.md's block is stale")
    p.add_argument("--results", default=str(ROOT / "results"), help="where the reports are (default: results/)")
    args = p.parse_args(argv)
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text()
    rendered = readme_with_gpu_report(readme, args.results)
    if args.write_readme:
        if rendered != readme:
            atomic_write(readme_path, rendered)
        print(f"README.md: GPU-report block {'updated' if rendered != readme else 'already current'}")
    elif args.check:
        print("README.md's GPU-report block is " + ("current" if rendered == readme else
                                                    "stale: run `python -m specdec_core.bench.gpureport --write-readme`"))
        return 0 if rendered == readme else 1
    else:
        print(readme_block(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
