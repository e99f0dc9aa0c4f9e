"""G3 ``commit_mamba_states_after_verify`` over a :class:`MambaVerifyStates`: G1 then G2, one device op
when it computes the steps itself."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    check_index,
    value_checks_enabled,
)
from .scatter import (
    _scatter_mamba_states_after_mtp_verify_reference,
    check_distinct_lines,
    checked_scatter_args,
    scatter_mamba_states_after_mtp_verify,
    state_bytes,
)
from .steps import _verify_commit_step_indices_reference, checked_step_args, verify_commit_step_indices


@runtime_checkable
class MambaVerifyStates(Protocol):
    """What G3 reads from the engine's linear-attention backend (attributes only).

    Attributes:
        ssm_states: ``[L, C, *ssm]`` persistent SSM states (mutated).
        conv_states: list of ``[L, C, *conv_k]`` persistent conv windows (mutated).
        intermediate_ssm: ``[L, M, D, *ssm]`` per-step states of the verify forward.
        intermediate_conv_windows: list, same length as ``conv_states``, of ``[L, M, D, *conv_k]``.
        state_indices: ``[>= bs]`` int32/int64 cache line of batch row r.
        mamba_track_interval: tracking interval in tokens, or None (no tracking).
        mamba_track_indices: ``[>= bs]`` int32/int64 tracking lines (-1 = none), or None;
            required with an interval.
    """

    ssm_states: Tensor
    conv_states: list[Tensor]
    intermediate_ssm: Tensor
    intermediate_conv_windows: list[Tensor]
    state_indices: Tensor
    mamba_track_interval: int | None
    mamba_track_indices: Tensor | None


def _commit_mamba_states_after_verify_reference(
    ssm_states: Tensor,
    intermediate_ssm: Tensor,
    conv_states: list[Tensor],
    intermediate_conv_windows: list[Tensor],
    state_indices: Tensor,
    mamba_track_indices: Tensor | None,
    accept_index: Tensor,
    accept_lens: Tensor,
    draft_token_num: int,
    seq_lens: Tensor | None,
    mamba_track_interval: int,
    last_correct_step_indices: Tensor,
    mamba_steps_to_track: Tensor | None,
) -> None:
    # G3 computing its steps: G1 then G2 (mamba_steps_to_track and mamba_track_indices both or neither).
    _verify_commit_step_indices_reference(
        accept_index,
        accept_lens,
        draft_token_num,
        seq_lens,
        mamba_track_interval,
        last_correct_step_indices,
        mamba_steps_to_track,
    )
    _scatter_mamba_states_after_mtp_verify_reference(
        ssm_states,
        intermediate_ssm,
        conv_states,
        intermediate_conv_windows,
        state_indices,
        last_correct_step_indices,
        mamba_track_indices,
        mamba_steps_to_track,
    )


def _commit_bytes(
    states: MambaVerifyStates | None,
    accept_index: Tensor,
    accept_lens: Tensor,
    draft_token_num: int,
    seq_lens: Tensor | None,
    last_correct_step_indices: Tensor | None,
    mamba_steps_to_track: Tensor | None,
    **_: object,
) -> int:
    """G2's bytes at the steps G1 computes (or the caller passed)."""
    if states is None:
        return 0
    bs = accept_index.shape[0]
    if last_correct_step_indices is None:
        last_correct_step_indices, mamba_steps_to_track = verify_commit_step_indices(
            accept_index, accept_lens, draft_token_num, seq_lens, states.mamba_track_interval
        )
    track_lines = states.mamba_track_indices
    return state_bytes(
        states.ssm_states,
        states.intermediate_ssm.shape[2],
        states.conv_states,
        [
            (last_correct_step_indices, states.state_indices[:bs]),
            (mamba_steps_to_track, None if track_lines is None else track_lines[:bs]),
        ],
    )


