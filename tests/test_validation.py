"""Shape checks of ``spec_hal.validation``: ``ANY_SIZE`` matches any size in one comparison, and a
mismatch is named with the argument, the expected shape and the dimension. Outputs left None are
allocated with the shape, dtype and device asked for, at any rank."""

from __future__ import annotations

import pytest
import torch

from spec_hal.validation import ANY_SIZE, check_index, check_output, check_tensor, empty, new_output


def test_any_size_matches_every_size_of_its_dimension():
    tensor = torch.zeros(3, 5, dtype=torch.int64)
    assert check_tensor("x", tensor, shape=(3, ANY_SIZE)) is tensor
    assert check_index("x", tensor, shape=(ANY_SIZE, 5)) is tensor
    assert (
        check_output("x", tensor, dtype=torch.int64, device=tensor.device, shape=(ANY_SIZE, ANY_SIZE))
        is tensor
    )
    assert check_tensor("x", torch.zeros(3, 0), shape=(3, ANY_SIZE)).shape == (3, 0)


@pytest.mark.parametrize(
    ("check", "shape", "message"),
    [
        (check_tensor, (4, ANY_SIZE), r"x: expected shape \(4, \*\), got \(3, 5\) \(dim 0\)"),
        (check_index, (ANY_SIZE, 6), r"x: expected shape \(\*, 6\), got \(3, 5\) \(dim 1\)"),
        (check_index, (3, ANY_SIZE, ANY_SIZE), r"x: expected a 3-D tensor, got shape \(3, 5\)"),
        (check_tensor, (ANY_SIZE,), r"x: expected a 1-D tensor, got shape \(3, 5\)"),
    ],
)
def test_a_shape_mismatch_names_the_argument_and_the_dimension(check, shape, message):
    with pytest.raises(ValueError, match=message):
        check("x", torch.zeros(3, 5, dtype=torch.int64), shape=shape)
    with pytest.raises(ValueError, match=message):
        check_output(
            "x",
            torch.zeros(3, 5, dtype=torch.int64),
            dtype=torch.int64,
            device=torch.device("cpu"),
            shape=shape,
        )


@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), [4, 1, 2], torch.Size([3, 0, 2])])
def test_allocations_take_every_rank_and_sequence_of_sizes(shape):
    device = torch.device("cpu")
    for tensor in (empty(shape, torch.int32, device), new_output(shape, torch.float16, device)):
        assert tensor.shape == tuple(shape)
        assert tensor.device == device
    assert empty(shape, torch.int32, device).dtype is torch.int32
    assert new_output(shape, torch.int64, device, fill=-1).eq(-1).all()


def test_the_value_check_gate_reads_spec_hal_debug_for_accelerators_only(monkeypatch):
    """Meta tensors hold no data: their gate is off without reading SPEC_HAL_DEBUG, so a meta call
    neither fails on a bad value of it nor keeps it before the user sets it. An accelerator's gate
    reads it once and then reads what was kept (a warm call enters no function of ``config``)."""
    from spec_hal import config, validation

    def asked():
        raise AssertionError("SPEC_HAL_DEBUG read")

    monkeypatch.setattr(config, "debug_read", None)
    monkeypatch.setattr(config, "debug", asked)
    assert validation.value_checks_enabled(torch.device("meta")) is False
    assert validation.value_checks_enabled(torch.device("cpu")) is True
    assert config.debug_read is None
    monkeypatch.setattr(config, "debug_read", True)  # as debug() keeps it once asked
    assert validation.value_checks_enabled(torch.device("cuda")) is True
    monkeypatch.setattr(config, "debug_read", False)
    assert validation.value_checks_enabled(torch.device("cuda")) is False
