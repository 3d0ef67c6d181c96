import pytest

from apps.providers import services
from apps.providers.models import AllowedNetwork

SECRET = "sk-canary-Do-Not-Leak-7f3a9c"


@pytest.fixture
def loopback_allowed(site_admin):
    return services.allowlist_add(user=site_admin, network="127.0.0.0/8", note="tests")


@pytest.fixture
def provider(site_admin, loopback_allowed, project):
    """A provider on a loopback address (nothing listens there: for tests that never call it),
    enabled for `project`."""
    made = services.provider_create(user=site_admin, name="Local", base_url="http://127.0.0.1:9/v1", api_key=SECRET,
                                    models=["m1", "m2"], max_retries=0, timeout_s=5)
    services.provider_enable(user=site_admin, provider=made, project_id=project.pk)
    return made


__all__ = ["AllowedNetwork"]


class ScriptedHttp:
    """A plain HTTP server on loopback answering every request with one scripted response, and
    recording what it was sent: for the transport rules (redirects, pinning, errors), not a model."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.requests: list[dict] = []
        self.status, self.headers, self.body = 200, {}, b"{}"

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                outer.requests.append({"method": self.command, "path": self.path, "host": self.headers.get("Host"),
                                       "authorization": self.headers.get("Authorization"),
                                       "body": self.rfile.read(length) if length else b""})
                self.send_response(outer.status)
                for name, value in {"Content-Type": "application/json", **outer.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def script(self, status: int, body: bytes = b"{}", headers: dict | None = None) -> None:
        self.status, self.body, self.headers = status, body, headers or {}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted_http():
    server = ScriptedHttp()
    yield server
    server.stop()


@pytest.fixture
def scripted_provider(site_admin, loopback_allowed, project, scripted_http):
    """A provider whose address is the scripted server, enabled for `project`, model "Scripted/m"."""
    made = services.provider_create(user=site_admin, name="Scripted", api_key=SECRET, models=["m"], max_retries=2,
                                    base_url=f"http://127.0.0.1:{scripted_http.port}/v1", timeout_s=5)
    services.provider_enable(user=site_admin, provider=made, project_id=project.pk)
    return made
