"""The core of the course on a CUDA GPU (marked ``cuda``; skipped where there is none).

The checks are those of ``python -m specdec_core.bench.gpucheck`` (``make gpu-check``), which runs them
without pytest on a bare GPU machine; here they also run on the CPU, so a broken check cannot hide
behind a missing GPU.
"""

from __future__ import annotations

import pytest
import torch

from specdec_core.bench import gpucheck

DEVICES = [pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                            reason="no CUDA GPU here")]),
           "cpu"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("check", gpucheck.CHECKS, ids=lambda c: c.__name__)
def test_core_check(check, device):
    assert check(device)


def test_a_broken_sampler_fails_the_exactness_check(monkeypatch):
    """The sampled check is not vacuous: a verify that keeps every guess (no rejection) must fail it."""
    from specdec_core import speculative

    monkeypatch.setattr(speculative, "verify", lambda drafted, q, p, generator=None: (
        drafted.numel(), int(torch.multinomial(p[-1], 1, generator=generator)), "bonus"))
    with pytest.raises(AssertionError, match="does not follow"):
        gpucheck.check_sampled_exactness("cpu", draws=1500)


def test_gpucheck_without_a_gpu_says_what_to_do(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert gpucheck.main(["--device", "cuda"]) == 2
    assert "GPU machine" in capsys.readouterr().out


def test_a_failing_check_names_its_file_and_line_and_the_run_goes_on(monkeypatch, tmp_path, capsys):
    """gpu-check's own run (--device cpu --tiny): a check that fails inside specdec_core prints that file:line,
    the other checks and the scale section still run, the report is written, and the exit status is 1."""
    from specdec_core.lm import check_inputs

    def check_broken(device):
        check_inputs(None, torch.zeros(3, dtype=torch.long, device=device), 1)  # 1-D ids: lm.py raises

    monkeypatch.setattr(gpucheck, "CHECKS", [check_broken, gpucheck.check_bandwidth])
    assert gpucheck.main(["--device", "cpu", "--tiny", "--no-bench", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("FAIL check_broken"))
    assert "at specdec_core/lm.py:" in line and "(check_inputs): ValueError: input_ids must have shape" in line
    assert "ok   check_bandwidth" in out and "host syncs" not in out  # counted on CUDA only
    assert (tmp_path / "gpu-cpu-tiny.json").exists() and (tmp_path / "gpu-cpu-tiny.md").exists()
    assert "# GPU report" in out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")
def test_host_syncs_are_counted_on_cuda():
    x = torch.ones(4, device="cuda")
    with gpucheck.host_syncs("cuda") as syncs:
        _ = x.sum().item()
    assert len(syncs) >= 1 and syncs[0].startswith("test_cuda.py:")
    with gpucheck.host_syncs("cpu") as none:
        _ = x.sum().item()
    assert none == []
