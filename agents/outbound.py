"""The outbound URL screen (SSRF guard): which URLs the platform may call, and at which address.

Push notifications (tasks_app/push.py) and the a2a_proxy agent both call out
to URLs a tenant typed in. Each resolves the host here just before the
request and connects to the address that was checked, so a name that
resolves to an internal address (or starts to, later) is never called. A
URL stored for later (a push config) is only checked for what it says
(url_syntax_check): its name may not resolve yet, unless it is localhost or
a name under it, which are loopback by definition, or a private-use name
(.local, .internal, home.arpa), which no public DNS answers. A lookup has the caller's
deadline: a DNS server that never answers is a refused URL, not a held thread.
"""

import functools
import ipaddress
import math
import re
import socket
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import httpx
from publicsuffixlist import PublicSuffixList

SHARED_NETWORK = ipaddress.ip_network("100.64.0.0/10")
# IPv6 site-local (deprecated by RFC 3879, still routed inside some networks): Python's is_private
# does not count it.
SITE_LOCAL = ipaddress.ip_network("fec0::/10")
LOOPBACK = ipaddress.ip_address("127.0.0.1")
# Cloud metadata and credential endpoints: refused even when private networks are allowed.
# An IPv6 address carrying one of the IPv4 ones (::ffff:, 6to4) is judged as it (_address_problem).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # instance metadata: AWS, GCP, Azure, Oracle, DigitalOcean, OpenStack
        "fd00:ec2::254",  # AWS instance metadata over IPv6
        "fe80::a9fe:a9fe",  # OpenStack instance metadata over IPv6 (Neutron, Ussuri and later)
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.170.23",  # AWS EKS Pod Identity credentials
        "fd00:ec2::23",  # AWS EKS Pod Identity credentials over IPv6
        "169.254.169.253",  # AWS VPC DNS resolver
        "fd00:ec2::253",  # AWS VPC DNS resolver over IPv6
        "100.100.100.200",  # Alibaba Cloud metadata
        "169.254.0.23",  # Tencent Cloud metadata
        "168.63.129.16",  # Azure WireServer (extension and provisioning data)
    )
)
# How long a name may take to resolve when the caller has no deadline of its own.
LOOKUP_TIMEOUT = 10.0
# How many names may be looked up at once (each lookup holds a thread of its own, for as long
# as the system resolver waits on a silent DNS server), how many of them under one domain
# (its registrable domain by the Public Suffix List: example.co.uk, alice.github.io), and how
# many for one tenant (lookups_for()): a tenant whose webhooks name domains that never answer,
# one or many, does not use up every lookup of the process. Callers asking for a name already
# being looked up share it (it counts for the tenant that started it).
MAX_LOOKUPS = 64
MAX_LOOKUPS_PER_DOMAIN = 8
MAX_LOOKUPS_PER_TENANT = 16
_pending_lock = threading.Lock()
_pending: dict[str, "_Lookup"] = {}
# When every lookup in a block must end (deadline()); none outside one.
# When the enclosing deadline() ends, and the seconds it was given (what a refusal names).
_deadline: ContextVar[tuple[float, float]] = ContextVar("outbound_deadline", default=(math.inf, math.inf))
# Whose the lookups are: the tenant (its pk) whose webhook, proxy agent or card they are for.
_tenant: ContextVar[int | None] = ContextVar("outbound_tenant", default=None)
# Inside noting_crowded(): the names refused a lookup because too many were waiting (_crowded).
_crowded_names: ContextVar[list[str] | None] = ContextVar("outbound_crowded", default=None)
# The name lookup. A module attribute so that a test can put a resolver on loopback in its place.
getaddrinfo = socket.getaddrinfo


# The refusals a private-networks setting lifts (metadata, multicast and reserved stay refused).
PRIVATE_PROBLEMS = frozenset(
    {
        "a loopback address",
        "a link-local address",
        "a shared (carrier-grade NAT) address",
        "a private address",
    }
)


