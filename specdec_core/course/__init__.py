"""Exercises: generation from solutions/, and the checkers their check cells call.

Each lesson's checkers live in ``lessonNN.py`` and are re-exported here, so a check cell reads
``from specdec_core.course import check_sample_step``.
"""

from .checks import CheckFailed, Checks
from .lesson01 import check_decode_step, check_sample_step
from .lesson01b import check_static_keep, check_static_rollback
from .lesson02 import check_average_log_likelihood
from .lesson03 import check_best_gamma, check_expected_tokens, check_verify_step
from .lesson04 import check_prompt_lookup, check_reduced_distribution
from .lesson04b import check_tree_mask, check_verify_tree_greedy
from .lesson04c import check_alpha_per_position, check_predicted_speedup
from .lesson05 import check_nf4_quantize
from .lesson06 import check_model_weight_bytes, check_stored_bytes
from .lesson07 import check_converged_count, check_jacobi_block, check_jacobi_iteration
from .lesson08 import check_consistency_kl, check_first_wrong_mask
from .lesson08b import check_noise_aware_mask, check_progressive_levels
from .lesson10 import check_batch_gain, check_choose_gamma, check_crossover

__all__ = [
    "CheckFailed",
    "Checks",
    "check_sample_step",
    "check_decode_step",
    "check_static_rollback",
    "check_static_keep",
    "check_average_log_likelihood",
    "check_verify_step",
    "check_expected_tokens",
    "check_best_gamma",
    "check_prompt_lookup",
    "check_reduced_distribution",
    "check_tree_mask",
    "check_verify_tree_greedy",
    "check_alpha_per_position",
    "check_predicted_speedup",
    "check_nf4_quantize",
    "check_stored_bytes",
    "check_model_weight_bytes",
    "check_jacobi_iteration",
    "check_first_wrong_mask",
    "check_consistency_kl",
    "check_converged_count",
    "check_jacobi_block",
    "check_progressive_levels",
    "check_noise_aware_mask",
    "check_batch_gain",
    "check_choose_gamma",
    "check_crossover",
]
