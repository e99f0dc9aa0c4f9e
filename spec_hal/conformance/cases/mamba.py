"""Conformance cases of family G (mamba state commit): ``verify_commit_step_indices``,
``scatter_mamba_states_after_mtp_verify`` and ``commit_mamba_states_after_verify``.

G3's ``states`` argument is a :class:`VerifyStates` (a dataclass satisfying
:class:`~spec_hal.ops.MambaVerifyStates`): comparing it after the call means comparing its tensors
(``ssm_states`` and every ``conv_states`` entry are the mutated ones). ``conv_states`` of G2 is a
list: each entry is compared.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from .. import grid
from ..case import BadCase, BadRow, Case, bad_cases_from, benched

__all__ = ["BUILDERS", "VerifyStates", "cases", "bad_cases"]

_SSM_ENTRY = (2, 4, 4)  # heads x key dim x value dim
_CONV_ENTRIES = ((6, 3), (2, 3))  # (channels, Kc - 1) of two conv types (e.g. x/B/C and a gate)


@dataclass
class VerifyStates:
    """A minimal :class:`~spec_hal.ops.MambaVerifyStates`."""

    ssm_states: Tensor
    conv_states: list[Tensor]
    intermediate_ssm: Tensor
    intermediate_conv_windows: list[Tensor]
    state_indices: Tensor
    mamba_track_interval: int | None = None
    mamba_track_indices: Tensor | None = None


def _draft_token_num(topk: int, num_steps: int) -> int:
    return num_steps + 1 if topk == 1 else topk * num_steps + 1


def _accept_inputs(
    bs: int, topk: int, num_steps: int, generator: torch.Generator, allow_empty: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(accept_index [bs, W], accept_lens [bs], seq_lens [bs]) of a verified batch, int64 on the CPU."""
    width = num_steps + 1
    draft_token_num = _draft_token_num(topk, num_steps)
    accept_lens = torch.randint(0 if allow_empty else 1, width + 1, (bs,), generator=generator)
    accept_index = torch.full((bs, width), -1, dtype=torch.int64)
    for b in range(bs):
        count = int(accept_lens[b])
        if count:
            steps = torch.randperm(draft_token_num - 1, generator=generator)[: count - 1].sort().values + 1
            accept_index[b, :count] = (
                torch.cat((torch.zeros(1, dtype=torch.int64), steps)) + b * draft_token_num
            )
    seq_lens = torch.randint(0, 200, (bs,), generator=generator)
    return accept_index, accept_lens, seq_lens


def build_verify_commit_step_indices(
    device: torch.device,
    *,
    bs: int,
    topk: int = 1,
    num_steps: int = 3,
    idx_dtype: torch.dtype = torch.int64,
    seed: int = 0,
    mamba_track_interval: int | None = None,
    allow_empty: bool = False,
) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed)
    accept_index, accept_lens, seq_lens = _accept_inputs(bs, topk, num_steps, generator, allow_empty)
    kwargs: dict[str, Any] = {
        "accept_index": accept_index.to(idx_dtype).to(device),
        "accept_lens": accept_lens.to(idx_dtype).to(device),
        "draft_token_num": _draft_token_num(topk, num_steps),
        "seq_lens": seq_lens.to(idx_dtype).to(device),
        "mamba_track_interval": mamba_track_interval,
        "last_correct_step_indices": torch.full((bs,), grid.POISON_INT, dtype=torch.int64, device=device),
    }
    if mamba_track_interval is not None:
        kwargs["mamba_steps_to_track"] = torch.full((bs,), grid.POISON_INT, dtype=torch.int64, device=device)
    return kwargs