class UrlRefused(ValueError):
    """A URL the platform will not call; the message says why."""


# What HTTP allows in a header (RFC 9110 5.5, 5.6.2), in ASCII: a name is a token; a value has
# no control character but tab, and neither starts nor ends with a space or tab. httpx refuses
# anything else, and quotes the whole value in its error: a secret in a log, or a status message.
# Matched whole (fullmatch): "$" would let a value end in a line feed.
HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
HEADER_VALUE_RE = re.compile(r"(?:[\x21-\x7e](?:[\x20\x09\x21-\x7e]*[\x21-\x7e])?)?")
BAD_HEADER = "a header of the request is not valid HTTP"


def header_valid(name: str, value: str) -> bool:
    """Whether a header can go out as it is (see HEADER_VALUE_RE)."""
    return bool(HEADER_NAME_RE.fullmatch(name) and HEADER_VALUE_RE.fullmatch(value))


def http_error_text(exc: httpx.HTTPError) -> str:
    """An httpx error as a reason to show: never the text of a header httpx refused (it quotes it)."""
    if isinstance(exc, httpx.LocalProtocolError):
        return BAD_HEADER
    return str(exc) or exc.__class__.__name__


@dataclass(frozen=True)
class Target:
    """A checked URL and the address it resolved to, used for the request."""

    url: httpx.URL
    address: str

    @property
    def pinned_url(self) -> httpx.URL:
        return self.url.copy_with(host=self.address)

    @property
    def extensions(self) -> dict:
        """httpx request extensions for the pinned URL: TLS checks the URL's name, not the address."""
        return {"sni_hostname": self.url.host} if self.url.scheme == "https" else {}

    def request(self, client: httpx.Client | httpx.AsyncClient, method: str, *, headers: dict, **kwargs):
        """A request of `client` to the checked address, its Host header and TLS name the URL's."""
        # The URL's Host, whatever spelling of it the caller's headers had (a proxy config's `host`).
        headers = {name: value for name, value in headers.items() if name.lower() != "host"}
        headers["Host"] = self.url.netloc.decode("ascii")
        return client.build_request(
            method, self.pinned_url, headers=headers, extensions=self.extensions, **kwargs
        )


def _is_literal(host: str) -> bool:
    """Whether a URL's host is an address in some spelling (IPv6, or any IPv4 form getaddrinfo reads)."""
    try:
        ipaddress.IPv6Address(host.strip("[]").partition("%")[0])
    except ValueError:
        try:
            socket.inet_aton(host)
        except OSError:
            return False
    return True


def _address_problem(ip, allow_private: bool, allow_loopback: bool) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address):
        # Without its zone (fe80::a9fe:a9fe%eth0 is the listed address, on one interface).
        ip = ipaddress.IPv6Address(int(ip))
        # Judged as the IPv4 address it carries: ::ffff:127.0.0.1, and the 6to4 form
        # 2002:7f00:1:: (routed to 127.0.0.1 where a host has a 6to4 route).
        ip = ip.ipv4_mapped or ip.sixtofour or ip
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_loopback:
        return None if allow_private or allow_loopback else "a loopback address"
    if ip.is_link_local:
        return None if allow_private else "a link-local address"
    if ip in SHARED_NETWORK:
        return None if allow_private else "a shared (carrier-grade NAT) address"
    if ip.is_private or ip in SITE_LOCAL:
        return None if allow_private else "a private address"
    if ip.is_reserved or not ip.is_global:
        return "a reserved address"
    return None


