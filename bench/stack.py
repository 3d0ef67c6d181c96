"""The live stack of the serving and live benchmarks, set up and torn down in one place.

`live_stack(DATABASE, prefix=...)` gives a benchmark what it measures against: a fresh PostgreSQL
database (BENCH_PG_URL) and Redis BENCH_LIVE_REDIS_URL (db 5 by default: the live benchmarks' own,
flushed) as broker, channel layer and cache; Django set up in this process against them and
migrated; a data folder of its own. The `Stack` it yields starts the production web server
(`start_web`: uvicorn as `manage.py up` starts it, bench/server.py), Celery workers (`start_worker`)
and any other child (`spawn`), each in a process group of its own. On leaving the block, however it
is left (an error, Ctrl-C, SIGTERM), every process the stack started is stopped, last started first
(SIGTERM to its group, SIGKILL after 15 s), the database dropped, Redis flushed and the data folder
removed.

`seed_demo` seeds what most of them need: a user, a project, the demo model registered ready in it
and a project API token.
"""

from __future__ import annotations

import os
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
from typing import Any

from bench.import_jsonl import PG_URL, ROOT, admin_execute, tear_down
from bench.server import start_web, stop_web

REDIS_URL = os.environ.get("BENCH_LIVE_REDIS_URL", "redis://127.0.0.1:6379/5")
WORKER_START_S = 90


def setup_django(database: str, data_dir: str) -> None:
    """A fresh PostgreSQL database, Redis REDIS_URL for broker, channel layer and cache; migrate."""
    admin_execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)', f'CREATE DATABASE "{database}"')
    os.environ.update(WORKBENCH_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="workbench.settings",
                      DATABASE_URL=f"{PG_URL}/{database}", REDIS_URL=REDIS_URL)
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def clear_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()  # the live benchmarks' own database
    client.close()


def session_cookie(user) -> str:
    """A logged-in session for `user`, as a browser would hold it."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


@dataclass
class Stack:
    """The running stack: its database, data folder, the web server's address once started, and
    every process started through it (stopped when the `live_stack` block is left)."""

    database: str
    data_dir: str
    address: str = ""  # "127.0.0.1:port" of the web server, once started
    processes: list[subprocess.Popen] = field(default_factory=list)

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

    def spawn(self, argv: list[str], **popen: Any) -> subprocess.Popen:
        """Start `argv` (in the repository, with `env`, unless `popen` says otherwise) in a process
        group of its own, stopped with the stack."""
        process = subprocess.Popen(argv, **{"cwd": ROOT, "env": self.env, **popen}, start_new_session=True)
        self.processes.append(process)
        return process

    def start_web(self) -> str:
        """uvicorn as `manage.py up` starts it (one process); returns "127.0.0.1:port" once /healthz is 200."""
        process, base = start_web(self.env)
        self.processes.append(process)
        self.address = base.removeprefix("http://")
        return self.address

    def start_worker(self, *, name: str = "bench-inference", queue: str = "inference",
                     threads: int = 8) -> subprocess.Popen:
        """A Celery worker on `queue`, threads pool of `threads` (the inference worker of `manage.py up`
        has 8); returns once it answers a ping."""
        from workbench.celery import app

        hostname = f"{name}-{os.getpid()}@{socket.gethostname()}"
        process = self.spawn(
            [sys.executable, "-m", "celery", "-A", "workbench", "--quiet", "worker", "-Q", queue, "--pool",
             "threads", "--concurrency", str(threads), "--hostname", hostname, "--loglevel", "WARNING",
             "--without-mingle", "--without-gossip"], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + WORKER_START_S
        while not app.control.ping(timeout=1, destination=[hostname]):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {queue} worker did not start")
        return process

    def stop(self) -> None:
        """Stop every process started through the stack, last started first."""
        while self.processes:
            process = self.processes.pop()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    try:
                        pipe.close()
                    except OSError:
                        pass
            stop_web(process)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `finally` that stops the stack


@contextmanager
def live_stack(database: str, *, prefix: str) -> Iterator[Stack]:
    """Set up the stack on the fresh database `database` (data folder named after `prefix`); tear
    everything down when the block is left, however it is left."""
    stack = Stack(database=database, data_dir=tempfile.mkdtemp(prefix=prefix))
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if in_main else None
    try:
        setup_django(database, stack.data_dir)
        clear_redis()
        yield stack
    finally:
        if in_main:  # a second SIGTERM must not cut the tear-down short (it is bounded: 30 s a process)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            stack.stop()
        finally:
            tear_down(database, data_dir=stack.data_dir, clear=clear_redis)
            if in_main:
                signal.signal(signal.SIGTERM, previous)


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
