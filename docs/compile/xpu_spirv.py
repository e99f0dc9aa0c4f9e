"""The Intel XPU trial of docs/compile/README.md: the shared Triton family compiled to SPIR-V by
triton-xpu 3.3.0b1, with no XPU device and no oneAPI toolkit. Not part of ``spec-hal compile``:
it needs a Triton older than spec_hal's floor and a stub for the one module it lacks (see the
README for the environment it runs in)."""

import collections
import json
import sys
import types

import triton

# spec_hal's launcher imports triton.knobs (Triton >= 3.4); 3.3 has none. The capture never runs a
# launch, so a stub that satisfies the import is enough.
knobs = types.ModuleType("triton.knobs")
knobs.runtime = types.SimpleNamespace(debug=False, launch_enter_hook=None, launch_exit_hook=None)
knobs.compilation = types.SimpleNamespace(instrumentation_mode="")
sys.modules["triton.knobs"] = knobs
triton.knobs = knobs

from triton._utils import find_paths_if, get_iterable_path  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

from spec_hal import aot  # noqa: E402
from spec_hal.devices import xpu  # noqa: E402

#: Data Center GPU Max (Ponte Vecchio): the SYCL architecture id and the properties the backend reads.
PVC = {
    "name": "Intel(R) Data Center GPU Max 1550",
    "architecture": 0x030F000700,
    "max_work_group_size": 1024,
    "max_num_sub_groups": 64,
    "sub_group_sizes": [16, 32],
    "has_fp64": True,
    "has_subgroup_2d_block_io": True,
    "has_bfloat16_conversions": True,
}


def main() -> None:
    target = GPUTarget("xpu", PVC, 32)
    backend = make_backend(target)
    captured = aot.capture({"xpu": xpu.TRITON_CONFIG}, "full")
    seen, rows = set(), []
    for launch in captured.launches["xpu"]:
        jit = launch.jit
        kwargs = dict(launch.kwargs, debug=False)
        bound, spec, options = create_function_from_signature(jit.signature, jit.params, backend)(
            *launch.args, **kwargs
        )
        key = (jit.fn.__name__, str(spec) + str(options))
        if key in seen:
            continue
        seen.add(key)
        # What Triton 3.3's JITFunction.run does before it compiles.
        sigvals = [x[0] for x in spec]
        signature = {p.name: v for p, v in zip(jit.params, sigvals, strict=True)}
        constexprs = {
            path: get_iterable_path(list(bound.values()), path)
            for path in find_paths_if(sigvals, lambda _, v: v == "constexpr")
        }
        attrvals = [x[1] for x in spec]
        attrs = {
            path: backend.parse_attr(get_iterable_path(attrvals, path))
            for path in find_paths_if(attrvals, lambda _, v: isinstance(v, str))
        }
        try:
            compiled = triton.compile(
                ASTSource(jit, signature, constexprs, attrs),
                target=target,
                options=backend.parse_options(kwargs).__dict__,
            )
            rows.append({"kernel": jit.fn.__name__, "ok": True, "binary": compiled.metadata.backend_name})
        except Exception as exc:
            rows.append(
                {"kernel": jit.fn.__name__, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:800]}
            )
    counts = collections.Counter((r["kernel"], r["ok"]) for r in rows)
    for kernel in sorted({r["kernel"] for r in rows}):
        print(f"{kernel:32} compiled {counts[(kernel, True)]}  failed {counts[(kernel, False)]}")
    unreached = sorted(set(aot.family_kernels()) - {r["kernel"] for r in rows})
    print(f"{len(rows)} specialisations, {sum(not r['ok'] for r in rows)} failed; unreached: {unreached}")
    print(f"capture errors: {captured.errors}")
    json.dump(rows, sys.stderr, indent=1)


if __name__ == "__main__":
    main()
