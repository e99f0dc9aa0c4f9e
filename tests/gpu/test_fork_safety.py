"""Fork safety on a real GPU: detection creates no CUDA context, so a child forked after
``import spec_hal; spec_hal.current_device()`` can still use the GPU.

The scenario runs in a fresh interpreter: this pytest process may already hold a CUDA context
(other GPU tests), which would make any fork from it unsafe whatever spec_hal does.
"""

from __future__ import annotations

import json
import subprocess
import sys

SCENARIO = r"""
import json, os, sys

import torch

import spec_hal

device = spec_hal.current_device()
initialized = torch.cuda.is_initialized()
pid = os.fork()
if pid == 0:
    try:
        values = torch.arange(16.0, device="cuda")
        _, indices = spec_hal.ops.fast_topk(values, 3)
        os._exit(0 if indices.tolist() == [15, 14, 13] else 3)
    except BaseException as exc:  # report, then exit non-zero
        print(f"child failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(4)
_, status = os.waitpid(pid, 0)
print(json.dumps({"device": device.name, "initialized": initialized,
                  "child_exit": os.waitstatus_to_exitcode(status)}))
"""

CHILD_EXITS = {
    3: "fast_topk in the child gave wrong indices",
    4: "the child could not use the GPU (its error is on stderr)",
}


def test_a_child_forked_after_detection_uses_the_gpu():
    done = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the scenario failed:\n{done.stderr}"
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["device"] == "cuda", f"detected {facts['device']}, not cuda"
    assert not facts["initialized"], "detection initialised CUDA in the parent (fork is no longer safe)"
    code = facts["child_exit"]
    assert code == 0, f"child exit {code}: {CHILD_EXITS.get(code, 'killed or crashed')}\n{done.stderr}"
