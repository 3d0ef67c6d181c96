"""The judging engine without Django: rubric checks, strict parsing, both orders of a pair, the
figures (position consistency, verbosity, kappa) against values worked out by hand."""

import json

import pytest

from workers.judging import (
    PairItem,
    PointItem,
    Reply,
    RubricError,
    check_rubric,
    cohen_kappa,
    estimate_cost,
    pairwise_summary,
    parse_answer,
    run_judge,
)
from workers.judging.stats import pair_outcome

pytestmark = pytest.mark.smoke

POINT = {"kind": "pointwise", "criteria": [{"name": "correct", "scale": "pass_fail"}, {"name": "clarity"}]}
PAIR = {"kind": "pairwise", "criteria": [{"name": "helpfulness", "description": "answers the question"}]}


def test_a_rubric_with_no_criteria_is_refused_naming_the_field():
    with pytest.raises(RubricError) as refused:
        check_rubric({"kind": "pointwise", "criteria": []})
    assert refused.value.field == "criteria"


@pytest.mark.parametrize("rubric, field", [
    ({"kind": "graded", "criteria": [{"name": "x"}]}, "kind"),
    ({"kind": "pointwise", "criteria": [{"name": "Bad Name"}]}, "criteria[0].name"),
    ({"kind": "pointwise", "criteria": [{"name": "x"}, {"name": "x"}]}, "criteria[1].name"),
    ({"kind": "pointwise", "criteria": [{"name": "x", "scale": "1-10"}]}, "criteria[0].scale"),
    ("helpfulness", "rubric"),
])
def test_bad_rubrics_name_what_is_wrong(rubric, field):
    with pytest.raises(RubricError) as refused:
        check_rubric(rubric)
    assert refused.value.field == field


def test_answers_are_read_strictly_against_the_schema():
    rubric = check_rubric(POINT)
    good = {"correct": {"score": "pass", "reason": "right"}, "clarity": {"score": 4, "reason": "clear"}}
    assert parse_answer(json.dumps(good), rubric) == (good, "")
    assert parse_answer("  " + json.dumps(good) + "\n", rubric)[0] == good
    for text in ["Sure! " + json.dumps(good), "```json\n" + json.dumps(good) + "\n```", "not json",
                 json.dumps({**good, "clarity": {"score": 6, "reason": "x"}}),
                 json.dumps({"correct": {"score": "pass", "reason": "x"}}),
                 json.dumps({**good, "extra": 1}), "[]"]:
        answer, error = parse_answer(text, rubric)
        assert answer is None and error, text


def test_a_pair_is_asked_in_both_orders_and_stored_whole():
    rubric = check_rubric(PAIR)
    asked = []

    def call(messages):
        asked.append(messages[-1]["content"])
        return Reply(text='{"winner": "A", "reason": "first shown"}', prompt_tokens=3, completion_tokens=2)

    stored = []
    run_judge(rubric, [PairItem(key="k1", prompt="q", first="one", second="two")], call=call,
              on_item=lambda verdicts: stored.append(verdicts) or False)
    assert "[Response A]\none\n\n[Response B]\ntwo" in asked[0]
    assert "[Response A]\ntwo\n\n[Response B]\none" in asked[1]
    assert len(stored) == 1 and [v.swapped for v in stored[0]] == [False, True]
    # A judge that always says A prefers the first in one order and the second in the other.
    assert pair_outcome(stored[0][0].answer["winner"], stored[0][1].answer["winner"]) == "inconsistent"


def test_a_call_that_raises_hands_on_nothing_of_its_item():
    rubric = check_rubric(PAIR)
    calls = []

    def call(messages):
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("provider down")
        return Reply(text='{"winner": "tie", "reason": "same"}')

    stored = []
    items = [PairItem(key=f"k{i}", prompt="q", first="a", second="b") for i in range(3)]
    with pytest.raises(RuntimeError):
        run_judge(rubric, items, call=call, on_item=lambda verdicts: stored.append(verdicts) or False)
    assert [v[0].key for v in stored] == ["k0"]


