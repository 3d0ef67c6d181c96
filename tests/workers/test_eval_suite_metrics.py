"""The eval suite's figures (workers.evaluation) on values worked out by hand."""

import pytest

from workers.comparison import score_output
from workers.evaluation import (
    MetricError,
    aggregate,
    check_metrics,
    criterion_score,
    deltas,
    gate,
    judged_scores,
    win_score,
)
from workers.judging import Verdict

pytestmark = [pytest.mark.smoke, pytest.mark.timeout(30)]

METRICS = check_metrics([{"metric": "exact_match", "threshold": 0.5}, {"metric": "rouge_l", "threshold": None},
                         {"metric": "perplexity", "threshold": 20}])


def test_items_scored_against_their_references_aggregate_to_hand_computed_means():
    # "the cat sat on the mat" vs "the cat is on the mat": LCS "the cat on the mat" = 5 of 6 words
    # each way, so P = R = F1 = 5/6. "Paris." vs "paris": the same words, an exact match.
    items = [score_output("the cat sat on the mat", "the cat is on the mat"), score_output("Paris.", "paris"),
             {**score_output("Berlin", "Paris"), "perplexity": 12.0}, {}]
    assert items[0] == {"exact_match": 0.0, "rouge_l": round(5 / 6, 6)}
    assert items[1] == {"exact_match": 1.0, "rouge_l": 1.0}
    values = aggregate(items, METRICS)
    # means over the items that have the score: (0 + 1 + 0) / 3; (5/6 + 1 + 0) / 3; 12 / 1
    assert values == {"exact_match": round(1 / 3, 6), "rouge_l": round((5 / 6 + 1) / 3, 6), "perplexity": 12.0}
    assert deltas(values, {"exact_match": 0.5, "rouge_l": None, "perplexity": 10.0}) == {
        "exact_match": round(1 / 3 - 0.5, 6), "rouge_l": None, "perplexity": 2.0}


def test_the_gate_names_each_missed_threshold_with_its_value_and_direction():
    failures = gate({"exact_match": 0.25, "rouge_l": 0.1, "perplexity": 25.5}, METRICS)
    assert [f.reason for f in failures] == ["exact_match 0.25 is not at least its threshold 0.5",
                                            "perplexity 25.5 is not at most its threshold 20"]
    assert gate({"exact_match": 0.5, "rouge_l": 0.0, "perplexity": 20.0}, METRICS) == []
    assert gate({"exact_match": None, "perplexity": 1.0}, METRICS)[0].reason == \
        "exact_match: no value (no item had a score), threshold 0.5"


@pytest.mark.parametrize("metrics, field", [
    ([], "metrics"),
    ("exact_match", "metrics"),
    ([{"metric": "bleu"}], "metrics[0].metric"),
    ([{"metric": "rouge_l"}, {"metric": "rouge_l"}], "metrics[1].metric"),
    ([{"metric": "exact_match", "threshold": 1.5}], "metrics[0].threshold"),
    ([{"metric": "perplexity", "threshold": 0.5}], "metrics[0].threshold"),
    ([{"metric": "rouge_l", "threshold": "0.5"}], "metrics[0].threshold"),
    ([{"metric": "rouge_l", "threshold": True}], "metrics[0].threshold"),
    ([{"metric": "rouge_l", "threshold": float("nan")}], "metrics[0].threshold"),
    ([{"metric": "rouge_l", "weight": 2}], "metrics[0]"),
    (["rouge_l"], "metrics[0]"),
    ([{"metric": "rouge_l", "judge": 3}], "metrics[0].judge"),
    ([{"metric": "judge", "criterion": "correct"}], "metrics[0].judge"),
    ([{"metric": "judge", "judge": "3", "criterion": "correct"}], "metrics[0].judge"),
    ([{"metric": "judge", "judge": 3}], "metrics[0].criterion"),
    ([{"metric": "win_rate", "judge": 3, "threshold": 1.01}], "metrics[0].threshold"),
    ([{"metric": "judge", "judge": 3, "criterion": "a"}, {"metric": "judge", "judge": 3, "criterion": "a"}],
     "metrics[1].metric"),
])
def test_bad_metrics_are_refused_naming_the_field(metrics, field):
    with pytest.raises(MetricError) as refused:
        check_metrics(metrics)
    assert refused.value.field == field


