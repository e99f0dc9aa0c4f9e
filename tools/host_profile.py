"""Where the eager host time of ops goes: cProfile of repeated public calls on the current device.

    python tools/host_profile.py assign_extend_cache_locs,draft_topk1_postprocess [bs]

Prints, per op, the host time per call and the functions with the most own time. Exploration for
the eager host-time target; figures for docs come from ``spec-hal bench``.
"""

from __future__ import annotations

import cProfile
import functools
import pstats
import sys
import time

from spec_hal import ops as public_ops
from spec_hal import registry, runtime
from spec_hal.bench import TYPICAL, _accepted, builders
from spec_hal.conformance.runner import device_context, torch_device_of


def main(op_names: list[str], bs: int) -> None:
    descriptor = registry.current_device()
    device = torch_device_of(descriptor)
    all_builders = builders()
    with device_context(descriptor):
        for op in op_names:
            builder = all_builders[op]
            call = functools.partial(
                getattr(public_ops, op), **builder(device, **_accepted(builder, {**TYPICAL, "bs": bs}))
            )
            for _ in range(50):
                call()
            runtime.synchronize(device)
            start = time.perf_counter()
            for _ in range(1000):
                call()
            per_call = (time.perf_counter() - start) * 1e3
            runtime.synchronize(device)
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(1000):
                call()
            profile.disable()
            runtime.synchronize(device)
            print(f"=== {op} bs={bs}: {per_call:.2f} us per call (unprofiled)")
            pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]) if len(sys.argv) > 2 else 64)