def test_done_items_are_skipped_on_resume():
    rubric = check_rubric(POINT)
    seen = []
    items = [PointItem(key=f"k{i}", prompt="q", response="r") for i in range(3)]
    run_judge(rubric, items, call=lambda m: Reply(text="x"), on_item=lambda v: seen.append(v[0].key) or False,
              done={"k0", "k2"})
    assert seen == ["k1"]


def test_estimate_counts_two_calls_a_pair_and_the_answer_budget():
    rubric = check_rubric(PAIR)
    items = [PairItem(key=f"k{i}", prompt="q", first="a", second="b") for i in range(3)]
    cost = estimate_cost(rubric, items, max_tokens=100)
    assert cost["calls"] == 6 and cost["items"] == 3 and cost["max_completion_tokens"] == 600
    assert cost["prompt_tokens"] > 0 and cost["max_total_tokens"] == cost["prompt_tokens"] + 600


def test_pairwise_figures_by_hand():
    pairs = [
        # consistent: second wins, second longer by 25
        {"first": 0, "second": 1, "in_order": "B", "swapped": "A", "first_len": 6, "second_len": 31},
        # inconsistent: A both times
        {"first": 0, "second": 1, "in_order": "A", "swapped": "A", "first_len": 22, "second_len": 5},
        # consistent tie
        {"first": 0, "second": 1, "in_order": "tie", "swapped": "tie", "first_len": 5, "second_len": 31},
        # unreadable in both orders
        {"first": 0, "second": 1, "in_order": None, "swapped": None, "first_len": 5, "second_len": 5},
    ]
    summary = pairwise_summary(pairs)
    assert summary["judged"] == 3 and summary["consistent"] == 2 and summary["position_consistency"] == 0.6667
    assert summary["unparseable_answers"] == 2 and summary["a_rate"] == 0.75
    assert summary["matchups"] == [{"first": 0, "second": 1, "first_wins": 0, "second_wins": 1, "ties": 1,
                                    "inconsistent": 1, "unparseable": 1}]
    assert summary["verbosity"] == {"decisive": 1, "with_length_difference": 1, "longer_won": 1,
                                    "longer_won_rate": 1.0, "mean_length_difference": 25.0}


def test_cohen_kappa_by_hand():
    # 6 items: observed 4/6; marginals judge {second 2, tie 4}, people {second 2, first 2, tie 2}:
    # expected (2*2 + 4*2) / 36 = 1/3, kappa = (2/3 - 1/3) / (2/3) = 0.5.
    items = [("second", "second"), ("second", "second"), ("tie", "first"), ("tie", "tie"), ("tie", "tie"),
             ("tie", "first")]
    assert cohen_kappa(items) == 0.5
    assert cohen_kappa([("a", "a"), ("b", "b")]) == 1.0
    assert cohen_kappa([("a", "a")]) is None  # chance agreement already certain
    assert cohen_kappa([]) is None


def test_items_judged_together_are_handed_on_whole_and_in_order_and_a_failure_keeps_only_whole_items():
    import threading

    rubric = check_rubric(PAIR)
    lock, seen = threading.Lock(), []

    def call(messages):
        text = messages[-1]["content"]
        with lock:
            seen.append(text)
        if "[Response A]\nb2" in text:  # the swapped order of item 2 fails
            raise RuntimeError("provider down")
        return Reply(text='{"winner": "tie", "reason": "same"}')

    stored = []
    items = [PairItem(key=f"k{i}", prompt="q", first=f"a{i}", second=f"b{i}") for i in range(6)]
    with pytest.raises(RuntimeError, match="provider down"):
        run_judge(rubric, items, call=call, on_item=lambda verdicts: stored.append(verdicts) or False, concurrency=4)
    # The first round (items 0-3) was asked together; 0, 1 and 3 are whole, 2 is not kept; 4-5 never asked.
    assert [v[0].key for v in stored] == ["k0", "k1", "k3"]
    assert all([x.swapped for x in v] == [False, True] for v in stored)
    assert len(seen) == 8


