"""Tensors on cuda:1 run on GPU 1: every Triton provider's small conformance cases, built on the
second GPU while GPU 0 stays current, compared with the portable reference on the CPU."""

from __future__ import annotations

import pytest
import torch

import spec_hal
from spec_hal.conformance.runner import all_cases, providers_for, run_case


@pytest.mark.gpus(2)
def test_triton_providers_run_on_the_tensors_gpu_and_leave_the_current_one():
    second = torch.device("cuda", 1)
    torch.cuda.set_device(0)
    descriptor = spec_hal.current_device()
    failures, checked = [], 0
    for case in all_cases():
        if not case.small or "triton" not in providers_for(case.op, descriptor):
            continue
        problems = run_case(case, second, "triton")
        checked += 1
        if problems:
            failures.append(f"{case.op} {case.name}: {problems[:2]}")
        assert torch.cuda.current_device() == 0, f"{case.op} {case.name} left GPU 1 current"
    assert checked > 0, f"no small case reaches a Triton provider on {descriptor.name}"
    assert not failures, f"{len(failures)} of {checked} cases failed on cuda:1:\n" + "\n".join(failures)
