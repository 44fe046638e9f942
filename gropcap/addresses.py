"""Printable IP addresses, as ``ipaddress`` prints them, at C speed.

``str(ipaddress.IPv6Address(raw))`` costs about 7 µs an address in Python; a flows table
of a router's capture formats hundreds of thousands of them. ``socket.inet_ntop`` (the C
library's) prints the same text (RFC 5952: lower case, no leading zeros, the longest run
of two or more zero groups, the first of equal runs, as ``::``) except where it embeds an
IPv4 address (``::ffff:1.2.3.4``, ``::1.2.3.4``), which ``ipaddress`` prints as it
chooses (Python 3.11: ``::ffff:102:304``; 3.13: the dotted form); those addresses, whose
first 10 bytes are zero, still go through ``ipaddress``.

Layer: 0 (the standard library only).
"""

from __future__ import annotations

import ipaddress
import socket

_ZERO10 = bytes(10)


def ipv6_text(raw: bytes) -> str:
    """``str(ipaddress.IPv6Address(raw))`` of 16 bytes."""
    if raw[:10] == _ZERO10:
        return str(ipaddress.IPv6Address(raw))
    return socket.inet_ntop(socket.AF_INET6, raw)


__all__ = ["ipv6_text"]