@define_op(
    _commit_mamba_states_after_verify_reference,
    mutates=("ssm_states", "conv_states", "last_correct_step_indices", "mamba_steps_to_track"),
    op_class="bandwidth",
    variant=(
        "ssm_states",
        "intermediate_ssm",
        "state_indices",
        "mamba_track_indices",
        "accept_index",
        "accept_lens",
        "seq_lens",
        "mamba_steps_to_track",
    ),
    bytes_moved=_commit_bytes,
)
def commit_mamba_states_after_verify(
    op: OpDef,
    states: MambaVerifyStates | None,
    accept_index: Tensor,
    accept_lens: Tensor,
    draft_token_num: int,
    seq_lens: Tensor | None = None,
    last_correct_step_indices: Tensor | None = None,
    mamba_steps_to_track: Tensor | None = None,
) -> tuple[Tensor, Tensor | None] | None:
    """Commit the recurrent states of the accepted tokens after verify (G1's steps, G2's copy).

    Called once per verify on hybrid models; a no-op (returns None) for non-mamba models
    (``states`` None), idle batches (bs = 0) or an empty ``accept_index``. Steps passed by the
    caller are used as they are; missing ones are computed as G1 does (tracking iff
    ``states.mamba_track_interval`` is not None). The copy is G2's on ``states.state_indices[:bs]``
    (and ``states.mamba_track_indices[:bs]``). Without any step from the caller this is one device
    op (steps and copy in one launch where the device fuses them); with both, G2 alone; with one of
    two, G1 then G2.

    Args:
        states: the backend's :class:`MambaVerifyStates`, or None.
        accept_index, accept_lens, draft_token_num, seq_lens: as :func:`verify_commit_step_indices`.
        last_correct_step_indices: ``[bs]`` int32/int64 steps to commit, or None (computed).
        mamba_steps_to_track: ``[bs]`` int32/int64 steps to track, or None (computed when tracking).

    Returns:
        ``(last_correct_step_indices, mamba_steps_to_track or None)`` (computed ones int64), or None
        when nothing was done.
    """
    check_index("accept_index", accept_index, ndim=2)
    if states is None:
        return None
    _check_states(states)
    if accept_index.numel() == 0:
        return None
    bs = accept_index.shape[0]
    interval = states.mamba_track_interval
    tracking = interval is not None
    if mamba_steps_to_track is not None and not tracking:
        raise ValueError("mamba_steps_to_track: given, but states.mamba_track_interval is None (no tracking)")
    track_indices = states.mamba_track_indices
    if tracking and track_indices is None:
        raise ValueError("states.mamba_track_indices: required when states.mamba_track_interval is set")
    state_lines = _batch_lines("states.state_indices", states.state_indices, bs)
    # Checked whenever given; read only with tracking.
    given_track_lines = (
        None if track_indices is None else _batch_lines("states.mamba_track_indices", track_indices, bs)
    )
    track_lines = given_track_lines if tracking else None
    if last_correct_step_indices is None and mamba_steps_to_track is None:
        return _commit_with_computed_steps(
            states, state_lines, track_lines, accept_index, accept_lens, draft_token_num, seq_lens, interval
        )
    if last_correct_step_indices is None or (tracking and mamba_steps_to_track is None):
        track_interval = interval if mamba_steps_to_track is None else None
        computed_last, computed_track = verify_commit_step_indices(
            accept_index,
            accept_lens,
            draft_token_num,
            seq_lens,
            track_interval,
            *_new_steps(accept_index, track_interval is not None),
        )
        if last_correct_step_indices is None:
            last_correct_step_indices = computed_last
        if mamba_steps_to_track is None:
            mamba_steps_to_track = computed_track
    scatter_mamba_states_after_mtp_verify(
        states.ssm_states,
        states.intermediate_ssm,
        states.conv_states,
        states.intermediate_conv_windows,
        state_lines,
        last_correct_step_indices,
        track_lines,
        mamba_steps_to_track,
    )
    return last_correct_step_indices, mamba_steps_to_track


_STATE_ATTRIBUTES = tuple(MambaVerifyStates.__annotations__)


def _batch_lines(name: str, lines: object, bs: int) -> Tensor:
    """The first ``bs`` entries of a per-request line table: the table itself when it has ``bs``
    (the usual case; a slice would cost a tensor view on every call)."""
    lines = check_index(name, lines)
    count = lines.shape[0]
    if count == bs:
        return lines
    if count < bs:
        raise ValueError(f"{name}: expected at least bs = {bs} entries, got {count}")
    return lines[:bs]


def _check_states(states: object) -> None:
    missing = [name for name in _STATE_ATTRIBUTES if not hasattr(states, name)]
    if missing:
        raise TypeError(
            f"states: expected a MambaVerifyStates (attributes {', '.join(_STATE_ATTRIBUTES)}) or None; "
            f"{type(states).__name__} lacks {', '.join(missing)}"
        )


def _new_steps(accept_index: Tensor, tracking: bool) -> tuple[Tensor, Tensor | None]:
    """G3's computed steps (int64 ``[bs]``): G3 has no output parameters, so it allocates them, also
    under graph capture (their size depends on bs alone; the graph's pool keeps them for replays)."""
    last = torch.empty(accept_index.shape[0], dtype=torch.int64, device=accept_index.device)
    return last, torch.empty_like(last) if tracking else None


def _commit_with_computed_steps(
    states: MambaVerifyStates,
    state_lines: Tensor,
    track_lines: Tensor | None,
    accept_index: Tensor,
    accept_lens: Tensor,
    draft_token_num: int,
    seq_lens: Tensor | None,
    mamba_track_interval: int | None,
) -> tuple[Tensor, Tensor | None]:
    """G3 without caller steps: G1's and G2's checks, then the one device op."""
    last, track = _new_steps(accept_index, mamba_track_interval is not None)
    device, last, track = checked_step_args(
        accept_index, accept_lens, draft_token_num, seq_lens, mamba_track_interval, last, track
    )
    _, conv_list, windows_list = checked_scatter_args(
        states.ssm_states,
        states.intermediate_ssm,
        states.conv_states,
        states.intermediate_conv_windows,
        state_lines,
        last,
        track_lines,
        track,
    )
    if value_checks_enabled(device):
        # Which lines are written depends on the steps: computed here too (into scratch, so that a
        # provider that leaves its outputs unwritten still shows), for the check only.
        check_last = torch.empty_like(last)
        check_track = None if track is None else torch.empty_like(track)
        _verify_commit_step_indices_reference(
            accept_index,
            accept_lens,
            draft_token_num,
            seq_lens,
            mamba_track_interval or 0,
            check_last,
            check_track,
        )
        check_distinct_lines(
            states.ssm_states.shape[1],
            states.intermediate_ssm.shape[2],
            state_lines,
            check_last,
            track_lines,
            check_track,
        )
    commit_mamba_states_after_verify.dispatch(
        device,
        states.ssm_states,
        states.intermediate_ssm,
        conv_list,
        windows_list,
        state_lines,
        track_lines,
        accept_index,
        accept_lens,
        draft_token_num,
        seq_lens,
        mamba_track_interval or 0,
        last,
        track,
    )
    return last, track