def _states(
    num_layers: int,
    num_lines: int,
    max_rows: int,
    draft_token_num: int,
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    ssm_entry: tuple[int, ...] = _SSM_ENTRY,
    device_random: bool = False,
) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
    """Persistent states and per-step scratch with the layouts engines use.

    ``ssm_states`` is a [C, L, ...] buffer seen as [L, C, ...] (entries contiguous, L/C strides
    swapped); the conv windows are strided views into a wider buffer, as verify kernels write them.
    """

    def randn(*shape: int) -> Tensor:
        if device_random:  # gigabyte-sized benchmark states: drawn where they live, not reproducible
            return torch.empty(shape, dtype=dtype, device=device).normal_()
        return torch.randn(*shape, generator=generator).to(dtype=dtype, device=device)

    ssm_states = randn(num_lines, num_layers, *ssm_entry).transpose(0, 1)
    intermediate_ssm = randn(num_layers, max_rows, draft_token_num, *ssm_entry)
    conv_states = [randn(num_layers, num_lines, *entry) for entry in _CONV_ENTRIES]
    windows = [
        randn(num_layers, max_rows, draft_token_num, channels, width + 2)[..., 1 : width + 1]
        for channels, width in _CONV_ENTRIES
    ]
    return ssm_states, intermediate_ssm, conv_states, windows


def _lines_and_steps(
    bs: int, num_lines: int, draft_token_num: int, tracking: bool, padding: bool, generator: torch.Generator
) -> dict[str, Tensor | None]:
    """Distinct cache lines per row (tracking lines too); padding rows get an out-of-range step or line."""
    lines = torch.randperm(num_lines, generator=generator)
    state_indices = lines[:bs].clone()
    last = torch.randint(0, draft_token_num, (bs,), generator=generator)
    track_indices = lines[bs : 2 * bs].clone() if tracking else None
    track_steps = torch.randint(-1, draft_token_num, (bs,), generator=generator) if tracking else None
    if padding and bs:
        kinds = torch.randint(0, 12, (bs,), generator=generator)
        # 0: step -1, 1: step D, 2: line -1, 3: line C, others: a real row
        last = torch.where(kinds == 0, -1, torch.where(kinds == 1, draft_token_num, last))
        state_indices = torch.where(kinds == 2, -1, torch.where(kinds == 3, num_lines, state_indices))
        if track_indices is not None:
            track_indices = torch.where(kinds == 0, -1, track_indices)
    return {
        "state_indices": state_indices,
        "last_correct_step_indices": last,
        "mamba_track_indices": track_indices,
        "mamba_steps_to_track": track_steps,
    }


#: The bench's large sizes: 48 layers of 32 x 128 x 128 fp32 SSM states (2 MiB per entry), drawn on
#: the device.
_LARGE_SIZES = tuple(
    {"bs": bs, "num_layers": 48, "ssm_entry": (32, 128, 128), "dtype": torch.float32, "device_random": True}
    for bs in (8, 32)
)


@benched(large_sizes=_LARGE_SIZES, bandwidth_target=90.0)
def build_scatter_mamba_states_after_mtp_verify(
    device: torch.device,
    *,
    bs: int,
    num_steps: int = 3,
    num_layers: int = 2,
    idx_dtype: torch.dtype = torch.int64,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    tracking: bool = False,
    padding: bool = True,
    ssm_entry: tuple[int, ...] = _SSM_ENTRY,
    device_random: bool = False,
) -> dict[str, Any]:
    """``ssm_entry`` / ``device_random``: the benchmarks' 32 x 128 x 128 states, drawn on the device."""
    generator = torch.Generator().manual_seed(seed)
    draft_token_num = num_steps + 1
    num_lines = 2 * bs + 3
    ssm, inter_ssm, conv, windows = _states(
        num_layers, num_lines, bs + 2, draft_token_num, dtype, device, generator, ssm_entry, device_random
    )
    indices = _lines_and_steps(bs, num_lines, draft_token_num, tracking, padding, generator)
    return {
        "ssm_states": ssm,
        "intermediate_ssm": inter_ssm,
        "conv_states": conv,
        "intermediate_conv_windows": windows,
        **{
            name: None if value is None else value.to(idx_dtype).to(device) for name, value in indices.items()
        },
    }


