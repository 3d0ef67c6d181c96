"""Where the server may send a request to a provider (server-side request forgery rules).

A base URL is http(s) with a host and nothing else surprising (no user:password@, no
fragment). Its host name is resolved and *every* address is checked: loopback, private,
link-local, shared, reserved, multicast and unspecified addresses are refused unless site staff
put them in the allowlist (AllowedNetwork). Public addresses need https: the API key would
otherwise cross the internet in clear. The check runs when a provider is saved and again on
every call, and the call is pinned to the address just checked (apps/providers/client.py), so
a name that resolves elsewhere a moment later (DNS rebinding) is not followed.
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from apps.core.errors import Invalid

MAX_URL_LENGTH = 500
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class CheckedUrl:
    url: str  # normalised: no trailing slash
    scheme: str
    host: str  # as written (a name, or an address without brackets)
    port: int
    addresses: tuple[str, ...]  # every address the host resolved to, all of them allowed

    @property
    def pinned(self) -> str:
        return self.addresses[0]


def parse_network(value: str, field: str = "network") -> str:
    """A CIDR range (a bare address is a /32 or /128), normalised; Invalid naming `field`."""
    if not isinstance(value, str) or not value.strip() or len(value) > 64:
        raise Invalid("Give an address or a range in CIDR form, e.g. 10.0.0.5 or 10.0.0.0/24.", field=field)
    try:
        network = ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        raise Invalid(f"{value.strip()[:64]!r} is not an address or a CIDR range.", field=field) from None
    return str(network)


def _plain(address: Address) -> Address:
    """An IPv4 address hidden in IPv6 (::ffff:127.0.0.1, 64:ff9b::/96 or 6to4) is judged as itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped:
            return address.ipv4_mapped
        if address.sixtofour:
            return address.sixtofour
        if address in ipaddress.ip_network("64:ff9b::/96"):
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def is_public(address: Address) -> bool:
    address = _plain(address)
    return address.is_global and not address.is_multicast


def allowed(address: Address, allowlist) -> bool:
    address = _plain(address)
    return any(address in network for network in allowlist)


def allowlist_networks() -> list:
    from apps.providers.models import AllowedNetwork

    return [ipaddress.ip_network(n) for n in AllowedNetwork.objects.values_list("network", flat=True)]


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        raise Invalid(f"The host name {host!r} does not resolve.", field="base_url") from None
    return list(dict.fromkeys(info[4][0].split("%")[0] for info in infos))  # order kept, duplicates gone


def check_base_url(value, *, allowlist=None, field: str = "base_url") -> CheckedUrl:
    """The URL parsed and its addresses checked; Invalid naming `field` with the reason otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid("Give the provider's base URL, e.g. https://api.openai.com/v1.", field=field)
    value = value.strip()
    if len(value) > MAX_URL_LENGTH:
        raise Invalid(f"The base URL is at most {MAX_URL_LENGTH} characters.", field=field)
    if any(ord(c) < 33 or ord(c) == 127 for c in value):
        raise Invalid("The base URL may not contain spaces or control characters.", field=field)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise Invalid(f"The base URL is malformed: {exc}.", field=field) from None
    if parts.scheme not in ("http", "https"):
        raise Invalid(f"The base URL must start with https:// (or http:// for an allowlisted address), "
                      f"not {parts.scheme + ':' if parts.scheme else 'nothing'}.", field=field)
    if not parts.hostname:
        raise Invalid("The base URL has no host.", field=field)
    if parts.username is not None or parts.password is not None:
        raise Invalid("Put the API key in its own field, not in the base URL.", field=field)
    if parts.fragment or parts.query:
        raise Invalid("The base URL takes no query string or fragment.", field=field)
    port = port or (443 if parts.scheme == "https" else 80)
    allowlist = allowlist_networks() if allowlist is None else allowlist
    addresses = resolve(parts.hostname, port)
    if not addresses:
        raise Invalid(f"The host name {parts.hostname!r} does not resolve.", field=field)
    all_allowlisted = True
    for text in addresses:
        address = ipaddress.ip_address(text)
        if allowed(address, allowlist):
            continue
        all_allowlisted = False
        if not is_public(address):
            named = "" if parts.hostname == text else f"{parts.hostname} resolves to "
            raise Invalid(f"{named}{text} is a loopback, private, link-local or reserved address; "
                          "a site admin must allowlist it first.", field=field)
    if parts.scheme == "http" and not all_allowlisted:
        raise Invalid("A public provider is reached over https only: the API key would travel in clear.",
                      field=field)
    url = value.rstrip("/")
    return CheckedUrl(url=url, scheme=parts.scheme, host=parts.hostname, port=port, addresses=tuple(addresses))
