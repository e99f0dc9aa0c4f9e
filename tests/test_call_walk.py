"""A warm public call on the CPU's portable path passes few of spec_hal's files: the op's contract
module, ``validation``, ``opdef`` (``dispatch`` alone) and the reference. The Triton family's
walk is in ``tests/triton_family/test_launch_walk.py``."""

from __future__ import annotations

import torch
from call_walk import entered, files, walk

from spec_hal import ops


def test_a_warm_latency_call_that_allocates_passes_at_most_five_files():
    accept_index = torch.tensor([[0, 1, -1], [3, -1, -1]])
    accept_lens = torch.tensor([2, 1])
    for _ in range(2):  # the first call may bind while the registry initialises: bound by the second
        ops.verify_commit_step_indices(accept_index, accept_lens, 3)
    stops = walk(ops.verify_commit_step_indices, accept_index, accept_lens, 3)  # outputs allocated
    assert len(files(stops)) <= 5, stops
    # The capture check before allocating asks the device's query kept by validation: nothing of
    # spec_hal.runtime, a vendor's runtime or the registry on a warm call.
    assert not [file for file in files(stops) if file.startswith(("runtime.py", "devices/", "registry/"))]
    # The contract is the op's call: opdef is entered once, by the contract's dispatch.
    assert entered(stops, "opdef.py") == ["dispatch"]


def test_every_op_enters_opdef_only_at_dispatch():
    """The contract is the op's call for every op: a warm call of any case enters opdef only by the
    contract's dispatch (once per provider call: ``move_kv_cache`` dispatches per buffer set)."""
    import spec_hal
    from spec_hal.conformance import runner
    from spec_hal.opdef import OpDef

    cpu = torch.device("cpu")
    dispatched = set()
    for case in runner.all_cases():
        if not case.small or case.op in dispatched:
            continue
        op = getattr(spec_hal.ops, case.op)
        assert type(op).__call__ is not OpDef.__call__, f"{case.op}: its contract does not take the op first"
        runner.call(case, runner.fresh_build(case, cpu))  # bound by the first call
        stops = walk(runner.call, case, runner.fresh_build(case, cpu))
        functions = set(entered(stops, "opdef.py"))
        assert functions <= {"dispatch"}, (case.op, case.name, stops)
        if functions:
            dispatched.add(case.op)
    assert dispatched == set(runner.builders()), "ops no small case dispatched"
