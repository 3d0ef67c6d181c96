"""Helpers for server-rendered pages that call services."""

from collections.abc import Callable
from typing import TypeVar

from django import forms

from apps.core.errors import Conflict, Invalid

T = TypeVar("T")


def run_service(form: forms.Form, call: Callable[[], T]) -> T | None:
    """Call a service; show its input errors on the form (inline, on the named field).
    Permission and not-found errors are left to the middleware's 403/404 pages."""
    try:
        return call()
    except (Invalid, Conflict) as exc:
        field = exc.field if exc.field in form.fields else None
        form.add_error(field, exc.message)
        return None
