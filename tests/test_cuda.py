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
