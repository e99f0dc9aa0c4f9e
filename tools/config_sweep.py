"""Graph-replay device time of Triton providers under alternative launch configurations.

    python tools/config_sweep.py scatter_mamba_states_after_mtp_verify move_kv_cache

For each op, re-registers its family's Triton providers for the current vendor with each candidate
``LaunchConfig`` (the vendor's own first) and times the benchmark's large sizes (or bs 64 / 512).
Exploration that picks a vendor's configuration; figures for docs come from ``spec-hal bench``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import sys

from spec_hal import ops as public_ops
from spec_hal import registry
from spec_hal.bench import LARGE_SIZES, TYPICAL, _accepted, _size_label, builders, bytes_moved, time_graph
from spec_hal.conformance.runner import device_context, torch_device_of
from spec_hal.kernels.triton.config import HOPPER

FAMILY = {
    "scatter_mamba_states_after_mtp_verify": "mamba",
    "move_kv_cache": "kv",
    "move_accept_tokens_to_target_kvcache": "kv",
    "generate_draft_decode_kv_indices": "index",
    "commit_mamba_states_after_verify": "mamba",
}
#: ``SWEEP_KIB`` / ``SWEEP_WARPS`` (comma-separated) override the tile sizes and warp counts tried.
CANDIDATES = [
    dataclasses.replace(HOPPER, name=f"copy{kib}k-w{warps}", copy_block_bytes=kib << 10, copy_num_warps=warps)
    for kib in (int(k) for k in os.environ.get("SWEEP_KIB", "8,16,32").split(","))
    for warps in (int(w) for w in os.environ.get("SWEEP_WARPS", "4,8").split(","))
]


def main(op_names: list[str]) -> None:
    descriptor = registry.current_device()
    device = torch_device_of(descriptor)
    all_builders = builders()
    with device_context(descriptor):
        for op in op_names:
            module = importlib.import_module(f"spec_hal.kernels.triton.{FAMILY[op]}")
            sizes = LARGE_SIZES.get(op) or [{"bs": 64}, {"bs": 512}]
            builder = all_builders[op]
            inputs = [builder(device, **_accepted(builder, {**TYPICAL, **s})) for s in sizes]
            for config in [HOPPER, *CANDIDATES]:
                module.register(descriptor.name, config)
                registry.invalidate()
                for s, kwargs in zip(sizes, inputs, strict=True):
                    call = functools.partial(getattr(public_ops, op), **kwargs)
                    us = time_graph(call, device, calls_per_graph=5, repeats=10).median_us
                    gbs = bytes_moved(op, kwargs) / us / 1e3
                    print(
                        f"{op:40s} {config.name:14s} {_size_label(s):40s} {us:9.2f} us {gbs:8.0f} GB/s",
                        flush=True,
                    )


if __name__ == "__main__":
    main(sys.argv[1:])
