"""Decoder options: which UDP ports carry which tunnel, and DSA tags on plain Ethernet.

Shared by the reference (dpkt/struct) decoder and the fast (numba) decoder, so both read the
same receive configuration. Validation raises :class:`gropcap.errors.ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gropcap import constants as C
from gropcap.errors import ConfigError

# IP protocols a FOU port may carry: the kernel's fou takes any ipproto; gropcap decodes
# IPv4 (IPIP over FOU), IPv6 (SIT over FOU) and GRE (GRE over FOU).
FOU_INNER_PROTOS = (C.IPPROTO_IPIP, C.IPPROTO_IPV6, C.IPPROTO_GRE)


def _check_ports(name: str, ports) -> tuple[int, ...]:
    try:
        out = tuple(int(p) for p in ports)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a sequence of UDP port numbers, got {ports!r}")
    for p in out:
        if not 0 < p < 65536:
            raise ConfigError(f"{name}: UDP port {p} out of range 1..65535")
    return out


@dataclass(frozen=True)
class DecodeOptions:
    """How to recognise encapsulations that cannot be told from the packet bytes alone.

    Parameters
    ----------
    vxlan_ports, vxlan_gpe_ports, geneve_ports:
        UDP destination ports decoded as VXLAN (RFC 7348), VXLAN-GPE and Geneve (RFC 8926).
    fou_ports:
        ``((port, ipproto), ...)``: UDP destination ports of Foo-over-UDP receivers and the
        IP protocol each carries (4 IPv4, 41 IPv6, 47 GRE), like ``ip fou add port P ipproto N``.
    gue_ports:
        UDP destination ports of GUE receivers (``ip fou add port P gue``).
    dsa_tag:
        ``"dsa"``, ``"edsa"``, ``"brcm"`` or ``"brcm-prepend"`` for a plain Ethernet
        capture (link type 1) taken on a DSA conduit interface; ``None`` for none.

    A port may appear in one list only. Example::

        DecodeOptions(vxlan_ports=(4789, 8472), fou_ports=((5555, 4),), dsa_tag="edsa")
    """

    vxlan_ports: tuple[int, ...] = (C.VXLAN_PORT,)
    vxlan_gpe_ports: tuple[int, ...] = (C.VXLAN_GPE_PORT,)
    geneve_ports: tuple[int, ...] = (C.GENEVE_PORT,)
    fou_ports: tuple[tuple[int, int], ...] = ()
    gue_ports: tuple[int, ...] = ()
    dsa_tag: str | None = None

    def __post_init__(self):
        set_ = object.__setattr__   # frozen: normalise lists to tuples once
        set_(self, "vxlan_ports", _check_ports("vxlan_ports", self.vxlan_ports))
        set_(self, "vxlan_gpe_ports", _check_ports("vxlan_gpe_ports", self.vxlan_gpe_ports))
        set_(self, "geneve_ports", _check_ports("geneve_ports", self.geneve_ports))
        set_(self, "gue_ports", _check_ports("gue_ports", self.gue_ports))
        fou = []
        for item in self.fou_ports:
            try:
                port, proto = (int(x) for x in item)
            except (TypeError, ValueError):
                raise ConfigError(f"fou_ports entries must be (port, ipproto) pairs, got {item!r}")
            _check_ports("fou_ports", (port,))
            if proto not in FOU_INNER_PROTOS:
                raise ConfigError(f"fou_ports: port {port} carries IP protocol {proto}",
                                  hint="use 4 (IPv4), 41 (IPv6) or 47 (GRE)")
            fou.append((port, proto))
        set_(self, "fou_ports", tuple(fou))
        if self.dsa_tag is not None and self.dsa_tag not in C.DSA_TAG_BY_NAME:
            raise ConfigError(f"unknown DSA tag {self.dsa_tag!r}",
                              hint="use one of " + ", ".join(sorted(C.DSA_TAG_BY_NAME)))
        seen: dict[int, str] = {}
        for name, ports in (("vxlan_ports", self.vxlan_ports),
                            ("vxlan_gpe_ports", self.vxlan_gpe_ports),
                            ("geneve_ports", self.geneve_ports),
                            ("fou_ports", tuple(p for p, _ in self.fou_ports)),
                            ("gue_ports", self.gue_ports)):
            for p in ports:
                if p in seen and seen[p] != name:
                    raise ConfigError(f"UDP port {p} is in both {seen[p]} and {name}")
                seen[p] = name

    @property
    def dsa_kind(self) -> int:
        """The ``DSA_*`` code of :attr:`dsa_tag` (``DSA_NONE`` when unset)."""
        return C.DSA_TAG_BY_NAME.get(self.dsa_tag, C.DSA_NONE) if self.dsa_tag else C.DSA_NONE

    def udp_tunnel(self, dport: int) -> tuple[int, int]:
        """``(TUN_* code, fou ipproto or 0)`` for a UDP destination port, ``(TUN_NONE, 0)``."""
        if dport in self.vxlan_ports:
            return C.TUN_VXLAN, 0
        if dport in self.vxlan_gpe_ports:
            return C.TUN_VXLAN_GPE, 0
        if dport in self.geneve_ports:
            return C.TUN_GENEVE, 0
        for port, proto in self.fou_ports:
            if dport == port:
                return C.TUN_FOU, proto
        if dport in self.gue_ports:
            return C.TUN_GUE, 0
        return C.TUN_NONE, 0