# the same states committed from accept_index (G1 steps computed inside the scatter launch)
@benched(large_sizes=tuple({"bs": sizes["bs"], "topk": 1, **sizes} for sizes in _LARGE_SIZES))
def build_commit_mamba_states_after_verify(
    device: torch.device,
    *,
    bs: int,
    topk: int = 1,
    num_steps: int = 3,
    num_layers: int = 2,
    idx_dtype: torch.dtype = torch.int64,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    mamba_track_interval: int | None = None,
    padding: bool = False,
    ssm_entry: tuple[int, ...] = _SSM_ENTRY,
    device_random: bool = False,
) -> dict[str, Any]:
    """``padding``: rows with nothing accepted, or a -1 / C cache or tracking line (CUDA-graph
    batches); ``ssm_entry`` / ``device_random``: the benchmarks' states, as for G2."""
    generator = torch.Generator().manual_seed(seed)
    draft_token_num = _draft_token_num(topk, num_steps)
    accept_index, accept_lens, seq_lens = _accept_inputs(bs, topk, num_steps, generator, allow_empty=padding)
    num_lines = 2 * bs + 3
    extra_rows = 2  # state_indices / mamba_track_indices are [>= bs]: the engine's padded buffers
    ssm, inter_ssm, conv, windows = _states(
        num_layers,
        num_lines,
        bs + extra_rows,
        draft_token_num,
        dtype,
        device,
        generator,
        ssm_entry,
        device_random,
    )
    lines = torch.randperm(num_lines, generator=generator)
    state_lines = lines[: bs + extra_rows].clone()
    track_lines = lines[bs + extra_rows : 2 * bs + extra_rows + 1].clone()
    if padding and bs:
        kinds = torch.randint(0, 8, (bs,), generator=generator)
        # 0: cache line -1, 1: cache line C, 2: tracking line -1, others: as drawn
        state_lines[:bs] = torch.where(kinds == 0, -1, torch.where(kinds == 1, num_lines, state_lines[:bs]))
        track_lines[:bs] = torch.where(kinds == 2, -1, track_lines[:bs])
    tracking = mamba_track_interval is not None
    states = VerifyStates(
        ssm_states=ssm,
        conv_states=conv,
        intermediate_ssm=inter_ssm,
        intermediate_conv_windows=windows,
        state_indices=state_lines.to(idx_dtype).to(device),
        mamba_track_interval=mamba_track_interval,
        mamba_track_indices=track_lines.to(idx_dtype).to(device) if tracking else None,
    )
    return {
        "states": states,
        "accept_index": accept_index.to(idx_dtype).to(device),
        "accept_lens": accept_lens.to(idx_dtype).to(device),
        "draft_token_num": draft_token_num,
        "seq_lens": seq_lens.to(idx_dtype).to(device),
    }


BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "verify_commit_step_indices": build_verify_commit_step_indices,
    "scatter_mamba_states_after_mtp_verify": build_scatter_mamba_states_after_mtp_verify,
    "commit_mamba_states_after_verify": build_commit_mamba_states_after_verify,
}


# --------------------------------------------------------------------------------------------------
# Golden cases (exact values)


def _golden_steps_build(device: torch.device) -> dict[str, Any]:
    # D = 3, W = 3, interval 2. Request 0: seq 3 -> 5 crosses 4; accepted nodes 0, 2.
    # Request 1: seq 4 -> 6 crosses 6; nodes 3, 5 (steps 0, 2). Request 2: seq 8 -> 9, no crossing.
    return {
        "accept_index": torch.tensor([[0, 2, -1], [3, 5, -1], [6, -1, -1]], dtype=torch.int32, device=device),
        "accept_lens": torch.tensor([2, 2, 1], device=device),
        "draft_token_num": 3,
        "seq_lens": torch.tensor([3, 4, 8], device=device),
        "mamba_track_interval": 2,
        "last_correct_step_indices": torch.full((3,), grid.POISON_INT, device=device),
        "mamba_steps_to_track": torch.full((3,), grid.POISON_INT, device=device),
    }


def _golden_steps_expected() -> dict[str, Any]:
    # Tracked column: max(boundary - pre - 1, 0) = 0 for request 0 (4 - 3 - 1), 1 for request 1 (6 - 4 - 1).
    last = torch.tensor([2, 2, 0])
    track = torch.tensor([0, 2, -1])
    return {"last_correct_step_indices": last, "mamba_steps_to_track": track, "result": (last, track)}


