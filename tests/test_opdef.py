"""The op object: public callable, reference, provider registration and its signature check,
variants by argument name, bytes moved, forcing a provider without the environment."""

from __future__ import annotations

import inspect
import os

import pytest
import torch
from fake_devices import device
from torch import Tensor

import spec_hal
from spec_hal import ops, registry
from spec_hal.opdef import OpDef, define_op
from spec_hal.registry import Intent
from spec_hal.testing import emulate, isolated_registry, use_provider


def _scale_reference(src: Tensor, factor: int, out: Tensor) -> None:
    out.copy_(src * factor)


@define_op(_scale_reference, mutates=("out",), op_class="latency", variant=("src", "factor"))
def _test_opdef_scale(op: OpDef, src: Tensor, factor: int, out: Tensor | None = None) -> Tensor:
    """Multiply ``src`` by ``factor``."""
    out = torch.empty_like(src) if out is None else out
    op.dispatch(src.device, src, factor, out)
    return out


scale = _test_opdef_scale


def test_every_public_device_op_is_an_op_object_with_its_reference():
    device_ops = {name for name in ops.__all__ if isinstance(getattr(ops, name), OpDef)}
    assert device_ops == set(spec_hal.ops.__all__) & set(registry.ops())
    for name in device_ops:
        op = getattr(ops, name)
        assert op.name == name and op.__doc__ and callable(op.reference)
        # The contract takes the op first and is the op's call; its signature shows the parameters after it.
        assert type(op).__call__ is op.contract
        contract_params = list(inspect.signature(op.contract).parameters.values())
        assert contract_params[0].name == "op"
        assert list(inspect.signature(op).parameters.values()) == contract_params[1:]
        assert set(op.mutates) <= set(inspect.signature(op.reference).parameters)


def test_calling_the_op_runs_the_contract_and_the_bound_provider():
    src = torch.arange(4.0)
    assert torch.equal(scale(src, 3), src * 3)
    assert scale.__doc__ == "Multiply ``src`` by ``factor``."


def test_a_contract_without_the_op_parameter_is_called_through_the_op():
    @define_op(_scale_reference, mutates=("out",), op_class="latency")
    def _test_opdef_scale_plain(src: Tensor, factor: int, out: Tensor | None = None) -> Tensor:
        out = torch.empty_like(src) if out is None else out
        _test_opdef_scale_plain.dispatch(src.device, src, factor, out)
        return out

    assert type(_test_opdef_scale_plain).__call__ is OpDef.__call__
    assert list(inspect.signature(_test_opdef_scale_plain).parameters) == ["src", "factor", "out"]
    assert torch.equal(_test_opdef_scale_plain(torch.arange(3.0), 2), torch.arange(3.0) * 2)


def test_a_positional_only_op_parameter_is_the_op_object():
    @define_op(_scale_reference, mutates=("out",), op_class="latency")
    def _test_opdef_scale_positional(
        op: OpDef, /, src: Tensor, factor: int, out: Tensor | None = None
    ) -> Tensor:
        out = torch.empty_like(src) if out is None else out
        op.dispatch(src.device, src, factor, out)
        return out

    assert list(inspect.signature(_test_opdef_scale_positional).parameters) == ["src", "factor", "out"]
    assert torch.equal(_test_opdef_scale_positional(torch.arange(3.0), 2), torch.arange(3.0) * 2)


def test_an_op_parameter_that_may_be_a_tensor_is_refused():
    # An old-style contract whose first argument is a tensor named op would be called with the op.
    def _op_reference(op: Tensor, out: Tensor) -> None:
        out.copy_(op)

    with pytest.raises(TypeError, match="the reference has a parameter 'op' too: rename it"):
        define_op(_op_reference, mutates=("out",), op_class="latency")(lambda op, out: out)


def test_variant_is_declared_by_argument_names():
    args = (torch.zeros(2, dtype=torch.float64), 5, torch.zeros(2))
    assert scale.variant == ("src", "factor")
    assert scale.variant_of(args) == (torch.float64, 5)
    kv_args = [[torch.zeros(2, dtype=torch.bfloat16)] * 2, None]
    assert ops.scatter_mamba_states_after_mtp_verify.variant  # every dtype a kernel specialises on
    assert ops.move_kv_cache.variant == ("tgt_loc", "src_loc", "segment_lens", "vectorizable")
    from spec_hal.opdef import _variant_part

    assert _variant_part(kv_args) == ((torch.bfloat16, torch.bfloat16), None)


def test_a_variant_or_mutated_name_that_is_no_parameter_is_refused():
    with pytest.raises(ValueError, match="'nope' is not a parameter of its reference"):
        define_op(_scale_reference, mutates=("out",), op_class="latency", variant=("nope",))(
            lambda src, factor, out: out
        )


def test_register_impl_as_decorator_and_call_on_the_op():
    with isolated_registry():
        registry.register_device(device("opdefdev", default=Intent("doubler", "test")))

        @scale.register_impl("opdefdev", "doubler")
        def doubled(src: Tensor, factor: int, out: Tensor) -> None:
            out.copy_(src * factor * 2)

        assert doubled.__name__ == "doubled"  # the decorator returns the provider itself
        assert [i.provider for i in scale.implementations("opdefdev")] == ["doubler", "portable"]
        with emulate("opdefdev"):
            assert scale(torch.ones(2), 3).tolist() == [6.0, 6.0]


