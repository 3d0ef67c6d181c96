"""The eval suite's figures (workers.evaluation) on values worked out by hand."""

import pytest

from workers.comparison import score_output
from workers.evaluation import MetricError, aggregate, check_metrics, deltas, gate

pytestmark = [pytest.mark.smoke, pytest.mark.timeout(30)]

METRICS = [{"metric": "exact_match", "threshold": 0.5}, {"metric": "rouge_l", "threshold": None},
           {"metric": "perplexity", "threshold": 20}]


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
])
def test_bad_metrics_are_refused_naming_the_field(metrics, field):
    with pytest.raises(MetricError) as refused:
        check_metrics(metrics)
    assert refused.value.field == field


def test_checked_metrics_are_normalised():
    assert check_metrics([{"metric": "perplexity", "threshold": 20}, {"metric": "rouge_l"}]) == [
        {"metric": "perplexity", "threshold": 20.0}, {"metric": "rouge_l", "threshold": None}]