def _golden_scatter_build(device: torch.device) -> dict[str, Any]:
    # L = 1, C = 4, M = 3, D = 2; entry value = 10*row + step. Row 0 commits step 1 into line 2,
    # row 1 is padding (step -1), row 2 commits step 0 into line 0 and tracks step 1 into line 3.
    steps = (10 * torch.arange(3.0)[:, None] + torch.arange(2.0)).view(1, 3, 2, 1)
    return {
        "ssm_states": torch.full((1, 4, 1), -1.0, device=device),
        "intermediate_ssm": steps.to(device),
        "conv_states": [torch.full((1, 4, 1), -1.0, device=device)],
        "intermediate_conv_windows": [(steps + 100).to(device)],
        "state_indices": torch.tensor([2, 1, 0], device=device),
        "last_correct_step_indices": torch.tensor([1, -1, 0], device=device),
        "mamba_track_indices": torch.tensor([-1, 1, 3], dtype=torch.int32, device=device),
        "mamba_steps_to_track": torch.tensor([0, -1, 1], dtype=torch.int32, device=device),
    }


def _golden_scatter_expected() -> dict[str, Any]:
    ssm = torch.tensor([20.0, -1.0, 1.0, 21.0]).view(1, 4, 1)
    conv = torch.tensor([120.0, -1.0, 101.0, 121.0]).view(1, 4, 1)
    return {"ssm_states": ssm, "conv_states": [conv]}


def _golden_commit_build(device: torch.device) -> dict[str, Any]:
    # The golden G1 requests (steps [2, 2, 0], tracked [0, 2, -1]) over L = 1, C = 8, M = 3 states
    # whose entry value is 10*row + step (conv windows: + 100); every line starts at -1.
    g1 = _golden_steps_build(device)
    accepted = {name: g1[name] for name in ("accept_index", "accept_lens", "draft_token_num", "seq_lens")}
    values = (10 * torch.arange(3.0)[:, None] + torch.arange(3.0)).view(1, 3, 3, 1)
    states = VerifyStates(
        ssm_states=torch.full((1, 8, 1), -1.0, device=device),
        conv_states=[torch.full((1, 8, 1), -1.0, device=device)],
        intermediate_ssm=values.to(device),
        intermediate_conv_windows=[(values + 100).to(device)],
        state_indices=torch.tensor([5, 1, 7], device=device),
        mamba_track_interval=g1["mamba_track_interval"],
        mamba_track_indices=torch.tensor([0, 3, 2], dtype=torch.int32, device=device),
    )
    return {"states": states, **accepted}


def _golden_commit_expected() -> dict[str, Any]:
    states = _golden_commit_build(torch.device("cpu"))["states"]
    # Row 0 commits step 2 into line 5 and tracks step 0 into line 0; row 1 commits step 2 into
    # line 1 and tracks step 2 into line 3; row 2 commits step 0 into line 7 and tracks nothing.
    ssm = torch.tensor([0.0, 12.0, -1.0, 12.0, -1.0, 2.0, -1.0, 20.0]).view(1, 8, 1)
    states.ssm_states = ssm
    states.conv_states = [torch.where(ssm >= 0, ssm + 100, ssm)]
    steps = _golden_steps_expected()
    return {"states": states, "result": steps["result"]}


# --------------------------------------------------------------------------------------------------
# Case lists


def _random_cases(op: str) -> list[Case]:
    """The grid of spec_hal.conformance.grid walked diagonally (no full product)."""
    found = []
    for i, bs in enumerate(grid.BATCH_SIZES):
        for j, idx_dtype in enumerate(grid.INDEX_DTYPES):
            sizes: dict[str, Any] = {
                "bs": bs,
                "idx_dtype": idx_dtype,
                "num_steps": grid.STEPS[(i + j) % len(grid.STEPS)],
                "seed": 10 * i + j,
            }
            tracking = (i + j) % 2 == 1
            interval = (1, 2, 4, 64)[(i + 2 * j) % 4] if tracking else None
            if op == "scatter_mamba_states_after_mtp_verify":
                sizes |= {
                    "num_layers": 1 + (i + j) % 3,
                    "tracking": tracking,
                    "dtype": (torch.bfloat16, torch.float32)[j],
                }
            else:
                sizes |= {"topk": grid.TOPKS[(i + j) % len(grid.TOPKS)], "mamba_track_interval": interval}
            if op == "commit_mamba_states_after_verify":
                sizes |= {"dtype": (torch.float32, torch.bfloat16)[j], "padding": i % 2 == 0}
            name = ",".join(f"{key}={str(value).replace('torch.', '')}" for key, value in sizes.items())
            found.append(Case(op, name, "random", functools.partial(BUILDERS[op], **sizes), small=bs <= 3))
    return found


