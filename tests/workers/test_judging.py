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


def _votes_kappa(value, items):
    return {"label": "kappa", "items_label": "items judged and voted on", "value": value, "items": items,
            "threshold": 0.6}


def test_a_judge_is_calibrated_only_with_enough_items_and_a_kappa_at_the_threshold():
    from workers.judging.stats import calibration

    assert calibration([_votes_kappa(0.7, 30)], min_items=20)["calibrated"] is True
    assert calibration([_votes_kappa(0.6, 20)], min_items=20)["calibrated"] is True  # at the threshold
    assert calibration([_votes_kappa(0.9, 19)], min_items=20) == {
        "calibrated": False, "reason": "19 items judged and voted on; the project asks for at least 20"}
    assert calibration([_votes_kappa(0.59, 50)], min_items=20)["reason"] == \
        "kappa 0.59 is below the project's threshold 0.6"
    assert calibration([_votes_kappa(None, 50)], min_items=20)["reason"] == "kappa is undefined on these items"


def test_with_ratings_every_figure_with_enough_items_must_reach_its_threshold():
    from workers.judging.stats import calibration

    rho = {"label": "clarity Spearman rho", "items_label": "items judged and rated on clarity", "threshold": 0.6}
    # Few votes are not counted, enough ratings are: the ratings decide.
    assert calibration([_votes_kappa(0.1, 3), {**rho, "value": 0.7, "items": 25}], min_items=20) == {
        "calibrated": True, "reason": ""}
    # Every counted figure must pass: good ratings do not make up for a poor kappa with the votes.
    assert calibration([_votes_kappa(0.2, 40), {**rho, "value": 0.9, "items": 25}], min_items=20) == {
        "calibrated": False, "reason": "kappa 0.2 is below the project's threshold 0.6"}
    assert calibration([_votes_kappa(0.9, 40), {**rho, "value": 0.5, "items": 25}], min_items=20)["reason"] == \
        "clarity Spearman rho 0.5 is below the project's threshold 0.6"
    assert calibration([_votes_kappa(0.9, 4), {**rho, "value": 0.9, "items": 5}], min_items=20)["reason"] == (
        "4 items judged and voted on; 5 items judged and rated on clarity; the project asks for at least 20")


def test_rank_correlations_and_mae_match_values_worked_out_by_hand():
    from workers.judging.stats import kendall, mean_absolute_error, spearman

    # No ties: rank differences d = 0, -1, 1, 0, 0, so rho = 1 - 6·Σd²/(n(n²-1)) = 1 - 12/120 = 0.9;
    # of the 10 pairs only (2,3)-(3,2) is discordant: tau = (9 - 1)/10 = 0.8; MAE = (0+1+1+0+0)/5.
    items = [(1, 1), (2, 3), (3, 2), (4, 4), (5, 5)]
    assert (spearman(items), kendall(items), mean_absolute_error(items)) == (0.9, 0.8, 0.4)
    # Ties: y ranks 1.5, 1.5, 3 against x ranks 1, 2, 3: Pearson of the ranks = 1.5/sqrt(2·1.5) = 0.8660;
    # tau-b = (concordant 2 - discordant 0)/sqrt((3 - 0 x-ties)(3 - 1 y-tie)) = 2/sqrt(6) = 0.8165.
    tied = [(1, 1), (2, 1), (3, 2)]
    assert (spearman(tied), kendall(tied)) == (0.866, 0.8165)
    # Undefined: one item, or a side that never varies.
    assert spearman([(3, 3)]) is None and kendall([(1, 4), (2, 4)]) is None and spearman([]) is None
    assert mean_absolute_error([]) is None


def test_pass_fail_agreement_is_kappa_and_the_true_positive_and_negative_rates():
    from workers.judging.stats import score_agreement, true_negative_rate, true_positive_rate

    # (person, judge): observed 4/6; person pass 4 fail 2, judge pass 4 fail 2, expected (16 + 4)/36;
    # kappa = (4/6 - 20/36)/(1 - 20/36) = 0.25; TPR = 3 of the person's 4 passes; TNR = 1 of 2 fails.
    items = [("pass", "pass")] * 3 + [("pass", "fail"), ("fail", "fail"), ("fail", "pass")]
    figures = score_agreement("pass_fail", items)
    assert (figures["items"], figures["kappa"], figures["tpr"], figures["tnr"]) == (6, 0.25, 0.75, 0.5)
    for name in ("kappa", "tpr", "tnr"):
        low, high = figures[f"{name}_ci"]
        assert low <= figures[name] <= high
    assert true_positive_rate([("fail", "pass")]) is None and true_negative_rate([("pass", "pass")]) is None
    assert score_agreement("1-5", [(3, 4)]) == {"items": 1, "rho": None, "rho_ci": None, "tau": None, "tau_ci": None,
                                                "mae": 1.0, "mae_ci": None}