@dataclass(frozen=True)
class Screen:
    """What a caller of url_check allows, and how a refusal names the switch that would allow more."""

    allow_private: bool
    allow_loopback: bool = False
    purpose: str = "push notifications are"
    setting: str = "PUSH_ALLOW_PRIVATE_NETWORKS"

    def refusal(self, host: str, address: str | None, problem: str) -> UrlRefused:
        """`address` None: a name that is loopback by definition (_is_loopback_name).

        A name's address is not shown, only a literal's (127.1 is 127.0.0.1): what the
        platform's own resolver answers for internal names ("redis", "postgres") is no
        tenant's business.
        """
        if address is None:
            resolves = f"resolves to {problem} (localhost and every name under it do, RFC 6761)"
        elif _is_literal(host):
            resolves = f"resolves to {address}, {problem}"
        else:
            resolves = f"resolves to {problem}"
        return self.refused(f"the host '{host}' {resolves}", fixable=problem in PRIVATE_PROBLEMS)

    def refused(self, why: str, *, fixable: bool) -> UrlRefused:
        """`why`, and where the URL may go; `fixable`: the setting lifts it, and the refusal names it."""
        return UrlRefused(
            f"{why}; {self.purpose} only sent to public addresses"
            + (f" unless {self.setting}=true is set" if fixable else "")
        )


# Names set aside for private networks, which public DNS never answers: mDNS's
# .local (RFC 6762), home.arpa (RFC 8375), and .internal (ICANN, 2024).
PRIVATE_USE_DOMAINS = ("local", "home.arpa", "internal")


def _is_under(host: str, *domains: str) -> bool:
    """Whether the host is one of the domains or a name under one, whatever its case or final dot."""
    name = host.lower().rstrip(".")
    return any(name == domain or name.endswith(f".{domain}") for domain in domains)


def _is_loopback_name(host: str) -> bool:
    """localhost and the names under it (RFC 6761 §6.3), which name loopback whatever DNS says."""
    return _is_under(host, "localhost")


def _ipv4_spelling(host: str) -> ipaddress.IPv4Address | None:
    """The address of a host in one of inet_aton's other spellings ('127.1', '0x7f000001',
    '2130706433'), which getaddrinfo reads without asking DNS; None for a name."""
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def _parsed(url: str, screen: Screen) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
        host = parsed.host  # decodes punycode: "xn--a.com" raises idna's error (a UnicodeError)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise UrlRefused(f"'{url}' is not a valid URL ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise UrlRefused(f"the scheme must be http or https, not '{parsed.scheme}'")
    if not host:
        raise UrlRefused("the URL has no host")
    if parsed.userinfo:
        raise UrlRefused("the URL must not carry credentials; use 'authentication' instead")
    # httpx takes any integer; no connection can be made to one outside this range.
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise UrlRefused(f"the port {parsed.port} is not a TCP port (1-65535)")
    address = parsed.host
    try:
        literal = ipaddress.ip_address(parsed.host.split("%")[0])
    except ValueError:
        literal = _ipv4_spelling(parsed.host)
        address = str(literal) if literal else address
    if literal is None:
        # localhost is refused now, as 127.0.0.1 is: stored for later, it would be refused at every call.
        if _is_loopback_name(parsed.host):
            problem = _address_problem(LOOPBACK, screen.allow_private, screen.allow_loopback)
            if problem:
                raise screen.refusal(parsed.host, None, problem)
        elif _is_under(parsed.host, *PRIVATE_USE_DOMAINS) and not screen.allow_private:
            # Only ever a private network's: stored, it would be refused at every call.
            why = f"the host '{parsed.host}' is a private-use name (.local, .internal, home.arpa)"
            raise screen.refused(why, fixable=True)
        return parsed  # any other name: resolved and screened when it is called
    problem = _address_problem(literal, screen.allow_private, screen.allow_loopback)
    if problem:
        raise screen.refusal(parsed.host, address, problem)
    return parsed


def url_syntax_check(url: str, *, allow_private: bool) -> httpx.URL:
    """Check what a URL says without resolving it: scheme, syntax, credentials, a literal address.

    For URLs stored now and called later (push configs): a host that does not
    resolve yet is accepted here, and url_check() screens it when it is called.
    """
    return _parsed(url, Screen(allow_private=allow_private))


