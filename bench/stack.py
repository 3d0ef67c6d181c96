"""The set-up the PostgreSQL benchmarks share, and its tear-down, in one place.

`live_stack(DATABASE, prefix=...)` gives a benchmark what it measures against: a fresh PostgreSQL
database (BENCH_PG_URL; its name prefixed with BENCH_DB_PREFIX, empty by default, so that runs by
several people against one server do not collide) and Redis BENCH_LIVE_REDIS_URL (db 5 by default:
the benchmarks' own, flushed) as broker, channel layer and cache; Django set up in this process
against them and migrated (`pool=False`: without a connection pool in this process); a data folder
of its own. The `Stack` it yields makes further databases (`copy_database`: a TEMPLATE copy,
`fresh_database`: an empty one), and starts the production web server (`start_web`: uvicorn as
`manage.py up` starts it), Celery workers (`start_worker`, `start_workers`) and any other child
(`spawn`), each in a process group of its own. On leaving the block, however it is left (an error,
Ctrl-C, SIGTERM), every process the stack started is stopped, last started first (SIGTERM to its
group, SIGKILL after 15 s), every database it made dropped, Redis flushed and the data folder
removed.

`seed_demo` seeds what the serving benchmarks need: a user, a project, the demo model registered
ready in it and a project API token; `seed_dataset` an owner, a project and an empty dataset.
`start_web`/`stop_web` also serve the benchmarks on the embedded default (sync_views),
`embedded_stack` sets Django up in-process on it (dashboard_latency, policy_scale), and
`django_already_set_up`/`rerun_in_child` every benchmark that sets Django up for itself.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432")
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "")
REDIS_URL = os.environ.get("BENCH_LIVE_REDIS_URL", "redis://127.0.0.1:6379/5")
WORKER_START_S = 90


# --- Django in this process ------------------------------------------------------------------------

def django_already_set_up() -> bool:
    from django.conf import settings

    return settings.configured


def rerun_in_child(module: str, names: list[str], args: list[str] = ()) -> list[dict]:
    """Another benchmark configured Django (for SQLite) in this process: run in a fresh one."""
    subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, check=True)
    return [json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text()) for name in names]


def admin_execute(*statements: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG_URL}/postgres", autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def setup_django(database: str, data_dir: str, *, pool: bool = True) -> None:
    """Django in this process on the fresh PostgreSQL database `database` and Redis REDIS_URL
    (broker, channel layer and cache), migrated; with `pool` False, without a connection pool."""
    admin_execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)', f'CREATE DATABASE "{database}"')
    os.environ.update(WORKBENCH_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="workbench.settings",
                      DATABASE_URL=f"{PG_URL}/{database}", REDIS_URL=REDIS_URL)
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    # For this process only: the stack's processes get the caller's DB_POOL, as deployed.
    caller_pool = os.environ.get("DB_POOL")
    if not pool:
        os.environ["DB_POOL"] = "0"
    try:
        django.setup()
    finally:
        if caller_pool is None:
            os.environ.pop("DB_POOL", None)
        else:
            os.environ["DB_POOL"] = caller_pool
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def use_database(name: str) -> None:
    """Point this process's connection at the database `name` (the stack's or one it made)."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name


def clear_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()  # the benchmarks' own database
    client.close()


def session_cookie(user) -> str:
    """A logged-in session for `user`, as a browser would hold it."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


# --- the web server --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(env: dict, *, workers: int = 1) -> tuple[subprocess.Popen, str]:
    """uvicorn exactly as `manage.py up` starts it (`workbench.server.uvicorn_argv`) with `env`, in a
    process group of its own; returns (process, "http://127.0.0.1:port") once /healthz is 200."""
    import requests

    from workbench.server import uvicorn_argv

    port = free_port()
    process = subprocess.Popen([sys.executable, *uvicorn_argv(host="127.0.0.1", port=port, workers=workers)],
                               cwd=ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}")
            try:
                if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                    return process, base
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError("the server did not answer /healthz within 60 s")
    except BaseException:  # Ctrl-C while it starts too: the caller has no process to stop yet
        stop_web(process)
        raise


def stop_web(process: subprocess.Popen) -> None:
    """SIGTERM to the process's group (a server's workers too), SIGKILL if it is still there after 15 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(15)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            pass


# --- the stack ---------------------------------------------------------------------------------------

