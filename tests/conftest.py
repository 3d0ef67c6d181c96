"""Fixtures every test module shares: services, personas, a live ASGI server, a browser.

Personas (one project, one member per built-in role, plus an outsider):
owner, admin, scientist, annotator, viewer — members of `project`; outsider — member of
`other_project` only.
"""

import os
import socket
import threading
import time
from pathlib import Path

import pytest
from channels.layers import ChannelLayerManager, channel_layers
from django.conf import settings
from django.db.backends.postgresql.operations import DatabaseOperations as PostgresOperations

# Shared fixtures, used beyond their own folders: an annotation dataset and a second annotator;
# fine-tune jobs' tiny registered model and split QA version.
from tests.annotation.fixtures import review_version, second_annotator  # noqa: F401
from tests.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.training.fixtures import qa_version, tiny_model  # noqa: F401
from workbench.embedded import EmbeddedRedis

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]
PASSWORD = "correct-horse-battery-9"


class PerThreadChannelLayers(ChannelLayerManager):
    """Channel layers per thread. A Redis channel layer binds its receive lock and buffers to the
    event loop that first receives, and production has one loop per process. Tests have several at
    once (the live server's thread, each socket scenario's loop under async_to_sync, the events
    publisher's thread): one layer per thread is one layer per loop, as in production, instead of
    popping a shared layer that another thread may be using."""

    _local = threading.local()

    @property
    def backends(self) -> dict:
        if not hasattr(self._local, "backends"):
            self._local.backends = {}
        return self._local.backends

    @backends.setter
    def backends(self, value: dict) -> None:
        self._local.backends = value


channel_layers.__class__ = PerThreadChannelLayers
channel_layers.__dict__.pop("backends", None)


def _flush_by_delete(ops, style, tables, *, reset_sequences=False, allow_cascade=False):
    """PostgreSQL's flush between transactional tests, as DELETEs in one transaction with the foreign keys
    deferred (Django creates them all DEFERRABLE) instead of one TRUNCATE: TRUNCATE gives each of the
    ~80 tables and their indexes new files, half a second a test across the suite's ~700 such tests,
    while deleting the few rows a test wrote takes milliseconds. The tables are locked first, as
    TRUNCATE locks them: a writer still busy from the test before (a worker's task, a server thread)
    is waited for and cannot add a row behind the deletes. The tables end as empty; sequences go on
    counting, as they do after TRUNCATE without RESTART IDENTITY."""
    if reset_sequences or not tables:
        return _truncate_flush(ops, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
    quoted = [ops.quote_name(table) for table in tables]
    return ["SET CONSTRAINTS ALL DEFERRED", f"LOCK TABLE {', '.join(quoted)} IN ACCESS EXCLUSIVE MODE",
            *(f"DELETE FROM {table}" for table in quoted)]


_truncate_flush = PostgresOperations.sql_flush
PostgresOperations.sql_flush = _flush_by_delete

# Set by run.sh for the second of its two runs (the embedded default after DATABASE_URL/REDIS_URL's):
# the tests that reach no database then ran already, on the same code, in the first.
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_setup"}


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("WORKBENCH_TESTS_DATABASE_ONLY"):
        return
    kept, without_database = [], []
    for item in items:
        reaches_database = (DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
                            or item.get_closest_marker("django_db") is not None)
        (kept if reaches_database else without_database).append(item)
    if without_database:
        config.hook.pytest_deselected(items=without_database)
        items[:] = kept


@pytest.fixture(scope="session", autouse=True)
def _no_stale_job_outputs():
    """Every session's test database numbers jobs from 1 again while ARTIFACT_ROOT stays: a job-1 folder
    left by an earlier session would make this session's job 1 resume its checkpoints and time nothing,
    and this session's export 1 find an earlier session's file beside its own."""
    import shutil

    from django.conf import settings

    for folder in ("training", "model-exports"):
        shutil.rmtree(Path(settings.ARTIFACT_ROOT) / folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def redis_service():
    """The embedded Redis when no REDIS_URL is configured (CI's real Redis otherwise)."""
    if not settings.EMBEDDED_REDIS:
        yield None
        return
    server = EmbeddedRedis(settings.DATA_DIR)
    server.start()
    yield server
    server.stop()


# --- personas -----------------------------------------------------------------------------

@pytest.fixture
def project(db):
    return ProjectFactory(name="Alpha")


@pytest.fixture
def other_project(db):
    return ProjectFactory(name="Bravo")


def _member(project, role, username):
    user = UserFactory(username=username)
    MembershipFactory(project=project, user=user, role=role)
    return user


@pytest.fixture
def owner(project):
    return _member(project, "owner", "olivia")


@pytest.fixture
def admin(project, owner):
    return _member(project, "admin", "adam")


@pytest.fixture
def scientist(project, owner):
    return _member(project, "scientist", "sofia")


@pytest.fixture
def annotator(project, owner):
    return _member(project, "annotator", "anna")


@pytest.fixture
def viewer(project, owner):
    return _member(project, "viewer", "victor")


@pytest.fixture
def outsider(other_project):
    return _member(other_project, "owner", "oscar")


@pytest.fixture
def site_admin(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


# --- live server and browser -----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveAsgiServer:
    """The real ASGI application (HTTP + websockets) served by uvicorn in a thread."""

    def __init__(self):
        import uvicorn

        from workbench.asgi import application
        from workbench.server import UVICORN_OPTIONS

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, log_level="warning",
                                **UVICORN_OPTIONS)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self):
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("live ASGI server did not start")
            time.sleep(0.02)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session")
def _asgi_server_session(django_db_setup, django_db_blocker, redis_service):
    with django_db_blocker.unblock():
        server = LiveAsgiServer()
        server.start()
        yield server
        server.stop()


@pytest.fixture
def live_asgi(_asgi_server_session, transactional_db):
    """Base URL of the live ASGI server; the test's data is committed so the server sees it."""
    return _asgi_server_session.url


def browser_login(page, username, password=PASSWORD):
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2 at production strength costs ~0.3 s per hash; tests hash hundreds of times."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def clear_cache():
    """Rate-limit counters, serving limits and open-socket counts live in the cache's Redis; each test
    starts with a fresh budget. Only those keys go: the same Redis carries the Celery broker and the
    channel layer."""
    from django.core.cache import cache

    from apps.serving.limits import KEY_PREFIX as SERVING_LIMITS

    client = cache._cache.get_client(write=True)
    prefix = settings.CACHES["default"]["KEY_PREFIX"]
    keys = [*client.scan_iter(match=f"{prefix}:1:*", count=1000), *client.scan_iter(match=f"{prefix}:ws:*", count=1000),
            *client.scan_iter(match=f"{SERVING_LIMITS}*", count=1000)]
    if keys:
        client.delete(*keys)


def die_with_the_test_run() -> None:
    """In the child: a session of its own (Ctrl-C reaches pytest only) and SIGKILL from the kernel
    when pytest dies, however it dies (a killed run left its workers running before)."""
    import ctypes
    import signal

    os.setsid()
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def child_process_env() -> dict[str, str]:
    """The environment for a process the test starts (a worker, a server) to use the test database."""
    from django.db import connection

    db = connection.settings_dict
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    if db["ENGINE"].endswith("sqlite3"):
        env["SQLITE_PATH"] = str(db["NAME"])
    else:
        env["DATABASE_URL"] = (f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:"
                               f"{db['PORT'] or 5432}/{db['NAME']}")
    return env


def _start_worker(*, queues: str, pool: str, concurrency: int, name: str, env: dict[str, str] | None = None):
    """A real Celery worker process on the test database; `env`: more of its environment."""
    import subprocess
    import sys

    env = {**child_process_env(), **(env or {})}
    # Jobs whose worker is killed are taken over within seconds, not the production minute and a half.
    env.setdefault("TRAINING_HEARTBEAT_S", "0.5")
    env.setdefault("TRAINING_HEARTBEAT_STALE_S", "3")
    hostname = f"{name}-{os.getpid()}@%h"
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workbench", "--quiet", "worker", "-Q", queues,
         "--concurrency", str(concurrency), "--pool", pool, "--hostname", hostname, "--loglevel", "WARNING",
         "--without-mingle", "--without-gossip"],
        env=env, cwd=settings.BASE_DIR, preexec_fn=die_with_the_test_run)
    from workbench.celery import app

    deadline = time.monotonic() + 60
    while not app.control.ping(timeout=1, destination=[hostname.replace("%h", socket.gethostname())]):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the test Celery worker {name} did not start")
    return process


