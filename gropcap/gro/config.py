"""GRO configuration: kernel profile (which rule set) and receive-path model.

A :class:`KernelProfile` turns ``--kernel X.Y`` into the rule switches that changed across
releases (see ``docs/kernel-gro-spec.md`` section 7). :class:`GroConfig` adds the receive
path: batch model, RSS, NAPI budget and timers, size limits, checksum policy. Both are frozen
and picklable, so they cross process boundaries and go into Parquet metadata as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field

from gropcap import constants as C
from gropcap.errors import ConfigError

# The newest release whose rules are modelled; the default profile.
NEWEST_KERNEL = (6, 18)
OLDEST_KERNEL = (4, 4)
# The last minor release of each major series (v4.20 was followed by v5.0, v5.19 by v6.0):
# X.Y past these never existed.
LAST_MINOR = {4: 20, 5: 19, 6: NEWEST_KERNEL[1]}
KERNEL_RELEASES = tuple((major, minor) for major, last in sorted(LAST_MINOR.items())
                        for minor in range(last + 1)
                        if OLDEST_KERNEL <= (major, minor) <= NEWEST_KERNEL)
KERNEL_RELEASES_TEXT = ", ".join(
    f"{major}.{min(m for a, m in KERNEL_RELEASES if a == major)}-{major}.{last}"
    for major, last in sorted(LAST_MINOR.items()))

# Microsoft's RSS verification key, the default of many NIC drivers and of the
# Toeplitz reference (also what `ethtool -x` shows on virtio/ixgbe with no key set).
DEFAULT_RSS_KEY = bytes.fromhex(
    "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")


@dataclass(frozen=True)
class KernelProfile:
    """The GRO rule set of one kernel release. Build with :meth:`parse`.

    Each switch names the change that introduced it (its docstring has the detail):

    ===========================  =======  ==============================================
    switch                       from     change
    ===========================  =======  ==============================================
    strip_tunnel_gso_on_decap    4.6      b311341e0bd9 (read by the gro_cells stage)
    encap_mark                   4.6      fac8e0f57969
    fixed_id_support             4.7      "GRO: Add support for TCP with fixed IPv4 ID"
    ip6_tunnel_gro               4.7      "ip6ip6/ip4ip6: Support for GSO/GRO"
    vxlan_gpe                    4.7      e1e5314de08b
    ip6gre_gro_cells             4.17     "net: ipv6/gre: Add GRO support"
    hash_buckets (8)             4.19     07d78363dcff (not in 4.18)
    timeout_flushes_old          4.20     605108acfe62 (read by the NAPI loops)
    udp_gro_socket               5.0      e20cf8d3f1f7
    udp_gro_fraglist             5.6      9fd1ff5d2ac7
    napi_defer_hard_irqs         5.7      6f8b12d661d0
    ecn_decap_ect1               5.7      "tunnel: Propagate ECT(1) when decapsulating"
    dsa_gro                      5.8      e131a5634830
    ip6gre_tap_hard_header_len   5.10     832ba596494b (5.9.13); ends 505b6d296c48 (after
                                          v7.2; stable 5.10.270, 6.1.188, 6.12.109;
                                          gro_cells stage)
    udp_gro_forwarding           5.12     NETIF_F_GRO_UDP_FWD
    ip6_tnl_mac_header_reset     5.14     da5a2e49f064 (read by the gro_cells stage)
    ipv6_hop_limit_flush         5.18     6fc2f3832d36
    gso_skb_gro                  5.19     5eddb24901ee (absent 5.18, present 6.1)
    big_tcp_ipv4 / per_family    6.3      b1a78b9b9886
    vxlan_gpe_gro                6.5      b0b672c4d095 (stable 6.1.43)
    udp_l3_checks                6.9      Gobert, UDP flush checks
    flush_id_era ends            6.10     Gobert, "move L3 flush checks"
    tcp_gro_fraglist             6.10     "net: add code for TCP fraglist GRO" + heuristic
    ip6_tnl_hard_header_len ends 6.11     4b3e33fcc38f (stable 5.10.225, 5.15.166,
                                          6.1.107, 6.6.48, 6.10.7; gro_cells stage)
    cwr_in_flag_word             6.15     4e4f7cefb130
    two_bit_fixedid              6.18     Gobert, "restore outer ip ids"
    ===========================  =======  ==============================================

    ``stable`` is the stable point release (the Z of X.Y.Z; 0 = the mainline release X.Y,
    which every switch follows unless its docstring names stable backports, see
    :meth:`_fixed_in`). Distribution ABI names such as Debian's ``6.1.0-57-amd64`` carry
    no stable number: give the upstream version (``uname -v``: ``Debian 6.1.192-1``).
    """

    version: tuple[int, int]
    stable: int = 0

    @classmethod
    def parse(cls, text: str | tuple[int, int] | None) -> "KernelProfile":
        """``"6.18"``, ``"6.1.0-50-amd64"`` or ``(6, 18)`` -> profile.

        >>> KernelProfile.parse("6.1").flush_id_era
        True
        """
        if text is None:
            return cls(NEWEST_KERNEL)
        stable = 0
        if isinstance(text, tuple):
            ver = tuple(text[:2])
            stable = int(text[2]) if len(text) > 2 else 0
        else:
            # X.Y, X.Y.Z, or a release string such as uname -r's "6.1.0-57-amd64"
            m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?(?:[-+~][\w.+~-]*)?\s*", str(text))
            if not m:
                raise ConfigError(f"kernel version {text!r} is not X.Y or X.Y.Z",
                                  hint="give a release such as 6.18, 6.6 or 5.15, or a "
                                       "stable one such as 6.1.192")
            ver = (int(m.group(1)), int(m.group(2)))
            stable = int(m.group(3) or 0)
        if ver < OLDEST_KERNEL or ver > NEWEST_KERNEL:
            raise ConfigError(
                f"kernel {ver[0]}.{ver[1]} is not modelled",
                hint=f"choose a release from {KERNEL_RELEASES_TEXT}")
        if ver not in KERNEL_RELEASES:
            raise ConfigError(f"kernel {ver[0]}.{ver[1]} was never released",
                              hint=f"choose a release from {KERNEL_RELEASES_TEXT}")
        return cls(ver, stable)

    @property
    def name(self) -> str:
        base = f"{self.version[0]}.{self.version[1]}"
        return f"{base}.{self.stable}" if self.stable else base

    def _fixed_in(self, mainline: tuple[int, int], **stable: int) -> bool:
        """A change that entered ``mainline`` (X.Y) and stable series as backports:
        ``v6_1=107`` means 6.1.107 and later 6.1.y have it (a profile without a stable
        number, X.Y, follows mainline X.Y: no backport)."""
        if self.version >= mainline:
            return True
        first = stable.get(f"v{self.version[0]}_{self.version[1]}")
        return first is not None and self.stable >= first

    # --- rule switches ---
    @property
    def hash_buckets(self) -> int:
        """07d78363dcff "net: Convert NAPI gro list into a small hash table" (v4.19; 4.18
        still has ``napi->gro_list``): 8 hash buckets per NAPI; before it one list of at
        most MAX_GRO_SKBS (8) entries for the whole instance."""
        return 8 if self.version >= (4, 19) else 1

    @property
    def ip6_tunnel_gro(self) -> bool:
        """"ip6ip6: Support for GSO/GRO" and "ip4ip6: Support for GSO/GRO" (Tom Herbert,
        v4.7): inet6_offloads[IPPROTO_IPV6] / [IPPROTO_IPIP] get a gro_receive. Before
        it ipv6_gro_receive finds no handler for nexthdr 41 / 4 and flushes (the packet
        goes up alone, BYPASS_NO_L4_OFFLOAD). 6in4 (SIT) over IPv4 is older."""
        return self.version >= (4, 7)

    @property
    def gso_skb_gro(self) -> bool:
        """5eddb24901ee "gro: add support of (hw)gro packets to gro stack" (Coco Li; in
        v6.1, not in v5.18: dev_gro_receive there sets ``flush = skb_is_gso(skb) ||
        skb_has_frag_list(skb)``; v5.19 by its merge window): an arriving GSO skb counts
        ``gso_segs`` and may merge. Before it every arriving GSO skb is flushed: a
        first-stage super-packet never merges again at a gro_cells device."""
        return self.version >= (5, 19)

    @property
    def napi_defer_hard_irqs(self) -> bool:
        """6f8b12d661d0 "net: napi: add hard irqs deferral feature" (v5.7): the
        ``napi_defer_hard_irqs`` sysfs knob exists. The same commit dropped
        ``napi->gro_bitmask`` from napi_watchdog's test: before it a timer that fires with
        nothing held schedules no poll (read by both NAPI loops)."""
        return self.version >= (5, 7)

    @property
    def timeout_flushes_old(self) -> bool:
        """605108acfe62 "net: don't keep lonely packets forever in the gro hash" (Paolo
        Abeni, v4.20; backported to 4.14.y in May 2019): napi_complete_done calls
        ``napi_gro_flush(n, !!timeout)`` before arming the gro_flush_timeout timer. Before
        it (``if (timeout) hrtimer_start(...); else napi_gro_flush(n, false);``) a poll
        that armed the timer flushed nothing: held packets waited for the timer poll
        (work 0: ``napi_gro_flush(n, false)``, everything) or a full-budget poll. Read by
        both NAPI loops (reference ``NapiQueue.run``, ``fast.napi.run``)."""
        return self.version >= (4, 20)

    @property
    def vxlan_gpe(self) -> bool:
        """e1e5314de08b "vxlan: implement GPE" (v4.7): VXLAN-GPE devices/sockets exist."""
        return self.version >= (4, 7)

    @property
    def vxlan_gpe_gro(self) -> bool:
        """b0b672c4d095 (July 2023, v6.5): vxlan_gpe_gro_receive, the GRO hook of
        VXLAN-GPE sockets. Before it a GPE
        socket used vxlan_gro_receive, whose eth_gro_receive reads an inner IP header as
        Ethernet, finds no handler and flushes (the packet goes up alone); a GPE payload
        of next protocol Ethernet still aggregates. Stable: 6.1.43 ("[PATCH 6.1 090/228]
        vxlan: fix GRO with VXLAN-GPE", August 2023; Debian's 6.1.192 aggregates GPE IP
        payloads live); other series' backports not checked."""
        return self._fixed_in((6, 5), v6_1=43)

    @property
    def tcp_gro_fraglist(self) -> bool:
        """Felix Fietkau's "net: add TCP fraglist GRO support" series (v6.10): "net: add
        code for TCP fraglist GRO" (the ``is_flist`` branch of tcp_gro_receive,
        skb_gro_receive_list) and "net: add heuristic for enabling TCP fraglist GRO"
        (tcp4/6_check_fraglist_gro: rx-gro-list on and no local socket for the flow)."""
        return self.version >= (6, 10)

    @property
    def fixed_id_support(self) -> bool:
        """"GRO: Add support for TCP with fixed IPv4 ID field, limit tunnel IP ID values"
        (Alexander Duyck, v4.7; is_atomic / SKB_GSO_TCP_FIXEDID): a constant IPv4 ID with
        DF may merge.

        Before it only the innermost ID was checked and had to increase by one per segment.
        """
        return self.version >= (4, 7)

    @property
    def ipv6_hop_limit_flush(self) -> bool:
        """6fc2f3832d36 (v5.18): hop-limit mismatch flushes; before, it was a flow key."""
        return self.version >= (5, 18)

    @property
    def flush_id_era(self) -> bool:
        """v4.7-v6.9: flush_id / is_atomic IP ID logic run per held packet in the L3 loop;
        ended by Richard Gobert's "net: gro: move L3 flush checks to tcp_gro_receive and
        udp_gro_receive_segment" (v6.10)."""
        return self.version < (6, 10)

    @property
    def udp_l3_checks(self) -> bool:
        """v6.9 + stable (Gobert's UDP flush-check fix): udp_gro_receive_segment checks
        TTL/TOS/DF/ID (gro_receive_network_flush)."""
        return self.version >= (6, 9)

    @property
    def cwr_in_flag_word(self) -> bool:
        """4e4f7cefb130 (v6.15, AccECN): CWR no longer masked out of the flag-word compare."""
        return self.version >= (6, 15)

    @property
    def two_bit_fixedid(self) -> bool:
        """Gobert "restore outer ip ids" (v6.18): outer/inner fixed-ID bits, no DF needed."""
        return self.version >= (6, 18)

    @property
    def big_tcp_ipv4(self) -> bool:
        """b1a78b9b9886 "net: add support for ipv4 big tcp" (v6.3): gro_ipv4_max_size may
        exceed 64 KB."""
        return self.version >= (6, 3)

    @property
    def per_family_max_size(self) -> bool:
        """b1a78b9b9886 "net: add support for ipv4 big tcp" (v6.3): skb_gro_receive takes
        gro_max_size when p->protocol is IPv6, else gro_ipv4_max_size (kept by the later
        netif_get_gro_max_size helper). Before v6.3 gro_max_size applies to all."""
        return self.version >= (6, 3)

    @property
    def dsa_gro(self) -> bool:
        """e131a5634830 (v5.8): DSA user ports run GRO through gro_cells."""
        return self.version >= (5, 8)

    @property
    def ip6gre_gro_cells(self) -> bool:
        """"net: ipv6/gre: Add GRO support" (Eran Ben Elisha, net-next early 2018, v4.17 by
        merge window): ip6gre / ip6gretap / ip6erspan call gro_cells_init; before it
        gro_cells_receive fell back to netif_rx (no GRO on those devices)."""
        return self.version >= (4, 17)

    @property
    def ip6_tnl_hard_header_len(self) -> bool:
        """ip6_tnl_link_config (net/ipv6/ip6_tunnel.c) sets an ip6tnl device's
        ``dev->hard_header_len = tdev->hard_header_len + t_hlen`` (lower device + 40; and
        ip6_tnl_dev_init_gen ``LL_MAX_HEADER + t_hlen`` when no route to the remote exists)
        until 4b3e33fcc38f "ip6_tunnel: Fix broken GRO" (Thomas Bogendoerfer, v6.11-rc5:
        needed_headroom instead; stable 5.10.225, 5.15.166, 6.1.107, 6.6.48, 6.10.7).
        gro_list_prepare memcmp()s ``hard_header_len`` bytes from ``skb_mac_header`` when
        it is not ETH_HLEN, so at the gro_cells stage of an ip6ip6 / ip4ip6 device those
        bytes join the flow key (see :attr:`ip6_tnl_mac_header_reset` for which bytes)."""
        return not self._fixed_in((6, 11), v5_10=225, v5_15=166, v6_1=107, v6_6=48,
                                  v6_10=7)

    @property
    def ip6gre_tap_hard_header_len(self) -> bool:
        """An ip6gretap / ip6erspan device's ``hard_header_len`` is the whole outer stack.
        ether_setup gives these ARPHRD_ETHER devices ``eth_header_ops``, and since
        832ba596494b "net: ip6_gre: set dev->hard_header_len when using header_ops" (Antoine
        Tenart, v5.10-rc7) net/ipv6/ip6_gre.c tests only ``dev->header_ops``:
        ip6gre_calc_hlen sets ``hard_header_len = LL_MAX_HEADER + t_hlen`` and
        ip6gre_tnl_link_config_route ``rt->dst.dev->hard_header_len + t_hlen`` (lower
        Ethernet 14 + IPv6 40 + GRE [+ ERSPAN]) instead of ``needed_headroom``. Not
        ETH_HLEN, so gro_list_prepare memcmp()s that many bytes from the inner Ethernet
        header (see the gro_cells stage). Until 505b6d296c48 "ip6_gre: fix hardware header
        length for NBMA tunnels" (netdev/net, 18 August 2026, after v7.2; CVE-2026-89562):
        only an NBMA ip6gre device (ip6gre_header_ops, ARPHRD_IP6GRE) keeps a
        hard_header_len, the route path sets needed_headroom only, so the taps keep
        ether_setup's ETH_HLEN. Stable: 5.10.270 (cb1afd087aed, 14 September 2026),
        6.1.188 and 6.12.109 (Debian's changelogs; Debian 6.1.192 and 6.12.117 merge these
        devices live, 5.10.223 does not); other series' backports not checked. From
        5.10, and 5.9.13 (Debian's changelog lists 832ba596494b there); its backports to
        older stable series are not checked, nor is the release of eb95f52fc72d "net:
        ipv6_gre: Fix GRO to work on IPv6 over GRE tap", before which ip6gre_calc_hlen set
        ``hard_header_len = LL_MAX_HEADER + t_hlen`` for every ip6gre device: releases
        before 5.10 are modelled with ETH_HLEN (they merge)."""
        return self._fixed_in((5, 10), v5_9=13) and not self._fixed_in(
            (7, 3), v5_10=270, v6_1=188, v6_12=109)

    @property
    def ip6_tnl_mac_header_reset(self) -> bool:
        """da5a2e49f064 "ip6_tunnel: allow redirecting ip6gre and ipxip6 packets to eth
        devices" (Guillaume Nault, v5.14): __ip6_tnl_rcv calls skb_reset_mac_header for a
        non-Ethernet tunnel device, so the MAC header is the inner IP header. Before it
        (e.g. 5.10) it stays the lower device's: gro_list_prepare's memcmp over
        :attr:`ip6_tnl_hard_header_len` bytes covers the outer Ethernet and IPv6 headers
        (payload length included); from it, the inner IP and L4 headers (TCP sequence
        number included: nothing merges)."""
        return self.version >= (5, 14)

    @property
    def strip_tunnel_gso_on_decap(self) -> bool:
        """b311341e0bd9 "tunnels: Remove encapsulation offloads on decap" (v4.6): the
        NETIF_F_GSO_ENCAP_ALL bits are cleared from gso_type when a tunnel is pulled."""
        return self.version >= (4, 6)

    @property
    def ecn_decap_ect1(self) -> bool:
        """"tunnel: Propagate ECT(1) when decapsulating as recommended by RFC6040"
        (v5.7): INET_ECN_decapsulate sets ECT(1) on an ECT(0) inner header under an
        ECT(1) outer one. Before it only outer CE was copied (CE over Not-ECT: drop)."""
        return self.version >= (5, 7)

    @property
    def encap_mark(self) -> bool:
        """fac8e0f57969 "tunnels: Don't apply GRO to multiple layers of encapsulation"
        (Jesse Gross, v4.6)."""
        return self.version >= (4, 6)

    @property
    def udp_gro_socket(self) -> bool:
        """e20cf8d3f1f7 "udp: implement GRO for plain UDP sockets." (Paolo Abeni, v5.0):
        UDP_GRO socket option (udp_gro_receive_segment)."""
        return self.version >= (5, 0)

    @property
    def udp_gro_fraglist(self) -> bool:
        """9fd1ff5d2ac7 "udp: Support UDP fraglist GRO/GSO." (Steffen Klassert, v5.6):
        NETIF_F_GRO_FRAGLIST (rx-gro-list) for UDP."""
        return self.version >= (5, 6)

    @property
    def udp_gro_forwarding(self) -> bool:
        """Paolo Abeni's "udp: ... NETIF_F_GRO_UDP_FWD" series (v5.12):
        rx-udp-gro-forwarding."""
        return self.version >= (5, 12)


