"""Word diffs for the version diff page: each change with a few words of context, wherever it is."""

from apps.datasets.worddiff import CONTEXT_TOKENS, word_diff


def test_a_change_deep_in_a_long_text_is_shown_with_its_context_and_the_rest_cut():
    words = [f"w{i}" for i in range(2000)]
    before = " ".join(words)
    after = " ".join(words[:1500] + ["changed"] + words[1501:])
    (hunk,) = word_diff(before, after)
    assert hunk.cut_before and hunk.cut_after
    assert ("del", "w1500") in hunk.parts and ("ins", "changed") in hunk.parts
    text = "".join(t for op, t in hunk.parts if op == "same")
    assert "w1497 w1498 w1499 " in text and " w1501 w1502" in text and "w1400" not in text
    assert sum(len(t) for op, t in hunk.parts if op == "same") <= 2 * CONTEXT_TOKENS * 6


def test_changes_far_apart_are_two_hunks_and_near_ones_one():
    words = [f"w{i}" for i in range(200)]
    far = list(words)
    far[10], far[150] = "x", "y"
    assert len(word_diff(" ".join(words), " ".join(far))) == 2
    near = list(words)
    near[10], near[13] = "x", "y"
    (hunk,) = word_diff(" ".join(words), " ".join(near))
    assert [op for op, _ in hunk.parts].count("ins") == 2


def test_whole_texts_added_or_removed_and_equal_texts():
    assert word_diff("same text", "same text") == []
    (added,) = word_diff(None, "brand new")
    assert added.parts == [("ins", "brand new")] and not (added.cut_before or added.cut_after)
    (removed,) = word_diff("gone now", "")
    assert removed.parts == [("del", "gone now")]


def test_texts_too_long_to_match_inside_still_show_their_change_in_context():
    before = "start " + " ".join(f"a{i}" for i in range(3000)) + " end"
    after = "start " + " ".join(f"b{i}" for i in range(3000)) + " end"
    (hunk,) = word_diff(before, after)
    assert hunk.parts[0] == ("same", "start ") and hunk.parts[-1] == ("same", " end")


def test_changed_words_separated_only_by_spaces_read_as_one_change():
    (hunk,) = word_diff("keep one two keep", "keep three four keep")
    assert hunk.parts == [("same", "keep "), ("del", "one two"), ("ins", "three four"), ("same", " keep")]