def cases() -> list[Case]:
    found = [case for op in BUILDERS for case in _random_cases(op)]
    edges: list[tuple[str, str, dict[str, Any]]] = [
        ("verify_commit_step_indices", "bs 0, tracking", {"bs": 0, "mamba_track_interval": 4}),
        (
            "verify_commit_step_indices",
            "empty accepts, tracking",
            {"bs": 8, "allow_empty": True, "mamba_track_interval": 2},
        ),
        ("scatter_mamba_states_after_mtp_verify", "bs 0", {"bs": 0}),
        (
            "scatter_mamba_states_after_mtp_verify",
            "no padding, tracking",
            {"bs": 5, "padding": False, "tracking": True},
        ),
        ("scatter_mamba_states_after_mtp_verify", "D = 1", {"bs": 3, "num_steps": 0}),
        ("commit_mamba_states_after_verify", "bs 0", {"bs": 0}),
        (
            "commit_mamba_states_after_verify",
            "tree, tracking every token",
            {"bs": 4, "topk": 2, "mamba_track_interval": 1},
        ),
        (
            "commit_mamba_states_after_verify",
            "padding rows, tracking, int32",
            {"bs": 6, "padding": True, "mamba_track_interval": 2, "idx_dtype": torch.int32, "seed": 3},
        ),
        (
            "commit_mamba_states_after_verify",
            "padding rows, D = 1",
            {"bs": 5, "padding": True, "num_steps": 0},
        ),
    ]
    for op, name, sizes in edges:
        found.append(Case(op, name, "edge", functools.partial(BUILDERS[op], **sizes), small=True))
    found.append(
        Case(
            "verify_commit_step_indices",
            "three requests, tracking",
            "golden",
            _golden_steps_build,
            _golden_steps_expected,
            small=True,
        )
    )
    found.append(
        Case(
            "scatter_mamba_states_after_mtp_verify",
            "padding row and tracking",
            "golden",
            _golden_scatter_build,
            _golden_scatter_expected,
            small=True,
        )
    )
    found.append(
        Case(
            "commit_mamba_states_after_verify",
            "three requests, tracking",
            "golden",
            _golden_commit_build,
            _golden_commit_expected,
            small=True,
        )
    )
    return found


G1 = "verify_commit_step_indices"
G2 = "scatter_mamba_states_after_mtp_verify"
G3 = "commit_mamba_states_after_verify"

