"""Figures made from a run's verdicts: pointwise scores per model, pairwise outcomes with their
position consistency and verbosity, Cohen's kappa for agreement with votes, and people's
pointwise ratings against the judge's scores (rank correlations from scipy). No Django.

Pairwise terms: each pair of a prompt has a `first` and a `second` response (a fixed order,
the comparison's columns). The judge saw them twice, first as A then swapped; its answer in each
order is mapped back to first/second/tie. Both orders agreeing is a consistent verdict; two
different verdicts are `inconsistent`: the judge has no preference there beyond position, which
agreement figures read as a tie.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import combinations

from .rubric import SCALE_1_5, Rubric


def pointwise_summary(rubric: Rubric, rows: Iterable[tuple[int, dict | None]]) -> dict:
    """rows: (column, answer or None when unparseable). Per column: items judged, unparseable,
    and per criterion the mean score (1-5) or the pass rate (pass/fail) over the judged ones."""
    by_column: dict[int, dict] = {}
    for column, answer in rows:
        entry = by_column.setdefault(column, {"judged": 0, "unparseable": 0, "_values": {}})
        if answer is None:
            entry["unparseable"] += 1
            continue
        entry["judged"] += 1
        for c in rubric.criteria:
            score = answer[c.name]["score"]
            entry["_values"].setdefault(c.name, []).append(int(score) if c.scale == SCALE_1_5 else score == "pass")
    columns = {}
    for column, entry in sorted(by_column.items()):
        criteria = {}
        for c in rubric.criteria:
            values = entry["_values"].get(c.name, [])
            key = "mean" if c.scale == SCALE_1_5 else "pass_rate"
            criteria[c.name] = {key: round(sum(values) / len(values), 4) if values else None, "n": len(values)}
        columns[column] = {"judged": entry["judged"], "unparseable": entry["unparseable"], "criteria": criteria}
    return {"columns": columns, "unparseable": sum(c["unparseable"] for c in columns.values())}


def canonical(winner: str | None, swapped: bool) -> str | None:
    """A judge's A/B/tie in the order shown → first/second/tie (None stays None)."""
    if winner is None:
        return None
    if winner == "tie":
        return "tie"
    return "first" if (winner == "A") != swapped else "second"


def pair_outcome(in_order: str | None, swapped: str | None) -> str | None:
    """The verdict on a pair from its two answers (A/B/tie as shown, None: unparseable): first,
    second, tie, inconsistent, or None when either answer could not be read."""
    a, b = canonical(in_order, False), canonical(swapped, True)
    if a is None or b is None:
        return None
    return a if a == b else "inconsistent"


def pairwise_summary(pairs: Sequence[dict]) -> dict:
    """pairs: {"first": column, "second": column, "in_order": A/B/tie/None, "swapped": A/B/tie/None,
    "first_len": chars, "second_len": chars}. Returns the counts per matchup, position consistency
    (consistent / pairs with both answers read), the share of decisive answers that picked A, and
    verbosity: of the consistent decisive verdicts between responses of different lengths, how
    many went to the longer one, and the mean length difference (winner − loser, characters)."""
    matchups: dict[tuple[int, int], Counter] = {}
    judged = consistent = unparseable_answers = picked_a = decisive_answers = 0
    diffs: list[int] = []
    longer_won = with_length_difference = 0
    for pair in pairs:
        for answer in (pair["in_order"], pair["swapped"]):
            if answer is None:
                unparseable_answers += 1
            elif answer != "tie":
                decisive_answers += 1
                picked_a += answer == "A"
        outcome = pair_outcome(pair["in_order"], pair["swapped"])
        counts = matchups.setdefault((pair["first"], pair["second"]), Counter())
        counts[outcome or "unparseable"] += 1
        if outcome is None:
            continue
        judged += 1
        consistent += outcome != "inconsistent"
        if outcome in ("first", "second"):
            won, lost = ((pair["first_len"], pair["second_len"]) if outcome == "first"
                         else (pair["second_len"], pair["first_len"]))
            diffs.append(won - lost)
            if won != lost:
                with_length_difference += 1
                longer_won += won > lost
    return {
        "pairs": len(pairs), "judged": judged, "unparseable_answers": unparseable_answers,
        "position_consistency": round(consistent / judged, 4) if judged else None, "consistent": consistent,
        "a_rate": round(picked_a / decisive_answers, 4) if decisive_answers else None,
        "matchups": [{"first": first, "second": second, "first_wins": counts["first"], "second_wins": counts["second"],
                      "ties": counts["tie"], "inconsistent": counts["inconsistent"], "unparseable": counts["unparseable"]}
                     for (first, second), counts in sorted(matchups.items())],
        "verbosity": {"decisive": len(diffs), "with_length_difference": with_length_difference,
                      "longer_won": longer_won,
                      "longer_won_rate": round(longer_won / with_length_difference, 4) if with_length_difference else None,
                      "mean_length_difference": round(sum(diffs) / len(diffs), 2) if diffs else None},
    }


