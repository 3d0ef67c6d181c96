"""The rating math of workers/comparison against worked examples: Bradley–Terry by Hunter's
MM algorithm, win matrices, win rates, seeded bootstrap intervals. Plain Python, no database."""

import math

import pytest

from workers.comparison import Outcome, bootstrap_ratings, bradley_terry, leaderboard, win_counts
from workers.comparison.ratings import bradley_terry_many, rating


def test_bradley_terry_reproduces_the_worked_example_of_the_wikipedia_article():
    # Wikipedia, "Bradley–Terry model", worked example: wins[i][j] = times i beat j, for
    # teams A, B, C, D; the iteration converges to p = (0.640, 1.043, 0.660, 2.270) with the
    # strengths normalised to a geometric mean of 1.
    wins = [[0, 2, 0, 1],
            [3, 0, 5, 0],
            [0, 3, 0, 1],
            [4, 0, 3, 0]]
    p = bradley_terry(wins)
    assert [round(x, 3) for x in p] == [0.640, 1.043, 0.660, 2.270]
    assert math.prod(p) == pytest.approx(1.0)


def test_win_counts_that_match_the_odds_exactly_give_back_the_true_strengths():
    # True strengths 4 : 2 : 1. Each pair's wins are exactly its games times p_i / (p_i + p_j),
    # so the likelihood equations hold at the true strengths: the MLE is (4, 2, 1) up to scale.
    wins = [[0, 4, 4],   # A beat B 4 of 6 (4/(4+2)), A beat C 4 of 5 (4/(4+1))
            [2, 0, 2],   # B beat A 2 of 6, B beat C 2 of 3 (2/(2+1))
            [1, 1, 0]]
    p = bradley_terry(wins)
    assert p == pytest.approx([2.0, 1.0, 0.5], rel=1e-6)  # (4, 2, 1) / geometric mean 2
    assert p[0] / (p[0] + p[1]) == pytest.approx(4 / 6)


def test_two_models_the_strength_ratio_is_the_ratio_of_wins():
    assert bradley_terry([[0, 3], [1, 0]]) == pytest.approx([math.sqrt(3), 1 / math.sqrt(3)])


def test_ties_and_both_bad_count_half_a_win_to_each_side():
    outcomes = [Outcome(0, 1, "a"), Outcome(0, 1, "tie"), Outcome(1, 0, "both_bad"), Outcome(1, 0, "a")]
    # model 0 wins 1 + 0.5 (tie) + 0.5 (both bad) = 2; model 1 wins 1 + 0.5 + 0.5 = 2
    assert win_counts(2, outcomes) == [[0.0, 2.0], [2.0, 0.0]]
    with pytest.raises(ValueError):
        win_counts(2, [Outcome(0, 1, "left")])


def test_a_model_that_never_won_needs_the_prior_to_have_a_finite_rating():
    wins = [[0, 5], [0, 0]]
    assert bradley_terry(wins)[1] == pytest.approx(0.0, abs=1e-3)
    with_prior = bradley_terry(wins, prior_ties=0.5)
    assert with_prior[1] > 0 and with_prior[0] / with_prior[1] == pytest.approx(5.25 / 0.25)
    assert rating(with_prior[1]) is not None and rating(0.0) is None


def test_a_model_without_games_keeps_the_neutral_strength():
    assert bradley_terry([[0, 2, 0], [1, 0, 0], [0, 0, 0]])[2] == 1.0


