"""G2 ``scatter_mamba_states_after_mtp_verify``: copy the states of the chosen steps into the cache
lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    check_index,
    check_tensor,
    common_device,
    trailing_dims_contiguous,
    value_checks_enabled,
)
from ..kv import _redirect_masked_lanes


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
        and trailing_dims_contiguous(states, 2)
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
    if not trailing_dims_contiguous(states, 2):
        raise ValueError(f"{states_name}: each state entry must be contiguous (strides {states.stride()})")
    # Each miss of the predicate is named above: reaching this line is a bug of these checks.
    raise AssertionError(f"{states_name}: a check of the state pair fails unnamed")


def state_bytes(
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
    return state_bytes(
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
    op: OpDef,
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
    device, conv_list, windows_list = checked_scatter_args(
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
        check_distinct_lines(
            ssm_states.shape[1],
            intermediate_ssm.shape[2],
            state_indices,
            last_correct_step_indices,
            mamba_track_indices,
            mamba_steps_to_track,
        )
    op.dispatch(
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


def checked_scatter_args(
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


def check_distinct_lines(
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
