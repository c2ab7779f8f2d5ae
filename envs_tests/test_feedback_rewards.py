"""Feedback rendering (status first, facts, token budget) and the per-turn reward functions."""

import pytest

from leap_gym.evaluation.feedback import estimate_tokens, render_feedback
from leap_gym.evaluation.rewards import binary_reward, get_reward_fn, speedup_reward, tiered_reward
from leap_gym.result import Diagnostic, EvalResult, KernelResources, Mismatch, Timing


def correct(speedup=None):
    timing = Timing(1.0, 0.01, speedup, 0.01, 20) if speedup else None
    return EvalResult("CORRECT", message="ok", timing=timing, backend="cuda",
                      resources={"k": KernelResources(registers=32, shared_mem_bytes=1024, theoretical_occupancy=0.5)})


def test_compile_error_feedback_quotes_the_line():
    result = EvalResult("COMPILE_ERROR", message="NVRTC error (line 3): expected a \";\"",
                        diagnostics=[Diagnostic("error", 'expected a ";"', 3, None, "    int i = 0")])
    text = render_feedback(result, 1, 4)
    assert text.startswith("COMPILE_ERROR") and "line 3" in text and "3 |     int i = 0" in text
    assert "3 turns left" in text


def test_wrong_output_feedback_has_statistics():
    mismatch = Mismatch(0, [4, 4], [4, 4], "float32", "float32", max_abs_error=2.5, max_rel_error=1.0,
                        first_index=[0, 3], fraction_mismatched=0.25, samples=[([0, 3], 1.0, 3.5)])
    result = EvalResult("WRONG_OUTPUT", message="output 0: 4 of 16 values differ", mismatch=mismatch)
    text = render_feedback(result, 2, 4)
    for fact in ("max abs error 2.5", "25.00%", "[0, 3]", "expected 1, got 3.5"):
        assert fact in text


def test_correct_feedback_has_time_speedup_and_resources():
    text = render_feedback(correct(speedup=2.0), 1, 1)
    assert "speedup 2.00x" in text and "32 registers" in text and "occupancy 50%" in text and "no turns left" in text


def test_feedback_respects_the_token_budget():
    result = EvalResult("RUNTIME_ERROR", message="boom", errors=[f"line {i}: something bad" for i in range(2000)],
                        device_output="x" * 50_000)
    text = render_feedback(result, 1, 4, token_budget=256)
    assert estimate_tokens(text) <= 256 + 20
    assert text.startswith("RUNTIME_ERROR: boom") and "more lines" in text and "3 turns left" in text


@pytest.mark.parametrize("status,binary,tiered", [("FORMAT_ERROR", 0, 0), ("COMPILE_ERROR", 0, 0.05),
                                                  ("RUNTIME_ERROR", 0, 0.1), ("WRONG_OUTPUT", 0, 0.2),
                                                  ("CORRECT", 1, 1.0)])
def test_rewards_by_status(status, binary, tiered):
    result = EvalResult(status)
    assert binary_reward(result) == binary and tiered_reward(result) == pytest.approx(tiered)


def test_speedup_reward_shape():
    assert speedup_reward(correct()) == 1.0  # backends without timing
    assert speedup_reward(correct(speedup=1.0)) == pytest.approx(1.0)
    assert speedup_reward(correct(speedup=4.0)) == pytest.approx(3.0)
    assert speedup_reward(correct(speedup=0.01)) == pytest.approx(0.1)
    assert speedup_reward(EvalResult("WRONG_OUTPUT")) == 0.0
    assert tiered_reward(correct(speedup=4.0)) == pytest.approx(1.5)
    assert get_reward_fn("speedup") is speedup_reward
    with pytest.raises(ValueError, match="binary"):
        get_reward_fn("nope")


def test_eval_result_round_trips_through_dict():
    result = correct(speedup=2.0)
    result.mismatch = Mismatch(0, [1], [1], "float32", "float32", samples=[([0], 1.0, 2.0)])
    back = EvalResult.from_dict(result.to_dict())
    assert back == result and back.speedup == 2.0
