"""API plumbing shared by every app: the one mapping from domain errors to HTTP answers."""

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from apps.core.errors import DomainError, PermissionDenied


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        body = {"detail": exc.message}
        if exc.field:
            body["field"] = exc.field
        body.update(getattr(exc, "extra", None) or {})
        if isinstance(exc, PermissionDenied):
            body["missing_permission"] = exc.permission
        response = Response(body, status=exc.status)
        if getattr(exc, "retry_after_s", None):
            response["Retry-After"] = str(exc.retry_after_s)
        return response
    return drf_exception_handler(exc, context)
