"""Self-checks for the implementation exercises: 【正解】, 【未実装】 or 【不正解】 and why.

The machinery (:func:`checker`, :func:`call_student`, :class:`Mistake`, ...) is in
:mod:`attnlab.checks.core`; each chapter's checks are in the module named after its
notebook. Every check is imported here by name (``from attnlab.checks import
check_attention`` leads an editor to its definition) and listed in :data:`CHECKS`, which
the grader reads; ``tests/test_registries.py`` names a check missing from either list.
"""

from collections.abc import Callable

from attnlab.checks.attention_has_no_order import check_order_blind_ceiling
from attnlab.checks.attention_review import check_attention
from attnlab.checks.context_extension import (
    check_interpolate_positions,
    check_ntk_scaled_base,
    check_yarn_inv_freq,
)
from attnlab.checks.core import (
    CheckResult,
    Mistake,
    Raised,
    Unimplemented,
    call_student,
    checker,
    raised_message,
    returned_array,
)
from attnlab.checks.inference_time import check_cache_step, check_merge_blocks
from attnlab.checks.learned_positions import check_position_lookup
from attnlab.checks.length_generalization import check_alibi_bias
from attnlab.checks.rope import check_half_layout, check_rope_half
from attnlab.checks.sinusoidal_encoding import (
    check_add_positional_encoding,
    check_timing_signal,
)
from attnlab.checks.split_and_concat import check_multi_head_attention, check_split_heads
from attnlab.checks.what_heads_capture import check_grouped_query_attention, check_max_context
from attnlab.checks.why_heads import check_heads_output

#: Every self-check of the book, in chapter order: function name → check.
CHECKS: dict[str, Callable[[Callable], bool]] = {
    check.__name__: check
    for check in (
        check_attention,  # 01
        check_heads_output,  # 02
        check_split_heads,  # 03
        check_multi_head_attention,
        check_max_context,  # 04
        check_grouped_query_attention,
        check_order_blind_ceiling,  # 05
        check_timing_signal,  # 06
        check_add_positional_encoding,
        check_position_lookup,  # 07
        check_rope_half,  # 08
        check_half_layout,
        check_interpolate_positions,  # 09
        check_ntk_scaled_base,
        check_yarn_inv_freq,
        check_alibi_bias,  # 10
        check_cache_step,  # 11
        check_merge_blocks,
    )
}

__all__ = [
    "CHECKS",
    "CheckResult",
    "Mistake",
    "Raised",
    "Unimplemented",
    "call_student",
    "check_add_positional_encoding",
    "check_alibi_bias",
    "check_attention",
    "check_cache_step",
    "check_grouped_query_attention",
    "check_half_layout",
    "check_heads_output",
    "check_interpolate_positions",
    "check_max_context",
    "check_merge_blocks",
    "check_multi_head_attention",
    "check_ntk_scaled_base",
    "check_order_blind_ceiling",
    "check_position_lookup",
    "check_rope_half",
    "check_split_heads",
    "check_timing_signal",
    "check_yarn_inv_freq",
    "checker",
    "raised_message",
    "returned_array",
]
