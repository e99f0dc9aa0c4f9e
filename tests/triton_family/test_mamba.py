"""Family G Triton kernels (interpreted) against the portable references of ``spec_hal/ops/mamba/``.

* conformance cases through the public ops with the "triton" provider: the small cases and a few
  larger ones from the family's ``BUILDERS`` (G1 over several blocks of requests; G3, which
  computes its steps inside the scatter launch, with padding rows and tracking);
* ``scatter_mamba_states_after_mtp_verify`` and ``commit_mamba_states_after_verify`` on layouts the
  cases do not reach, providers and portable references called directly: more state tensors than
  one launch takes, an SSM state and conv states of other dtypes, a source entry that is not a 2-D
  block (portable for that part), contiguous windows, states with nothing for the kernel to copy
  (G3 falls back to G1's launch then G2's), and a launch configuration whose grid limit makes every
  axis loop; the launches each G3 layout makes are counted;
* every vendor's launch configuration (registered explicitly).
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from triton_family.interpreted import TRITON_VENDORS, VENDOR_CONFIGS, register_launchers, small_cases

from spec_hal import registry
from spec_hal.conformance.case import Case
from spec_hal.conformance.cases import mamba as mamba_cases
from spec_hal.conformance.runner import compare, run_case
from spec_hal.kernels.triton import launch
from spec_hal.kernels.triton import mamba as mamba_kernels
from spec_hal.kernels.triton.config import INTERPRETER, LaunchConfig
from spec_hal.testing import emulate, isolated_registry

CPU = torch.device("cpu")
OPS = (
    "verify_commit_step_indices",
    "scatter_mamba_states_after_mtp_verify",
    "commit_mamba_states_after_verify",
)


def case_id(case: Case) -> str:
    return f"{case.op}:{case.name}"


def built(op: str, name: str, **sizes) -> Case:
    return Case(op, name, "edge", functools.partial(mamba_cases.BUILDERS[op], **sizes), small=True)


EXTRA = [
    # 150 requests > the interpreter block (64): three programs of G1.
    built("verify_commit_step_indices", "bs150_tracking_int32", bs=150, topk=2, num_steps=4, mamba_track_interval=3, idx_dtype=torch.int32),
    built("verify_commit_step_indices", "bs70_empty_accepts", bs=70, allow_empty=True, mamba_track_interval=1),
    built("verify_commit_step_indices", "bs5_no_tracking", bs=5, topk=4, num_steps=3),
    built("scatter_mamba_states_after_mtp_verify", "bs6_tracking_fp32_int32", bs=6, num_layers=3, tracking=True, dtype=torch.float32, idx_dtype=torch.int32),
    built("commit_mamba_states_after_verify", "bs9_padding_tracking_int32", bs=9, topk=2, num_layers=3, padding=True, mamba_track_interval=3, idx_dtype=torch.int32, seed=5),
    built("commit_mamba_states_after_verify", "bs7_padding_bf16", bs=7, num_steps=4, padding=True, dtype=torch.bfloat16, seed=6),
]  # fmt: skip


@pytest.mark.parametrize("case", [c for op in OPS for c in small_cases(op)] + EXTRA, ids=case_id)
def test_case(case):
    with emulate("cuda"):
        assert run_case(case, CPU, "triton") == []


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
def test_every_vendor_configuration(vendor):
    cases = [c for op in OPS for c in small_cases(op) if c.kind == "golden"]
    cases.append(built("scatter_mamba_states_after_mtp_verify", "bs3_tracking", bs=3, tracking=True))
    cases.append(
        built(
            "commit_mamba_states_after_verify",
            "bs4_padding_tracking",
            bs=4,
            padding=True,
            mamba_track_interval=2,
        )
    )
    with isolated_registry(), emulate(vendor) as descriptor:
        registry.REGISTRY.load_bindings(descriptor)
        register_launchers(vendor, VENDOR_CONFIGS[vendor], mamba_kernels.LAUNCHERS)
        for case in cases:
            assert run_case(case, CPU, "triton") == [], case_id(case)


# --------------------------------------------------------------------------------------------------
# scatter_mamba_states_after_mtp_verify on other layouts, provider called directly


def states_and_windows(
    gen: torch.Generator,
    num_layers: int,
    num_lines: int,
    max_rows: int,
    num_steps: int,
    entry: tuple[int, ...],
    dtype: torch.dtype,
    window: str = "contiguous",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A persistent state [L, C, *entry] and its per-step scratch [L, M, D, *entry] laid out as
    ``window``: contiguous, "strided" (the last dim a slice of a wider one), or "permuted" (entry
    dims in reverse memory order: not a 2-D block once there are three)."""
    states = torch.randn(num_layers, num_lines, *entry, generator=gen).to(dtype)
    shape = (num_layers, max_rows, num_steps, *entry)
    if window == "strided":
        wide = torch.randn(*shape[:-1], shape[-1] + 3, generator=gen).to(dtype)
        steps = wide[..., 1 : 1 + shape[-1]]
    elif window == "permuted":
        steps = torch.randn(*shape[:3], *reversed(entry), generator=gen).to(dtype)
        steps = steps.permute(0, 1, 2, *range(steps.dim() - 1, 2, -1))
    else:
        steps = torch.randn(*shape, generator=gen).to(dtype)
    return states, steps