# One row a line, so that the table reads down.
# fmt: off
BAD_ROWS: list[BadRow] = [
    (G1, "float accept_index", TypeError, "accept_index", {"accept_index": torch.zeros(3, 3)}),
    (G1, "accept_lens length", ValueError, "accept_lens", {"accept_lens": torch.tensor([2, 2])}),
    (G1, "draft_token_num 0", ValueError, "draft_token_num", {"draft_token_num": 0}),
    (G1, "interval 0", ValueError, "mamba_track_interval", {"mamba_track_interval": 0}),
    (G1, "tracking without seq_lens", ValueError, "seq_lens", {"seq_lens": None}),
    (G1, "int32 output", TypeError, "last_correct_step_indices", {"last_correct_step_indices": torch.zeros(3, dtype=torch.int32)}),
    (G1, "track output length", ValueError, "mamba_steps_to_track", {"mamba_steps_to_track": torch.zeros(2, dtype=torch.int64)}),
    (G1, "accept_lens > W", ValueError, "accept_lens", {"value_check": True, "accept_lens": torch.tensor([2, 4, 1])}),
    (G1, "negative accept_lens", ValueError, "accept_lens", {"value_check": True, "accept_lens": torch.tensor([2, -1, 1])}),
    (G1, "accept_index past bs*D", ValueError, "accept_index", {"value_check": True, "accept_index": torch.tensor([[0, 9, -1], [3, 5, -1], [6, -1, -1]])}),
    (G1, "negative seq_lens", ValueError, "seq_lens", {"value_check": True, "seq_lens": torch.tensor([3, -4, 8])}),
    (G2, "r >= M", ValueError, "intermediate_ssm", {"state_indices": torch.tensor([2, 1, 0, 3]), "last_correct_step_indices": torch.tensor([1, -1, 0, 0]), "mamba_track_indices": None, "mamba_steps_to_track": None}),
    (G2, "conv lists of different lengths", ValueError, "intermediate_conv_windows", {"intermediate_conv_windows": []}),
    (G2, "conv_states not a list", TypeError, "conv_states", {"conv_states": torch.zeros(1, 4, 1)}),
    (G2, "intermediate dtype", TypeError, "intermediate_ssm", {"intermediate_ssm": torch.zeros(1, 3, 2, 1, dtype=torch.float64)}),
    (G2, "intermediate entry shape", ValueError, "intermediate_ssm", {"intermediate_ssm": torch.zeros(1, 3, 2, 2)}),
    (G2, "conv lines differ", ValueError, r"conv_states\[0\]", {"conv_states": [torch.zeros(1, 5, 1)]}),
    (G2, "window D differs", ValueError, r"intermediate_conv_windows\[0\]", {"intermediate_conv_windows": [torch.zeros(1, 3, 3, 1)]}),
    # Made on the device, not copied there: a copy of an expanded tensor is contiguous.
    (G2, "entries not contiguous", ValueError, "ssm_states", {"ssm_states": lambda old: torch.zeros(1, 4, 2, device=old.device)[..., :1].expand(1, 4, 3), "intermediate_ssm": torch.zeros(1, 3, 2, 3)}),
    (G2, "track steps without lines", ValueError, "mamba_track_indices", {"mamba_track_indices": None}),
    (G2, "float state_indices", TypeError, "state_indices", {"state_indices": torch.zeros(3)}),
    (G2, "step length", ValueError, "last_correct_step_indices", {"last_correct_step_indices": torch.tensor([1, 0])}),
    (G2, "a line written twice", ValueError, "state_indices", {"value_check": True, "mamba_track_indices": torch.tensor([-1, 1, 2])}),
    (G3, "tracking without track lines", ValueError, "states.mamba_track_indices", {"states": lambda s: replace(s, mamba_track_indices=None)}),
    (G3, "state_indices shorter than bs", ValueError, "states.state_indices", {"states": lambda s: replace(s, state_indices=s.state_indices[:2])}),
    (G3, "track steps without an interval", ValueError, "mamba_steps_to_track", {"states": lambda s: replace(s, mamba_track_interval=None), "mamba_steps_to_track": torch.tensor([0, 0, 0])}),
    (G3, "float accept_index", TypeError, "accept_index", {"accept_index": torch.zeros(3, 4)}),
    (G3, "states not MambaVerifyStates", TypeError, "states", {"states": {"ssm_states": None}}),
    (G3, "accept_lens length", ValueError, "accept_lens", {"accept_lens": torch.tensor([1, 1])}),
    (G3, "tracking without seq_lens", ValueError, "seq_lens", {"seq_lens": None}),
    (G3, "float state_indices", TypeError, "states.state_indices", {"states": lambda s: replace(s, state_indices=s.state_indices.float())}),
    (G3, "r >= M", ValueError, "intermediate_ssm", {"states": lambda s: replace(s, intermediate_ssm=s.intermediate_ssm[:, :2], intermediate_conv_windows=[w[:, :2] for w in s.intermediate_conv_windows])}),
    (G3, "conv lists of different lengths", ValueError, "intermediate_conv_windows", {"states": lambda s: replace(s, intermediate_conv_windows=s.intermediate_conv_windows[:1])}),
    (G3, "intermediate dtype", TypeError, "intermediate_ssm", {"states": lambda s: replace(s, intermediate_ssm=s.intermediate_ssm.double())}),
    (G3, "accept_lens > W", ValueError, "accept_lens", {"value_check": True, "accept_lens": torch.tensor([1, 5, 1])}),
    (G3, "a line written twice", ValueError, "state_indices", {"value_check": True, "states": lambda s: replace(s, state_indices=torch.cat((s.state_indices[:1], s.state_indices[:1], s.state_indices[2:])))}),
]
# fmt: on


def bad_cases() -> list[BadCase]:
    # The valid calls whose arguments the cases break (G3: bs 3, tracking every 2 tokens).
    commit = functools.partial(build_commit_mamba_states_after_verify, bs=3, mamba_track_interval=2)
    return bad_cases_from(BAD_ROWS, {G1: _golden_steps_build, G2: _golden_scatter_build, G3: commit})
