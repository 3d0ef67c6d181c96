"""The official `openai` client for one provider call, pinned to the address netguard checked.

httpx would resolve the host name again when it connects; a name whose answer changed since the
check (DNS rebinding) would then reach an address nobody checked. The transport below sends the
request to the checked address instead, keeping the Host header and, for https, the TLS server
name (SNI and certificate check) of the name, so the provider sees an ordinary request.
Redirects are never followed (a 3xx is an error), environment proxies are ignored (they would
bypass the pin), and the client has its own timeout and retry count from the provider row.
"""

import httpx
import openai

from apps.providers.netguard import CheckedUrl


class PinnedTransport(httpx.HTTPTransport):
    def __init__(self, checked: CheckedUrl, **kwargs) -> None:
        super().__init__(**kwargs)
        self.checked = checked

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if (request.url.host, request.url.port or self.checked.port) != (self.checked.host, self.checked.port):
            # The client only ever builds URLs under the checked base URL; anything else is refused.
            raise httpx.ConnectError(f"refused: {request.url.host} is not the checked provider host")
        # The Host header was set from the name when the request was built; only the socket moves.
        request.url = request.url.copy_with(host=self.checked.pinned)
        if self.checked.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": self.checked.host}
        return super().handle_request(request)


def build_client(checked: CheckedUrl, *, api_key: str, timeout_s: float, max_retries: int) -> openai.OpenAI:
    http_client = httpx.Client(transport=PinnedTransport(checked), follow_redirects=False, trust_env=False,
                               timeout=timeout_s)
    # A keyless local server still gets a placeholder: the client refuses an empty key.
    return openai.OpenAI(base_url=checked.url, api_key=api_key or "none", timeout=timeout_s,
                         max_retries=max_retries, http_client=http_client)