def test_a_stack_of_win_matrices_is_fitted_as_each_would_be_alone():
    # The bootstrap fits its rounds as one stack: each matrix must come out as its own fit,
    # the degenerate ones too (a model that never played, one that never won, nothing played).
    stack = [[[0, 2, 0, 1], [3, 0, 5, 0], [0, 3, 0, 1], [4, 0, 3, 0]],
             [[0, 5, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
             [[0, 1, 2, 0], [1, 0, 0, 0], [7, 0, 0, 0], [0, 0, 0, 0]],
             [[0] * 4 for _ in range(4)]]
    for prior in (0.0, 0.5):
        together = bradley_terry_many(stack, prior_ties=prior, tolerance=1e-12)
        for wins, fitted in zip(stack, together, strict=True):
            assert list(fitted) == pytest.approx(bradley_terry(wins, prior_ties=prior, tolerance=1e-12),
                                                 rel=1e-6, abs=1e-6)


def test_the_leaderboard_ranks_by_rating_with_win_rates_matrix_and_counts():
    outcomes = ([Outcome(0, 1, "a")] * 6 + [Outcome(0, 1, "b")] * 2 + [Outcome(1, 2, "a")] * 5
                + [Outcome(2, 0, "tie")] * 2 + [Outcome(0, 2, "both_bad")])
    board = leaderboard(3, outcomes, rounds=50, seed=1)
    assert [s.index for s in board.standings] == [0, 1, 2]
    assert [s.rank for s in board.standings] == [1, 2, 3]
    first = board.standings[0]
    assert (first.votes, first.wins, first.losses, first.ties, first.both_bad) == (11, 6, 2, 2, 1)
    assert first.win_rate == pytest.approx((6 + 1.5) / 11)
    assert board.win_matrix[0][1] == pytest.approx(6 / 8) and board.win_matrix[1][0] == pytest.approx(2 / 8)
    assert board.win_matrix[1][2] == 1.0 and board.win_matrix[0][0] is None
    assert board.games[0][1] == 8 and board.total_votes == len(outcomes)
    for s in board.standings:
        low, high = s.ci
        assert low <= s.rating <= high


def test_bootstrap_intervals_are_seeded_and_narrow_with_more_votes():
    few = [Outcome(0, 1, "a")] * 6 + [Outcome(0, 1, "b")] * 4
    many = few * 20
    assert bootstrap_ratings(2, few, rounds=100, seed=3) == bootstrap_ratings(2, few, rounds=100, seed=3)
    varied = few + [Outcome(1, 2, "tie"), Outcome(0, 2, "a"), Outcome(2, 0, "a")] * 5 + [Outcome(2, 1, "b")] * 3
    assert bootstrap_ratings(3, varied, rounds=100, seed=3) != bootstrap_ratings(3, varied, rounds=100, seed=4)
    def width(ci):
        return ci[1] - ci[0]

    assert width(bootstrap_ratings(2, many, rounds=100, seed=3)[0]) < width(bootstrap_ratings(2, few, rounds=100,
                                                                                               seed=3)[0]) / 2
    assert bootstrap_ratings(3, few, rounds=10)[2] is None  # never voted on
    assert bootstrap_ratings(2, [], rounds=10) == [None, None]


def test_the_bootstrap_by_vote_kind_matches_resampling_each_vote():
    """One multinomial draw over (pair, result) kinds is the same distribution as resampling
    the votes one by one: the intervals agree within what 2,000 rounds can tell apart."""
    import numpy as np

    from workers.comparison.ratings import DEFAULT_PRIOR_TIES, rating

    votes = ([Outcome(0, 1, "a")] * 60 + [Outcome(0, 1, "b")] * 40 + [Outcome(1, 2, "tie")] * 20
             + [Outcome(2, 0, "a")] * 30 + [Outcome(0, 2, "both_bad")] * 10)
    ours = bootstrap_ratings(3, votes, rounds=2000, seed=1)
    rng = np.random.default_rng(7)
    per_vote = [[], [], []]
    for _ in range(2000):
        wins = [[0.0] * 3 for _ in range(3)]
        for k in rng.integers(0, len(votes), size=len(votes)):
            vote = votes[k]
            share = {"a": 1.0, "b": 0.0}.get(vote.result, 0.5)
            wins[vote.a][vote.b] += share
            wins[vote.b][vote.a] += 1 - share
        for i, strength in enumerate(bradley_terry(wins, prior_ties=DEFAULT_PRIOR_TIES, tolerance=1e-8)):
            per_vote[i].append(rating(strength))
    for i in range(3):
        low, high = np.quantile(per_vote[i], 0.025), np.quantile(per_vote[i], 0.975)
        assert abs(ours[i][0] - low) < 8 and abs(ours[i][1] - high) < 8, (i, ours[i], low, high)


def test_a_leaderboard_without_votes_has_no_ratings():
    board = leaderboard(2, [], rounds=10)
    assert [s.rating for s in board.standings] == [None, None]
    assert [s.win_rate for s in board.standings] == [None, None]


def test_counted_outcomes_are_the_same_leaderboard_as_one_outcome_a_vote():
    one_by_one = [Outcome(0, 1, "a")] * 5 + [Outcome(0, 1, "b")] * 2 + [Outcome(1, 2, "tie")] * 3 + [
        Outcome(2, 0, "both_bad")] * 4
    counted = [Outcome(0, 1, "a", 5), Outcome(0, 1, "b", 2), Outcome(1, 2, "tie", 3), Outcome(2, 0, "both_bad", 4)]
    assert leaderboard(3, counted, rounds=50, seed=2) == leaderboard(3, one_by_one, rounds=50, seed=2)
    assert leaderboard(3, counted, rounds=50, seed=2).total_votes == 14