def test_a_provider_whose_signature_differs_from_the_reference_is_refused():
    with isolated_registry():
        with pytest.raises(
            TypeError, match=r"parameters \(src, out\) do not match the reference's \(src, factor, out\)"
        ):
            scale.register_impl("cpu", "bad", lambda src, out: None)
        with pytest.raises(TypeError, match="do not match"):  # same names, another order
            registry.register_impl("_test_opdef_scale", "cpu", "bad", lambda src, out, factor: None)
        scale.register_impl("cpu", "varargs", lambda *args: None)  # version 1 accepts *args providers
        scale.register_impl("cpu", "extra", lambda src, factor, out, *, stream=None: None)


def test_bytes_moved_counts_every_tensor_once_unless_the_op_says_otherwise():
    src = torch.zeros(8)
    assert scale.bytes_moved(src, 2) == src.nbytes
    assert scale.bytes_moved(src, 2, out=torch.zeros(8)) == 2 * src.nbytes
    kv = ops.KVBuffers([torch.zeros(16, 4), torch.zeros(16, 4)])
    tgt, src_loc = torch.tensor([1, 2, -1]), torch.tensor([3, 4, 5])
    # Two lanes with both slots: each reads and writes one 16-byte row of two buffers.
    assert ops.move_kv_cache.bytes_moved(kv, tgt, src_loc) == 2 * 2 * 2 * 16


def test_use_provider_forces_one_op_and_touches_no_environment(monkeypatch):
    monkeypatch.delenv("SPEC_HAL_OPS", raising=False)
    with isolated_registry():
        registry.register_device(device("forcedev", default=Intent("portable", "test")))
        scale.register_impl("forcedev", "tripler", lambda src, factor, out: out.copy_(src * factor * 3))
        with emulate("forcedev"):
            assert scale(torch.ones(1), 1).item() == 1.0
            with use_provider("_test_opdef_scale", "tripler"):
                assert "SPEC_HAL_OPS" not in os.environ
                assert scale(torch.ones(1), 1).item() == 3.0
            assert scale(torch.ones(1), 1).item() == 1.0
    with pytest.raises(KeyError, match="unknown op"), use_provider("no_such_op", "portable"):
        pass


def test_a_provider_registered_during_resolution_is_not_shadowed_by_a_stale_binding():
    with isolated_registry():
        registry.register_device(device("racedev", default=Intent("late", "test")))
        with emulate("racedev"):
            original = registry.resolve

            def resolve_while_registering(*args):
                fn = original(*args)
                scale.register_impl("racedev", "late", lambda src, factor, out: out.fill_(7))
                return fn

            registry_resolve = "spec_hal.registry.resolve"
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(registry_resolve, resolve_while_registering)
                first = scale(torch.ones(1), 1).item()  # resolved before "late" existed: portable
            assert first == 1.0
            assert scale(torch.ones(1), 1).item() == 7.0  # the newer provider, not a cached old one


def test_a_forked_child_can_register_while_the_parent_held_the_lock():
    import threading

    holding, release = threading.Event(), threading.Event()

    def hold_the_lock():
        with registry.STATE.lock:
            holding.set()
            release.wait(5)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    holding.wait(5)
    try:
        pid = os.fork()
        if pid == 0:  # child: the lock must be usable at once
            try:
                registry.register_impl("_test_opdef_scale", "cpu", "child", lambda src, factor, out: None)
                os._exit(0)
            except BaseException:
                os._exit(1)
        status = _wait_or_kill(pid, seconds=10)
    finally:
        release.set()
        holder.join()
    assert status is not None, "the child deadlocked on the lock the parent held"
    assert os.waitstatus_to_exitcode(status) == 0


def _wait_or_kill(pid: int, seconds: float) -> int | None:
    """The child's wait status, or None (after killing it) when it did not end in time."""
    import signal
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_the_variant_is_read_only_while_some_provider_can_decline_one(monkeypatch):
    reads = []
    original = OpDef.variant_of
    monkeypatch.setattr(OpDef, "variant_of", lambda self, args: reads.append(1) or original(self, args))
    with isolated_registry():
        registry.register_device(device("variantdev", default=Intent("picky", "test")))
        with emulate("variantdev"):
            scale.register_impl("variantdev", "picky", lambda src, factor, out: out.fill_(5))
            assert scale(torch.ones(1), 1).item() == 5.0
            assert reads == []  # nothing can decline: bindings are keyed by device alone
            scale.register_impl(
                "variantdev",
                "picky",
                lambda src, factor, out: out.fill_(5),
                supports=lambda variant: None if variant[0] is torch.float32 else "float32 only",
            )
            assert scale(torch.ones(1), 1).item() == 5.0
            assert scale(torch.ones(1, dtype=torch.float64), 1).item() == 1.0  # declined: portable
            assert len(reads) >= 2
