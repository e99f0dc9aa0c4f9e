"""Loop oracles for family G, written from the spec, independent of spec_hal."""

from __future__ import annotations

import torch


def _step(accept_index: list[list[int]], b: int, column: int, draft_token_num: int) -> int:
    if column < 0 or column >= len(accept_index[b]) or accept_index[b][column] == -1:
        return -1
    return accept_index[b][column] - b * draft_token_num


def verify_commit_step_indices(
    accept_index: list[list[int]],
    accept_lens: list[int],
    draft_token_num: int,
    seq_lens: list[int] | None = None,
    mamba_track_interval: int | None = None,
) -> tuple[list[int], list[int] | None]:
    last = [_step(accept_index, b, accept_lens[b] - 1, draft_token_num) for b in range(len(accept_lens))]
    if mamba_track_interval is None:
        return last, None
    interval = mamba_track_interval
    track = []
    for b in range(len(accept_lens)):
        pre = seq_lens[b]
        post = pre + accept_lens[b]
        if pre // interval != post // interval:
            column = max((post // interval) * interval - pre - 1, 0)
            track.append(_step(accept_index, b, column, draft_token_num))
        else:
            track.append(-1)
    return last, track


def scatter_mamba_states_after_mtp_verify(
    ssm_states: torch.Tensor,
    intermediate_ssm: torch.Tensor,
    conv_states: list[torch.Tensor],
    intermediate_conv_windows: list[torch.Tensor],
    state_indices: list[int],
    last_correct_step_indices: list[int],
    mamba_track_indices: list[int] | None = None,
    mamba_steps_to_track: list[int] | None = None,
) -> None:
    num_lines = ssm_states.shape[1]
    num_steps = intermediate_ssm.shape[2]
    writes = list(zip(range(len(state_indices)), state_indices, last_correct_step_indices, strict=True))
    if mamba_track_indices is not None:
        writes += list(zip(range(len(state_indices)), mamba_track_indices, mamba_steps_to_track, strict=True))
    for row, line, step in writes:
        if not (0 <= step < num_steps and 0 <= line < num_lines):
            continue  # padding row
        ssm_states[:, line] = intermediate_ssm[:, row, step]
        for conv, windows in zip(conv_states, intermediate_conv_windows, strict=True):
            conv[:, line] = windows[:, row, step]
