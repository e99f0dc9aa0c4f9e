"""Value checks that cannot be fooled by integer wrap-around or NaN, and counters that would wrap.

An int64 sum formed inside a check wraps (``2**63 - 1 + 3`` is negative) and then passes a bound
it should fail; an in-place counter at its dtype's maximum wraps to the minimum. Both must be a
ValueError naming the argument, before anything is written. (The conformance bad cases run the
same inputs on every provider; these tests also check that nothing was written.)
"""

from __future__ import annotations

import math

import pytest
import torch

import spec_hal.ops as ops
from spec_hal.validation import check_sum_below, exact_sum

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


@pytest.mark.parametrize(
    "values",
    [[INT64_MAX, 3], [INT64_MAX] * 5, [-(2**63), -(2**63), 7], [2**62] * 4, [1, 2, 3], []],
)
def test_exact_sum_is_the_python_sum(values):
    assert exact_sum(torch.tensor(values, dtype=torch.int64)) == sum(values)


def test_exact_sum_of_int32_values():
    assert exact_sum(torch.full((5,), INT32_MAX, dtype=torch.int32)) == 5 * INT32_MAX


@pytest.mark.parametrize(
    ("value", "plus", "constant", "limit"),
    [
        ([INT64_MAX, 3], [1, 1], 0, 2**63),  # the int64 sum wraps negative
        ([3, INT64_MAX - 1], [0, 1], 0, 2**63),
        ([5, 6], [INT64_MAX, 0], 1, 2**63),
        ([5, 6], [1, 1], 1, 8),
        ([5, 6], [1, 0], 1, 8),  # 7 and 7: below 8
        ([INT32_MAX, 0], None, 1, 2**31),
        ([INT64_MAX - 1, 0], None, 1, 2**63),  # exactly at the limit's edge: fine
    ],
)
def test_check_sum_below_compares_the_true_sums(value, plus, constant, limit):
    added = [0] * len(value) if plus is None else plus
    sums = [v + p + constant for v, p in zip(value, added, strict=True)]
    offenders = [i for i, total in enumerate(sums) if total >= limit]
    plus_tensor = None if plus is None else torch.tensor(plus)

    def check():
        check_sum_below(
            "x", torch.tensor(value), limit, plus=plus_tensor, constant=constant, expression="x + y"
        )

    if not offenders:
        check()
        return
    with pytest.raises(ValueError, match=rf"x: x \+ y must stay below {limit}; found x\[{offenders[0]}\]"):
        check()


# --------------------------------------------------------------------------------------------------
# Ops whose checks summed int64 values


def _table() -> torch.Tensor:
    return torch.arange(40, dtype=torch.int32).view(2, 20)


@pytest.mark.parametrize("seq_lens", [[INT64_MAX, 3], [3, INT64_MAX], [2**62, 3]])
def test_assign_draft_cache_locs_refuses_a_huge_seq_len(seq_lens):
    out = torch.full((2 * 2 * 3,), -7)
    with pytest.raises(ValueError, match=r"seq_lens: the draft slots of seq_lens\[\d\]"):
        ops.assign_draft_cache_locs_contiguous(
            torch.tensor([0, 1]), _table(), torch.tensor(seq_lens), 2, 3, out=out
        )
    assert bool((out == -7).all())


@pytest.mark.parametrize("seq_lens", [[INT64_MAX, 3], [2**62, 3]])
def test_generate_draft_decode_kv_indices_refuses_a_huge_seq_len(seq_lens):
    lens = torch.tensor(seq_lens)
    kv_indices = torch.full((3, 200), -7, dtype=torch.int32)
    kv_indptr = torch.full((3, 5), -7, dtype=torch.int32)
    with pytest.raises(ValueError, match="seq_lens"):
        ops.generate_draft_decode_kv_indices(
            torch.tensor([0, 1]), _table(), lens, lens.repeat_interleave(2), 1, 2, 3, kv_indices, kv_indptr
        )
    assert bool((kv_indices == -7).all()) and bool((kv_indptr == -7).all())


def test_generate_draft_decode_kv_indices_refuses_positions_whose_sum_wraps():
    lens = torch.tensor([3, 4])
    with pytest.raises(ValueError, match="positions: sum"):
        ops.generate_draft_decode_kv_indices(
            torch.tensor([0, 1]),
            _table(),
            lens,
            torch.full((4,), 2**62),  # sum = 2**64: an int64 sum is 0
            1,
            2,
            3,
            torch.zeros((3, 200), dtype=torch.int32),
            torch.zeros((3, 5), dtype=torch.int32),
        )


