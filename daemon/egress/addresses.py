"""Which range an address a destination resolved to lies in, for the policy and the proxy's floor.

The proxy connects only to addresses in the ranges a decision names; the shipped policy names
`public` alone, so loopback, private networks, link-local (cloud metadata lives there),
unique-local and everything reserved are refused unless a rule names them on purpose.
"""

from __future__ import annotations

import ipaddress

from daemon.policy.egress_verdict import AddressRange

#: Cloud instance-metadata endpoints (AWS, GCP, Azure, OpenStack; Alibaba; AWS over IPv6).
_METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "100.100.100.200", "fd00:ec2::254")
)
_SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def classify(address: str) -> AddressRange:
    """The range of an IP literal (IPv4-mapped and NAT64 IPv6 addresses count as the IPv4
    address they carry: a connection to them reaches it)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return classify(str(ip.ipv4_mapped))
        if ip in _NAT64:
            return classify(str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    if ip in _METADATA:
        return "metadata"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link_local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv6Address) and ip in _UNIQUE_LOCAL:
        return "unique_local"
    if ip.is_private or (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED_ADDRESS_SPACE):
        return "private"
    if not ip.is_global or ip.is_reserved:
        return "reserved"
    return "public"
