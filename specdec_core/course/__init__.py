"""Exercises: generation from solutions/, and the checkers their check cells call.

Each lesson's checkers live in ``lessonNN.py`` and are re-exported here, so a check cell reads
``from specdec_core.course import check_sample_step``.
"""

from .checks import CheckFailed, Checks

__all__ = ["CheckFailed", "Checks"]
