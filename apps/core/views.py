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


def is_openai_path(path: str) -> bool:
    """The OpenAI-compatible API (apps/serving/urls_openai.py): its clients read OpenAI's error shape."""
    return path == "/v1" or path.startswith("/v1/")


def openai_error(message: str, kind: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def not_found(request: HttpRequest, exception=None) -> HttpResponse:
    if is_openai_path(request.path):
        return JsonResponse(openai_error(f"Unknown path {request.path[:200]}: this server has /v1/models, "
                                              "/v1/chat/completions and /v1/completions.",
                                         "invalid_request_error", "unknown_url"), status=404)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_openai_path(request.path):
        return JsonResponse(openai_error("Server error.", "server_error"), status=500)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Server error."}, status=500)
    return render(request, "500.html", status=500)