@dataclass
class Stack:
    """The running stack: its database, data folder, the web server's address once started, every
    database it made and every process started through it (all dropped and stopped when the
    `live_stack` block is left)."""

    database: str
    data_dir: str
    address: str = ""  # "127.0.0.1:port" of the web server last started
    processes: list[subprocess.Popen] = field(default_factory=list)
    databases: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def origin(self) -> str:
        """The Origin a browser on the server's pages sends: the site's own, port included, as the
        websocket handshake's check (apps.core.asgi.SameOriginWebsocket) wants it."""
        return self.url

    @property
    def env(self) -> dict:
        """The environment of the stack's processes: this database, Redis and data folder."""
        env = {**os.environ, "DATABASE_URL": f"{PG_URL}/{self.database}", "REDIS_URL": REDIS_URL,
               "WORKBENCH_DATA_DIR": self.data_dir}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env.pop("CELERY_BROKER_URL", None)
        return env

    def fresh_database(self, name: str) -> str:
        """An empty database `name` (BENCH_DB_PREFIX before it), dropped with the stack; its full name."""
        name = DB_PREFIX + name
        self.databases.append(name)
        admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
        return name

    def copy_database(self, name: str, *, source: str = "") -> str:
        """A TEMPLATE copy of the stack's database (or of `source`, a full name) as `name`
        (BENCH_DB_PREFIX before it), dropped with the stack; its full name. This process's connection
        is closed first: PostgreSQL copies only a database nobody is connected to (so the stack must
        be set up with `pool=False`)."""
        from django.db import connection

        connection.close()
        name = DB_PREFIX + name
        self.databases.append(name)
        admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
                      f'CREATE DATABASE "{name}" TEMPLATE "{source or self.database}"')
        return name

    def spawn(self, argv: list[str], **popen: Any) -> subprocess.Popen:
        """Start `argv` (in the repository, with `env`, unless `popen` says otherwise) in a process
        group of its own, stopped with the stack."""
        process = subprocess.Popen(argv, **{"cwd": ROOT, "env": self.env, **popen}, start_new_session=True)
        self.processes.append(process)
        return process

    def start_web(self, *, database: str = "", workers: int = 1, env: dict | None = None) -> str:
        """uvicorn as `manage.py up` starts it, `workers` processes, on the stack's database (or
        `database`), `env` added to the stack's; returns "127.0.0.1:port" once /healthz is 200."""
        environment = {**self.env, **(env or {})}
        if database:
            environment["DATABASE_URL"] = f"{PG_URL}/{database}"
        if workers > 1:  # as manage.py up runs them: request metrics shared through files
            environment["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="prometheus-", dir=self.data_dir)
        process, base = start_web(environment, workers=workers)
        self.processes.append(process)
        self.address = base.removeprefix("http://")
        return self.address

    @staticmethod
    def worker_hostname(name: str, n: int = 0) -> str:
        """The Celery hostname of the `n`th worker start_workers starts as `name`."""
        return f"{name}-{n}-{os.getpid()}@{socket.gethostname()}"

    def start_workers(self, count: int, *, name: str = "bench-inference", queue: str = "inference",
                      pool: str = "threads", concurrency: int = 8, env: dict | None = None) -> list[subprocess.Popen]:
        """`count` Celery worker processes on `queue`, each a `pool` pool of `concurrency` (the
        inference worker of `manage.py up`: threads, 16), `env` added to the stack's; returns once
        every one answers a ping."""
        from workbench.celery import app

        hostnames = [self.worker_hostname(name, n) for n in range(count)]
        workers = [self.spawn(
            [sys.executable, "-m", "celery", "-A", "workbench", "--quiet", "worker", "-Q", queue, "--pool", pool,
             "--concurrency", str(concurrency), "--hostname", hostname, "--loglevel", "WARNING",
             "--without-mingle", "--without-gossip"], env={**self.env, **(env or {})}, stdin=subprocess.DEVNULL)
            for hostname in hostnames]
        deadline = time.monotonic() + WORKER_START_S
        while len(app.control.ping(timeout=1, destination=hostnames)) < count:
            if any(worker.poll() is not None for worker in workers) or time.monotonic() > deadline:
                raise RuntimeError(f"{count} {queue} worker(s) did not all start")
        return workers

    def start_worker(self, *, name: str = "bench-inference", queue: str = "inference",
                     threads: int = 16) -> subprocess.Popen:
        """One Celery worker on `queue`, threads pool of `threads`; returns once it answers a ping."""
        return self.start_workers(1, name=name, queue=queue, concurrency=threads)[0]

    def stop(self, processes: list[subprocess.Popen] | None = None) -> None:
        """Stop `processes` (by default every process started through the stack), last started first."""
        for process in reversed(list(self.processes if processes is None else processes)):
            self.processes.remove(process)
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    try:
                        pipe.close()
                    except OSError:
                        pass
            stop_web(process)

    def tear_down(self) -> None:
        """Close this process's connection (when Django got that far), drop the stack's databases,
        flush Redis, remove the data folder."""
        try:
            from django.db import connection

            connection.close()
        except Exception:  # noqa: BLE001 - Django may not be set up if the database could not be made
            pass
        for name in reversed(self.databases):
            admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        clear_redis()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `finally` that stops the stack


@contextmanager
def live_stack(database: str, *, prefix: str, pool: bool = True) -> Iterator[Stack]:
    """Set up the stack on the fresh database `database` (BENCH_DB_PREFIX before it; data folder
    named after `prefix`); tear everything down when the block is left, however it is left.
    `pool=False`: this process holds no idle connection (a pool's would block `copy_database`, and
    keep it on one database after `use_database`); without a pool, each request of an in-process
    client opens a connection of its own."""
    stack = Stack(database=DB_PREFIX + database, data_dir=tempfile.mkdtemp(prefix=prefix))
    stack.databases.append(stack.database)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if in_main else None
    try:
        setup_django(stack.database, stack.data_dir, pool=pool)
        clear_redis()
        yield stack
    finally:
        if in_main:  # a second SIGTERM must not cut the tear-down short (it is bounded: 30 s a process)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            stack.stop()
        finally:
            stack.tear_down()
            if in_main:
                signal.signal(signal.SIGTERM, previous)


@contextmanager
def embedded_stack(*, prefix: str) -> Iterator[str]:
    """Django in this process on the embedded default (SQLite and the embedded Redis in a fresh data
    folder named after `prefix`), as the test client finds it, migrated; yields the data folder, which
    is removed with Redis stopped when the block is left."""
    data_dir = tempfile.mkdtemp(prefix=prefix)
    os.environ.update(WORKBENCH_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="workbench.settings")
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    from workbench.embedded import EmbeddedRedis

    redis = EmbeddedRedis(data_dir)
    redis.start()
    try:
        setup_test_environment()
        call_command("migrate", verbosity=0)
        yield data_dir
    finally:
        redis.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# --- seeds ---------------------------------------------------------------------------------------------

@dataclass
class Demo:
    user: Any
    project: Any
    model: Any  # the demo model's RegisteredModel
    key: str  # the project API token; "" when none was made


def seed_demo(model_dir, *, project: str, model: str = "Demo", username: str = "bench-owner",
              token: str | None = "bench") -> Demo:
    """A user `username`, their project `project`, the demo model at `model_dir` registered ready in it
    as `model` and, unless `token` is None, a project API token of that name (view and generate, a day)."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.accounts.services import token_create
    from apps.projects.services import project_create
    from apps.registry.models import RegisteredModel
    from workers.models import inspect_model

    user = get_user_model().objects.create_user(username, password="x" * 12)
    owned = project_create(user=user, name=project)
    registered = RegisteredModel.objects.create(project=owned, name=model, format="hf_dir",
                                                source_path=str(model_dir), weights_path=str(model_dir),
                                                status="ready", info=inspect_model(model_dir).as_dict())
    key = ""
    if token is not None:
        _, key = token_create(user=user, name=token, permissions=["project.view", "model.view", "model.generate"],
                              project=owned, expires_at=timezone.now() + timedelta(days=1))
    return Demo(user=user, project=owned, model=registered, key=key)


def seed_dataset():
    """A user "bench-owner", their project "Bench" and an empty dataset "rows" in it: (user, project, dataset)."""
    from django.contrib.auth import get_user_model

    from apps.datasets.services import dataset_create
    from apps.projects.services import project_create

    owner = get_user_model().objects.create_user("bench-owner", password="x" * 12)
    project = project_create(user=owner, name="Bench")
    dataset = dataset_create(user=owner, project=project, name="rows")
    return owner, project, dataset
