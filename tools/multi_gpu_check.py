"""Tensors on cuda:1 run on GPU 1: every Triton provider's small conformance cases, built on the
second GPU while GPU 0 stays current, compared with the portable reference on the CPU. Needs two GPUs
(the device tool's nvidia-h200-x2)."""

import sys

import torch

from spec_hal import registry
from spec_hal.conformance.runner import all_cases, run_case

second = torch.device("cuda", 1)
torch.cuda.set_device(0)
descriptor = registry.current_device()
registry._ensure_bindings(descriptor)
failures, checked = [], 0
for case in all_cases():
    if not case.small or case.op not in registry.ops():
        continue
    if not any(i.provider == "triton" for i in registry.implementations(case.op, descriptor.name)):
        continue
    problems = run_case(case, second, "triton")
    checked += 1
    if problems:
        failures.append(f"{case.op} {case.name}: {problems[:2]}")
    assert torch.cuda.current_device() == 0, "a provider left GPU 1 current"
print(
    f"cuda:1: {checked} small cases through the Triton providers, {len(failures)} failed; current device stayed 0"
)
for line in failures:
    print("FAIL", line)
sys.exit(1 if failures or checked == 0 else 0)