def lines_and_steps(gen: torch.Generator, bs: int, num_lines: int, num_steps: int, dtype: torch.dtype):
    """Distinct lines for commit and tracking rows, with padding rows (-1 / D steps, -1 / C lines)."""
    lines = torch.randperm(num_lines, generator=gen)
    state_indices, track_indices = lines[:bs].clone(), lines[bs : 2 * bs].clone()
    last = torch.randint(-1, num_steps + 1, (bs,), generator=gen)
    track = torch.randint(-1, num_steps, (bs,), generator=gen)
    state_indices[0] = num_lines  # a padding row with a valid step
    track_indices[1] = -1
    return [t.to(dtype) for t in (state_indices, last, track_indices, track)]


def assert_scatter_matches(args: list, config: LaunchConfig = INTERPRETER) -> None:
    want = copy.deepcopy(args)
    registry.ops()["scatter_mamba_states_after_mtp_verify"].reference(*want)
    mamba_kernels._scatter_mamba_states(config, *args)
    assert compare(args, want) == []


def scatter_args(gen, bs, entries, dtypes, windows, idx_dtype=torch.int64, tracking=True, num_layers=2):
    num_lines, max_rows, num_steps = 2 * bs + 2, bs + 1, 3
    pairs = [
        states_and_windows(gen, num_layers, num_lines, max_rows, num_steps, entry, dtype, window)
        for entry, dtype, window in zip(entries, dtypes, windows, strict=True)
    ]
    state_indices, last, track_indices, track = lines_and_steps(gen, bs, num_lines, num_steps, idx_dtype)
    (ssm, inter_ssm), conv = pairs[0], pairs[1:]
    return [
        ssm,
        inter_ssm,
        [states for states, _ in conv],
        [steps for _, steps in conv],
        state_indices,
        last,
        track_indices if tracking else None,
        track if tracking else None,
    ]


def test_more_states_than_one_launch():
    # SSM + 5 conv states = 6 parts: two launches; fp32 SSM with bf16 conv windows.
    gen = torch.Generator().manual_seed(1)
    entries = [(2, 4, 4), (6, 3), (2, 3), (5,), (3, 2), (4, 1)]
    dtypes = [torch.float32] + [torch.bfloat16] * 5
    windows = ["contiguous", "strided", "strided", "contiguous", "strided", "contiguous"]
    assert_scatter_matches(scatter_args(gen, 4, entries, dtypes, windows, idx_dtype=torch.int32))


def test_source_entry_not_a_2d_block():
    # A [2, 3, 4] entry stored in reverse dim order: copied by the portable reference, the rest by the kernel.
    gen = torch.Generator().manual_seed(2)
    entries = [(2, 3, 4), (6, 3)]
    args = scatter_args(gen, 3, entries, [torch.float32] * 2, ["permuted", "strided"], tracking=False)
    assert mamba_kernels._entry_as_2d(args[1].shape, args[1].stride()) is None
    assert_scatter_matches(args)


