"""How the web tier is served: one set of uvicorn options for `manage.py up`, the README's
production command and the tests' live server, so what is tested is what ships.

uvicorn must never rewrite the client address from `X-Forwarded-For` itself: its default trusts
any header sent from loopback, which let a local client forge its IP (login lockout, audit log).
Django reads forwarded headers as TRUSTED_PROXY_COUNT says (axes/ipware) and the scheme as
TRUST_X_FORWARDED_PROTO says.
"""

UVICORN_OPTIONS: dict = {
    "lifespan": "off",
    "ws": "websockets-sansio",
    "proxy_headers": False,
    "server_header": False,
    # On SIGTERM uvicorn stops accepting, closes open sockets with 1012 (the pages reconnect to
    # another replica) and lets requests in flight finish, but waits for them without end unless
    # bounded: a long streamed answer would outlast a pod's grace period (30 s) and be killed.
    "timeout_graceful_shutdown": 20,
}


def uvicorn_argv(*, host: str, port: int, workers: int, log_level: str = "warning") -> list[str]:
    """`python -m uvicorn ...` arguments with UVICORN_OPTIONS spelled as flags."""
    return ["-m", "uvicorn", "workbench.asgi:application", "--host", host, "--port", str(port),
            "--lifespan", UVICORN_OPTIONS["lifespan"], "--ws", UVICORN_OPTIONS["ws"],
            "--no-proxy-headers", "--no-server-header",
            "--timeout-graceful-shutdown", str(UVICORN_OPTIONS["timeout_graceful_shutdown"]),
            "--log-level", log_level, "--workers", str(workers)]
