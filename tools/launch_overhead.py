"""Where the host time of one Triton launch goes (run on an accelerator; prints a table).

Times, per call on the host (median of batches): the JIT launch ``kernel[grid](...)``; its pieces
(Triton's argument binder, device/stream lookup); a launch through the compiled kernel handle
``compiled[grid](*args)``; the launcher called directly. For an empty kernel (one argument) and for
the 20-argument kernel of ``assign_extend_cache_locs``, plus the op's public call and its dispatch.
Exploration for the eager host-time target of issue #6; figures go into docs only via ``spec-hal bench``.
"""

from __future__ import annotations

import statistics
import time

import torch
import triton
from triton.runtime import driver

from spec_hal.kernels.triton import index as index_kernels
from spec_hal.kernels.triton.config import HOPPER
from spec_hal.kernels.triton.empty import _empty_kernel


def host_us(fn, repeats: int = 3000, batches: int = 5) -> float:
    for _ in range(200):
        fn()
    medians = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        medians.append((time.perf_counter() - start) / repeats * 1e6)
        torch.accelerator.synchronize()
    return statistics.median(medians)


def pieces(name: str, kernel, grid, args, kwargs) -> None:
    compiled = kernel[grid](*args, **kwargs)
    device = driver.active.get_current_device()
    stream = driver.active.get_current_stream(device)
    binder = kernel.device_caches[device][4]
    bound, specialization, options = binder(*args, **kwargs)
    values = tuple(bound.values())
    run = compiled.run
    function, packed = compiled.function, compiled.packed_metadata
    g = tuple(grid) + (1,) * (3 - len(grid))
    runner = compiled[g]
    rows = {
        "jit kernel[grid](...)": lambda: kernel[grid](*args, **kwargs),
        "binder(*args)": lambda: binder(*args, **kwargs),
        "tuple(specialization) hash": lambda: hash(tuple(binder(*args, **kwargs)[1])),
        "get_current_device+stream": lambda: driver.active.get_current_stream(
            driver.active.get_current_device()
        ),
        "compiled[grid](*values)": lambda: runner(*values, stream=stream),
        "launcher(...) direct": lambda: run(
            g[0], g[1], g[2], stream, function, packed, None, None, None, *values
        ),
    }
    for label, fn in rows.items():
        print(f"{name:28s} {label:34s} {host_us(fn):7.2f} us", flush=True)


def main() -> None:
    device = torch.device("cuda")
    marker = torch.zeros(1, device=device)
    pieces("empty (1 arg)", _empty_kernel, (1,), (marker,), {})

    bs, width = 64, 8
    req_pool_indices = torch.arange(bs, device=device, dtype=torch.int64)
    req_to_token = torch.arange(bs * 4096, device=device, dtype=torch.int32).view(bs, 4096)
    start = torch.full((bs,), 100, device=device, dtype=torch.int64)
    end = start + width
    out = torch.empty(bs * width, device=device, dtype=torch.int64)
    rows, columns = index_kernels._tile(HOPPER)
    args = (
        req_pool_indices,
        1,
        req_to_token,
        4096,
        1,
        bs,
        4096,
        start,
        1,
        end,
        1,
        out,
        1,
        bs * width,
        bs,
    )
    kwargs = dict(
        TO_TABLE=False, ROWS=rows, COLS=columns, SCAN_BLOCK=HOPPER.block, num_warps=HOPPER.num_warps
    )
    pieces("window (15 args)", index_kernels._window_kernel, (triton.cdiv(bs, rows),), args, kwargs)

    from spec_hal import ops
    from spec_hal.ops.index import _assign_extend_cache_locs_portable as op

    bound = op.bind(device, None)
    calls = {
        "public spec_hal.ops call": lambda: ops.assign_extend_cache_locs(
            req_pool_indices, req_to_token, start, end, out
        ),
        "op.dispatch": lambda: op.dispatch(device, req_pool_indices, req_to_token, start, end, out),
        "bound provider": lambda: bound(req_pool_indices, req_to_token, start, end, out),
    }
    for label, fn in calls.items():
        print(f"{'assign_extend_cache_locs':28s} {label:34s} {host_us(fn):7.2f} us", flush=True)


if __name__ == "__main__":
    main()