def win_rate(matchups: Sequence[dict]) -> float | None:
    """The first side's share of the wins over the judged pairs of pairwise_summary's matchups: a
    win 1, a tie or an inconsistent pair (the two orders disagree) 0.5, a loss 0; pairs with an
    unreadable answer left out. None when no pair was judged."""
    won = sum(m["first_wins"] + 0.5 * (m["ties"] + m["inconsistent"]) for m in matchups)
    judged = sum(m["first_wins"] + m["second_wins"] + m["ties"] + m["inconsistent"] for m in matchups)
    return round(won / judged, 4) if judged else None


def cohen_kappa(pairs: Sequence[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters over the same items, (rater 1's label, rater 2's label) each:
    (p_observed − p_expected) / (1 − p_expected). None when there are no items, or when chance
    agreement is already certain (both raters used one same label throughout: undefined)."""
    n = len(pairs)
    if not n:
        return None
    observed = sum(a == b for a, b in pairs) / n
    left, right = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    expected = sum(left[label] * right[label] for label in left) / (n * n)
    if expected >= 1:
        return None
    return round((observed - expected) / (1 - expected), 4)


BOOTSTRAP_RESAMPLES = 200  # as the leaderboard's intervals (workers/comparison/ratings.py)


def bootstrap_interval(items: Sequence, statistic: Callable[[Sequence], float | None], *,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float] | None:
    """A percentile bootstrap interval of `statistic` over `items`: the items resampled with
    replacement `resamples` times (fixed seed: the same items give the same interval). Resamples
    where the statistic is undefined (None) are left out; None when fewer than two items or no
    resample is defined."""
    import random

    if len(items) < 2:
        return None
    rng = random.Random(seed)
    values = sorted(v for v in (statistic([items[rng.randrange(len(items))] for _ in items])
                                for _ in range(resamples)) if v is not None)
    return _percentile_interval(values, level)


def _percentile_interval(values: Sequence[float], level: float) -> tuple[float, float] | None:
    """The percentile interval of sorted resample values (None without any)."""
    if not len(values):
        return None
    tail = (1 - level) / 2
    low = values[int(tail * (len(values) - 1))]
    high = values[int(round((1 - tail) * (len(values) - 1)))]
    return round(float(low), 4), round(float(high), 4)


def kappa_interval(pairs: Sequence[tuple[str, str]], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                   level: float = 0.95) -> tuple[float, float] | None:
    """A percentile bootstrap interval of Cohen's kappa over the items (bootstrap_interval)."""
    return bootstrap_interval(pairs, cohen_kappa, resamples=resamples, seed=seed, level=level)


def confusion(pairs: Sequence[tuple[str, str]], labels: Sequence[str]) -> dict[str, dict[str, int]]:
    """Counts of (rater 1's label, rater 2's label): {label of rater 1: {label of rater 2: n}},
    every label of `labels` present on both sides (zeros included)."""
    table = {a: dict.fromkeys(labels, 0) for a in labels}
    for a, b in pairs:
        table[a][b] += 1
    return table


def point_score(rubric: Rubric, answer: dict) -> float:
    """One number for a pointwise answer, to compare two responses by: the mean over the criteria
    of each score put on 0..1 (1-5: (score − 1) / 4; pass/fail: 1 or 0)."""
    values = [(int(answer[c.name]["score"]) - 1) / 4 if c.scale == SCALE_1_5 else float(answer[c.name]["score"] == "pass")
              for c in rubric.criteria]
    return sum(values) / len(values)


def implied_preference(first: float, second: float) -> str:
    """A pointwise judge's preference between two responses from their point_score: the higher
    one, or tie when equal."""
    if first == second:
        return "tie"
    return "first" if first > second else "second"


def calibration(figures: Sequence[dict], *, min_items: int) -> dict:
    """Whether a judge's agreement with people is enough to rely on it. figures: each
    {"label": "kappa", "items_label": "items judged and voted on", "value": float | None,
    "items": n, "threshold": t}. Calibrated when at least one figure has `min_items` items and
    every figure that has them reaches its threshold; `reason` says what is short."""
    counted = [f for f in figures if f["items"] >= min_items]
    if not counted:
        return {"calibrated": False, "reason": "; ".join(f"{f['items']} {f['items_label']}" for f in figures)
                + f"; the project asks for at least {min_items}"}
    short = [f"{f['label']} is undefined on these items" if f["value"] is None else
             f"{f['label']} {f['value']} is below the project's threshold {f['threshold']}"
             for f in counted if f["value"] is None or f["value"] < f["threshold"]]
    return {"calibrated": not short, "reason": "; ".join(short)}


# --- people's pointwise ratings beside the judge's scores -----------------------------------------

PASS = "pass"  # the positive label of a pass/fail criterion (TPR, TNR)


def _numbers(items: Sequence[tuple]) -> tuple[list[float], list[float]] | None:
    """The two sides of (x, y) items, or None when a correlation is undefined on them (fewer than
    two items, or a side that never varies)."""
    if len(items) < 2:
        return None
    xs, ys = [float(x) for x, _ in items], [float(y) for _, y in items]
    return None if len(set(xs)) < 2 or len(set(ys)) < 2 else (xs, ys)


def spearman(items: Sequence[tuple[float, float]]) -> float | None:
    """Spearman's rho of (x, y) items (scipy.stats.spearmanr: tied values share their mean rank);
    None where undefined (see _numbers)."""
    from scipy.stats import spearmanr

    sides = _numbers(items)
    return None if sides is None else round(float(spearmanr(*sides).statistic), 4)


def kendall(items: Sequence[tuple[float, float]]) -> float | None:
    """Kendall's tau-b of (x, y) items (scipy.stats.kendalltau, corrected for ties: a 1-5 scale has
    many); None where undefined (see _numbers)."""
    from scipy.stats import kendalltau

    sides = _numbers(items)
    return None if sides is None else round(float(kendalltau(*sides).statistic), 4)


def mean_absolute_error(items: Sequence[tuple[float, float]]) -> float | None:
    """The mean of |x − y| over the items (scale points); None without items."""
    return round(sum(abs(x - y) for x, y in items) / len(items), 4) if items else None


def true_positive_rate(items: Sequence[tuple[str, str]]) -> float | None:
    """Of the items the reference (the first of each) marks pass, the share the other marks pass
    too; None when the reference never passes."""
    passed = [other for reference, other in items if reference == PASS]
    return round(sum(other == PASS for other in passed) / len(passed), 4) if passed else None


def true_negative_rate(items: Sequence[tuple[str, str]]) -> float | None:
    """Of the items the reference marks fail, the share the other marks fail too; None when the
    reference never fails."""
    failed = [other for reference, other in items if reference != PASS]
    return round(sum(other != PASS for other in failed) / len(failed), 4) if failed else None


def scale_statistics(xs, ys) -> tuple:
    """Spearman's rho, Kendall's tau-b and the MAE of each row of two (samples × items) arrays of
    1-5 scores at once (NaN where a row's side is constant): rho is scipy's Pearson of the average
    ranks, row by row (what spearmanr computes); tau-b is counted from each row's 5×5 table of
    (x, y) scores. Bootstrap intervals need 200 resamples per figure, and a scipy call per resample
    costs about a millisecond, which made one judge's table take seconds (scipy's own functions
    give the point values; tests hold the two to the same numbers)."""
    import warnings

    import numpy as np
    from scipy.stats import pearsonr, rankdata

    xs, ys = np.asarray(xs, dtype=np.int64), np.asarray(ys, dtype=np.int64)
    rows, n = xs.shape
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")  # a constant row: its rho is NaN, left out like an undefined one
        rho = pearsonr(rankdata(xs, axis=1), rankdata(ys, axis=1), axis=1).statistic
        cells = (xs - 1) * SCALE_POINTS + (ys - 1) + SCALE_POINTS * SCALE_POINTS * np.arange(rows)[:, None]
        table = np.bincount(cells.ravel(), minlength=rows * SCALE_POINTS ** 2).reshape(
            rows, SCALE_POINTS, SCALE_POINTS).astype(float)
        # Pairs above and to the right of a cell (both higher: concordant), above and to the left (discordant).
        from_here = table[:, ::-1, ::-1].cumsum(1).cumsum(2)[:, ::-1, ::-1]
        higher = np.zeros_like(table)
        higher[:, :-1, :-1] = from_here[:, 1:, 1:]
        left = table[:, ::-1, :].cumsum(1)[:, ::-1, :].cumsum(2)
        crossed = np.zeros_like(table)
        crossed[:, :-1, 1:] = left[:, 1:, :-1]
        concordant, discordant = (table * higher).sum((1, 2)), (table * crossed).sum((1, 2))
        pairs = n * (n - 1) / 2
        x_ties = (table.sum(2) * (table.sum(2) - 1) / 2).sum(1)
        y_ties = (table.sum(1) * (table.sum(1) - 1) / 2).sum(1)
        tau = (concordant - discordant) / np.sqrt((pairs - x_ties) * (pairs - y_ties))
    mae = np.abs(xs - ys).mean(1)
    return rho, np.where(np.isfinite(tau), tau, np.nan), mae


def pass_fail_statistics(xs, ys) -> tuple:
    """Cohen's kappa, TPR and TNR (the first side the reference) of each row of two (samples ×
    items) boolean arrays (True: pass) at once, from each row's 2×2 table; NaN where undefined."""
    import numpy as np

    xs, ys = np.asarray(xs, dtype=bool), np.asarray(ys, dtype=bool)
    n = xs.shape[1]
    both, x_only = (xs & ys).sum(1), (xs & ~ys).sum(1)
    y_only, neither = (~xs & ys).sum(1), (~xs & ~ys).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = (both + neither) / n
        expected = ((both + x_only) * (both + y_only) + (y_only + neither) * (x_only + neither)) / (n * n)
        kappa = np.where(expected < 1, (observed - expected) / (1 - expected), np.nan)
        tpr = np.where(both + x_only > 0, both / (both + x_only), np.nan)
        tnr = np.where(y_only + neither > 0, neither / (y_only + neither), np.nan)
    return kappa, tpr, tnr


def _intervals(scale: str, items: Sequence[tuple], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
               level: float = 0.95) -> dict:
    """Percentile bootstrap intervals of a criterion's figures over the items (as
    bootstrap_interval: resamples with replacement, a fixed seed, undefined ones left out), every
    figure over the same resamples, drawn and computed at once."""
    import numpy as np

    scaled = scale == SCALE_1_5
    names = SCALE_FIGURES if scaled else PASS_FAIL_FIGURES
    if len(items) < 2:
        return dict.fromkeys(names)
    values = np.asarray(items, dtype=np.int64) if scaled else np.asarray(items) == PASS
    draw = np.random.default_rng(seed).integers(0, len(items), size=(resamples, len(items)))
    figures = (scale_statistics if scaled else pass_fail_statistics)(values[:, 0][draw], values[:, 1][draw])
    intervals = {}
    for name, resampled in zip(names, figures, strict=True):
        interval = _percentile_interval(np.sort(resampled[~np.isnan(resampled)]), level)
        intervals[name] = list(interval) if interval else None
    return intervals


SCALE_POINTS = 5  # a 1-5 criterion's scores
SCALE_FIGURES = {"rho": spearman, "tau": kendall, "mae": mean_absolute_error}
PASS_FAIL_FIGURES = {"kappa": cohen_kappa, "tpr": true_positive_rate, "tnr": true_negative_rate}


def score_agreement(scale: str, items: Sequence[tuple]) -> dict:
    """The figures of one criterion over (reference score, other score) items, each with its 95%
    bootstrap interval (`<figure>_ci`) and the number of items: rho, tau and MAE on a 1-5 scale;
    kappa, TPR and TNR (pass positive, the first of each item the reference) on pass/fail."""
    figures = {"items": len(items)}
    intervals = _intervals(scale, items)
    for name, statistic in (SCALE_FIGURES if scale == SCALE_1_5 else PASS_FAIL_FIGURES).items():
        figures[name], figures[f"{name}_ci"] = statistic(items), intervals[name]
    return figures


def rating_agreement(rubric: Rubric, judged: dict, rated: dict) -> list[dict]:
    """Per criterion, the judge's scores against people's ratings of the same outputs, beside the
    people against each other. judged: output → the judge's answer; rated: output → [(rater,
    answer)], earliest first, one per rater. Each rating of a judged output is one judge-vs-people
    item (the person's score, the judge's); each two ratings of an output are one
    people-vs-people item (the earlier rater's, the later's)."""
    def score(answer: dict, criterion) -> int | str:
        value = answer[criterion.name]["score"]
        return int(value) if criterion.scale == SCALE_1_5 else value

    criteria = []
    for c in rubric.criteria:
        judge_items = [(score(answer, c), score(judged[output], c))
                       for output, ratings in rated.items() if output in judged for _, answer in ratings]
        people_items = [(score(a, c), score(b, c)) for ratings in rated.values()
                        for (_, a), (_, b) in combinations(ratings, 2)]
        criteria.append({"name": c.name, "scale": c.scale, "judge_vs_people": score_agreement(c.scale, judge_items),
                         "people_vs_people": score_agreement(c.scale, people_items)})
    return criteria
