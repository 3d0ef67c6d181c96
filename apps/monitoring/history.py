"""A bounded history of queue depths in Redis, for the dashboard's chart.

Samples are taken by whoever looks (each open dashboard, the periodic alert task), but at most
one per SAMPLE_EVERY_S across every process (a Redis lock that expires), and the list is cut
to MAX_SAMPLES: an hour at the sampling rate, whatever the number of watchers. Request latency
and error rate need no sampling: http_metrics keeps them per minute already.
"""

from __future__ import annotations

import json
import time

from apps.monitoring import redis_store

QUEUE_SAMPLES_KEY = redis_store.KEY_PREFIX + "history:queues"
SAMPLE_LOCK_KEY = redis_store.KEY_PREFIX + "history:queues:lock"
SAMPLE_EVERY_S = 10
MAX_SAMPLES = 360  # one hour at SAMPLE_EVERY_S


def record_queue_depths(waiting: dict[str, int], *, at: float | None = None) -> bool:
    """Append one sample unless another was taken less than SAMPLE_EVERY_S ago; True when this
    one was kept. Raises redis.RedisError when Redis cannot be reached."""
    client = redis_store.client()
    if not client.set(SAMPLE_LOCK_KEY, "1", nx=True, ex=SAMPLE_EVERY_S):
        return False
    sample = json.dumps({"at": time.time() if at is None else at, "waiting": waiting})
    with client.pipeline(transaction=True) as pipe:
        pipe.rpush(QUEUE_SAMPLES_KEY, sample)
        pipe.ltrim(QUEUE_SAMPLES_KEY, -MAX_SAMPLES, -1)
        pipe.execute()
    return True


def queue_depth_samples() -> list[dict]:
    """The kept samples, oldest first: {"at": epoch seconds, "waiting": {queue: messages}}.
    Raises redis.RedisError when Redis cannot be reached."""
    return [json.loads(sample) for sample in redis_store.client().lrange(QUEUE_SAMPLES_KEY, 0, -1)]
