"""The matplotlib set-up every figure module shares: the notebook's backend, ``plt`` and ``Figure``."""

from __future__ import annotations

import matplotlib

matplotlib.use(matplotlib.get_backend())  # keep the notebook's inline backend
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["plt", "Figure"]