def _stop_worker(process) -> None:
    import subprocess

    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker, redis_service):
    """A real Celery worker process consuming `default` and `gpu`, on the test database."""
    process = _start_worker(queues="default,gpu", pool="prefork", concurrency=1, name="test-worker")
    yield process
    _stop_worker(process)


@pytest.fixture(scope="session")
def inference_worker(django_db_setup, django_db_blocker, redis_service):
    """A real `inference` worker as production runs it: threads sharing one model cache and batcher."""
    # Every test serves models of its own: the engine's figures keep a label for each of them.
    process = _start_worker(queues="inference", pool="threads", concurrency=4, name="test-inference",
                            env={"INFERENCE_METRIC_SERIES_MAX": "100000"})
    yield process
    _stop_worker(process)


@pytest.fixture(scope="session")
def demo_model_dir(tmp_path_factory) -> Path:
    """The demo model converted once per session into a safetensors directory."""
    from workers.models import DemoModelMissing, convert_gguf_to_safetensors, demo_model_gguf

    try:
        gguf = demo_model_gguf()
    except DemoModelMissing as exc:
        pytest.fail(f"the demo model is part of the set-up: {exc}")
    return convert_gguf_to_safetensors(gguf, tmp_path_factory.mktemp("demo") / "smollm2-135m-instruct")


@pytest.fixture
def demo_model(project, owner, demo_model_dir):
    """The demo model (converted once per session), registered ready in `project`: slow enough on a
    CPU (tens of ms a token) that an answer can be stopped while it streams."""
    from apps.registry.models import RegisteredModel
    from workers.models import inspect_model

    info = inspect_model(demo_model_dir).as_dict()
    return RegisteredModel.objects.create(project=project, name="SmolLM2 demo", format="hf_dir",
                                          source_path=str(demo_model_dir), weights_path=str(demo_model_dir),
                                          status="ready", info=info, created_by=owner)


def wait_for(predicate, timeout: float = 30, interval: float = 0.1, what: str = "condition"):
    """Poll until predicate() is truthy (real asynchronous work: a worker, a socket)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
