"""``spec-hal compile`` (spec_hal.aot): targets, the capture of the providers' launches, one small
kernel compiled per backend, failures reported as rows, the committed report, and the HIP
descriptor's distributed backend. The whole family is compiled by ``tox -e compile``, not here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from test_cli import spec_hal

from spec_hal import aot
from spec_hal.composition import builtin_descriptors

SOURCE = Path(os.environ.get("SPEC_HAL_SOURCE_TREE") or Path(__file__).resolve().parents[1])
REPORT = SOURCE / "docs" / "compile" / "report.json"

#: Compiling needs Triton's compilers, not its interpreter (whose kernels are not JIT functions).
needs_compiler = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1", reason="TRITON_INTERPRET=1: kernels are interpreted"
)


def test_hip_dist_backend_is_a_name_torch_distributed_accepts():
    from spec_hal.devices import hip

    # ROCm builds of torch register RCCL under the name "nccl"; "rccl" is no backend name.
    assert hip.DESCRIPTOR.dist_backend in torch.distributed.Backend.backend_list
    assert hip.DESCRIPTOR.dist_backend == "nccl"


def test_targets_are_parsed_by_name_and_bad_names_say_what_is_expected():
    assert aot.parse_target("gfx942") == aot.KNOWN_TARGETS["gfx942"]
    assert aot.parse_target("sm_90").arch == 90
    assert aot.parse_target("gfx1100").warp_size == 32  # RDNA
    assert aot.parse_target("gfx908").warp_size == 64  # CDNA
    assert aot.parse_target("sm_120").backend == "cuda"
    with pytest.raises(ValueError, match="--target: unknown target 'h100'.*gfx90a"):
        aot.parse_target("h100")
    for descriptor in builtin_descriptors():
        assert all(
            aot.KNOWN_TARGETS[n].backend == descriptor.triton_backend for n in descriptor.compile_targets
        )


def test_resources_are_read_from_the_compilers_reports():
    amdgcn = (
        "    .sgpr_count:     19\n    .sgpr_spill_count: 3\n    .vgpr_count:     9\n"
        "    .vgpr_spill_count: 2\n; ScratchSize: 16\n; Occupancy: 8\n"
    )
    amd = aot.amd_resources(amdgcn)
    assert (amd["registers"], amd["spills"], amd["sgpr_spills"]) == (9, 2, 3)
    assert (amd["scratch_bytes"], amd["occupancy"], amd["agprs"]) == (16, 8, None)
    ptxas = (
        "ptxas info    : Function properties for k\n"
        "    8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 96 registers, used 0 barriers, 568 bytes cmem[0]\n"
    )
    nvidia = aot.ptxas_resources(ptxas)
    assert (nvidia["registers"], nvidia["spills"], nvidia["spill_load_bytes"], nvidia["stack_bytes"]) == (
        96,
        8,
        4,
        8,
    )
    assert aot.ptxas_resources("")["registers"] is None


def test_evidence_never_claims_a_target_the_committed_report_does_not_show_compiled():
    if not REPORT.exists():
        pytest.skip("no source tree with docs/ here")
    report = json.loads(REPORT.read_text())
    assert report["schema_version"] == 1
    assert not report["capture_errors"] and not report["unreached"]
    for descriptor in builtin_descriptors():
        vendor, claim = descriptor.name, "; ".join(descriptor.evidence)
        for target in descriptor.compile_targets:
            rows = [r for r in report["rows"] if r["vendor"] == vendor and r["target"] == target]
            if target in claim:
                assert rows and all(r["ok"] for r in rows), f"{vendor} claims {target}"


def test_committed_report_covers_every_kernel_of_the_family_on_every_default_target():
    pytest.importorskip("triton", reason="the family's kernels are read from its modules")
    if not REPORT.exists():
        pytest.skip("no source tree with docs/ here")
    report = json.loads(REPORT.read_text())
    kernels = set(aot.family_kernels())
    for descriptor in builtin_descriptors():
        vendor = descriptor.name
        for target in descriptor.compile_targets:
            compiled = {r["kernel"] for r in report["rows"] if (r["vendor"], r["target"]) == (vendor, target)}
            assert compiled == kernels, (
                f"docs/compile/report.json is stale for {vendor} {target}: regenerate it with "
                "`spec-hal compile --all --json docs/compile/report.json`"
            )


# --------------------------------------------------------------------------------------------------
# With Triton's compilers


@pytest.fixture(scope="module")
def configs():
    pytest.importorskip("triton")
    from spec_hal.devices import cuda, hip

    return {"hip": hip.TRITON_CONFIG, "cuda": cuda.TRITON_CONFIG}


@needs_compiler
def test_capture_records_the_providers_launches_with_each_vendors_configuration(configs):
    from spec_hal import ops
    from spec_hal.kernels.triton import launch as launch_module
    from spec_hal.kernels.triton.launch import Launch

    launch = Launch.__call__
    captured = aot.capture(configs, "quick", ops=["align_evict_mask_to_page_size"])
    assert not captured.errors
    for vendor in configs:
        made = captured.launches[vendor]
        assert {m.jit.fn.__name__ for m in made} == {"_align_evict_mask_kernel"}
        assert [m.sizes["bs"] for m in made] == [1, 64, 256]  # the bench's quick sizes
    # Each vendor's configuration sized its launches: a program covers at least a warp's lanes,
    # 64 on AMD and 32 on NVIDIA.
    hip, cuda = captured.launches["hip"][0], captured.launches["cuda"][0]
    assert hip.kwargs["ROWS"] * hip.kwargs["COLS"] == 64 and cuda.kwargs["ROWS"] * cuda.kwargs["COLS"] == 32
    # Nothing was launched and nothing is left patched or recording.
    assert Launch.__call__ is launch and launch_module._recorded is None and launch_module._recorded_launch
    assert "dispatch" not in vars(ops.align_evict_mask_to_page_size)
    with pytest.raises(ValueError, match="ops: 'no_such_op' is not an op of the Triton family"):
        aot.capture(configs, "quick", ops=["no_such_op"])


@needs_compiler
def test_capture_records_each_launch_of_a_launch_sequence(configs):
    """Split renorm rows make their digit launches through one LaunchSequence: the capture records
    each of them (what the providers launch), and leaves the sequence unpatched."""
    from spec_hal.kernels.triton import renorm
    from spec_hal.kernels.triton.launch import LaunchSequence

    sequence_call = LaunchSequence.__call__
    captured = aot.capture(configs, "full", ops=["top_p_renorm_prob"])
    assert not captured.errors and LaunchSequence.__call__ is sequence_call
    made = [m for m in captured.launches["cuda"] if m.sizes["vocab"] == 131072 and m.sizes["bs"] == 64]
    planned = renorm._launches(configs["cuda"], 64, 131072, True, True, False)
    assert planned.digits is not None and len(planned.digits.launches) == 11
    assert [m.kwargs.get("LEVEL") for m in made] == [*range(11), None]  # each digit, then the write


def _small_specialisation(configs, vendor: str, target: aot.Target) -> aot.Specialisation:
    captured = aot.capture({vendor: configs[vendor]}, "quick", ops=["align_evict_mask_to_page_size"])
    return aot.specialise(captured.launches[vendor], target, every=False)[0]


@needs_compiler
@pytest.mark.parametrize(("vendor", "target"), [("hip", "gfx942"), ("cuda", "sm_90")])
def test_one_small_kernel_compiles_with_its_resources(configs, vendor, target):
    chip = aot.KNOWN_TARGETS[target]
    spec = _small_specialisation(configs, vendor, chip)
    assert [use["sizes"]["bs"] for use in spec.uses] == [256]  # one per kernel: the largest size
    with aot.fresh_compiles():
        row = aot.compile_one(spec, chip)
    assert row["ok"], row["error"]
    assert row["registers"] > 0 and row["spills"] == 0
    assert row["threads"] == row["num_warps"] * chip.warp_size
    if vendor == "hip":
        assert row["occupancy"] > 0 and row["sgprs"] > 0


@needs_compiler
def test_a_kernel_that_does_not_fit_its_target_is_a_failed_row_not_an_exception(configs):
    chip = aot.KNOWN_TARGETS["gfx90a"]
    spec = _small_specialisation(configs, "hip", chip)
    spec.options["num_warps"] = 32  # 32 wavefronts of 64 lanes: 2048 threads in one program
    with aot.fresh_compiles():
        row = aot.compile_one(spec, chip)
    assert not row["ok"]
    assert "does not fit gfx90a: 32 warps x 64 lanes > 1024 threads" in row["error"]


@needs_compiler
def test_a_compile_error_is_a_failed_row_with_the_compilers_message(configs):
    import triton
    import triton.language as tl

    @triton.jit
    def odd_tile(out_ptr, BLOCK: tl.constexpr):
        tl.store(out_ptr + tl.arange(0, BLOCK), 0)

    spec = aot.Specialisation(
        "odd_tile", "test", odd_tile, {"out_ptr": "*i32", "BLOCK": "constexpr"}, {(1,): 3}, {}, {}
    )
    with aot.fresh_compiles():
        row = aot.compile_one(spec, aot.KNOWN_TARGETS["sm_80"])
    assert not row["ok"]
    assert "power of 2" in row["error"]


def test_a_long_compile_error_keeps_its_cause():
    """Triton prints the source excerpt first and the cause last: the report keeps both ends."""
    source = "\n".join(f"    line {i} of the kernel" for i in range(30))
    text = f"CompilationError: at 26:30:\n{source}\nNameError('Cannot access global variable _SLOTS')"
    excerpt = aot._error_excerpt(text)
    assert excerpt.startswith("CompilationError: at 26:30:")
    assert excerpt.endswith("NameError('Cannot access global variable _SLOTS')")
    assert len(excerpt.splitlines()) == 12
    assert aot._error_excerpt("one line") == "one line"


def test_plan_names_the_vendors_that_cannot_be_compiled_and_why():
    pytest.importorskip("triton")
    configs, targets, not_compiled = aot.plan(["musa", "npu", "hip"], ["gfx942", "sm_90"])
    assert list(configs) == ["hip"] and [t.name for t in targets["hip"]] == ["gfx942"]
    reasons = {row["vendor"]: row["reason"] for row in not_compiled}
    assert "no 'musa' backend" in reasons["musa"]
    assert reasons["npu"] == "binds no Triton kernel family"
    assert reasons["hip"] == "a cuda target; hip compiles for hip"  # sm_90, asked for with hip
    with pytest.raises(ValueError, match="--vendor: unknown vendor 'amd'"):
        aot.plan(["amd"], None)


def test_command_reports_vendors_it_cannot_compile_and_writes_the_json(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "compile.json"
    done = spec_hal("compile", "--vendor", "musa", "--json", str(out), TRITON_INTERPRET="0")
    assert done.returncode == 0, done.stderr
    assert "not compiled: musa: the installed Triton" in done.stdout
    report = json.loads(out.read_text())
    assert report["schema_version"] == 1 and report["rows"] == []
    assert [row["vendor"] for row in report["not_compiled"]] == ["musa"]


def test_command_refuses_an_unknown_target_naming_the_option():
    pytest.importorskip("triton")
    done = spec_hal("compile", "--target", "h100", TRITON_INTERPRET="0")
    assert done.returncode == 2
    assert "--target: unknown target 'h100'" in done.stderr
