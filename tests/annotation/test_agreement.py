"""Agreement math against textbook examples, computed by hand or published with the method."""

import pytest

from apps.annotation import agreement


def units_from_columns(*raters):
    """{item: {rater: value}} from one list per rater (None = no answer)."""
    units = {}
    for rater, values in enumerate(raters):
        for item, value in enumerate(values):
            if value is not None:
                units.setdefault(item, {})[rater] = value
    return units


def test_cohen_kappa_of_the_two_reader_yes_no_example():
    # 50 proposals: both yes 20, A yes/B no 5, A no/B yes 10, both no 15.
    # p_o = 35/50 = 0.7; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = (0.7-0.5)/(1-0.5) = 0.4
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert agreement.cohen_kappa(a, b) == pytest.approx(0.4)


def test_cohen_kappa_is_one_for_perfect_agreement_and_undefined_for_a_single_category():
    assert agreement.cohen_kappa(["a", "b", "a"], ["a", "b", "a"]) == pytest.approx(1.0)
    assert agreement.cohen_kappa(["a", "a"], ["a", "a"]) is None


def test_fleiss_kappa_of_fleiss_1971_worked_example():
    # 10 subjects, 14 raters each, 5 categories (the classic worked example): kappa = 0.210.
    table = [
        [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
    ]
    units = {}
    for subject, counts in enumerate(table):
        values = [category for category, n in enumerate(counts) for _ in range(n)]
        units[subject] = dict(enumerate(values))
    assert agreement.fleiss_kappa(units) == pytest.approx(0.20993, abs=1e-4)


def test_krippendorff_alpha_of_krippendorffs_four_observer_example_with_missing_values():
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 observers, 12 units,
    # nominal data with missing values: alpha = 0.743.
    a = [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None]
    b = [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3]
    c = [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None]
    d = [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None]
    units = units_from_columns(a, b, c, d)
    assert agreement.krippendorff_alpha(units, "nominal") == pytest.approx(0.743, abs=1e-3)


def test_ordinal_krippendorff_alpha_of_krippendorffs_four_observer_example_is_0_815():
    # The same reliability data as the nominal example above; Krippendorff (2011) reports
    # ordinal alpha = 0.815 for it (interval 0.849, ratio 0.797).
    a = [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None]
    b = [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3]
    c = [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None]
    d = [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None]
    units = units_from_columns(a, b, c, d)
    alpha = agreement.krippendorff_alpha(units, "ordinal", value_domain=[1, 2, 3, 4, 5])
    assert alpha == pytest.approx(0.815, abs=1e-3)
    assert alpha == pytest.approx(ordinal_alpha_by_hand(units, [1, 2, 3, 4, 5]), abs=1e-9)


def ordinal_alpha_by_hand(units, domain):
    """Krippendorff's ordinal alpha from its definition, independently of the package: the
    coincidence matrix o[c][k] (each unit's ordered pairs of values from different coders,
    weighted 1 / (m_u - 1)), the ordinal distance delta(c, k) = (sum of n_g for g from c to k
    - (n_c + n_k) / 2) ** 2 over the marginals n_g, and alpha = 1 - D_o / D_e."""
    o = {(c, k): 0.0 for c in domain for k in domain}
    for answers in units.values():
        values = list(answers.values())
        if len(values) < 2:
            continue
        for i, c in enumerate(values):
            for j, k in enumerate(values):
                if i != j:
                    o[c, k] += 1 / (len(values) - 1)
    marginal = {c: sum(o[c, k] for k in domain) for c in domain}
    n = sum(marginal.values())

    def delta(c, k):
        low, high = sorted((domain.index(c), domain.index(k)))
        return (sum(marginal[g] for g in domain[low:high + 1]) - (marginal[c] + marginal[k]) / 2) ** 2

    observed = sum(o[c, k] * delta(c, k) for c in domain for k in domain)
    expected = sum(marginal[c] * marginal[k] * delta(c, k) for c in domain for k in domain) / (n - 1)
    return 1 - observed / expected


def test_ordinal_alpha_credits_near_misses_that_nominal_alpha_does_not():
    # Disagreements only between neighbouring points of a 1-5 scale.
    first = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    second = [2, 2, 4, 4, 5, 1, 3, 3, 5, 5]
    units = units_from_columns(first, second)
    nominal = agreement.krippendorff_alpha(units, "nominal")
    ordinal = agreement.krippendorff_alpha(units, "ordinal", value_domain=[1, 2, 3, 4, 5])
    assert ordinal > nominal and ordinal > 0.8


def test_consensus_gold_and_disagreements():
    units = {1: {"ann": "pos", "bob": "pos", "cat": "neg"}, 2: {"ann": "neg", "bob": "neg"}, 3: {"ann": "pos"}}
    consensus = agreement.agreement_with_consensus(units)
    assert consensus["cat"] == {"agreed": 0, "items": 1, "rate": 0.0}
    assert consensus["ann"]["rate"] == 1.0 and consensus["ann"]["items"] == 2
    assert agreement.disagreements(units) == [1]
    gold = agreement.gold_accuracy(units, {1: "neg", 3: "pos"})
    assert gold["ann"] == {"correct": 1, "items": 2, "accuracy": 0.5}
    assert gold["cat"]["accuracy"] == 1.0
    assert agreement.majority({"a": "x", "b": "y"}) == (None, 0.5)


def test_two_annotators_who_disagree_on_6_of_16_items_agree_with_the_consensus_10_times_in_16():
    # Two annotators: a disagreement is a tie for first, so the item has no consensus and counts
    # against both (it used to be left out, and both scored 10/10 = 1.0).
    anna = ["pos"] * 8 + ["neg"] * 8
    ben = ["pos"] * 5 + ["neg"] * 3 + ["neg"] * 5 + ["pos"] * 3
    consensus = agreement.agreement_with_consensus(units_from_columns(anna, ben))
    assert consensus[0] == {"agreed": 10, "items": 16, "rate": 10 / 16}
    assert consensus[1]["rate"] == 0.625
    # Three annotators, one tie among them (x, y, z): only the two items with a majority are won.
    three = agreement.agreement_with_consensus(units_from_columns(["x", "a", "a"], ["y", "a", "a"], ["z", "a", "b"]))
    assert {rater: score["agreed"] for rater, score in three.items()} == {0: 2, 1: 2, 2: 1}
    assert all(score["items"] == 3 for score in three.values())
