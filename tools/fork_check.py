"""Fork safety on a real GPU: detection must not create a CUDA context, so a forked child can use
the GPU after ``import spec_hal; spec_hal.current_device()``. Run by tools/h200_run.sh."""

import os
import sys

import torch

import spec_hal

device = spec_hal.current_device()
initialized = torch.cuda.is_initialized()
print(f"detected {device.name}; CUDA initialised in parent after detection: {initialized}")
pid = os.fork()
if pid == 0:
    try:
        values = torch.arange(16.0, device="cuda")
        _, indices = spec_hal.ops.fast_topk(values, 3)
        os._exit(0 if indices.tolist() == [15, 14, 13] else 3)
    except BaseException as exc:  # report, then exit non-zero
        print(f"child failed: {exc}", file=sys.stderr)
        os._exit(4)
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
print(f"child using the GPU after fork: {'ok' if code == 0 else f'FAILED (exit {code})'}")
sys.exit(0 if code == 0 and not initialized and device.name == "cuda" else 1)
