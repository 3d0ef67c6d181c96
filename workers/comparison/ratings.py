"""Ratings from pairwise votes: win counts, win rates, the pairwise win matrix, Bradley–Terry
strengths (Hunter's MM algorithm) and seeded bootstrap confidence intervals.

Plain Python and numpy (imported when used), no Django. A vote is an `Outcome(a, b, result)` between models named
by index; `result` is "a" (a won), "b" (b won), "tie" or "both_bad"; `count` votes alike (the
database groups them, so a leaderboard costs the kinds of vote, not the votes).

How ties count: a tie is half a win for each side (the usual Bradley–Terry treatment of
ties, as in Chatbot Arena). "Both bad" says the two are equally bad, which is a tie as far as
their relative strength goes, so it is counted as a tie in the ratings and the win rates; its
own count is still reported, so a pair people mostly reject is visible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

RESULTS = ("a", "b", "tie", "both_bad")

# Elo-like display scale for strengths (as Chatbot Arena reports): 1000 + 400 * log10(p),
# so a 400-point gap is 10:1 odds of winning.
RATING_BASE = 1000.0
RATING_SCALE = 400.0
MM_MAX_ITERATIONS = 10_000
MM_TOLERANCE = 1e-10
# Pseudo-ties added between every two models that met, only for the leaderboard's ratings:
# without them a model that never won has strength 0 (rating -inf) and the MM iteration does
# not converge. 0.5 of a game moves a rating of a well-sampled model by a few points only.
DEFAULT_PRIOR_TIES = 0.5


@dataclass(frozen=True)
class Outcome:
    a: int
    b: int
    result: str
    count: int = 1  # this many votes with this pair and result


def win_counts(n: int, outcomes: Sequence[Outcome]) -> list[list[float]]:
    """wins[i][j]: how many times i beat j, a tie or both-bad counting half a win to each."""
    wins = [[0.0] * n for _ in range(n)]
    for o in outcomes:
        if o.a == o.b:
            continue
        if o.result == "a":
            wins[o.a][o.b] += o.count
        elif o.result == "b":
            wins[o.b][o.a] += o.count
        elif o.result in ("tie", "both_bad"):
            wins[o.a][o.b] += 0.5 * o.count
            wins[o.b][o.a] += 0.5 * o.count
        else:
            raise ValueError(f"unknown vote result {o.result!r}")
    return wins


def bradley_terry(wins: Sequence[Sequence[float]], *, prior_ties: float = 0.0,
                  max_iterations: int = MM_MAX_ITERATIONS, tolerance: float = MM_TOLERANCE) -> list[float]:
    """Maximum-likelihood Bradley–Terry strengths p (P(i beats j) = p_i / (p_i + p_j)) from a
    win matrix, by the minorisation–maximisation update of Hunter (2004):

        p_i <- W_i / sum_{j != i} n_ij / (p_i + p_j)

    where W_i is i's total wins and n_ij the games between i and j; then rescaled so that the
    geometric mean of the strengths is 1. `prior_ties` adds that many ties to every pair that
    played. A model that played no game gets strength 1 (no information); one with games but no
    win (and no prior) gets 0.
    """
    import numpy as np

    n = len(wins)
    fitted = bradley_terry_many(np.array(wins, dtype=float).reshape(1, n, n), prior_ties=prior_ties,
                                max_iterations=max_iterations, tolerance=tolerance)
    return [float(x) for x in fitted[0]]


def bradley_terry_many(wins, *, prior_ties: float = 0.0, max_iterations: int = MM_MAX_ITERATIONS,
                       tolerance: float = MM_TOLERANCE):
    """`bradley_terry` of a stack of win matrices (an array r x n x n) at once, r x n strengths:
    one MM update moves every matrix, until the slowest has converged. A bootstrap's refits
    cost one fit's numpy calls instead of one per round."""
    import numpy as np

    w = np.array(wins, dtype=float)
    diagonal = np.arange(w.shape[1])
    w[:, diagonal, diagonal] = 0.0
    games = w + w.transpose(0, 2, 1)
    if prior_ties:
        w = w + np.where(games > 0, prior_ties / 2, 0.0)
        games = w + w.transpose(0, 2, 1)
    total_wins = w.sum(axis=2)
    played = games.sum(axis=2) > 0
    p = np.ones(w.shape[:2])
    for _ in range(max_iterations):
        with np.errstate(divide="ignore", invalid="ignore"):  # 0 / 0 where two never-winning models never met
            denominator = np.where(games > 0, games / (p[:, :, None] + p[:, None, :]), 0.0).sum(axis=2)
        new = np.where(played & (denominator > 0), total_wins / np.where(denominator > 0, denominator, 1.0), p)
        new = _normalise(new, played)
        change = float(np.max(np.abs(new - p))) if p.size else 0.0
        p = new
        if change < tolerance:
            break
    return p


def _normalise(p, played):
    """Each row rescaled so that the geometric mean of its played, positive strengths is 1 (rows
    with none are left as they are); unplayed models get 1."""
    import numpy as np

    positive = played & (p > 0)
    with np.errstate(divide="ignore"):
        logs = np.where(positive, np.log(np.where(positive, p, 1.0)), 0.0)
    counts = positive.sum(axis=1, keepdims=True)
    scale = np.exp(logs.sum(axis=1, keepdims=True) / np.maximum(counts, 1))
    return np.where(played, p / np.where(counts > 0, scale, 1.0), 1.0)


