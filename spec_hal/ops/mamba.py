"""Family G: hybrid linear-attention (mamba / GDN / KDA) state commit after verify .

During TARGET_VERIFY the model writes the recurrent state after every draft step into scratch
(``intermediate_ssm``, ``intermediate_conv_windows``) and leaves the persistent cache lines alone.
After acceptance the state after the last accepted step is copied into each request's cache line
(and, with prefix-cache tracking, the state at the last ``track_interval`` boundary into a tracking
line). G1 computes those steps, G2 copies the states, G3 commits over a :class:`MambaVerifyStates`:
when it computes the steps itself it is one device op (``commit_mamba_states_after_verify``,
portable reference = G1's then G2's; one launch on the Triton vendors), otherwise G2 (after G1 for
a step the caller left out).

Contracts and portable references live together: each ``_<op>_reference`` function is the op's
portable provider (and the provider signature); each public op is made by ``define_op`` from its
contract, which validates and dispatches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn, Protocol, runtime_checkable

import torch
from torch import Tensor

from ..opdef import define_op
from ..validation import (
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    check_tensor,
    common_device,
    new_output,
    value_checks_enabled,
)
from .kv import _redirect_masked_lanes, _trailing_dims_contiguous

__all__ = [
    "MambaVerifyStates",
    "verify_commit_step_indices",
    "scatter_mamba_states_after_mtp_verify",
    "commit_mamba_states_after_verify",
]


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


# --------------------------------------------------------------------------------------------------
# G1 verify_commit_step_indices


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
    variant=("accept_index", "accept_lens", "seq_lens", "last_correct_step_indices", "mamba_steps_to_track"),
)
def verify_commit_step_indices(
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
    device, last, track = _checked_step_args(
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
    verify_commit_step_indices.dispatch(
        device, accept_index, accept_lens, draft_token_num, seq_lens, mamba_track_interval or 0, last, track
    )
    return last, track


def _checked_step_args(
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


# --------------------------------------------------------------------------------------------------
# G2 scatter_mamba_states_after_mtp_verify


def _scatter_mamba_states_after_mtp_verify_reference(
    ssm_states: Tensor,
    intermediate_ssm: Tensor,
    conv_states: list[Tensor],
    intermediate_conv_windows: list[Tensor],
    state_indices: Tensor,
    last_correct_step_indices: Tensor,
    mamba_track_indices: Tensor | None,
    mamba_steps_to_track: Tensor | None,
) -> None:
    # Commit rows and tracking rows become one list of (cache line, batch row, step) lanes.
    num_lines = ssm_states.shape[1]
    num_steps = intermediate_ssm.shape[2]
    bs = state_indices.shape[0]
    if bs == 0 or num_lines == 0:
        return
    batch_row = torch.arange(bs, device=state_indices.device)
    line, step = state_indices.long(), last_correct_step_indices.long()
    if mamba_track_indices is not None and mamba_steps_to_track is not None:
        line = torch.cat((line, mamba_track_indices.long()))
        step = torch.cat((step, mamba_steps_to_track.long()))
        batch_row = torch.cat((batch_row, batch_row))
    # Padding rows (step outside [0, D) or line outside [0, C)) are skipped.
    valid = (step >= 0) & (step < num_steps) & (line >= 0) & (line < num_lines)
    line, batch_row, step = _redirect_masked_lanes(
        valid, torch.where(valid, line, 0), batch_row, torch.where(valid, step, 0)
    )
    # With no valid lane at all, every lane writes line 0: restore it afterwards (one line, cheap).
    any_valid = valid.any()
    for states, steps in zip(
        (ssm_states, *conv_states), (intermediate_ssm, *intermediate_conv_windows), strict=True
    ):
        line_zero = states.select(1, 0)
        kept = line_zero.clone()
        states.index_copy_(1, line, steps[:, batch_row, step])
        line_zero.copy_(torch.where(any_valid, line_zero, kept))


def _state_pair_fits(
    states: object,
    steps: object,
    layers_and_lines: Sequence[int] | None,
    rows_and_steps: Sequence[int] | None,
) -> bool:
    """Whether a persistent ``[L, C, *entry]`` state and its ``[L, M, D, *entry]`` per-step scratch
    fit (L, C as ``layers_and_lines`` and M, D as ``rows_and_steps`` where given: those of the SSM
    pair), each attribute read once and no name built: every call checks every pair. On a miss,
    :func:`_raise_state_pair_mismatch` names what does not fit."""
    if not (isinstance(states, Tensor) and isinstance(steps, Tensor) and steps.dtype is states.dtype):
        return False
    state_shape, step_shape = states.shape, steps.shape
    return (
        len(state_shape) >= 2
        and len(step_shape) == len(state_shape) + 1
        and step_shape[0] == state_shape[0]
        and step_shape[3:] == state_shape[2:]
        and (layers_and_lines is None or state_shape[:2] == layers_and_lines)
        and (rows_and_steps is None or step_shape[1:3] == rows_and_steps)
        and _trailing_dims_contiguous(states, 2)
    )


def _raise_state_pair_mismatch(
    states_name: str,
    states: object,
    steps_name: str,
    steps: object,
    layers_and_lines: Sequence[int] | None,
    rows_and_steps: Sequence[int] | None,
) -> NoReturn:
    """The error, naming the argument, of a state pair :func:`_state_pair_fits` refused."""
    states = check_tensor(states_name, states)
    state_shape = states.shape
    if len(state_shape) < 2:
        raise ValueError(f"{states_name}: expected an [L, C, ...] tensor, got shape {tuple(state_shape)}")
    steps = check_tensor(steps_name, steps, dtype=states.dtype)
    step_shape = steps.shape
    if len(step_shape) != len(state_shape) + 1:
        raise ValueError(
            f"{steps_name}: expected a {len(state_shape) + 1}-D tensor, got shape {tuple(step_shape)}"
        )
    if layers_and_lines is not None:
        num_layers, num_lines = layers_and_lines
        if state_shape[0] != num_layers:
            raise ValueError(
                f"{states_name}: expected {num_layers} layers (as ssm_states), got shape {tuple(state_shape)}"
            )
        if state_shape[1] != num_lines:
            raise ValueError(
                f"{states_name}: expected {num_lines} cache lines (as ssm_states), got shape {tuple(state_shape)}"
            )
    if step_shape[0] != state_shape[0] or step_shape[3:] != state_shape[2:]:
        raise ValueError(
            f"{steps_name}: expected shape ({state_shape[0]}, M, D, {', '.join(map(str, state_shape[2:]))}) "
            f"to match {states_name}, got {tuple(step_shape)}"
        )
    if rows_and_steps is not None and step_shape[1:3] != rows_and_steps:
        max_rows, num_steps = rows_and_steps
        raise ValueError(
            f"{steps_name}: expected M, D = {max_rows}, {num_steps} (as intermediate_ssm), "
            f"got shape {tuple(step_shape)}"
        )
    if not _trailing_dims_contiguous(states, 2):
        raise ValueError(f"{states_name}: each state entry must be contiguous (strides {states.stride()})")
    # Each miss of the predicate is named above: reaching this line is a bug of these checks.
    raise AssertionError(f"{states_name}: a check of the state pair fails unnamed")


def _state_bytes(
    ssm_states: Tensor,
    num_steps: int,
    conv_states: list[Tensor],
    steps_and_lines: list[tuple[Tensor | None, Tensor | None]],
) -> int:
    """2 x lanes written x layers x (SSM + conv entry bytes); a lane is written when its step lies in
    [0, D) and its cache line in [0, C) (others are padding, skipped)."""
    num_lines = ssm_states.shape[1]
    lanes = sum(
        int(((steps >= 0) & (steps < num_steps) & (lines >= 0) & (lines < num_lines)).sum())
        for steps, lines in steps_and_lines
        if steps is not None and lines is not None
    )
    per_lane = ssm_states[0, 0].nbytes + sum(c[0, 0].nbytes for c in conv_states)
    return 2 * lanes * ssm_states.shape[0] * per_lane


def _scatter_bytes(
    ssm_states: Tensor,
    intermediate_ssm: Tensor,
    conv_states: list[Tensor],
    state_indices: Tensor,
    last_correct_step_indices: Tensor,
    mamba_track_indices: Tensor | None,
    mamba_steps_to_track: Tensor | None,
    **_: object,
) -> int:
    return _state_bytes(
        ssm_states,
        intermediate_ssm.shape[2],
        conv_states,
        [(last_correct_step_indices, state_indices), (mamba_steps_to_track, mamba_track_indices)],
    )


@define_op(
    _scatter_mamba_states_after_mtp_verify_reference,
    mutates=("ssm_states", "conv_states"),
    op_class="bandwidth",
    variant=(
        "ssm_states",
        "intermediate_ssm",
        "state_indices",
        "last_correct_step_indices",
        "mamba_track_indices",
        "mamba_steps_to_track",
    ),
    bytes_moved=_scatter_bytes,
)
def scatter_mamba_states_after_mtp_verify(
    ssm_states: Tensor,
    intermediate_ssm: Tensor,
    conv_states: list[Tensor],
    intermediate_conv_windows: list[Tensor],
    state_indices: Tensor,
    last_correct_step_indices: Tensor,
    mamba_track_indices: Tensor | None = None,
    mamba_steps_to_track: Tensor | None = None,
) -> tuple[Tensor, list[Tensor]]:
    """Copy each request's state after its committed verify step into its cache line.

    For batch row r with step s = ``last_correct_step_indices[r]`` and line c = ``state_indices[r]``:
    ``ssm_states[:, c] = intermediate_ssm[:, r, s]`` and likewise for every conv window; with
    tracking, the same for (``mamba_track_indices[r]``, ``mamba_steps_to_track[r]``). A row whose
    step is outside ``[0, D)`` or whose line is outside ``[0, C)`` is a padding row (CUDA-graph
    batches): it is skipped silently on every device.

    Args:
        ssm_states: ``[L, C, *ssm]`` persistent states, each entry contiguous (mutated).
        intermediate_ssm: ``[L, M, D, *ssm]`` per-step states, same dtype, ``M >= bs``.
        conv_states: list of ``[L, C, *conv_k]`` (mutated).
        intermediate_conv_windows: list, same length, of ``[L, M, D, *conv_k]`` (may be strided views).
        state_indices: ``[bs]`` int32/int64 cache line of each batch row.
        last_correct_step_indices: ``[bs]`` int32/int64 step to commit (G1).
        mamba_track_indices: ``[bs]`` int32/int64 tracking lines, or None.
        mamba_steps_to_track: ``[bs]`` int32/int64 steps to track (G1), or None (both or neither).

    Returns:
        ``(ssm_states, conv_states)``, updated in place.
    """
    device, conv_list, windows_list = _checked_scatter_args(
        ssm_states,
        intermediate_ssm,
        conv_states,
        intermediate_conv_windows,
        state_indices,
        last_correct_step_indices,
        mamba_track_indices,
        mamba_steps_to_track,
    )
    if state_indices.shape[0] == 0:
        return ssm_states, conv_list
    if value_checks_enabled(device):
        _check_distinct_lines(
            ssm_states.shape[1],
            intermediate_ssm.shape[2],
            state_indices,
            last_correct_step_indices,
            mamba_track_indices,
            mamba_steps_to_track,
        )
    scatter_mamba_states_after_mtp_verify.dispatch(
        device,
        ssm_states,
        intermediate_ssm,
        conv_list,
        windows_list,
        state_indices,
        last_correct_step_indices,
        mamba_track_indices,
        mamba_steps_to_track,
    )
    return ssm_states, conv_list


def _checked_scatter_args(
    ssm_states: Tensor,
    intermediate_ssm: Tensor,
    conv_states: list[Tensor],
    intermediate_conv_windows: list[Tensor],
    state_indices: Tensor,
    last_correct_step_indices: Tensor,
    mamba_track_indices: Tensor | None,
    mamba_steps_to_track: Tensor | None,
) -> tuple[torch.device, list[Tensor], list[Tensor]]:
    """G2's arguments checked (shapes, dtypes, devices; the distinct-lines value check needs the
    steps and is the caller's): ``(device, conv_states, intermediate_conv_windows)`` as lists."""
    if not isinstance(conv_states, (list, tuple)):
        raise TypeError(f"conv_states: expected a list of tensors, got {type(conv_states).__name__}")
    if not isinstance(intermediate_conv_windows, (list, tuple)):
        raise TypeError(
            f"intermediate_conv_windows: expected a list of tensors, got {type(intermediate_conv_windows).__name__}"
        )
    if len(intermediate_conv_windows) != len(conv_states):
        raise ValueError(
            f"intermediate_conv_windows: expected {len(conv_states)} tensors (one per conv_states entry), "
            f"got {len(intermediate_conv_windows)}"
        )
    if not _state_pair_fits(ssm_states, intermediate_ssm, None, None):
        _raise_state_pair_mismatch("ssm_states", ssm_states, "intermediate_ssm", intermediate_ssm, None, None)
    layers_and_lines = ssm_states.shape[:2]
    rows_and_steps = intermediate_ssm.shape[1:3]
    for k, (conv, windows) in enumerate(zip(conv_states, intermediate_conv_windows, strict=True)):
        if not _state_pair_fits(conv, windows, layers_and_lines, rows_and_steps):
            _raise_state_pair_mismatch(
                f"conv_states[{k}]",
                conv,
                f"intermediate_conv_windows[{k}]",
                windows,
                layers_and_lines,
                rows_and_steps,
            )
    check_index("state_indices", state_indices)
    bs = state_indices.shape[0]
    check_index("last_correct_step_indices", last_correct_step_indices, shape=(bs,))
    if (mamba_track_indices is None) != (mamba_steps_to_track is None):
        missing = "mamba_track_indices" if mamba_track_indices is None else "mamba_steps_to_track"
        raise ValueError(
            f"{missing}: mamba_track_indices and mamba_steps_to_track go together (both or neither)"
        )
    if mamba_track_indices is not None:
        check_index("mamba_track_indices", mamba_track_indices, shape=(bs,))
        check_index("mamba_steps_to_track", mamba_steps_to_track, shape=(bs,))
    if bs > rows_and_steps[0]:
        raise ValueError(
            f"intermediate_ssm: expected at least bs = {bs} verify rows (dim 1), got {rows_and_steps[0]}"
        )
    device = ssm_states.device
    tensors = (
        intermediate_ssm,
        *conv_states,
        *intermediate_conv_windows,
        state_indices,
        last_correct_step_indices,
        mamba_track_indices,
        mamba_steps_to_track,
    )
    for tensor in tensors:
        if tensor is None or tensor.device == device:
            continue
        # Names only to report the odd one.
        common_device(
            ssm_states=ssm_states,
            intermediate_ssm=intermediate_ssm,
            **{f"conv_states[{k}]": conv for k, conv in enumerate(conv_states)},
            **{
                f"intermediate_conv_windows[{k}]": windows
                for k, windows in enumerate(intermediate_conv_windows)
            },
            state_indices=state_indices,
            last_correct_step_indices=last_correct_step_indices,
            mamba_track_indices=mamba_track_indices,
            mamba_steps_to_track=mamba_steps_to_track,
        )
    return device, list(conv_states), list(intermediate_conv_windows)


