"""What a change to a model costs in quality: perplexity, and whether generated code parses and
passes unit tests (HumanEval's, run in an isolated process)."""

from __future__ import annotations

import ast
import math
import os
import re
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch import nn


@torch.inference_mode()
def perplexity(model: nn.Module, input_ids: torch.Tensor, window: int = 512) -> float:
    """exp(mean next-token negative log-likelihood) of ``input_ids`` [1, T], in windows of ``window``
    tokens (each window is scored on its own; the first token of a window is not predicted)."""
    total, count = 0.0, 0
    for start in range(0, input_ids.shape[1], window):
        chunk = input_ids[:, start : start + window].to(next(model.parameters()).device)
        if chunk.shape[1] < 2:
            break
        logits = model(input_ids=chunk).logits.float()
        total += float(F.cross_entropy(logits[0, :-1], chunk[0, 1:], reduction="sum"))
        count += chunk.shape[1] - 1
    return math.exp(total / count)


def extract_code(text: str) -> str:
    """The first fenced code block of a chat answer (```python … ```), else the whole answer."""
    match = re.search(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", text, re.S)
    return match.group(1) if match else text


def parses(answer: str) -> bool:
    """Whether the code in a chat answer is valid Python (a weaker quality signal than the tests)."""
    try:
        ast.parse(extract_code(answer))
    except (SyntaxError, ValueError):
        return False
    return True


def shown(answer: str, limit: int = 420) -> str:
    """A generated answer as a lesson prints it: runs of blank lines collapsed to one (a collapsed model
    can emit hundreds), cut at ``limit`` characters, followed by its real length."""
    text = re.sub(r"\n[ \t]*\n(?:[ \t]*\n)+", "\n\n", answer).strip()
    cut = f"{text[:limit]} …" if len(text) > limit else text
    return f"{cut}\n({len(answer)} characters, {answer.count(chr(10)) + 1} lines as generated)"


def passes(problem: dict, answer: str, timeout: float = 10.0) -> bool:
    """Whether the code in a chat answer passes the HumanEval problem's unit tests (:func:`runs_ok`)."""
    code = extract_code(answer)
    if f"def {problem['entry_point']}" not in code:  # an answer that only wrote the body
        code = problem["prompt"] + code
    return runs_ok(f"{code}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n", timeout)


def passes_checks(answer: str, name: str, checks: list[str], timeout: float = 10.0) -> bool:
    """Whether the function in a chat answer makes every check true: ``checks`` are expressions about
    ``f``, the function called ``name`` if the answer defines one, else the last function it defines
    (a request that names no function leaves the name to the model)."""
    code = extract_code(answer)
    try:
        defined = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    except (SyntaxError, ValueError):
        return False
    if not defined:
        return False
    f = name if name in defined else defined[-1]
    asserts = "\n".join(f"assert {check}, {check!r}" for check in checks)
    return runs_ok(f"{code}\n\nf = {f}\n{asserts}\n", timeout)


def runs_ok(program: str, timeout: float = 10.0) -> bool:
    """Whether a program exits cleanly in a fresh, isolated Python process (``-I``, a temporary working
    folder, no environment but PATH), killed after ``timeout`` s: how generated code is run."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            run = subprocess.run([sys.executable, "-I", "-c", program], cwd=folder, capture_output=True,
                                 timeout=timeout, env={"PATH": os.environ.get("PATH", "")})
        except subprocess.TimeoutExpired:
            return False
    return run.returncode == 0
