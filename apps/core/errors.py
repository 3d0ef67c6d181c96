"""Domain errors raised by services and the policy layer; the web layers map them to HTTP."""


class DomainError(Exception):
    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(DomainError):
    """The object does not exist, or the principal may not know that it does."""

    status = 404

    def __init__(self, message: str = "Not found.") -> None:
        super().__init__(message)


class PermissionDenied(DomainError):
    """The principal can see the object but lacks `permission` on it."""

    status = 403

    def __init__(self, permission: str, message: str | None = None) -> None:
        super().__init__(message or f"You need the '{permission}' permission to do this.")
        self.permission = permission


class Invalid(DomainError):
    """Bad input; `field` names where."""

    status = 400


class Conflict(DomainError):
    status = 409


class Gone(DomainError):
    status = 410


class QuotaExceeded(DomainError):
    """Too much running at once for this person or project: answered 429 with Retry-After."""

    status = 429
    retry_after_s = 60