def _check_distinct_lines(
    num_lines: int,
    num_steps: int,
    state_indices: Tensor,
    last_correct_step_indices: Tensor,
    mamba_track_indices: Tensor | None,
    mamba_steps_to_track: Tensor | None,
) -> None:
    """No cache line is written twice (the order of two writes would be unspecified)."""
    lines = [state_indices.long()]
    steps = [last_correct_step_indices.long()]
    if mamba_track_indices is not None and mamba_steps_to_track is not None:
        lines.append(mamba_track_indices.long())
        steps.append(mamba_steps_to_track.long())
    line, step = torch.cat(lines), torch.cat(steps)
    written = line[(step >= 0) & (step < num_steps) & (line >= 0) & (line < num_lines)].sort().values
    repeated = written[1:] == written[:-1]
    if bool(repeated.any()):
        raise ValueError(
            f"state_indices: cache line {int(written[1:][repeated][0])} is written by more than one row "
            "(state_indices and mamba_track_indices together)"
        )


# --------------------------------------------------------------------------------------------------
# G3 commit_mamba_states_after_verify


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
    return _state_bytes(
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
        "last_correct_step_indices",
        "mamba_steps_to_track",
    ),
    bytes_moved=_commit_bytes,
)
def commit_mamba_states_after_verify(
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
    device, last, track = _checked_step_args(
        accept_index, accept_lens, draft_token_num, seq_lens, mamba_track_interval, last, track
    )
    _, conv_list, windows_list = _checked_scatter_args(
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
        _check_distinct_lines(
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
