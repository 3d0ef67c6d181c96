"""The teacher engine, plain Python: where a row's prompt is read, the run's rounds, stopping and
failures, and the estimate shown before launch."""

import threading

import pytest

from workers.judging import Reply
from workers.teaching import TeacherCancelled, TeacherItem, estimate_cost, prompt_messages, run_teacher

pytestmark = [pytest.mark.smoke, pytest.mark.timeout(30)]

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Rome."}]


def test_a_conversation_is_cut_before_its_last_assistant_turn():
    assert prompt_messages("messages", prompt=None, messages=CHAT, metadata={}) == CHAT[:4]
    assert prompt_messages("messages", prompt=None, messages=CHAT[:4], metadata={}) == CHAT[:4]
    # nothing left for the teacher: only a system turn, no messages, an empty question, not a list
    assert prompt_messages("messages", prompt=None, messages=CHAT[:1], metadata={}) is None
    assert prompt_messages("messages", prompt=None, messages=None, metadata={}) is None
    assert prompt_messages("messages", prompt=None, messages=[{"role": "user", "content": "  "}], metadata={}) is None
    assert prompt_messages("messages", prompt=None, messages="hello", metadata={}) is None


def test_a_prompt_or_a_metadata_column_is_asked_as_one_user_turn():
    assert prompt_messages("prompt", prompt="What is Paris?", messages=None, metadata={}) == [
        {"role": "user", "content": "What is Paris?"}]
    assert prompt_messages("prompt", prompt="", messages=None, metadata={}) is None
    assert prompt_messages("question", prompt="ignored", messages=None, metadata={"question": "Why?"}) == [
        {"role": "user", "content": "Why?"}]
    assert prompt_messages("question", prompt=None, messages=None, metadata={"question": 42}) == [
        {"role": "user", "content": "42"}]
    for value in (None, True, ["a list"], {"an": "object"}):
        assert prompt_messages("question", prompt=None, messages=None, metadata={"question": value}) is None


def items(n: int) -> list[TeacherItem]:
    return [TeacherItem(position=i, messages=[{"role": "user", "content": f"q{i}"}]) for i in range(n)]


def echo(messages):
    return Reply(text=messages[-1]["content"].upper(), prompt_tokens=3, completion_tokens=2)


def test_a_run_asks_what_is_not_done_in_rounds_from_threads_and_hands_each_round_in_order():
    rounds, threads = [], set()

    def call(messages):
        threads.add(threading.get_ident())
        return echo(messages)

    run_teacher(items(7), call=call, on_answers=lambda answers: rounds.append(answers) and False, done={1, 4},
                concurrency=2)
    assert [[a.position for a in r] for r in rounds] == [[0, 2], [3, 5], [6]]
    assert [a.text for r in rounds for a in r] == ["Q0", "Q2", "Q3", "Q5", "Q6"]
    assert (rounds[0][0].prompt_tokens, rounds[0][0].completion_tokens) == (3, 2)
    assert threading.get_ident() not in threads


def test_a_run_stops_when_asked_and_raises_the_first_error_after_the_answers_before_it():
    handed = []
    with pytest.raises(TeacherCancelled):
        run_teacher(items(6), call=echo, on_answers=lambda answers: handed.append(answers) or True, concurrency=2)
    assert len(handed) == 1

    def failing(messages):
        if messages[-1]["content"] == "q3":
            raise RuntimeError("provider said no")
        return echo(messages)

    handed = []
    with pytest.raises(RuntimeError, match="provider said no"):
        run_teacher(items(6), call=failing, on_answers=lambda answers: handed.append(answers) and False,
                    concurrency=2)
    assert [[a.position for a in r] for r in handed] == [[0, 1], [2]]  # nothing of row 3 or after


def test_the_estimate_counts_a_call_a_row_characters_over_four_and_the_answer_budget():
    assert estimate_cost(items(3), max_tokens=10) == {"calls": 3, "prompt_tokens": 2, "max_completion_tokens": 30,
                                                      "max_total_tokens": 32}
    assert estimate_cost([], max_tokens=10)["calls"] == 0