@contextmanager
def deadline(seconds: float):
    """Every lookup in the block ends within `seconds` from now, whatever timeout it is given.

    For a check that looks up several names (a config's URLs, a card and its
    interfaces): together they take no longer than the check may.
    """
    token = _deadline.set(min(_deadline.get(), (time.monotonic() + seconds, seconds)))
    try:
        yield
    finally:
        _deadline.reset(token)


@contextmanager
def noting_crowded():
    """Yields a list of the names in the block refused a lookup for want of room (too many waiting).

    Such a refusal says how busy the platform was, not what the name is: a
    result that came of it must not be kept (agents.health).
    """
    noted: list[str] = []
    token = _crowded_names.set(noted)
    try:
        yield noted
    finally:
        _crowded_names.reset(token)


def _note_crowded(name: str) -> None:
    """A lookup of `name` was refused for want of room (a share, or a thread): tell noting_crowded()."""
    if (noted := _crowded_names.get()) is not None:
        noted.append(name)


@contextmanager
def lookups_for(tenant_pk):
    """The lookups in the block are the tenant's: it may have MAX_LOOKUPS_PER_TENANT waiting at once."""
    token = _tenant.set(tenant_pk)
    try:
        yield
    finally:
        _tenant.reset(token)


def lookups_charged_to(tenant_pk) -> None:
    """lookups_for() for the rest of the current asyncio task, whose context is its own (a turn's)."""
    _tenant.set(tenant_pk)


def time_left(timeout: float) -> float:
    """`timeout`, or what is left of the enclosing deadline() if that ends sooner."""
    return max(0.0, min(timeout, _deadline.get()[0] - time.monotonic()))


def _timeout_named(timeout: float) -> float:
    """The timeout a refusal names: the caller's own, or the enclosing deadline()'s if that ends first.

    Not what is left of either by the time of the lookup (0.499 s of 0.5, say).
    """
    ends, seconds = _deadline.get()
    return seconds if ends < time.monotonic() + timeout else timeout


class _Lookup:
    """One name's getaddrinfo on a thread of its own; its answer or its exception once done."""

    def __init__(self, domain: str, tenant):
        self.domain = domain
        self.tenant = tenant
        self.done = threading.Event()
        self.answer: list | BaseException | None = None


def lookups_waiting() -> list[str]:
    """The names being looked up now (for tests, and for a look at a stuck process)."""
    with _pending_lock:
        return list(_pending)


@functools.cache
def _suffixes() -> PublicSuffixList:
    """The Public Suffix List as the package ships it (read once; never fetched)."""
    return PublicSuffixList()


def _domain(name: str) -> str:
    """The name's registrable domain (example.co.uk, alice.github.io), or the name if it has none."""
    return _suffixes().privatesuffix(name) or name


def _lookup(host: str, port: int, timeout: float) -> list[str]:
    """The addresses a name resolves to, within `timeout` seconds (or the deadline()), else UrlRefused.

    getaddrinfo has no deadline of the caller's (the system resolver waits and
    retries as resolv.conf says, an NSS module as long as it likes) and cannot
    be interrupted: it runs on a daemon thread that the caller stops waiting
    for when its time is up.
    """
    try:
        # An address needs no lookup (nor a thread): AI_NUMERICHOST never asks DNS.
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        return [info[4][0] for info in infos]
    except (OSError, UnicodeError):
        pass
    named, timeout = _timeout_named(timeout), time_left(timeout)
    name = host.lower().rstrip(".")
    with _pending_lock:
        lookup = _pending.get(name)
        if lookup is None and timeout <= 0:
            # The check's time is gone (its earlier steps took it): no lookup is started for nothing.
            raise UrlRefused(f"the host '{host}' was not looked up: the check ran out of time before it")
        if lookup is None:
            lookup = _Lookup(_domain(name), _tenant.get())
            if _crowded(lookup):
                _note_crowded(name)
                busy = "too many lookups are waiting on DNS; try again later"
                raise UrlRefused(f"the host '{host}' was not looked up: {busy}")
            _pending[name] = lookup
            _start(lookup, name, host, port)
    if not lookup.done.wait(timeout):
        raise UrlRefused(f"the host '{host}' did not resolve within {named:.3g} s")
    answer = lookup.answer
    if isinstance(answer, OSError | UnicodeError):
        raise UrlRefused(f"the host '{host}' does not resolve")
    if isinstance(answer, UrlRefused):
        raise UrlRefused(str(answer))  # one exception of its own for each waiting caller
    if isinstance(answer, BaseException):
        raise UrlRefused(f"the host '{host}' could not be looked up") from answer
    return [info[4][0] for info in answer]


