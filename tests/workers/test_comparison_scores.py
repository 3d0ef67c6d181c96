"""Exact match and ROUGE-L of workers/comparison against hand-computed values."""

import pytest

from workers.comparison import exact_match, rouge_l, score_output, tokens
from workers.comparison.scores import lcs_length


def test_tokens_are_lower_cased_words_with_punctuation_dropped_as_rouge_score_counts():
    assert tokens("Paris, France.") == ["paris", "france"]
    assert tokens("  it's\tfine ") == ["it", "s", "fine"]  # rouge-score: "it s fine"
    assert tokens("Ça coûte 5 €.") == ["ça", "coûte", "5"]  # other scripts' words are kept


def test_rouge_l_matches_the_reference_implementation_on_punctuation():
    # rouge-score tokenizes these alike (lower-cased ASCII words) and scores the LCS F1: 1.0, and 4/4 & 4/6 -> 0.8.
    assert rouge_l("Paris.", "paris") == 1.0
    assert rouge_l("The capital is Paris!", "the capital of France is Paris.") == pytest.approx(0.8)


def test_exact_match_ignores_case_spacing_and_punctuation_but_not_words():
    assert exact_match("Paris.", "paris") == 1.0
    assert exact_match("  The  capital ", "the capital") == 1.0
    assert exact_match("Paris, France", "Paris") == 0.0


def test_rouge_l_is_the_f1_of_the_longest_common_subsequence():
    # Lin (2004)-style example: LCS("the cat sat on the mat", "the cat is on the mat") is
    # "the cat on the mat" = 5 tokens; P = 5/6, R = 5/6, F1 = 5/6.
    assert rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)
    # candidate 2 tokens, reference 4, LCS 2: P = 1, R = 0.5, F1 = 2/3
    assert rouge_l("police killed", "police killed the gunman") == pytest.approx(2 / 3)
    assert rouge_l("a b c", "x y z") == 0.0
    assert rouge_l("", "") == 1.0 and rouge_l("", "paris") == 0.0
    assert lcs_length(list("ABCBDAB"), list("BDCABA")) == 4  # the CLRS example


def test_score_output_without_a_reference_has_no_scores():
    assert score_output("paris", None) == {}
    assert score_output("Paris", "paris") == {"exact_match": 1.0, "rouge_l": 1.0}
