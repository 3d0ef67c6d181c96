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
