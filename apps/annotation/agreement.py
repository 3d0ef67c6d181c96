"""Agreement between annotators, on plain data (no database).

`units` throughout: {item id: {annotator id: value}}, one field's answers. Values are
hashable (a multi-label answer is passed as a tuple). Cohen's and Fleiss' kappa are a few
lines each and follow the textbook formulas; Krippendorff's alpha comes from the
`krippendorff` package (missing data and ordinal distances done right).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from itertools import combinations

Units = Mapping[Hashable, Mapping[Hashable, Hashable]]


def cohen_kappa(first: list, second: list) -> float | None:
    """Cohen's kappa of two raters over the same items (paired lists). None when undefined."""
    if len(first) != len(second) or not first:
        return None
    n = len(first)
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    count_a, count_b = Counter(first), Counter(second)
    expected = sum(count_a[c] * count_b[c] for c in set(count_a) | set(count_b)) / (n * n)
    if expected == 1:
        return None  # both raters used one category throughout: kappa is undefined
    return (observed - expected) / (1 - expected)


def pairwise_cohen(units: Units) -> dict[tuple, dict]:
    """Cohen's kappa for every pair of annotators, over the items both answered."""
    annotators = sorted({a for answers in units.values() for a in answers}, key=str)
    result = {}
    for a, b in combinations(annotators, 2):
        shared = [answers for answers in units.values() if a in answers and b in answers]
        if shared:
            result[(a, b)] = {"kappa": cohen_kappa([s[a] for s in shared], [s[b] for s in shared]),
                              "items": len(shared)}
    return result


def fleiss_kappa(units: Units) -> float | None:
    """Fleiss' kappa over items with two or more answers. With varying numbers of raters per
    item, each item's agreement is taken over its own rater pairs (the usual generalisation)."""
    rated = [list(answers.values()) for answers in units.values() if len(answers) >= 2]
    if not rated:
        return None
    totals: Counter = Counter()
    agreements = []
    for values in rated:
        counts = Counter(values)
        totals.update(counts)
        n = len(values)
        agreements.append(sum(c * (c - 1) for c in counts.values()) / (n * (n - 1)))
    all_answers = sum(totals.values())
    observed = sum(agreements) / len(agreements)
    expected = sum((c / all_answers) ** 2 for c in totals.values())
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def krippendorff_alpha(units: Units, level: str = "nominal", value_domain: list | None = None) -> float | None:
    """Krippendorff's alpha ("nominal" or "ordinal"); None when there is nothing to compare."""
    import krippendorff
    import numpy as np

    pairable = {item: answers for item, answers in units.items() if len(answers) >= 2}
    values = {v for answers in pairable.values() for v in answers.values()}
    if not pairable or len(values) < 2:
        return None
    annotators = sorted({a for answers in pairable.values() for a in answers}, key=str)
    if level == "ordinal":
        domain = sorted(value_domain or values)
        code = {v: float(v) for v in domain}
    else:
        domain = sorted(values, key=repr)
        code = {v: float(i) for i, v in enumerate(domain)}
    matrix = np.full((len(annotators), len(pairable)), np.nan)
    row_of = {a: i for i, a in enumerate(annotators)}
    for column, answers in enumerate(pairable.values()):
        for annotator, value in answers.items():
            matrix[row_of[annotator], column] = code[value]
    return float(krippendorff.alpha(reliability_data=matrix, level_of_measurement=level,
                                     value_domain=[code[v] for v in domain]))


def majority(answers: Mapping[Hashable, Hashable]) -> tuple[Hashable | None, float]:
    """(the most common answer or None on a tie for first, the share of annotators who gave it)."""
    if not answers:
        return None, 0.0
    ranked = Counter(answers.values()).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None, ranked[0][1] / len(answers)
    return ranked[0][0], ranked[0][1] / len(answers)


def agreement_with_consensus(units: Units) -> dict[Hashable, dict]:
    """Per annotator: how often they gave the majority answer, on items with at least one other
    annotator (their own vote counted, as in most consensus scores). An item without a majority
    (a tie for first: two annotators who disagree) has no consensus to agree with, so it counts
    against everyone on it; skipping those items made two annotators who disagree on a third of
    their items both score 1.0."""
    scores: dict = {}
    for answers in units.values():
        if len(answers) < 2:
            continue
        consensus, _ = majority(answers)
        for annotator, value in answers.items():
            entry = scores.setdefault(annotator, {"agreed": 0, "items": 0})
            entry["items"] += 1
            entry["agreed"] += consensus is not None and value == consensus
    return {a: {**s, "rate": s["agreed"] / s["items"]} for a, s in scores.items()}


def gold_accuracy(units: Units, gold: Mapping[Hashable, Hashable]) -> dict[Hashable, dict]:
    """Per annotator: correct answers on gold items."""
    scores: dict = {}
    for item, expected in gold.items():
        for annotator, value in units.get(item, {}).items():
            entry = scores.setdefault(annotator, {"correct": 0, "items": 0})
            entry["items"] += 1
            entry["correct"] += value == expected
    return {a: {**s, "accuracy": s["correct"] / s["items"]} for a, s in scores.items()}


def disagreements(units: Units) -> list[Hashable]:
    """Items answered by 2+ annotators who did not all give the same answer."""
    return [item for item, answers in units.items() if len(answers) >= 2 and len(set(answers.values())) > 1]