def test_entries_coalesce():
    gen = torch.Generator().manual_seed(3)
    _, contiguous = states_and_windows(gen, 1, 2, 2, 2, (2, 4, 4), torch.float32)
    _, strided = states_and_windows(gen, 1, 2, 2, 2, (6, 3), torch.float32, "strided")
    assert mamba_kernels._entry_as_2d(contiguous.shape, contiguous.stride()) == (1, 32, 0, 1)
    assert mamba_kernels._entry_as_2d(strided.shape, strided.stride()) == (6, 3, 6, 1)


def test_grid_limit():
    # max_grid 1: one program loops over every tile, lane and layer.
    config = LaunchConfig(
        "tiny-grid", num_warps=1, block=16, copy_num_warps=1, copy_block_bytes=32, max_grid=1
    )
    gen = torch.Generator().manual_seed(4)
    args = scatter_args(
        gen, 3, [(2, 4, 4), (6, 3)], [torch.float32, torch.bfloat16], ["contiguous", "strided"]
    )
    assert_scatter_matches(args, config)


def test_commit_steps_grid_limit():
    config = LaunchConfig(
        "tiny-grid", num_warps=1, block=16, copy_num_warps=1, copy_block_bytes=32, max_grid=1
    )
    kwargs = mamba_cases.BUILDERS["verify_commit_step_indices"](
        CPU, bs=40, topk=2, num_steps=3, mamba_track_interval=2, allow_empty=True
    )
    args = [kwargs[name] for name in ("accept_index", "accept_lens", "draft_token_num", "seq_lens")]
    args += [2, kwargs["last_correct_step_indices"], kwargs["mamba_steps_to_track"]]
    want = copy.deepcopy(args)
    registry.ops()["verify_commit_step_indices"].reference(*want)
    mamba_kernels._verify_commit_step_indices(config, *args)
    assert compare(args, want) == []


# --------------------------------------------------------------------------------------------------
# commit_mamba_states_after_verify (steps computed in the scatter launch), provider called directly


@pytest.fixture
def launches():
    """``launches()``: {"steps": G1 kernel launches, "scatter": scatter kernel launches} so far."""
    kernels = {"steps": mamba_kernels._commit_steps_kernel, "scatter": mamba_kernels._scatter_states_kernel}
    with launch.recording() as recorded:
        yield lambda: {
            name: sum(made.kernel is kernel for made, _ in recorded) for name, kernel in kernels.items()
        }


def commit_args(
    gen, bs, entries, dtypes, windows, idx_dtype=torch.int64, tracking=True, num_layers=2, seed=0
):
    """Provider arguments of G3 computing its steps: accepted trees with empty rows, padding lines."""
    accepted = mamba_cases.BUILDERS["verify_commit_step_indices"](
        CPU, bs=bs, topk=2, num_steps=2, idx_dtype=idx_dtype, seed=seed, allow_empty=True,
        mamba_track_interval=2 if tracking else None,
    )  # fmt: skip
    num_steps = accepted["draft_token_num"]
    num_lines, max_rows = 2 * bs + 2, bs + 1
    pairs = [
        states_and_windows(gen, num_layers, num_lines, max_rows, num_steps, entry, dtype, window)
        for entry, dtype, window in zip(entries, dtypes, windows, strict=True)
    ]
    state_indices, _, track_indices, _ = lines_and_steps(gen, bs, num_lines, num_steps, idx_dtype)
    (ssm, inter_ssm), conv = pairs[0], pairs[1:]
    return [
        ssm,
        inter_ssm,
        [states for states, _ in conv],
        [steps for _, steps in conv],
        state_indices,
        track_indices if tracking else None,
        accepted["accept_index"],
        accepted["accept_lens"],
        num_steps,
        accepted["seq_lens"],
        2 if tracking else 0,
        accepted["last_correct_step_indices"],
        accepted.get("mamba_steps_to_track"),
    ]


