"""Matplotlib figures of the course. Each function takes plain data and returns a Figure.

Sections, one per lesson; add new figures at the end of your lesson's section.
"""

from __future__ import annotations

import matplotlib

matplotlib.use(matplotlib.get_backend())  # keep the notebook's inline backend
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["plt", "Figure"]
