"""The address rules for providers (server-side request forgery): what a base URL may be, and
every address its host resolves to checked against the public ranges and the admin's allowlist."""

import ipaddress

import pytest

from apps.core.errors import Invalid
from apps.providers import netguard

pytestmark = pytest.mark.timeout(30)

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/v1", "http://[::1]:8000/v1", "http://0x7f000001/v1", "http://2130706433/v1",
    "http://[::ffff:127.0.0.1]/v1", "http://169.254.169.254/latest", "https://10.1.2.3/v1", "https://192.168.0.1/v1",
    "https://172.16.0.1/v1", "https://100.64.0.1/v1", "https://0.0.0.0/v1", "https://[fe80::1]/v1",
    "https://[fd00::1]/v1", "https://224.0.0.1/v1", "https://240.0.0.1/v1",
])
def test_loopback_private_link_local_and_reserved_addresses_are_refused(url):
    with pytest.raises(Invalid) as refused:
        netguard.check_base_url(url, allowlist=[])
    assert refused.value.field == "base_url"
    assert "allowlist" in refused.value.message


def test_a_dns_name_resolving_to_a_private_address_is_refused_with_the_address_named():
    with pytest.raises(Invalid) as refused:
        netguard.check_base_url("https://localhost:8443/v1", allowlist=[])
    assert refused.value.field == "base_url"
    assert "localhost resolves to 127.0.0.1" in refused.value.message


def test_allowlisted_loopback_passes_and_every_address_of_a_name_must_be_allowed():
    checked = netguard.check_base_url("http://127.0.0.1:8000/v1/", allowlist=LOOPBACK)
    assert (checked.url, checked.addresses, checked.port) == ("http://127.0.0.1:8000/v1", ("127.0.0.1",), 8000)
    assert netguard.check_base_url("http://localhost:8000/v1", allowlist=LOOPBACK).pinned == "127.0.0.1"
    # ::ffff:127.0.0.1 is judged as 127.0.0.1: allowlisting the IPv4 range covers it, nothing else.
    assert netguard.check_base_url("http://[::ffff:127.0.0.1]:80/v1", allowlist=LOOPBACK).pinned == "::ffff:127.0.0.1"
    with pytest.raises(Invalid):
        netguard.check_base_url("http://[::1]:8000/v1", allowlist=LOOPBACK)


def test_public_addresses_need_https_and_pass_with_it():
    assert netguard.check_base_url("https://93.184.216.34/v1", allowlist=[]).pinned == "93.184.216.34"
    with pytest.raises(Invalid) as clear:
        netguard.check_base_url("http://93.184.216.34/v1", allowlist=[])
    assert clear.value.field == "base_url" and "https" in clear.value.message


@pytest.mark.parametrize("value, says", [
    ("file:///etc/passwd", "https://"), ("gopher://127.0.0.1:70/_stats", "https://"), ("ftp://example.com", "https://"),
    ("javascript:alert(1)", "https://"), ("//example.com/v1", "https://"), ("example.com/v1", "https://"),
    ("https://", "no host"), ("https://user:pw@example.com/v1", "API key"), ("https://example.com/v1?x=1", "query"),
    ("https://example.com/v1#x", "query"), ("https://exa mple.com/v1", "spaces"), ("https://example.com:99999/", "malformed"),
    ("https://example.com/\x00", "control"), ("https://" + "a" * 600 + ".com", "at most"), ("", "base URL"),
    (12, "base URL"), (None, "base URL"), (["https://example.com"], "base URL"),
    ("https://name.invalid/v1", "does not resolve"),
])
def test_malformed_urls_and_other_schemes_are_refused_naming_the_field(value, says):
    with pytest.raises(Invalid) as refused:
        netguard.check_base_url(value, allowlist=[])
    assert refused.value.field == "base_url"
    assert says in refused.value.message


@pytest.mark.parametrize("value", ["10.0.0.0/33", "not-an-ip", "", "1.2.3.4.5", 7, "a" * 100])
def test_allowlist_entries_must_be_addresses_or_ranges(value):
    with pytest.raises(Invalid) as refused:
        netguard.parse_network(value)
    assert refused.value.field == "network"


def test_allowlist_entries_are_normalised():
    assert netguard.parse_network(" 10.0.0.5 ") == "10.0.0.5/32"
    assert netguard.parse_network("10.0.0.9/24") == "10.0.0.0/24"
    assert netguard.parse_network("::1") == "::1/128"
