"""On an NVIDIA GPU: are the specialisations ``spec_hal.aot`` derives on meta tensors the ones
Triton's JIT really compiles, and are the registers it reads from ptxas the driver's?

Every family op runs through its public contract on the GPU at the bench's quick sizes (and
each launcher record's ``coverage_sizes``); then, per kernel, the JIT's cache keys are compared with the keys of the
specialisations ``spec_hal.aot`` captures for the same sizes, and the registers of an ahead-of-time
compile for the GPU's own target with the driver's ``n_regs`` of the kernels the JIT loaded. Run from a checkout: ``PYTHONPATH=. python docs/compile/jit_check.py``.
"""

import collections
import json

import torch
import triton
from triton import knobs
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

from spec_hal import aot, ops
from spec_hal.bench import builders, sizes_for
from spec_hal.devices import cuda
from spec_hal.kernels.triton.family import LAUNCHERS


def main() -> None:
    major, minor = torch.cuda.get_device_capability()
    target = aot.parse_target(f"sm_{major}{minor}")
    print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(), target.name)
    found = builders()
    for launcher in LAUNCHERS:
        name = launcher.op
        for sizes in [*sizes_for(name, found[name], "quick"), *map(dict, launcher.coverage_sizes)]:
            getattr(ops, name)(**found[name](torch.device("cuda"), **sizes))
    torch.cuda.synchronize()

    captured = aot.capture({"cuda": cuda.TRITON_CONFIG}, "quick")
    backend = make_backend(target.gpu_target())
    derived = collections.defaultdict(set)
    for launch in captured.launches["cuda"]:
        jit = launch.jit
        kwargs = {
            **launch.kwargs,
            "debug": launch.kwargs.get("debug", jit.debug) or knobs.runtime.debug,
            "instrumentation_mode": knobs.compilation.instrumentation_mode,
        }
        binder = create_function_from_signature(jit.signature, jit.params, backend)
        _, specialization, options = binder(*launch.args, **kwargs)
        derived[jit.fn.__name__].add(str(specialization) + str(options))

    keys, loaded = {}, collections.Counter()
    for name, jit in aot.family_kernels().items():
        keys[name] = {key for caches in jit.device_caches.values() for key in caches[0]}
        for caches in jit.device_caches.values():
            for kernel in caches[0].values():
                loaded[(name, kernel.n_regs)] += 1
    mismatched = {
        name: {"jit": len(keys[name]), "aot": len(derived[name])}
        for name in keys
        if len(keys[name]) != len(derived[name])
        or not all(any(key in jit_key for jit_key in keys[name]) for key in derived[name])
    }
    print("specialisations: kernels", len(keys), "mismatched", json.dumps(mismatched))

    compiled = collections.Counter()
    with aot.fresh_compiles():
        for spec in aot.specialise(captured.launches["cuda"], target):
            row = aot.compile_one(spec, target)
            compiled[(spec.kernel, row["registers"])] += 1
    print("registers per specialisation: the same as the driver's" if compiled == loaded else "DIFFER")
    if compiled != loaded:
        print("ahead of time", sorted(compiled.items()))
        print("driver", sorted(loaded.items()))


if __name__ == "__main__":
    main()