def test_filter_finished_cache_loc_refuses_drafts_whose_sum_wraps():
    with pytest.raises(ValueError, match="tgt_cache_loc: needs at least"):
        ops.filter_finished_cache_loc(
            torch.zeros(4, dtype=torch.int64),
            torch.arange(4),
            torch.full((4,), 2**62),  # sum(ncd + 1) = 2**64 + 4: an int64 sum is 4
            torch.ones(4, dtype=torch.int64),
        )


def test_move_accept_tokens_refuses_a_seq_len_that_wraps_past_the_pool():
    kv = ops.KVBuffers([torch.zeros(8, 4)])
    with pytest.raises(ValueError, match="seq_lens: seq_lens \\+ num_correct_drafts"):
        ops.move_accept_tokens_to_target_kvcache(
            kv,
            torch.tensor([0]),
            torch.zeros(1, 8, dtype=torch.int32),
            torch.tensor([INT64_MAX]),
            torch.tensor([1]),
            torch.tensor([[0, 1]]),
            torch.tensor([2, 3]),
        )


# --------------------------------------------------------------------------------------------------
# In-place counters and derived positions at their dtype's maximum


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_draft_topk1_postprocess_refuses_positions_that_would_wrap(dtype):
    top = torch.iinfo(dtype).max
    positions = torch.tensor([5, top], dtype=dtype)
    with pytest.raises(ValueError, match=rf"positions: positions \+ 1 .* found positions\[1\] = {top}"):
        ops.draft_topk1_postprocess(torch.randn(2, 7), positions)
    assert positions.tolist() == [5, top]
    ops.draft_topk1_postprocess(torch.randn(2, 7), positions.clamp(max=top - 1))  # one below: fine


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_create_num_accept_tokens_filter_refuses_seq_lens_that_would_wrap(dtype):
    top = torch.iinfo(dtype).max
    seq_lens = torch.tensor([top - 1, 3], dtype=dtype)
    with pytest.raises(ValueError, match=r"seq_lens: seq_lens \+ num_correct_drafts \+ 1"):
        ops.create_num_accept_tokens_filter(torch.tensor([1, 0]), torch.tensor([0]), seq_lens)
    assert seq_lens.tolist() == [top - 1, 3]
    ops.create_num_accept_tokens_filter(torch.tensor([0, 0]), torch.tensor([0]), seq_lens)
    assert seq_lens.tolist() == [top, 4]


def test_num_correct_drafts_at_int64_max_is_refused():
    with pytest.raises(ValueError, match="seq_lens|num_correct_drafts"):
        ops.create_num_accept_tokens_filter(torch.tensor([INT64_MAX]), torch.tensor([0]), torch.tensor([3]))


def test_target_verify_refuses_seq_lens_whose_new_length_would_wrap():
    bs, d = 2, 3
    with pytest.raises(ValueError, match=r"seq_lens: seq_lens \+ accept_lens"):
        ops.target_verify_topk1_postprocess(
            torch.randn(bs * d, 5),
            torch.zeros(bs, d, dtype=torch.int64),
            torch.arange(bs * d).view(bs, d),
            torch.tensor([[1, 2, -1], [1, 2, -1]]),
            torch.tensor([4, INT64_MAX - 1]),
        )


@pytest.mark.parametrize("op", ["build", "reconstruct"])
def test_tree_positions_that_would_wrap_are_refused(op):
    seq_lens = torch.tensor([INT64_MAX, 2])
    if op == "build":
        call = lambda: ops.build_tree_kernel_efficient(  # noqa: E731
            torch.tensor([[-1, 0, 1]] * 2), torch.tensor([[0, 1, 2, 4]] * 2), seq_lens, 2, 2, 5, 1
        )
    else:
        mask = torch.eye(5, dtype=torch.bool).repeat(2, 1, 1)
        mask[:, :, 0] = True
        call = lambda: ops.reconstruct_indices_from_tree_mask(mask.flatten(), seq_lens, 5)  # noqa: E731
    with pytest.raises(ValueError, match=r"seq_lens: seq_lens \+ depth"):
        call()


# --------------------------------------------------------------------------------------------------
# NaN temperatures


@pytest.mark.parametrize("bad", [math.nan, 0.0, -1.0])
def test_a_nan_or_non_positive_temperature_is_refused(bad):
    temperatures = torch.tensor([[1.0], [bad]])
    with pytest.raises(ValueError, match="temperatures: expected positive values, found"):
        ops.renorm_draft_probs(torch.randn(2, 6), temperatures, True)
    with pytest.raises(ValueError, match="temperatures: expected positive values, found"):
        ops.sample_draft_proposal(torch.randn(2, 6), temperatures)
