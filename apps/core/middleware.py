
# No inline script and no eval: injected markup in user data cannot run. Inline styles are
# allowed because Plotly (and Swagger UI) set style attributes through setAttribute, which
# CSP counts as inline; all user text is escaped, so styles carry no user input.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response




class DomainErrorMiddleware:
    """Pages raise the same domain errors as services; this turns them into friendly pages."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        from django.shortcuts import render

        from apps.core.errors import DomainError, NotFound, PermissionDenied

        if not isinstance(exception, DomainError):
            return None
        if isinstance(exception, NotFound):
            return render(request, "404.html", status=404)
        context = {"message": exception.message,
                   "missing_permission": getattr(exception, "permission", None)}
        template = "403.html" if isinstance(exception, PermissionDenied) else "error.html"
        return render(request, template, context, status=exception.status)
