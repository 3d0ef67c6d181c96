"""The charts' history: queue depth samples kept in Redis, at most one per interval whoever
asks, cut to a bound; request latency and error rate per minute from every web process."""

import time

import pytest

from apps.monitoring import history, http_metrics, selectors


def test_queue_depth_samples_are_taken_at_most_once_per_interval(clean_queue_history):
    assert history.record_queue_depths({"gpu": 3}, at=100.0)
    assert not history.record_queue_depths({"gpu": 4}, at=101.0)  # another process, a moment later
    assert history.queue_depth_samples() == [{"at": 100.0, "waiting": {"gpu": 3}}]


def test_queue_depth_samples_are_cut_to_the_newest(clean_queue_history, monkeypatch):
    monkeypatch.setattr(history, "MAX_SAMPLES", 5)
    for i in range(8):
        history.redis_store.client().delete(history.SAMPLE_LOCK_KEY)  # as if the interval had passed
        history.record_queue_depths({"gpu": i}, at=float(i))
    assert [s["waiting"]["gpu"] for s in history.queue_depth_samples()] == [3, 4, 5, 6, 7]


@pytest.mark.usefixtures("clean_request_window")
def test_latency_and_error_rate_are_kept_per_minute_across_processes():
    for status, seconds in [(200, 0.010), (200, 0.030), (500, 0.050), (200, 0.030)]:
        http_metrics.observe(route="/x/", method="GET", status=status, seconds=seconds)
    http_metrics.flush()
    minutes = http_metrics.minutes(60)
    assert len(minutes) == 61 and minutes[-1].start == int(time.time() // 60) * 60
    # All four fell in one minute, unless the clock crossed a minute between them (then two).
    assert sum(m.requests for m in minutes) == 4 and sum(m.errors for m in minutes) == 1
    assert sum(m.seconds for m in minutes) == pytest.approx(0.120)
    assert all(m.mean_s is None and m.error_rate is None for m in minutes if not m.requests)
    busiest = max(minutes, key=lambda m: m.requests)
    if busiest.requests == 4:
        assert busiest.error_rate == 0.25 and busiest.mean_s == pytest.approx(0.030)


def test_the_dashboard_charts_only_the_last_hour_of_queue_samples(clean_queue_history):
    history.record_queue_depths({"gpu": 1}, at=time.time() - 2 * 3600)
    history.redis_store.client().delete(history.SAMPLE_LOCK_KEY)
    history.record_queue_depths({"gpu": 2})
    assert [s["waiting"]["gpu"] for s in selectors.queue_history()] == [2]