def _crowded(lookup: _Lookup) -> bool:
    """Whether the process, the lookup's domain or its tenant has all the lookups it may have waiting."""
    if len(_pending) >= MAX_LOOKUPS:
        return True
    if sum(1 for other in _pending.values() if other.domain == lookup.domain) >= MAX_LOOKUPS_PER_DOMAIN:
        return True
    if lookup.tenant is None:
        return False
    return sum(1 for other in _pending.values() if other.tenant == lookup.tenant) >= MAX_LOOKUPS_PER_TENANT


def _start(lookup: _Lookup, name: str, host: str, port: int) -> None:
    """Run the lookup on a daemon thread (with _pending_lock held); it leaves _pending when done."""

    def resolve() -> None:
        try:
            lookup.answer = getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except Exception as exc:  # handed to the waiting callers
            lookup.answer = exc
        finally:
            with _pending_lock:
                _pending.pop(name, None)
            lookup.done.set()

    try:
        threading.Thread(target=resolve, name=f"lookup {host}"[:60], daemon=True).start()
    except BaseException as exc:
        # This lookup ends here, and leaves no name behind for later callers to wait on.
        _pending.pop(name, None)
        lookup.answer = UrlRefused(f"the host '{host}' could not be looked up now; try again later")
        lookup.done.set()
        _note_crowded(name)
        if not isinstance(exc, RuntimeError):  # RuntimeError: no thread to be had, a refusal
            raise


def url_check(
    url: str,
    *,
    allow_private: bool,
    timeout: float = LOOKUP_TIMEOUT,
    allow_loopback: bool = False,
    purpose: str = "push notifications are",
    setting: str = "PUSH_ALLOW_PRIVATE_NETWORKS",
) -> Target:
    """Resolve a URL and check every address it has; answer the one to connect to.

    Raises UrlRefused for a scheme other than http/https, credentials in the
    URL, a host that does not resolve within `timeout` seconds, or any address
    that is loopback, private, link-local, shared, multicast, reserved,
    unspecified or cloud metadata
    (private ones are allowed with allow_private, loopback ones also with
    allow_loopback: the caller's settings say). A refusal names `setting`, the
    switch that would allow it, so whoever reads it knows what to change.
    """
    screen = Screen(allow_private, allow_loopback, purpose, setting)
    parsed = _parsed(url, screen)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    # The name as it goes in Host and TLS (IDNA 2008: faß.de is xn--fa-hia.de, not fass.de).
    addresses = list(dict.fromkeys(_lookup(parsed.raw_host.decode("ascii"), port, timeout)))
    if not addresses:
        raise UrlRefused(f"the host '{parsed.host}' does not resolve")
    # Every address must pass: a host with one public and one private address is refused.
    for address in addresses:
        problem = _address_problem(ipaddress.ip_address(address.split("%")[0]), allow_private, allow_loopback)
        if problem:
            raise screen.refusal(parsed.host, address, problem)
    return Target(url=parsed, address=addresses[0])
