from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from apps.core.readiness import run_checks


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and answering."""
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """Database, broker and channel layer reachable: safe to route traffic here."""
    checks = run_checks()
    ready = all(outcome == "ok" for outcome in checks.values())
    return JsonResponse({"status": "ok" if ready else "unavailable", "checks": checks},
                        status=200 if ready else 503)


def home(request: HttpRequest) -> HttpResponse:
    return redirect("projects:list" if request.user.is_authenticated else "accounts:login")


def not_found(request: HttpRequest, exception=None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Server error."}, status=500)
    return render(request, "500.html", status=500)