def assert_commit_matches(args: list, config: LaunchConfig = INTERPRETER) -> None:
    want = copy.deepcopy(args)
    registry.ops()["commit_mamba_states_after_verify"].reference(*want)
    mamba_kernels._commit_mamba_states(config, *args)
    assert compare(args, want) == []


SSM_AND_CONV = ([(2, 4, 4), (6, 3), (2, 3)], [torch.float32, torch.bfloat16, torch.bfloat16])


@pytest.mark.parametrize("tracking", [False, True])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_commit_is_one_launch(launches, tracking, idx_dtype):
    gen = torch.Generator().manual_seed(5)
    args = commit_args(gen, 6, *SSM_AND_CONV, ["contiguous", "strided", "strided"], idx_dtype, tracking)
    assert_commit_matches(args)
    assert launches() == {"steps": 0, "scatter": 1}


def test_commit_more_states_than_one_launch(launches):
    # 6 parts: the first launch computes and stores the steps, the second reads them.
    gen = torch.Generator().manual_seed(6)
    entries = [(2, 4, 4), (6, 3), (2, 3), (5,), (3, 2), (4, 1)]
    dtypes = [torch.float32] + [torch.bfloat16] * 5
    windows = ["contiguous", "strided", "strided", "contiguous", "strided", "contiguous"]
    assert_commit_matches(commit_args(gen, 4, entries, dtypes, windows, torch.int32))
    assert launches() == {"steps": 0, "scatter": 2}


def test_commit_source_entry_not_a_2d_block(launches):
    # The SSM entry is read through a contiguous copy of its buffer, in the same launch.
    gen = torch.Generator().manual_seed(7)
    args = commit_args(gen, 3, [(2, 3, 4), (6, 3)], [torch.float32] * 2, ["permuted", "strided"])
    assert_commit_matches(args)
    assert launches() == {"steps": 0, "scatter": 1}


def test_commit_with_nothing_for_the_kernel_to_copy(launches):
    # No scatter launch to compute the steps in: G1's launch alone.
    gen = torch.Generator().manual_seed(8)
    assert_commit_matches(commit_args(gen, 3, [(2, 0), (0,)], [torch.float32] * 2, ["contiguous"] * 2))
    assert launches() == {"steps": 1, "scatter": 0}


def test_commit_with_only_an_entry_that_is_no_2d_block(launches):
    gen = torch.Generator().manual_seed(8)
    assert_commit_matches(commit_args(gen, 3, [(2, 3, 4)], [torch.float32], ["permuted"]))
    assert launches() == {"steps": 0, "scatter": 1}


def test_commit_tracking_steps_without_tracking_lines(launches):
    gen = torch.Generator().manual_seed(9)
    args = commit_args(gen, 3, *SSM_AND_CONV, ["contiguous", "strided", "contiguous"])
    args[5] = None  # mamba_track_indices: tracked steps are computed, nothing is copied for them
    assert_commit_matches(args)
    assert launches() == {"steps": 1, "scatter": 1}


def test_commit_grid_limit():
    # max_grid 1: one program loops over every tile, lane and layer, and stores every step.
    config = LaunchConfig(
        "tiny-grid", num_warps=1, block=16, copy_num_warps=1, copy_block_bytes=32, max_grid=1
    )
    gen = torch.Generator().manual_seed(10)
    assert_commit_matches(commit_args(gen, 5, *SSM_AND_CONV, ["contiguous", "strided", "strided"]), config)


def test_commit_bs0_launches_nothing(launches):
    gen = torch.Generator().manual_seed(11)
    args = commit_args(gen, 2, *SSM_AND_CONV, ["contiguous", "strided", "strided"])
    for index in (4, 5, 6, 7, 9, 11, 12):  # the per-request tensors, with no request
        args[index] = args[index][:0]
    assert_commit_matches(args)
    assert launches() == {"steps": 0, "scatter": 0}