MODELS = ("ideal", "napi")
_OPTIONAL_DEFAULTS = {"native_gro": True, "tunnel_gro": None, "udp_tunnels": "",
                      "udp_gro": "off", "vlan_gro": True, "rx_gro_list": False,
                      "tcp_local_socket": True, "mtu": None, "poll_acks": False}

# --udp-gro: udp_gro_receive's modes (net/ipv4/udp_offload.c)
UDP_GRO_MODES = ("off", "socket", "forward", "fraglist")
# --udp-tunnel KIND:PORT: UDP tunnel sockets with a gro_receive hook
UDP_TUNNEL_KINDS = ("vxlan", "vxlan-gpe", "geneve", "fou", "gue")


def parse_udp_tunnels(text) -> tuple[tuple[str, int], ...]:
    """``"vxlan:4789,geneve:6081"`` (or pairs) -> ``(("vxlan", 4789), ("geneve", 6081))``.

    >>> parse_udp_tunnels("vxlan:4789")
    (('vxlan', 4789),)
    """
    if not text:
        return ()
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in items:
        if isinstance(item, str):
            kind, sep, port = item.strip().partition(":")
            if not sep:
                raise ConfigError(f"udp tunnel {item!r} is not KIND:PORT",
                                  hint="e.g. vxlan:4789,geneve:6081")
        else:
            kind, port = item
        kind = str(kind).strip().lower()
        if kind not in UDP_TUNNEL_KINDS:
            raise ConfigError(f"unknown udp tunnel kind {kind!r}",
                              hint=f"use one of {', '.join(UDP_TUNNEL_KINDS)}")
        try:
            port = int(port)
        except ValueError:
            raise ConfigError(f"udp tunnel port {port!r} is not a number") from None
        if not 0 < port < 65536:
            raise ConfigError(f"udp tunnel port {port} out of range 1..65535")
        out.append((kind, port))
    return tuple(out)