def test_checked_metrics_are_normalised():
    assert check_metrics([{"metric": "perplexity", "threshold": 20}, {"metric": "rouge_l"},
                          {"metric": "judge", "judge": 3, "criterion": " correct "},
                          {"metric": "win_rate", "judge": 4, "threshold": 0.5}]) == [
        {"metric": "perplexity", "key": "perplexity", "threshold": 20.0},
        {"metric": "rouge_l", "key": "rouge_l", "threshold": None},
        {"metric": "judge", "judge": 3, "criterion": "correct", "key": "judge:3:correct", "threshold": None},
        {"metric": "win_rate", "judge": 4, "key": "win_rate:4", "threshold": 0.5}]


def test_judge_answers_become_scores_from_zero_to_one():
    answer = {"correct": {"score": "pass", "reason": ""}, "clarity": {"score": 4, "reason": ""}}
    assert criterion_score(answer, "correct", "pass_fail") == 1.0
    assert criterion_score({"correct": {"score": "fail"}}, "correct", "pass_fail") == 0.0
    assert criterion_score(answer, "clarity", "1-5") == 0.75  # (4 - 1) / 4
    assert criterion_score(None, "clarity", "1-5") is None
    assert [win_score(o) for o in ("first", "second", "tie", "inconsistent", None)] == [1.0, 0.0, 0.5, 0.5, None]
    # two wins, a tie and a loss: a win rate of 2.5 / 4
    metrics = check_metrics([{"metric": "win_rate", "judge": 4, "threshold": 0.7}])
    values = aggregate([{"win_rate:4": s} for s in (1.0, 1.0, 0.5, 0.0)], metrics)
    assert values == {"win_rate:4": 0.625}
    assert gate(values, metrics)[0].reason == "win_rate:4 0.625 is not at least its threshold 0.7"


def verdict(answer, swapped=False) -> Verdict:
    return Verdict(key="0", swapped=swapped, raw="", answer=answer, error="" if answer else "not JSON")


def test_a_pairwise_judge_s_two_orders_become_the_run_s_win_score():
    # The run's output is `first`: shown as A in order, as B swapped.
    asked = check_metrics([{"metric": "win_rate", "judge": 4}])
    def score(in_order, swapped):
        return judged_scores("pairwise", [verdict({"winner": in_order} if in_order else None),
                                          verdict({"winner": swapped} if swapped else None, swapped=True)],
                             asked, {})["win_rate:4"]
    assert score("A", "B") == 1.0  # the run's output both times
    assert score("B", "A") == 0.0  # the baseline's both times
    assert score("A", "A") == 0.5  # position only: inconsistent
    assert score("tie", "tie") == 0.5
    assert score("A", None) is None  # an unreadable answer: no score


def test_a_pointwise_judge_s_answer_scores_each_asked_criterion():
    asked = check_metrics([{"metric": "judge", "judge": 3, "criterion": "correct"},
                           {"metric": "judge", "judge": 3, "criterion": "clarity"}])
    answer = {"correct": {"score": "fail", "reason": ""}, "clarity": {"score": 5, "reason": ""}}
    assert judged_scores("pointwise", [verdict(answer)], asked, {"correct": "pass_fail", "clarity": "1-5"}) == {
        "judge:3:correct": 0.0, "judge:3:clarity": 1.0}
    assert judged_scores("pointwise", [verdict(None)], asked, {}) == {"judge:3:correct": None,
                                                                       "judge:3:clarity": None}
