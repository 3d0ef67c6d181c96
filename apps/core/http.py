from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str | None:
    """The client's address as the lockout layer sees it (trusted proxies only)."""
    from axes.helpers import get_client_ip_address

    return get_client_ip_address(request)
