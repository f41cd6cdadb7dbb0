"""The menu of forward widths: a forward whose token count varies step to step pads to the next one.

    WIDTHS = (1, 2, 4, 8, 16, 32, 64)      menu_width(7) = 8, menu_width(9) = 16, menu_width(64) = 64

Why a menu: an auto tree changes its node count from step to step, and a compiled step holds one graph
per input shape. Padding to the next power of two keeps seven shapes for any n ≤ 64 and never more
than doubles the tokens (a pad is a token that sees only itself and is never kept). What a padded
forward costs is v at its menu width, which is how the cost model prices it (``tree_shapes``).
"""

from __future__ import annotations

WIDTHS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)  # tokens per forward: every padded forward is one of these


def menu_width(n: int) -> int:
    """The smallest menu width that holds ``n`` tokens (1 ≤ n ≤ 64)."""
    if not 1 <= n <= WIDTHS[-1]:
        raise ValueError(f"a forward of {n} tokens has no menu width: the menu {WIDTHS} holds 1 to {WIDTHS[-1]} tokens")
    return next(width for width in WIDTHS if n <= width)