def rating(strength: float) -> float | None:
    """The Elo-like display value of a strength; None for a strength of 0."""
    return RATING_BASE + RATING_SCALE * math.log10(strength) if strength > 0 else None


def bootstrap_ratings(n: int, outcomes: Sequence[Outcome], *, rounds: int = 200, seed: int = 0,
                      prior_ties: float = DEFAULT_PRIOR_TIES, level: float = 0.95) -> list[tuple[float, float] | None]:
    """Percentile bootstrap interval of each model's rating: resample the votes with
    replacement `rounds` times (seeded: the same votes and seed give the same intervals),
    refit, and take the (1-level)/2 and (1+level)/2 quantiles. None for a model without votes.

    Votes with the same pair and result are interchangeable, so a resample is one multinomial
    draw over the distinct (a, b, result) kinds (at most 3 n^2) weighted by their counts: the
    same distribution as drawing each vote, at a cost that does not grow with the votes."""
    import numpy as np

    if not outcomes:
        return [None] * n
    if any(o.result not in RESULTS for o in outcomes):
        raise ValueError("unknown vote result")
    kinds: dict[tuple[int, int, float], int] = {}
    for o in outcomes:
        if o.a != o.b:
            key = (o.a, o.b, {"a": 1.0, "b": 0.0}.get(o.result, 0.5))  # a's share of the win
            kinds[key] = kinds.get(key, 0) + o.count
    a = np.array([k[0] for k in kinds], dtype=int)
    b = np.array([k[1] for k in kinds], dtype=int)
    credit = np.array([k[2] for k in kinds])
    counts = np.array(list(kinds.values()), dtype=float)
    m = int(counts.sum())
    rng = np.random.default_rng(seed)
    samples: list[list[float]] = [[] for _ in range(n)]
    if m and rounds:
        drawn = rng.multinomial(m, counts / m, size=rounds)  # rounds x kinds
        wins = np.zeros((rounds, n, n))
        np.add.at(wins, (slice(None), a, b), drawn * credit)
        np.add.at(wins, (slice(None), b, a), drawn * (1.0 - credit))
        for strengths in bradley_terry_many(wins, prior_ties=prior_ties, tolerance=1e-8):
            for i, s in enumerate(strengths):
                value = rating(float(s))
                if value is not None:
                    samples[i].append(value)
    seen = {o.a for o in outcomes} | {o.b for o in outcomes}
    low, high = (1 - level) / 2, (1 + level) / 2
    return [(float(np.quantile(samples[i], low)), float(np.quantile(samples[i], high)))
            if i in seen and samples[i] else None for i in range(n)]


@dataclass
class Standing:
    """One model's line of a leaderboard (by index into the models given)."""

    index: int
    votes: int = 0  # votes this model took part in
    wins: int = 0
    losses: int = 0
    ties: int = 0
    both_bad: int = 0
    win_rate: float | None = None  # (wins + ties/2 + both_bad/2) / votes
    strength: float = 1.0
    rating: float | None = None
    ci: tuple[float, float] | None = None
    rank: int = 0


@dataclass
class Leaderboard:
    standings: list[Standing]  # best first
    win_matrix: list[list[float]]  # [i][j]: share of i-vs-j votes i won (ties half), None on the diagonal / unplayed
    games: list[list[int]] = field(default_factory=list)  # [i][j]: votes between i and j
    total_votes: int = 0


def leaderboard(n: int, outcomes: Sequence[Outcome], *, rounds: int = 200, seed: int = 0,
                prior_ties: float = DEFAULT_PRIOR_TIES) -> Leaderboard:
    """Everything a leaderboard shows, for n models and their votes."""
    wins = win_counts(n, outcomes)
    strengths = bradley_terry(wins, prior_ties=prior_ties)
    intervals = bootstrap_ratings(n, outcomes, rounds=rounds, seed=seed, prior_ties=prior_ties)
    standings = [Standing(index=i, strength=strengths[i], rating=rating(strengths[i]), ci=intervals[i])
                 for i in range(n)]
    games = [[0] * n for _ in range(n)]
    for o in outcomes:
        if o.a == o.b:
            continue
        games[o.a][o.b] += o.count
        games[o.b][o.a] += o.count
        first, second = standings[o.a], standings[o.b]
        first.votes += o.count
        second.votes += o.count
        if o.result == "a":
            first.wins += o.count
            second.losses += o.count
        elif o.result == "b":
            second.wins += o.count
            first.losses += o.count
        elif o.result == "tie":
            first.ties += o.count
            second.ties += o.count
        else:
            first.both_bad += o.count
            second.both_bad += o.count
    for s in standings:
        if s.votes:
            s.win_rate = (s.wins + (s.ties + s.both_bad) / 2) / s.votes
        else:
            s.rating, s.strength = None, 1.0
    matrix = [[wins[i][j] / games[i][j] if i != j and games[i][j] else None for j in range(n)] for i in range(n)]
    ordered = sorted(standings, key=lambda s: (s.rating is None, -(s.rating or 0.0), s.index))
    for rank, s in enumerate(ordered, start=1):
        s.rank = rank
    return Leaderboard(standings=ordered, win_matrix=matrix, games=games, total_votes=sum(o.count for o in outcomes))