# The receive parameter that sets where inferred NAPI polls end. 50 us = the default RX
# interrupt throttling of Intel ice / i40e (ICE_DFLT_RX_ITR, I40E_ITR_RX_DEF = *_ITR_20K:
# "50us (translates to ~20k int/sec max)"): frames less than this apart share an interrupt
# and so a poll. Not fitted: on the veth pairs in sample_pcaps/pairs any gap from 30 to
# 50 us gives the kernel's count within 2%; 100 us (the old default) lumped successive
# sender bursts into 64-frame polls that the kernel never ran (docs/gro-model.md).
DEFAULT_POLL_GAP_NS = 50_000


@dataclass(frozen=True)
class GroConfig:
    """Everything that decides GRO verdicts besides the packets themselves.

    Attributes:
        kernel: rule set (``KernelProfile.parse("6.18")``).
        model: ``"ideal"`` (no poll boundaries, unlimited table: the upper bound) or
            ``"napi"`` (RSS queues, 8x8 table, polls inferred from timestamps).
        verify_checksums: apply TCP/UDP checksums as software GRO would; by default the NIC
            is assumed to have validated them (CHECKSUM_UNNECESSARY).
        gro_max_size / gro_ipv4_max_size: per-device limits (65536 unless BIG TCP).
        rss: ``"toeplitz"`` (hash of addresses and ports, as NIC RSS) or ``"none"``
            (no hash: every flow in bucket 0 of queue 0).
        rss_key: Toeplitz key (40 bytes).
        queues: RX queues; a flow's queue is ``hash % queues`` (indirection table of a
            NIC spread evenly).
        budget: NAPI weight, frames per poll (64).
        poll_gap_ns: a gap longer than this between two frames of one queue ends a poll
            (default 50 us: the interrupt moderation of ice/i40e, ICE_DFLT_RX_ITR =
            ICE_ITR_20K = 50 us; docs/gro-model.md "Poll boundaries on real receive paths").
        hz: CONFIG_HZ; with HZ < 1000 a full-budget poll flushes everything.
        gro_flush_timeout_ns / napi_defer_hard_irqs: deferred flush (sysfs knobs);
            napi_defer_hard_irqs exists from 5.7 and is 0 on older kernels.
        native_gro: GRO on the receiving device (``ethtool -K dev gro off`` ->
            netif_elide_gro: every frame skips GRO).
        tunnel_gro: the gro_cells second stage after decapsulation (tunnel, ERSPAN and DSA
            user devices): ``None`` not modelled (one stage; DSA user-port GRO folded into
            it), ``True`` modelled with GRO on those devices, ``False`` modelled with GRO
            off on them (gro_cells_receive falls back to netif_rx).
        udp_tunnels: ``(("vxlan", 4789), ...)``: local UDP tunnel sockets with a
            gro_receive hook; VXLAN/Geneve/FOU/GUE on other ports are plain UDP.
        udp_gro: ``off`` | ``socket`` (UDP_GRO socket option) | ``forward``
            (rx-udp-gro-forwarding) | ``fraglist`` (rx-gro-list).
        vlan_gro: the kernel has vlan_gro_receive (CONFIG_VLAN_8021Q, vlan_core.c's
            vlan_offload_init). ``False``: in-band 802.1Q / 802.1ad frames skip GRO
            (BYPASS_NO_VLAN_GRO), as on kernels built without 802.1Q support.
        rx_gro_list: NETIF_F_GRO_FRAGLIST (``ethtool -K dev rx-gro-list on``) on the
            receiving device; for TCP it matters from v6.10 (tcp4/6_check_fraglist_gro).
            UDP's use of it is ``udp_gro="fraglist"``.
        tcp_local_socket: the TCP flows end on this host (an established socket exists,
            so ``is_flist`` stays 0 and normal GRO runs); ``False``: forwarded traffic
            (a router), so with ``rx_gro_list`` TCP is aggregated as a frag_list
            (skb_gro_receive_list, SKB_GSO_FRAGLIST).
        mtu: the receiving device's MTU (bytes of IP packet): a frame with at most this
            many outermost IP bytes is a wire frame, a larger one was captured already
            coalesced. ``None``: inferred from the capture (:mod:`gropcap.gro.mtu`).
        poll_acks: ``napi`` model: a poll also ends where the receiver's ACKs in the
            capture show a delivery (:mod:`gropcap.receive.ackpolls`); the gap rule and the budget
            still end the polls that sent no ACK. The pipeline and calibrate apply it
            before the engine runs (the engine itself reads only arrival times).
    """

    kernel: KernelProfile = field(default_factory=lambda: KernelProfile(NEWEST_KERNEL))
    model: str = "ideal"
    verify_checksums: bool = False
    gro_max_size: int = 65536
    gro_ipv4_max_size: int = 65536
    rss: str = "toeplitz"
    rss_key: bytes = DEFAULT_RSS_KEY
    queues: int = 1
    budget: int = 64
    poll_gap_ns: int = DEFAULT_POLL_GAP_NS
    hz: int = 250
    gro_flush_timeout_ns: int = 0
    napi_defer_hard_irqs: int = 0
    native_gro: bool = True
    tunnel_gro: bool | None = None
    udp_tunnels: tuple = ()
    udp_gro: str = "off"
    vlan_gro: bool = True
    rx_gro_list: bool = False
    tcp_local_socket: bool = True
    mtu: int | None = None
    poll_acks: bool = False

    def __post_init__(self):
        object.__setattr__(self, "udp_tunnels", parse_udp_tunnels(self.udp_tunnels))
        if self.udp_gro not in UDP_GRO_MODES:
            raise ConfigError(f"unknown udp_gro mode {self.udp_gro!r}",
                              hint=f"use one of {UDP_GRO_MODES}")
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}", hint=f"use one of {MODELS}")
        if self.rss not in ("toeplitz", "none"):
            raise ConfigError(f"unknown rss {self.rss!r}", hint="use toeplitz or none")
        if self.queues < 1 or self.budget < 1 or self.hz < 1:
            raise ConfigError("queues, budget and hz must be positive")
        if len(self.rss_key) < 12:
            raise ConfigError("rss key must be at least 12 bytes (IPv4 4-tuple needs 12)")
        if self.napi_defer_hard_irqs and not self.kernel.napi_defer_hard_irqs:
            # the knob arrived in 5.7 (6f8b12d661d0): an older kernel runs without it, so
            # 0 is what is in force (and what to_dict reports); the CLI refuses the option
            object.__setattr__(self, "napi_defer_hard_irqs", 0)
        for name in ("gro_max_size", "gro_ipv4_max_size"):
            if not 1 <= getattr(self, name) <= 512 * 1024:
                raise ConfigError(f"{name} must be between 1 and 524288")
        if self.mtu is not None and not 68 <= self.mtu <= 65536:
            raise ConfigError(f"mtu {self.mtu} out of range 68..65536",
                              hint="the receiving device's MTU, e.g. 1500, 9000 or 65535")

    def replace(self, **changes) -> "GroConfig":
        return dataclasses.replace(self, **changes)

    def max_size(self, ip_version: int) -> int:
        """netif_get_gro_max_size: the limit for a packet whose ``skb->protocol`` is IPv6
        (``ip_version == 6``) or anything else (IPv4, and in-band VLAN-tagged frames, whose
        skb->protocol is 0x8100)."""
        if not self.kernel.per_family_max_size:
            return self.gro_max_size
        return self.gro_max_size if ip_version == 6 else self.gro_ipv4_max_size

    def to_dict(self) -> dict:
        # shallow: every field is a scalar, bytes or a tuple replaced below, and the
        # kernel profile by its name (dataclasses.asdict walked the whole profile: 0.7 ms
        # a call, and the engine asks per batch)
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["kernel"] = self.kernel.name
        d["rss_key"] = self.rss_key.hex()
        d["udp_tunnels"] = ",".join(f"{k}:{p}" for k, p in self.udp_tunnels)
        # the receive-path switches added with the gro_cells stage appear only when set, so
        # configurations (and baselines) recorded before them compare equal
        for key, default in _OPTIONAL_DEFAULTS.items():
            if d[key] == default:
                del d[key]
        return d

    @property
    def tcp_fraglist(self) -> bool:
        """TCP fraglist GRO in force (tcp4/6_check_fraglist_gro, v6.10): rx-gro-list on and
        no local socket for the flows, so ``NAPI_GRO_CB(skb)->is_flist`` is set."""
        return bool(self.kernel.tcp_gro_fraglist and self.rx_gro_list
                    and not self.tcp_local_socket)

    def udp_tunnel_socket(self, kind: str, port: int) -> bool:
        """A local tunnel socket of ``kind`` listens on UDP ``port``."""
        return (kind, port) in self.udp_tunnels

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


