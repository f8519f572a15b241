"""The outbound URL screen (agents/outbound.py): metadata addresses, and lookups with a deadline.

Webhooks, agent imports and the proxy agent all call url_check; their own
tests cover what each makes of a refusal.
"""

import ipaddress
import threading
import time

import httpx
import pytest

from agents import outbound
from agents.outbound import UrlRefused, url_check
from tests import dns_server
from tests.dns_server import finishes_within

silent_dns = dns_server.silent_dns
full_tenant = dns_server.full_tenant

METADATA_V4 = [
    "169.254.169.254",
    "169.254.170.2",
    "169.254.170.23",
    "169.254.169.253",
    "100.100.100.200",
    "169.254.0.23",
    "168.63.129.16",
]
METADATA_V6 = ["fd00:ec2::254", "fd00:ec2::23", "fd00:ec2::253", "fe80::a9fe:a9fe", "fe80::a9fe:a9fe%25eth0"]


def sixtofour(address: str) -> str:
    """The 6to4 address (2002::/16) that carries an IPv4 address."""
    packed = ipaddress.IPv4Address(address).packed
    return f"2002:{packed[0]:02x}{packed[1]:02x}:{packed[2]:02x}{packed[3]:02x}::"


@pytest.mark.parametrize(
    "host",
    [
        *METADATA_V4,
        *(f"[{address}]" for address in METADATA_V6),
        *(f"[::ffff:{address}]" for address in METADATA_V4),
        *(f"[{sixtofour(address)}]" for address in METADATA_V4),
    ],
)
@pytest.mark.parametrize("allow_private", [False, True])
def test_cloud_metadata_addresses_are_refused_even_where_private_networks_are_allowed(host, allow_private):
    for url in (f"http://{host}/latest/meta-data/", f"https://{host}:8443/v2/credentials"):
        with pytest.raises(UrlRefused, match="a cloud metadata address") as refused:
            url_check(url, allow_private=allow_private, allow_loopback=True)
        # No setting lifts it, so the refusal names none.
        assert str(refused.value).endswith("push notifications are only sent to public addresses")


@pytest.mark.parametrize("address", METADATA_V4)
def test_nat64_forms_of_metadata_addresses_are_refused_too(address):
    # 64:ff9b::/96 is refused whole (a reserved range); a NAT64 gateway would reach the IPv4 address.
    with pytest.raises(UrlRefused, match="only sent to public addresses"):
        url_check(f"http://[64:ff9b::{address}]/", allow_private=True, allow_loopback=True)


def test_neighbours_of_metadata_addresses_follow_their_networks_rule():
    # Only the listed addresses are metadata: the rest of link-local and shared space is private.
    for host in ("169.254.170.3", "100.100.100.201", "[fd00:ec2::1]"):
        assert url_check(f"http://{host}/", allow_private=True).address == host.strip("[]")
        with pytest.raises(UrlRefused, match="unless PUSH_ALLOW_PRIVATE_NETWORKS=true is set"):
            url_check(f"http://{host}/", allow_private=False)


def test_a_name_dns_never_answers_is_refused_when_the_timeout_runs_out(silent_dns):
    started = time.monotonic()
    with pytest.raises(UrlRefused) as refused:
        finishes_within(10, url_check, "https://hooks.silent.test/a2a", allow_private=False, timeout=0.5)
    assert time.monotonic() - started < 2
    assert str(refused.value) == "the host 'hooks.silent.test' did not resolve within 0.5 s"
    # It was asked: the lookup went out, and the screen stopped waiting for it.
    assert silent_dns.wait_for_queries(1) == ["hooks.silent.test"]


def test_an_international_name_is_looked_up_as_it_goes_in_host_and_tls(silent_dns):
    # Python's socket spells faß as fass (IDNA 2003); Host and TLS's name say xn--fa-hia (IDNA 2008).
    with pytest.raises(UrlRefused):
        finishes_within(10, url_check, "http://faß.silent.test/hook", allow_private=False, timeout=0.3)
    assert silent_dns.wait_for_queries(1) == ["xn--fa-hia.silent.test"]


def test_a_refusal_names_no_address_a_name_resolved_to(monkeypatch):
    # What the platform's own DNS answers for its internal names is no tenant's business.
    monkeypatch.setattr(outbound, "getaddrinfo", lambda *args, **kwargs: [(2, 1, 6, "", ("172.18.0.3", 80))])
    with pytest.raises(UrlRefused) as refused:
        url_check("http://redis:80/", allow_private=False)
    assert "172.18" not in str(refused.value) and "a private address" in str(refused.value)
    # A literal's address is shown, in the spelling it reads as.
    with pytest.raises(UrlRefused, match="127.0.0.1, a loopback address"):
        url_check("http://127.1/", allow_private=False)
    with pytest.raises(UrlRefused, match="a private address"):
        url_check("http://[fec0::1]/", allow_private=False)