def test_the_kappa_interval_is_a_seeded_bootstrap_around_the_estimate():
    from workers.judging.stats import kappa_interval

    items = [("second", "second"), ("second", "second"), ("tie", "first"), ("tie", "tie"), ("tie", "tie"),
             ("tie", "first")] * 5
    low, high = kappa_interval(items)
    assert low <= cohen_kappa(items) <= high and low < high
    assert kappa_interval(items) == (low, high)  # same items, same interval
    assert kappa_interval([("a", "a"), ("b", "b"), ("a", "a")]) == (1.0, 1.0)
    assert kappa_interval([("a", "a")]) is None


def test_the_confusion_table_counts_each_pair_of_labels_by_hand():
    from workers.judging.stats import confusion

    items = [("second", "second"), ("second", "second"), ("first", "tie"), ("tie", "tie"), ("tie", "tie"),
             ("first", "tie")]
    assert confusion(items, ("first", "second", "tie")) == {
        "first": {"first": 0, "second": 0, "tie": 2},
        "second": {"first": 0, "second": 2, "tie": 0},
        "tie": {"first": 0, "second": 0, "tie": 2}}
    assert confusion([], ("a", "b")) == {"a": {"a": 0, "b": 0}, "b": {"a": 0, "b": 0}}


def test_a_pointwise_answer_is_one_score_on_zero_to_one_and_the_higher_is_preferred():
    from workers.judging.stats import implied_preference, point_score

    rubric = check_rubric(POINT)  # correct: pass/fail, clarity: 1-5

    def answer(correct, clarity):
        return {"correct": {"score": correct, "reason": ""}, "clarity": {"score": clarity, "reason": ""}}

    assert point_score(rubric, answer("pass", 4)) == 0.875  # (1 + 3/4) / 2
    assert point_score(rubric, answer("pass", 3)) == 0.75  # (1 + 2/4) / 2
    assert point_score(rubric, answer("fail", 1)) == 0.0
    assert point_score(rubric, answer("pass", 5)) == 1.0
    assert implied_preference(0.875, 0.75) == "first"
    assert implied_preference(0.0, 1.0) == "second"
    assert implied_preference(0.5, 0.5) == "tie"


def test_a_judge_is_calibrated_only_with_enough_items_and_a_kappa_at_the_threshold():
    from workers.judging.stats import calibration

    assert calibration(0.7, 30, min_kappa=0.6, min_items=20)["calibrated"] is True
    assert calibration(0.6, 20, min_kappa=0.6, min_items=20)["calibrated"] is True  # at the threshold
    short = calibration(0.9, 19, min_kappa=0.6, min_items=20)
    assert short == {"calibrated": False, "min_kappa": 0.6, "min_items": 20,
                     "reason": "19 items judged and voted on; the project asks for at least 20"}
    assert calibration(0.59, 50, min_kappa=0.6, min_items=20)["reason"] == \
        "kappa 0.59 is below the project's threshold 0.6"
    assert calibration(None, 50, min_kappa=0.6, min_items=20)["reason"] == "kappa is undefined on these items"


def test_the_bootstrap_interval_of_a_statistic_is_seeded_and_brackets_it():
    from workers.judging.stats import bootstrap_interval, kappa_interval

    def mean(xs):
        return sum(xs) / len(xs)

    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 3
    low, high = bootstrap_interval(values, mean)
    assert low < mean(values) < high and (low, high) == bootstrap_interval(values, mean)
    assert bootstrap_interval([4, 4, 4], mean) == (4.0, 4.0)
    assert bootstrap_interval([1], mean) is None
    assert bootstrap_interval([1, 2], lambda xs: None) is None  # never defined
    items = [("a", "a"), ("b", "b"), ("a", "b"), ("b", "b")] * 4
    assert kappa_interval(items) == bootstrap_interval(items, cohen_kappa)
