"""Multi-block Jacobi decoding (Jacobi Forcing, Hu, Kou et al. 2025): which guesses are in flight.

The decoding loop is :func:`specdec_core.jacobi.jacobi_generate` with ``blocks`` = K > 1; this module
holds only its window. Plain Jacobi decoding iterates on one block until it has converged. With several
blocks in flight the next block starts iterating before the current one is done — on a prefix that is
still partly noisy — so that when the current block converges, the next one is partly right:

    window          the unfixed tokens after the output: the rest of the real-active block, then up to
                    K − 1 pseudo-active blocks of guesses
    activation      a new block of n guesses joins the window once the real-active block has fixed at
                    least a share r of its n tokens (the paper uses r = 0.85, K = 2)
    one iteration   ONE forward over [newest fixed token, window[:-1]]; the convergence test runs over
                    the whole window, so its leading unchanged tokens + 1 are fixed across block borders

The convergence test verifies every token, so the output is exactly the greedy output. A wider window
costs a wider forward (v(width) target steps, lesson 01): the stats report every forward's width.
With K = 1 the window is always the rest of the current block: plain Jacobi decoding, iteration for
iteration (``tests/test_jacobi_multiblock.py`` compares both with the loops they replaced).
"""

from __future__ import annotations


def window_size(done: int, window: int, remaining: int, n: int, blocks: int, activation: float) -> int:
    """How many unfixed tokens the window should hold before the next iteration.

    done: tokens fixed so far; window: unfixed tokens it holds now; remaining: tokens still allowed;
    n: the block size; blocks: K, the most blocks in flight; activation: the share r."""
    real_end = (done // n + 1) * n  # the real-active block ends here
    size = max(window, real_end - done)  # at least the rest of the real-active block
    in_flight = -(-(done + size) // n) - done // n  # blocks the window overlaps
    if in_flight < blocks and done % n >= activation * n:
        size += n  # a pseudo-active block joins
    return min(size, remaining)
