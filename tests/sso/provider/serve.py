"""Run the test provider: `python -m tests.sso.provider.serve PORT` (prints "ready" when it listens)."""

import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


class ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def main() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sso.provider.settings"
    import django
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application

    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)
    server = make_server("127.0.0.1", int(sys.argv[1]), get_wsgi_application(), server_class=ThreadingServer,
                         handler_class=QuietHandler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
