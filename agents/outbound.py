"""The outbound URL screen (SSRF guard): which URLs the platform may call, and at which address.

Push notifications (tasks_app/push.py) and the a2a_proxy agent both call out
to URLs a tenant typed in. Each resolves the host here just before the
request and connects to the address that was checked, so a name that
resolves to an internal address (or starts to, later) is never called. A
URL stored for later (a push config) is only checked for what it says
(url_syntax_check): its name may not resolve yet.
"""

import ipaddress
import socket
from dataclasses import dataclass

import httpx

SHARED_NETWORK = ipaddress.ip_network("100.64.0.0/10")
# Cloud metadata endpoints: refused even when private networks are allowed.
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)


class UrlRefused(ValueError):
    """A URL the platform will not call; the message says why."""


@dataclass(frozen=True)
class Target:
    """A checked URL and the address it resolved to, used for the request."""

    url: httpx.URL
    address: str

    @property
    def pinned_url(self) -> httpx.URL:
        return self.url.copy_with(host=self.address)


def _address_problem(ip, allow_private: bool) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # judged as the IPv4 address it carries
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_loopback:
        return None if allow_private else "a loopback address"
    if ip.is_link_local:
        return None if allow_private else "a link-local address"
    if ip in SHARED_NETWORK:
        return None if allow_private else "a shared (carrier-grade NAT) address"
    if ip.is_private:
        return None if allow_private else "a private address"
    if ip.is_reserved or not ip.is_global:
        return "a reserved address"
    return None


def _refusal(host: str, address: str, problem: str) -> UrlRefused:
    return UrlRefused(
        f"the host '{host}' resolves to {address}, {problem}; "
        "push notifications (and proxied calls) are only sent to public addresses"
    )


def url_syntax_check(url: str, *, allow_private: bool) -> httpx.URL:
    """Check what a URL says without resolving it: scheme, syntax, credentials, a literal address.

    For URLs stored now and called later (push configs): a host that does not
    resolve yet is accepted here, and url_check() screens it when it is called.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise UrlRefused(f"'{url}' is not a valid URL ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise UrlRefused(f"the scheme must be http or https, not '{parsed.scheme}'")
    if not parsed.host:
        raise UrlRefused("the URL has no host")
    if parsed.userinfo:
        raise UrlRefused("the URL must not carry credentials; use 'authentication' instead")
    try:
        literal = ipaddress.ip_address(parsed.host.split("%")[0])
    except ValueError:
        return parsed  # a name: resolved and screened when it is called
    problem = _address_problem(literal, allow_private)
    if problem:
        raise _refusal(parsed.host, parsed.host, problem)
    return parsed


def url_check(url: str, *, allow_private: bool) -> Target:
    """Resolve a URL and check every address it has; answer the one to connect to.

    Raises UrlRefused for a scheme other than http/https, credentials in the
    URL, a host that does not resolve, or any address that is loopback, private,
    link-local, shared, multicast, reserved, unspecified or cloud metadata
    (private ones are allowed with allow_private: the caller's setting says).
    """
    parsed = url_syntax_check(url, allow_private=allow_private)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parsed.host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise UrlRefused(f"the host '{parsed.host}' does not resolve") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise UrlRefused(f"the host '{parsed.host}' does not resolve")
    # Every address must pass: a host with one public and one private address is refused.
    for address in addresses:
        problem = _address_problem(ipaddress.ip_address(address.split("%")[0]), allow_private)
        if problem:
            raise _refusal(parsed.host, address, problem)
    return Target(url=parsed, address=addresses[0])
