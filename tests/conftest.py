"""Shared pytest set-up for the course's tests and its notebooks under nbval.

- nbval never compares stderr (warnings and progress bars go there): see
  ``specdec_core.course.nbval_run.skip_stderr_comparison``. The hook below is a global one
  (``pytest_collection_modifyitems``), so it also reaches the notebooks in ``lessons/`` and
  ``solutions/`` that ``make test`` collects next to ``tests/``.
- Tests marked ``offline`` need the offline SmolLM2 pair. Without it they are skipped on a
  student's machine (with a reason naming ``make setup``); under CI (``CI=true``) nothing may skip
  silently, so they run and fail with the loader's own message instead.
"""

from __future__ import annotations

import os

import pytest

from specdec_core.course.nbval_run import skip_stderr_comparison

# Nothing a test measures is this machine's truth: the cost model is never cached from a test run
# (nor from a notebook kernel nbval starts, which inherits this environment).
os.environ.setdefault("SPECDEC_TESTING", "1")


def offline_model_missing() -> str | None:
    """Why the offline model is not usable here, or None when it is (cheap: no model is loaded)."""
    from specdec_core.assets import AssetMissingError, find_gguf_source

    try:
        find_gguf_source()
    except AssetMissingError:
        return "the offline model is not on this machine: run `make setup` (downloads and converts it once)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_stderr_comparison(items)
    offline = [item for item in items if item.get_closest_marker("offline")]
    if not offline or os.environ.get("CI", "").lower() == "true":
        return
    reason = offline_model_missing()
    if reason:
        for item in offline:
            item.add_marker(pytest.mark.skip(reason=reason))
