"""LEAP's pure functions against hand-computed tables: rank rewards, Kevin returns, advantages, DCP."""

import math

import pytest

from leap_agents import (
    DCPConfig,
    DifficultyTracker,
    dcp_decide,
    group_advantages,
    kevin_returns,
    rank_rewards,
    single_turn_rewards,
    solved_fraction,
)


@pytest.mark.parametrize("first_solved, expected", [
    # the table: G=8, two turn-1 solves, three turn-2 solves -> F(1) = 2/8
    ([1, 1, 2, 2, 2, None, None, None], [1, 1, .75, .75, .75, 0, 0, 0]),
    # most solved at once: a late solve earns little (F(1) = 7/8)
    ([1, 1, 1, 1, 1, 1, 1, 2], [1, 1, 1, 1, 1, 1, 1, .125]),
    # nobody solved at turn 1: a turn-2 solve earns full credit
    ([2, None, None, None], [1, 0, 0, 0]),
    # three turns: F(1) = 1/4, F(2) = 2/4
    ([1, 2, 3, None], [1, .75, .5, 0]),
    ([None, None], [0, 0]),
    ([], []),
])
def test_rank_rewards_table(first_solved, expected):
    assert rank_rewards(first_solved) == pytest.approx(expected)


def test_rank_rewards_is_one_minus_cdf():
    fs = [1, 3, 2, None, 2, 1, None, 4]
    for k, r in zip(fs, rank_rewards(fs)):
        assert r == (0.0 if k is None else pytest.approx(1 - solved_fraction(fs, k - 1)))


def test_rank_rewards_tie_break_by_speedup_stays_in_band():
    fs = [1, 1, 2, 2, 2, None, None, None]
    sp = [1.5, 3.0, 2.0, None, 2.0, None, None, None]
    r = rank_rewards(fs, sp, tie_break=True)
    # turn 1: 3.0x first (1.0), 1.5x second (1 - 1/8); turn 2 band (1 - 5/8, 1 - 2/8] = (.375, .75]:
    # the two 2.0x share the better rank (.75), the unknown speedup ranks last (1 - 4/8)
    assert r == pytest.approx([.875, 1.0, .75, .5, .75, 0, 0, 0])
    assert rank_rewards(fs, [None] * 8, tie_break=True) == rank_rewards(fs)  # no speedups: no change


def test_rank_rewards_errors():
    with pytest.raises(ValueError, match="1-based"):
        rank_rewards([0, 1])
    with pytest.raises(ValueError, match="needs speedups"):
        rank_rewards([1], tie_break=True)


def test_kevin_returns_and_single_turn():
    assert kevin_returns([0, 0, 1], gamma=0.4) == pytest.approx([0.16, 0.4, 1.0])
    assert kevin_returns([1, 1], gamma=0.4) == pytest.approx([1.4, 1.0])
    assert kevin_returns([]) == []
    assert single_turn_rewards([[1.0, 0.0], [0.0, 1.0], []]) == [1.0, 0.0, 0.0]


def test_group_advantages():
    a = group_advantages([1, 0, 0, 1])
    assert a == pytest.approx([1, -1, -1, 1], abs=1e-5)
    assert group_advantages([1, 0, 0, 1], normalize_std=False) == pytest.approx([.5, -.5, -.5, .5])
    assert group_advantages([0.3] * 4) == [0.0] * 4  # no signal in an all-equal group
    adv = group_advantages(rank_rewards([1, 1, 2, 2, 2, None, None, None]))
    assert sum(adv) == pytest.approx(0, abs=1e-9) and adv[0] > adv[2] > 0 > adv[5]


F, C, OK, W = 0, 1, 4, 3  # status ranks: format error, compile error, correct, wrong output


def reasons(decisions):
    return [d.reason for d in decisions]


def test_dcp_table():
    G = 4
    # easy: 2/4 solved at turn 1 with threshold .5 -> the unsolved stop too
    assert reasons(dcp_decide([1, 1, 0, 0], [OK, OK, W, C], 1, 4, 0.5)) == ["solved", "solved", "easy_group",
                                                                              "easy_group"]
    # in between: 1/4 solved -> the unsolved refine
    d = dcp_decide([1, 0, 0, 0], [OK, W, C, F], 1, 4, 0.5)
    assert reasons(d) == ["solved", "refine", "refine", "refine"]
    assert [x.continues for x in d] == [False, True, True, True]
    # hopeless: nothing passed, nothing compiled
    assert reasons(dcp_decide([0] * G, [F, C, C, F], 1, 4)) == ["hopeless_no_progress"] * G
    # nothing passed but something compiled (wrong output): refine
    assert reasons(dcp_decide([0] * G, [F, W, C, F], 1, 4)) == ["refine"] * G
    # turn 2: still nothing compiled, but a trajectory improved (format error -> compile error): refine
    assert reasons(dcp_decide([0] * G, [C, C, F, F], 2, 4, prev_best_progress=[F, C, F, F])) == ["refine"] * G
    no_progress = dcp_decide([0] * G, [C, C, F, F], 2, 4, prev_best_progress=[C, C, F, F])
    assert reasons(no_progress) == ["hopeless_no_progress"] * G
    # history: a task never solved over 3 epochs is hopeless even though it compiles
    never_solved = dcp_decide([0] * G, [W] * G, 1, 4, history_estimate=0.0, history_count=3)
    assert reasons(never_solved) == ["hopeless_history"] * G
    # ... but not with too little history, nor once the group solves something
    assert reasons(dcp_decide([0] * G, [W] * G, 1, 4, history_estimate=0.0, history_count=1)) == ["refine"] * G
    assert reasons(dcp_decide([1, 0, 0, 0], [OK, W, W, W], 1, 4, history_estimate=0.0, history_count=3))[1] == "refine"
    # budget spent
    assert reasons(dcp_decide([1, 0, 0, 0], [OK, W, W, W], 4, 4)) == ["solved", "max_turns", "max_turns", "max_turns"]
    # DCP off: full refinement, even of easy and hopeless groups
    assert reasons(dcp_decide([1, 1, 1, 0], [OK, OK, OK, F], 1, 4, enabled=False))[3] == "refine"
    assert reasons(dcp_decide([0] * G, [F] * G, 1, 4, enabled=False)) == ["refine"] * G


def test_dcp_threshold_edges_and_errors():
    # pass rate exactly at the threshold stops (>=); just below refines
    assert reasons(dcp_decide([1, 1, 1, 0, 0, 0, 0, 0], [OK] * 3 + [W] * 5, 1, 3, 0.375))[3] == "easy_group"
    assert reasons(dcp_decide([1, 1, 0, 0, 0, 0, 0, 0], [OK] * 2 + [W] * 6, 1, 3, 0.375))[3] == "refine"
    with pytest.raises(ValueError, match="best_progress"):
        dcp_decide([True], [], 1, 2)


def test_difficulty_tracker():
    t = DifficultyTracker(alpha=0.5)
    assert t.estimate("a") is None and t.count("a") == 0
    assert t.update("a", 1.0) == 1.0
    assert t.update("a", 0.0) == 0.5
    assert t.update("a", 0.0) == 0.25 and t.count("a") == 3
    u = DifficultyTracker()
    u.load_state_dict(t.state_dict())
    assert u.estimate("a") == 0.25 and u.count("a") == 3
    assert DCPConfig().easy_threshold == 0.5
    assert not math.isnan(t.estimate("a"))
