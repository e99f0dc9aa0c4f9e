"""Shape checks of ``spec_hal.validation``: ``ANY_SIZE`` matches any size in one comparison, and a
mismatch is named with the argument, the expected shape and the dimension."""

from __future__ import annotations

import pytest
import torch

from spec_hal.validation import ANY_SIZE, check_index, check_output, check_tensor


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
