"""memoized(): a pure computation kept in the shared cache (real Redis) under its inputs."""

import uuid

from apps.core.memo import memoized


def test_the_same_inputs_compute_once_and_other_inputs_compute_again():
    kind = f"test-{uuid.uuid4()}"  # a kind of its own: no entry left by another run
    runs = []

    def compute(value):
        runs.append(value)
        return {"doubled": value * 2}

    assert memoized(kind, [1, {"b": 2, "a": 1}], lambda: compute(1)) == {"doubled": 2}
    assert memoized(kind, [1, {"a": 1, "b": 2}], lambda: compute(1)) == {"doubled": 2}  # key order does not matter
    assert runs == [1]
    assert memoized(kind, [2, {"a": 1, "b": 2}], lambda: compute(2)) == {"doubled": 4}
    assert memoized(f"{kind}-other", [1, {"a": 1, "b": 2}], lambda: compute(1)) == {"doubled": 2}
    assert runs == [1, 2, 1]


def test_by_worker_sends_the_computation_once_per_inputs_and_shows_the_subjects_newest_meanwhile():
    from celery import current_app

    from apps.core.memo import memoized_by_worker

    kind, queue = f"test-{uuid.uuid4()}", f"test-memo-{uuid.uuid4()}"  # a queue no worker consumes
    with current_app.connection_for_write() as connection:
        client = connection.default_channel.client
        try:
            ask = lambda inputs: memoized_by_worker(kind, "subject-1", inputs, task="test.compute",  # noqa: E731
                                                    args=[7], queue=queue)
            assert ask([1]) == (None, False)  # nothing yet: the page says it is being computed
            assert ask([1]) == (None, False)
            assert client.llen(queue) == 1  # asked of a worker once, not once per page view

            memoized(kind, [1], lambda: {"n": 1}, subject="subject-1")  # as the worker does
            assert ask([1]) == ({"n": 1}, True)
            assert ask([2]) == ({"n": 1}, False)  # new inputs: the newest numbers, while the next are computed
            assert client.llen(queue) == 2
        finally:
            client.delete(queue)
