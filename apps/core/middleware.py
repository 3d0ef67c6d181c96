
# No inline script or style and no eval: injected markup in user data cannot run.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])

# Vendored third-party UIs that set style attributes at run time (never scripts).
RELAXED_STYLE_PATHS = ("/api/docs/",)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            policy = CONTENT_SECURITY_POLICY
            if request.path.startswith(RELAXED_STYLE_PATHS):
                policy = policy.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
            response["Content-Security-Policy"] = policy
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
