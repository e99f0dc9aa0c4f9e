"""G1 ``verify_commit_step_indices``: the accepted step to commit and the step to track, per request."""

from __future__ import annotations

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    common_device,
    new_output,
    value_checks_enabled,
)


def _verify_commit_step_indices_reference(
    accept_index: Tensor,
    accept_lens: Tensor,
    draft_token_num: int,
    seq_lens: Tensor | None,
    mamba_track_interval: int,
    last_correct_step_indices: Tensor,
    mamba_steps_to_track: Tensor | None,
) -> None:
    # mamba_track_interval is read only when mamba_steps_to_track is given (the schema has no int?).
    bs, width = accept_index.shape
    request_base = torch.arange(bs, device=accept_index.device) * draft_token_num

    def step_at(column: Tensor) -> Tensor:
        # Tree step of the accepted node in each request's ``column``; -1 where there is none.
        inside = (column >= 0) & (column < width)
        node = accept_index.gather(1, column.clamp(0, max(width - 1, 0))[:, None])[:, 0].long()
        return torch.where(inside & (node >= 0), node - request_base, -1)

    accepted = accept_lens.long()
    if width == 0:  # nothing accepted anywhere (gather needs a column)
        last_correct_step_indices.fill_(-1)
        if mamba_steps_to_track is not None:
            mamba_steps_to_track.fill_(-1)
        return
    last_correct_step_indices.copy_(step_at(accepted - 1))
    if mamba_steps_to_track is None:
        return
    assert seq_lens is not None
    interval = mamba_track_interval
    before = seq_lens.long()
    after = before + accepted
    boundary = torch.div(after, interval, rounding_mode="floor")
    crosses = torch.div(before, interval, rounding_mode="floor") != boundary
    # The last accepted token before the boundary: its state is the boundary's state.
    column = (boundary * interval - before - 1).clamp(min=0)
    mamba_steps_to_track.copy_(torch.where(crosses, step_at(column), -1))


@define_op(
    _verify_commit_step_indices_reference,
    mutates=("last_correct_step_indices", "mamba_steps_to_track"),
    op_class="latency",
    variant=("accept_index", "accept_lens", "seq_lens", "mamba_steps_to_track"),
)
def verify_commit_step_indices(
    op: OpDef,
    accept_index: Tensor,
    accept_lens: Tensor,
    draft_token_num: int,
    seq_lens: Tensor | None = None,
    mamba_track_interval: int | None = None,
    last_correct_step_indices: Tensor | None = None,
    mamba_steps_to_track: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """The verify step whose recurrent state each request commits (and tracks).

    After verify, request b keeps the state after its last accepted node: step
    ``accept_index[b, accept_lens[b]-1] - b*D`` of the verify forward. With prefix-cache tracking
    (``mamba_track_interval`` I), a request whose committed length crosses a multiple of I also
    keeps the state of the last accepted token before that boundary. -1 = nothing to commit/track
    (``accept_lens[b] == 0``, a -1 node, or no boundary crossed).

    Args:
        accept_index: ``[bs, W]`` int32/int64 flat accepted node ids, root first, -1 padded.
        accept_lens: ``[bs]`` int32/int64 committed tokens incl. the bonus, in ``[0, W]``.
        draft_token_num: D, nodes per request.
        seq_lens: ``[bs]`` int32/int64 lengths before this step's tokens (needed with tracking).
        mamba_track_interval: I > 0, or None (no tracking).
        last_correct_step_indices: optional ``[bs]`` int64 output.
        mamba_steps_to_track: optional ``[bs]`` int64 output (written only with tracking).

    Returns:
        ``(last_correct_step_indices, mamba_steps_to_track or None)``, both int64.
    """
    device, last, track = checked_step_args(
        accept_index,
        accept_lens,
        draft_token_num,
        seq_lens,
        mamba_track_interval,
        last_correct_step_indices,
        mamba_steps_to_track,
    )
    if accept_index.shape[0] == 0:
        return last, track
    op.dispatch(
        device, accept_index, accept_lens, draft_token_num, seq_lens, mamba_track_interval or 0, last, track
    )
    return last, track


def checked_step_args(
    accept_index: Tensor,
    accept_lens: Tensor,
    draft_token_num: int,
    seq_lens: Tensor | None,
    mamba_track_interval: int | None,
    last_correct_step_indices: Tensor | None,
    mamba_steps_to_track: Tensor | None,
) -> tuple[torch.device, Tensor, Tensor | None]:
    """G1's arguments checked (values too where value checks run) and its outputs allocated:
    ``(device, last_correct_step_indices, mamba_steps_to_track or None)``."""
    check_index("accept_index", accept_index, ndim=2)
    bs, width = accept_index.shape
    check_index("accept_lens", accept_lens, shape=(bs,))
    check_positive_int("draft_token_num", draft_token_num)
    tracking = mamba_track_interval is not None
    if tracking:
        check_positive_int("mamba_track_interval", mamba_track_interval)
        if seq_lens is None:
            raise ValueError("seq_lens: required with mamba_track_interval")
    if seq_lens is not None:
        check_index("seq_lens", seq_lens, shape=(bs,))
    device = common_device(accept_index=accept_index, accept_lens=accept_lens, seq_lens=seq_lens)
    if last_correct_step_indices is None:
        last = new_output((bs,), torch.int64, device)
    else:
        last = check_output(
            "last_correct_step_indices",
            last_correct_step_indices,
            dtype=torch.int64,
            device=device,
            shape=(bs,),
        )
    track = None
    if tracking:
        if mamba_steps_to_track is None:
            track = new_output((bs,), torch.int64, device)
        else:
            track = check_output(
                "mamba_steps_to_track", mamba_steps_to_track, dtype=torch.int64, device=device, shape=(bs,)
            )
    if bs and value_checks_enabled(device):
        check_range("accept_lens", accept_lens, 0, width + 1)
        check_range("accept_index", accept_index, 0, bs * draft_token_num, allow=-1)
        if tracking:
            assert seq_lens is not None  # tracking requires seq_lens (checked above)
            check_non_negative("seq_lens", seq_lens)
    return device, last, track