def test_the_intervals_figures_at_once_are_scipys_and_the_plain_ones_row_by_row():
    import math
    import random

    from workers.judging.stats import (
        cohen_kappa,
        kendall,
        mean_absolute_error,
        pass_fail_statistics,
        scale_statistics,
        spearman,
        true_negative_rate,
        true_positive_rate,
    )

    rng = random.Random(3)
    rows = [[(rng.randint(1, 5), rng.randint(1, 5)) for _ in range(rng.randint(2, 12))] for _ in range(300)]
    rows += [[(1, 1), (2, 1), (3, 1)], [(4, 4), (4, 4)], [(1, 5), (5, 1), (3, 3)]]  # constant sides, reversed

    def same(vectorized, plain):
        return plain is None and math.isnan(vectorized) or plain is not None and round(float(vectorized), 4) == plain

    for items in rows:
        xs, ys = [[x for x, _ in items]], [[y for _, y in items]]
        rho, tau, mae = (values[0] for values in scale_statistics(xs, ys))
        assert same(rho, spearman(items)) and same(tau, kendall(items)) and same(mae, mean_absolute_error(items))
        labels = [("pass" if x > 2 else "fail", "pass" if y > 3 else "fail") for x, y in items]
        kappa, tpr, tnr = (values[0] for values in pass_fail_statistics([[a == "pass" for a, _ in labels]],
                                                                        [[b == "pass" for _, b in labels]]))
        assert same(kappa, cohen_kappa(labels)), labels
        assert same(tpr, true_positive_rate(labels)) and same(tnr, true_negative_rate(labels))


def test_ratings_agreement_pairs_each_rating_with_the_judge_and_each_two_raters():
    from workers.judging.stats import rating_agreement

    rubric = check_rubric(POINT)  # correct: pass/fail, clarity: 1-5

    def answer(correct, clarity):
        return {"correct": {"score": correct, "reason": ""}, "clarity": {"score": clarity, "reason": ""}}

    judged = {"o1": answer("pass", 4), "o2": answer("fail", 2), "o3": answer("pass", 5)}
    rated = {"o1": [(1, answer("pass", 5)), (2, answer("pass", 4))], "o2": [(1, answer("fail", 1))],
             "o4": [(1, answer("fail", 3)), (2, answer("pass", 3))]}  # o4: rated, not judged
    correct, clarity = rating_agreement(rubric, judged, rated)
    # clarity, judge vs people: (5,4), (4,4), (1,2); ranks 3,2,1 against 2.5,2.5,1 -> rho 0.866;
    # tau-b = 2/sqrt(3·2) = 0.8165 (one tie on the judge's side); MAE = (1 + 0 + 1)/3.
    assert clarity["name"] == "clarity" and clarity["judge_vs_people"]["items"] == 3
    assert (clarity["judge_vs_people"]["rho"], clarity["judge_vs_people"]["tau"],
            clarity["judge_vs_people"]["mae"]) == (0.866, 0.8165, 0.6667)
    # people with each other: o1 (5, 4) and o4 (3, 3), both sides in the same order -> rho 1; MAE (1 + 0)/2.
    assert (clarity["people_vs_people"]["items"], clarity["people_vs_people"]["rho"],
            clarity["people_vs_people"]["mae"]) == (2, 1.0, 0.5)
    # correct, judge vs people: pass-pass, pass-pass, fail-fail: kappa 1, TPR 1, TNR 1.
    assert {k: correct["judge_vs_people"][k] for k in ("items", "kappa", "tpr", "tnr")} == {
        "items": 3, "kappa": 1.0, "tpr": 1.0, "tnr": 1.0}
    # people: o1 pass-pass, o4 fail-pass: observed 1/2, expected (1·2 + 1·0)/4 = 1/2 -> kappa 0;
    # TPR 1 (the earlier rater's one pass), TNR 0 (their one fail, the later rater passed it).
    assert {k: correct["people_vs_people"][k] for k in ("items", "kappa", "tpr", "tnr")} == {
        "items": 2, "kappa": 0.0, "tpr": 1.0, "tnr": 0.0}


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