# --- rules both engines read (here, not in gro/reference.py: the numba engine's
# preparation reads them without importing the reference model, 8 ms of a warm run) ---

# UDP tunnels a socket can own (vxlan, vxlan-gpe, geneve)
UDP_TUNNELS = (C.TUN_VXLAN, C.TUN_VXLAN_GPE, C.TUN_GENEVE)
# UDP tunnels whose socket has a gro_receive hook (vxlan, geneve, fou, gue), by config name
UDP_TUNNEL_KIND = {C.TUN_VXLAN: "vxlan", C.TUN_VXLAN_GPE: "vxlan-gpe",
                   C.TUN_GENEVE: "geneve", C.TUN_FOU: "fou", C.TUN_GUE: "gue"}


def udp_mode(config: GroConfig) -> str:
    """The UDP GRO mode in force for plain UDP (udp_gro_receive, first branch); ``off``
    when the configured mode is newer than the kernel."""
    mode, prof = config.udp_gro, config.kernel
    if (mode == "socket" and not prof.udp_gro_socket
            or mode == "forward" and not prof.udp_gro_forwarding
            or mode == "fraglist" and not prof.udp_gro_fraglist):
        return "off"
    return mode


def fraglist_before_tunnel(config: GroConfig) -> bool:
    """v5.6-v5.12 with rx-gro-list (``udp_gro="fraglist"``): udp_gro_receive set
    ``is_flist = sk ? !udp_sk(sk)->gro_enabled : 1`` and ran udp_gro_receive_segment
    *before* its tunnel branch, so a datagram to a tunnel socket (no UDP_GRO on it) was
    aggregated as an outer UDP datagram, as with no socket. From v5.13 (Paolo Abeni,
    "udp: skip L4 aggregation for UDP tunnel packets", series "udp: GRO L4
    improvements") that check runs only when ``!sk || !udp_sk(sk)->gro_receive``."""
    return udp_mode(config) == "fraglist" and config.kernel.version < (5, 13)


def needs_reference(config: GroConfig) -> bool:
    """True when ``config`` uses a rule only the reference model implements, so a caller
    must run ``gro.reference.simulate`` instead of the numba engine (``gro/engine.py``).

    None today: UDP GRO (``udp_gro``: socket, forward, fraglist) and UDP tunnel sockets
    (``udp_tunnels``) are in both engines (``gro/_udp_prepare.py``,
    ``fast.udp._udp_receive``), as are TCP fraglist GRO (``rx_gro_list``,
    ``tcp_local_socket``), GRO off on the device (``native_gro``, ``no_gro=``), the DSA
    conduit of the gro_cells stage (``tunnel_gro``), VLAN GRO (``vlan_gro``) and arriving
    GSO packets (``coalesced=``, ``hashes=``), so the gro_cells stage
    (:mod:`gropcap.gro.stages`) runs on the numba engine too. Kept as the one place a
    future reference-only rule is declared.

    >>> needs_reference(GroConfig())
    False
    >>> needs_reference(GroConfig(udp_tunnels="vxlan:4789", udp_gro="fraglist"))
    False
    """
    return False
