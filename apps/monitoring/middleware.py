import time

from apps.monitoring import http_metrics


class RequestMetricsMiddleware:
    """Times every request Django handles and counts it by route pattern, method and status
    class. Placed right after WhiteNoise: static files are not counted, everything else is
    (sessions, auth, CSRF, the view, the error pages of the middleware below)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)  # an exception below arrives here as a 500 response
        match = getattr(request, "resolver_match", None)
        route = "/" + match.route if match is not None else http_metrics.UNMATCHED_ROUTE
        # A streamed body is still being sent: this measures the time to its first byte.
        http_metrics.observe(route=route, method=request.method, status=response.status_code,
                             seconds=time.perf_counter() - started)
        return response
