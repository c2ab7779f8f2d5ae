"""Output comparison statistics and the torch operator guard of `ModelNew.forward`."""

import pytest
import torch

from leap_gym.evaluation.correctness import TorchOpError, TorchOpGuard, compare_outputs, inputs_modified


def test_matching_outputs_pass_within_tolerance():
    x = torch.randn(16, 16)
    assert compare_outputs(x, x + 1e-6, atol=1e-4, rtol=1e-4) is None
    assert compare_outputs((x, x), [x, x], atol=0, rtol=0) is None


def test_mismatch_statistics():
    expected = torch.zeros(4, 4)
    actual = expected.clone()
    actual[1, 2] = 3.0
    actual[3, 3] = -1.0
    m = compare_outputs(expected, actual, atol=1e-4, rtol=1e-4)
    assert m.first_index == [1, 2] and m.max_abs_error == 3.0 and m.fraction_mismatched == 2 / 16
    assert m.samples[0] == ([1, 2], 0.0, 3.0)


@pytest.mark.parametrize("actual,reason", [
    (torch.zeros(4, 5), "shape"), (torch.zeros(4, 4, dtype=torch.float64), "dtype"), (3.0, "should be a tensor"),
])
def test_shape_dtype_and_type_are_checked(actual, reason):
    assert reason in compare_outputs(torch.zeros(4, 4), actual, 1e-4, 1e-4).reason


def test_nan_where_a_number_is_expected_is_a_mismatch():
    actual = torch.zeros(3)
    actual[1] = float("nan")
    assert compare_outputs(torch.zeros(3), actual, 1e-4, 1e-4).first_index == [1]


def test_inputs_modified_in_place_are_found():
    a, b = torch.ones(3), torch.ones(3)
    assert inputs_modified([a, 2], [b, 2]) is None
    b[0] = 0
    assert inputs_modified([a], [b]) == 0


def test_guard_allows_allocation_and_views_but_not_compute():
    x = torch.randn(4, 4)
    with TorchOpGuard():
        y = torch.empty_like(x)
        z = x.view(16).reshape(2, 8).contiguous()
        torch.zeros(3)
        assert y.shape == x.shape and z.numel() == 16
    for op in (lambda: x + 1, lambda: torch.relu(x), lambda: x @ x, lambda: torch.nn.functional.softmax(x, -1)):
        with pytest.raises(TorchOpError, match="the computation must happen in your CUDA kernels"):
            with TorchOpGuard():
                op()
    with TorchOpGuard({"relu"}):
        torch.relu(x)
