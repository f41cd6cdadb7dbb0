"""ipywidgets panels over pure functions (``interactive_output`` style).

Each panel: a pure function in specdec_core computes the result (unit-tested); the panel only
wires sliders to it and draws. Sections, one per lesson.
"""

from __future__ import annotations

import ipywidgets as widgets
from IPython.display import display

__all__ = ["widgets", "display"]
