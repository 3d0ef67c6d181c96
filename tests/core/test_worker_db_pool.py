"""A threads-pool worker's database pool grows with its concurrency (workbench/celery.py): each of
its N jobs holds a connection and its heartbeat thread another, past the default pool of 10."""

import pytest
from celery.concurrency import get_implementation
from django.conf import settings

from workbench.celery import size_the_database_pool


@pytest.fixture
def pooled(monkeypatch):
    pool = {"min_size": 1, "max_size": 10, "timeout": 10}
    monkeypatch.setitem(settings.DATABASES["default"], "OPTIONS", {"pool": pool})
    monkeypatch.delenv("DB_POOL_MAX_SIZE", raising=False)
    return pool


def test_a_threads_worker_gets_two_connections_a_job_and_a_margin(pooled):
    # As `celery worker --pool threads --concurrency 16` hands them over (celery.bin.worker: "pool", a class).
    size_the_database_pool(options={"pool": get_implementation("threads"), "concurrency": 16})
    assert pooled["max_size"] == 36


@pytest.mark.parametrize("options", [{"pool": get_implementation("prefork"), "concurrency": 16},
                                     {"pool": "threads", "concurrency": 2}, {"concurrency": 16}])
def test_prefork_children_and_small_thread_pools_keep_the_configured_size(pooled, options):
    size_the_database_pool(options=options)
    assert pooled["max_size"] == 10


def test_an_explicit_size_wins(pooled, monkeypatch):
    monkeypatch.setenv("DB_POOL_MAX_SIZE", "10")
    size_the_database_pool(options={"pool": "threads", "concurrency": 16})
    assert pooled["max_size"] == 10
