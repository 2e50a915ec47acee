"""The SSRF guard: a webhook may only reach public http(s) addresses.

A URL is refused when its scheme is not http or https, when it carries credentials, or when
its host is, or resolves to, an address that is loopback, private, link-local (169.254.0.0/16,
cloud metadata included), multicast, reserved, unspecified or otherwise not globally
routable. ``CONVEYOR_WEBHOOKS_ALLOW_PRIVATE=true`` turns the address check off;
``CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS`` lets through the addresses inside the listed CIDRs.

The host is resolved again at every attempt and *every* address it resolves to must pass;
the transport then connects to the address that was checked (``webhooks.transport``), so a
name that re-binds to an internal address between check and connect cannot slip past.
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from webhooks import conf
from webhooks.errors import UnsafeURL

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
SCHEMES = {"http": 80, "https": 443}
HINT = "allow it with CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS or CONVEYOR_WEBHOOKS_ALLOW_PRIVATE"


@dataclass(frozen=True)
class Target:
    """A parsed webhook URL: where to connect and what to ask for."""

    url: str
    scheme: str
    host: str
    port: int
    path: str


def parse(url: str) -> Target:
    """Split ``url`` into a Target; raise UnsafeURL if it is not a plain http(s) URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL(f"webhook URL refused: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise UnsafeURL(f"webhook URL refused: only http and https are allowed, not {scheme!r}")
    if parts.username is not None or parts.password is not None:
        raise UnsafeURL("webhook URL refused: credentials in the URL are not supported")
    if not parts.hostname:
        raise UnsafeURL("webhook URL refused: it names no host")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(
        url=url, scheme=scheme, host=parts.hostname, port=port or SCHEMES[scheme], path=path
    )


def address_kind(ip: Address) -> str | None:
    """Name why ``ip`` is not a public address (``"loopback"`` …), or None if it is public."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind, flag in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        ("non-public", not ip.is_global),
    ):
        if flag:
            return kind
    return None


def check_address(host: str, ip: Address) -> None:
    """Raise UnsafeURL unless webhooks may connect to ``ip`` (which ``host`` resolved to)."""
    settings = conf.get()
    if settings.allow_private or any(ip in net for net in settings.allowed_networks):
        return
    kind = address_kind(ip)
    if kind is None:
        return
    subject = str(ip) if host == str(ip) else f"{host} resolves to {ip}, which"
    raise UnsafeURL(f"webhook URL refused: {subject} is a {kind} address ({HINT})")


def literal_address(host: str) -> Address | None:
    """Return ``host`` as an IP address if it is one, else None."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def resolve(target: Target) -> list[Address]:
    """Return the distinct addresses ``target.host`` resolves to, in resolver order.

    Raises ``socket.gaierror`` when the name does not resolve.
    """
    literal = literal_address(target.host)
    if literal is not None:
        return [literal]
    found: list[Address] = []
    for *_, sockaddr in socket.getaddrinfo(target.host, target.port, proto=socket.IPPROTO_TCP):
        ip = ipaddress.ip_address(sockaddr[0])
        if ip not in found:
            found.append(ip)
    return found


def guard(url: str) -> tuple[Target, Address]:
    """Resolve ``url`` now and return it with the checked address to connect to.

    Raises UnsafeURL when refused, ``socket.gaierror`` when the name does not resolve.
    """
    target = parse(url)
    addresses = resolve(target)
    if not addresses:
        raise socket.gaierror(f"{target.host} resolved to no address")
    for ip in addresses:
        check_address(target.host, ip)
    return target, addresses[0]


def check_for_save(url: str) -> Target:
    """Refuse a URL an endpoint may not be saved with, with the message delivery would give.

    A name that does not resolve (yet) is accepted: each attempt checks it again.
    """
    target = parse(url)
    try:
        addresses = resolve(target)
    except (OSError, UnicodeError):
        return target
    for ip in addresses:
        check_address(target.host, ip)
    return target