def test_a_lookup_that_fails_is_a_host_that_does_not_resolve(silent_dns):
    def release_once_asked():
        silent_dns.wait_for_queries(1)
        silent_dns.release()

    threading.Thread(target=release_once_asked, daemon=True).start()
    with pytest.raises(UrlRefused, match="^the host 'gone.silent.test' does not resolve$"):
        finishes_within(10, url_check, "http://gone.silent.test/", allow_private=False, timeout=5)


def test_callers_of_one_name_share_its_lookup_and_one_domain_cannot_take_every_lookup(silent_dns):
    waiting = []

    def look_up(host: str) -> None:
        try:
            url_check(f"https://{host}/a2a", allow_private=False, timeout=5)
        except UrlRefused as exc:
            waiting.append(str(exc))

    callers = [
        threading.Thread(target=look_up, args=(f"hook{n % outbound.MAX_LOOKUPS_PER_DOMAIN}.silent.test",))
        for n in range(2 * outbound.MAX_LOOKUPS_PER_DOMAIN)
    ]
    for caller in callers:
        caller.start()
    # Two callers a name, one query a name: each name's lookup thread is shared.
    asked = silent_dns.wait_for_queries(outbound.MAX_LOOKUPS_PER_DOMAIN)
    time.sleep(0.2)
    assert sorted(silent_dns.queries) == sorted(asked) and len(set(asked)) == len(asked)
    # The domain has all it may have waiting: one more of its names is refused at once, saying why.
    started = time.monotonic()
    with pytest.raises(UrlRefused) as refused:
        url_check("https://one-more.silent.test/a2a", allow_private=False, timeout=5)
    assert time.monotonic() - started < 1
    assert str(refused.value) == (
        "the host 'one-more.silent.test' was not looked up: too many lookups are waiting on DNS; "
        "try again later"
    )
    # Another domain's names are looked up as ever.
    assert url_check("http://localhost/", allow_private=False, allow_loopback=True).address in (
        "127.0.0.1",
        "::1",
    )
    silent_dns.release()
    for caller in callers:
        caller.join(10)
    # Let go, every caller hears its name's answer (the server's "no").
    assert len(waiting) == len(callers)
    assert all(text.endswith("does not resolve") for text in waiting), waiting


def test_one_tenant_cannot_take_every_lookup_whatever_domains_it_names(silent_dns, full_tenant):
    # The tenant has all it may have waiting: one more of its names is refused at once.
    started = time.monotonic()
    with outbound.lookups_for(full_tenant), pytest.raises(UrlRefused) as refused:
        url_check("https://one-more.silent.test/hook", allow_private=False, timeout=5)
    assert time.monotonic() - started < 1
    assert str(refused.value) == (
        "the host 'one-more.silent.test' was not looked up: too many lookups are waiting on DNS; "
        "try again later"
    )
    # Another tenant's name is looked up as ever (and waits on the silent server).
    with (
        outbound.lookups_for(full_tenant + 1),
        pytest.raises(UrlRefused, match="did not resolve within 0.5 s"),
    ):
        finishes_within(
            10, url_check, "https://other-tenant.silent.test/hook", allow_private=False, timeout=0.5
        )
    assert "other-tenant.silent.test" in silent_dns.queries


def test_a_check_out_of_time_starts_no_lookup():
    with outbound.deadline(0):
        with pytest.raises(UrlRefused) as refused:
            url_check("http://localhost/", allow_private=False, allow_loopback=True)
    assert str(refused.value) == "the host 'localhost' was not looked up: the check ran out of time before it"
    assert "localhost" not in outbound.lookups_waiting()


def test_the_pinned_request_has_the_urls_host_whatever_the_callers_headers_say():
    target = outbound.Target(url=httpx.URL("https://agent.example/a2a"), address="93.184.216.34")
    with httpx.Client() as client:
        request = target.request(client, "GET", headers={"host": "internal.example", "X-Key": "k"})
    assert [value for name, value in request.headers.raw if name.lower() == b"host"] == [b"agent.example"]
    assert request.url.host == "93.184.216.34" and request.extensions["sni_hostname"] == "agent.example"
    assert request.headers["X-Key"] == "k"


def test_lookups_are_capped_by_registrable_domain_not_by_the_last_two_labels():
    # By the last two labels, every tenant under github.io or co.uk shared one domain's
    # lookups: one silent site took them from all the others.
    assert outbound._domain("alice.github.io") != outbound._domain("bob.github.io")
    assert outbound._domain("hooks.shop.example.co.uk") == outbound._domain("api.example.co.uk")
    assert outbound._domain("hooks.shop.example.co.uk") != outbound._domain("api.other.co.uk")
    assert outbound._domain("a.silent.test") == outbound._domain("b.silent.test") == "silent.test"
    assert outbound._domain("localhost") == "localhost"
