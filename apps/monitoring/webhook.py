"""POSTing alerts to the operator's webhook (settings.ALERT_WEBHOOK_URL). The URL comes only
from the server's configuration, never from a user; redirects are not followed, so nothing is
sent anywhere but the configured host."""

import json
import logging
import urllib.error
import urllib.request
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

TIMEOUT_S = 3.0


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # the 3xx is then raised as an HTTPError: logged like any other failure


_opener = urllib.request.build_opener(_NoRedirects)


def is_usable(url: str | None) -> bool:
    if not url:
        return False
    parts = urlsplit(url)
    return parts.scheme in {"http", "https"} and bool(parts.hostname)


def webhook_post(url: str, payload: dict) -> bool:
    """POST `payload` as JSON; True when the receiver answered 2xx. Failures are logged,
    never raised: an alert must not break the evaluation that found it."""
    if not is_usable(url):
        logger.error("ALERT_WEBHOOK_URL must be an http(s) URL with a host; alerts are not sent")
        return False
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "workbench-alerts"})
    host = urlsplit(url).hostname
    try:
        with _opener.open(request, timeout=TIMEOUT_S) as response:
            return 200 <= response.status < 300
    except urllib.error.HTTPError as exc:
        logger.warning("alert webhook at %s answered %s", host, exc.code)
    except (urllib.error.URLError, OSError) as exc:  # refused, unresolvable, timed out, TLS
        logger.warning("alert webhook at %s could not be reached: %s", host, getattr(exc, "reason", exc))
    return False
