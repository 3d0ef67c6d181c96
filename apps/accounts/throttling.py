from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle


class TokenRateThrottle(SimpleRateThrottle):
    """Requests per API token (each token has its own budget)."""

    scope = "token"

    def get_cache_key(self, request, view):
        if request.auth is None or not hasattr(request.auth, "key_id"):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.key_id}


class SessionUserRateThrottle(UserRateThrottle):
    """Requests per logged-in person using the API from the browser."""

    def get_cache_key(self, request, view):
        if request.auth is not None:
            return None  # tokens have their own budget
        return super().get_cache_key(request, view)
