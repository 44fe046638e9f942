"""Reference GRO model: plain Python, written straight from the kernel (the test oracle).

Layer: packet columns (``decode/schema.py``, Arrow) -> :class:`GroResult` (``gro/result.py``).
The numba engine (``gro/engine.py``) implements the same contract and is held equal to this
module bit for bit; ``docs/gro-model.md`` fixes what the kernel leaves to hardware and timing
(RSS, buckets, NAPI polls, delivery order, reason precedence).

One function per kernel function it mirrors (6.18 names; older behaviour is switched by
``config.kernel``, a :class:`KernelProfile`):

==============================  ==========================================================
kernel                          here
==============================  ==========================================================
dev_gro_receive                 :meth:`GroNode.dev_gro_receive`
gro_list_prepare                :func:`gro_list_prepare_key` (same flow), and the
                                bail-outs of :func:`gro_list_prepare_and_l2`
vlan_gro_receive                :func:`vlan_gro_receive_key`
inet_gro_receive                :func:`inet_gro_receive` (bail), :func:`ip_key`,
                                :func:`ip_skb_flush`
ipv6_gro_receive                :func:`ipv6_gro_receive` (bail), :func:`ip_key`
gre_gro_receive / ipip / sit    :func:`tunnel_gro_receive` (bail), :func:`tunnel_key`
tcp_gro_lookup                  :func:`tcp_gro_lookup_key`
tcp4/6_gro_receive              :func:`tcp_csum_and_header`
tcp_gro_receive                 :meth:`GroNode.tcp_gro_receive`
inet_gro_flush / ipv6_gro_flush :func:`inet_gro_flush`, :func:`ipv6_gro_flush`
  (+ flush_id era before 6.10)  :func:`flush_id_old`
skb_gro_receive                 :func:`skb_gro_receive`
gro_complete (+ tcp_gro_compl.) :func:`gro_complete`
__gro_flush / gro_flush_oldest  :meth:`GroNode.gro_flush`
napi_complete_done/__napi_poll  :class:`NapiQueue`
==============================  ==========================================================

Scope: Ethernet / VLAN / QinQ / DSA + IPv4 / IPv6 + TCP, natively aggregated GRE (flags
K and C only), GRE-TEB, IPIP, SIT, ip6ip6 and ip4ip6 tunnels. UDP tunnels (VXLAN, VXLAN-GPE,
Geneve, FOU, GUE) are aggregated natively only when ``config.udp_tunnels`` names a local
tunnel socket on their port (udp_gro_receive tunnel branch); otherwise they are plain UDP.
Plain UDP, and the inner UDP of such a tunnel socket, follow ``config.udp_gro``
(udp_gro_receive_segment: socket UDP_GRO, forwarding, fraglist). ERSPAN is delivered alone
(``BYPASS_TUNNEL``). The gro_cells second stage after decapsulation is
:mod:`gropcap.gro.stages`, which runs :func:`simulate` again over a derived table of
arriving GSO packets (``coalesced=``).

Features only this model has: see :func:`needs_reference` (none today).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from gropcap import constants as C
from gropcap.decode import schema as S
from gropcap.errors import ConfigError
from gropcap.gro import gso
from gropcap.gro import reasons as R
from gropcap.gro.config import (UDP_TUNNEL_KIND, UDP_TUNNELS, GroConfig,  # noqa: F401
                                KernelProfile, fraglist_before_tunnel, needs_reference,
                                udp_mode)
from gropcap.gro.gso import udp_tunnel_gso_bits  # noqa: F401
from gropcap.gro.flows import assign_flow_ids
from gropcap.gro.result import GroResult, concat_runs, run_bounds
from gropcap.gro.rss import gro_bucket, rss_hash, rx_queue

__all__ = ["simulate", "needs_reference", "GroNode", "HeldEntry", "Skb", "MAX_GRO_SKBS",
           "GRO_HASH_BUCKETS"]

MAX_GRO_SKBS = 8          # net/core/gro.c: held packets per bucket
GRO_HASH_BUCKETS = 8      # include/linux/netdevice.h (v4.19, 07d78363dcff)
GRO_LEGACY_MAX_SIZE = 65536   # include/linux/netdevice.h: the 64 KB limit before BIG TCP

# tcp_gro_receive: flags never masked out of the flag word, and the final-flag list
_TCP_FINAL = C.TCP_FLAG_URG | C.TCP_FLAG_PSH | C.TCP_FLAG_RST | C.TCP_FLAG_SYN | C.TCP_FLAG_FIN
_TCP_NEVER_EQUAL = C.TCP_FLAG_SYN | C.TCP_FLAG_RST | C.TCP_FLAG_URG

# Tunnels aggregated natively on the receiving device (no socket needed)
_NATIVE_TUNNELS = (C.TUN_GRE, C.TUN_GRE_TEB, C.TUN_IPIP, C.TUN_SIT, C.TUN_IP6IP6,
                   C.TUN_IP4IP6)
# (the UDP tunnels, the UDP GRO mode and needs_reference live in gro/config.py, the UDP
# tunnel completion bits in gro/gso.py: the numba engine's preparation reads them too,
# without importing this module: 8 ms of a warm run)
_UDP_TUNNELS = UDP_TUNNELS
_UDP_TUNNEL_KIND = UDP_TUNNEL_KIND
UDP_GRO_CNT_MAX = 64      # include/net/udp.h: segments per UDP GRO packet
# inet_offloads / inet6_offloads with a gro_receive: TCP, UDP, GRE, IPIP (4), IPv6 (41)
_L4_WITH_GRO = (C.IPPROTO_TCP, C.IPPROTO_UDP, C.IPPROTO_GRE, C.IPPROTO_IPIP, C.IPPROTO_IPV6)

_FLUSH_OF_NOT_HELD = {R.NOT_HELD_LENGTH: R.FLUSH_LENGTH, R.NOT_HELD_IP_RF: R.FLUSH_IP_RF,
                      R.NOT_HELD_FRAG_LIST: R.FLUSH_FRAG_LIST}


# --- the packet as GRO sees it ------------------------------------------------------------

@dataclass(slots=True)
class IpHdr:
    """One IP header of a packet (outermost first), the fields GRO reads."""

    version: int
    hdr_len: int
    tot_len: int
    src: bytes
    dst: bytes
    proto: int
    ttl: int
    tos: int
    id: int
    df: bool
    mf: bool
    rf: bool
    frag_off: int
    csum_ok: bool
    flow_label: int
    ext_mask: int
    ext_len: int
    ext_digest: int
    gro_len: int      # skb_gro_len at this header: bytes from it to the end of the frame


@dataclass(slots=True)
class Skb:
    """One received frame with the values the GRO chain computes from it."""

    idx: int
    status: int
    hash: int
    queue: int
    bucket: int
    dsa: bool
    l2: tuple                 # gro_list_prepare + vlan_gro_receive identity
    bad_tpid: bool            # a VLAN TPID without a packet_offload (0x9100)
    vlan_depth: int           # in-band VLAN tags (skb->protocol is then 0x8100)
    eth_type: int             # the frame's EtherType (its TPID when tagged in band)
    ip: list                  # IpHdr, outermost first (two for a native tunnel)
    tun_type: int
    tun_flags: int
    tun_key: tuple            # gre_gro_receive / eth_gro_receive identity
    tun_csum_ok: bool
    encap_depth: int
    l4_proto: int
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    doff: int
    window: int
    options: bytes
    opt_len: int
    l4_csum_state: int
    payload_len: int          # column value (IP lengths)
    len: int                  # skb_gro_len at TCP: payload incl. any trailer/padding
    p_len: int                # skb->len counted from the outer network header (+VLAN tags)
    ts_ns: int
    udp_sock: bool = False    # a local UDP tunnel socket owns the outer port (tunnel GRO)
    udp_csum: int = 0         # outer UDP checksum field of a UDP tunnel (0: none)
    udp_len: int = 0          # plain UDP: uh->len
    udp_gro_len: int = 0      # plain UDP: skb_gro_len at the UDP header
    uh_check: int = 0         # the aggregated UDP header's checksum (inner one in a tunnel)
    flist: bool = False       # NAPI_GRO_CB(skb)->is_flist (UDP fraglist mode)
    tcp_flist: bool = False   # NAPI_GRO_CB(skb)->is_flist of a TCP flow (v6.10 fraglist GRO)
    inner_eth_type: int = 0   # EtherType / first TPID of an inner Ethernet header
    inner_vlan: tuple = (0, 0, 0, 0, 0)   # its in-band tags: depth, TPID/TCI x 2
    elide: bool = False       # the receiving device has GRO off (netif_elide_gro)
    frag_list: bool = False   # an arriving GRO packet that carries a frag_list
    gso_segs: int = 1         # NAPI_GRO_CB(skb)->count: > 1 for a frame captured coalesced
    gso_size: int = 0         # skb_shinfo(skb)->gso_size of such a frame (0: plain segment)
    key: tuple = ()           # full same-flow key (all layers), see Skb building
    key_nohop: tuple = ()     # the same without IPv6 hop limits (FLUSH_HOP_LIMIT_FLOW)


@dataclass(slots=True)
class HeldEntry:
    """A held super-packet ``p``: NAPI_GRO_CB(p) and the fields of its first packet."""

    skb: Skb                  # first packet: its headers are p's headers
    packets: list             # row numbers merged, in order
    count: int                # NAPI_GRO_CB(p)->count
    len: int                  # p->len
    gro_len: int              # skb_gro_len(p): payload merged so far
    gso_size: int             # skb_shinfo(p)->gso_size: payload of the first packet
    age: int                  # NAPI_GRO_CB(p)->age (jiffy when held)
    seq_no: int               # insertion order (oldest first when flushing an unlimited list)
    bucket: int
    flags_or: int = 0         # FIN|PSH ORed into p's header by merges
    ip_fixedid: int = 0       # 6.10+: ip_fixedid (1 bit, 2 bits from 6.18)
    is_atomic: bool = True    # before 6.10: NAPI_GRO_CB(p)->is_atomic


@dataclass(slots=True)
class SegDraft:
    """A super-packet handed to the stack (before its seg_id / poll_id are known)."""

    packets: list
    count: int
    payload_len: int
    gso_size: int
    gso_type: int
    end_reason: int
    queue: int


@dataclass
class Outcome:
    """What ``dev_gro_receive`` did with one packet."""

    completed: list = field(default_factory=list)  # (HeldEntry, end_reason), delivery order
    kind: str = "held"         # "merged" | "delivered" | "held"
    reason: int = R.NO_HELD_PACKET


# --- building Skb objects from the table -----------------------------------------------------

def _col(table: pa.Table, name: str) -> list:
    return table.column(name).to_pylist()


def _ip_layer(cols: dict, prefix: str, i: int, end: int) -> IpHdr:
    off = cols[prefix + "offset"][i]
    return IpHdr(
        version=cols[prefix + "version"][i], hdr_len=cols[prefix + "hdr_len"][i],
        tot_len=cols[prefix + "tot_len"][i], src=cols[prefix + "src"][i],
        dst=cols[prefix + "dst"][i], proto=cols[prefix + "proto"][i],
        ttl=cols[prefix + "ttl"][i], tos=cols[prefix + "tos"][i], id=cols[prefix + "id"][i],
        df=cols[prefix + "df"][i], mf=cols[prefix + "mf"][i], rf=cols[prefix + "rf"][i],
        frag_off=cols[prefix + "frag_off"][i], csum_ok=cols[prefix + "csum_ok"][i],
        flow_label=cols[prefix + "flow_label"][i], ext_mask=cols[prefix + "ext_mask"][i],
        ext_len=cols[prefix + "ext_len"][i], ext_digest=cols[prefix + "ext_digest"][i],
        gro_len=end - off)


# Same flow is decided layer by layer; a held p stays a candidate only while every layer
# finds it equal. Each layer's compared fields are one key part; the whole key is their tuple
# (so "first candidate in list order" is "first entry with an equal key").

def gro_list_prepare_key(hash_: int, iface: int, dsa_port: int, eth_dst: int, eth_src: int,
                         eth_type: int) -> tuple:
    """gro_list_prepare: RX hash, device (interface; DSA user port), and the whole 14-byte
    MAC header (compare_ether_header: destination, source, EtherType)."""
    return (hash_, iface, dsa_port, eth_dst, eth_src, eth_type)


_VLAN_FIELDS = ("depth", "tpid0", "tci0", "tpid1", "tci1")


def vlan_gro_receive_key(depth: int, tpid0: int, tci0: int, tpid1: int, tci1: int) -> tuple:
    """vlan_gro_receive (0x8100 / 0x88A8, recursing for QinQ): compare_vlan_header, i.e.
    the whole TCI (PCP, DEI, VID) and encapsulated EtherType of every in-band tag. Used
    for the outer link's tags (``vlan_*``) and the tags inside a tunnel's Ethernet
    (``inner_vlan_*``: eth_gro_receive hands them to the same handler)."""
    return (depth, tpid0, tci0, tpid1, tci1)


def ip_key(h: IpHdr, with_hop: bool) -> tuple:
    """inet_gro_receive / ipv6_gro_receive same-flow fields of one IP header."""
    if h.version == 4:
        return (4, h.proto, h.src, h.dst)               # inet_gro_receive
    # ipv6_gro_receive: version + flow label (first word & 0xF00FFFFF), addresses,
    # nexthdr, extension-header bytes; hop limit too before 5.18 (6fc2f3832d36)
    key = (6, h.flow_label, h.src, h.dst, h.proto, h.ext_mask, h.ext_len, h.ext_digest)
    return key + (h.ttl,) if with_hop else key


def tunnel_key(tun_type: int, flags: int, proto: int, key: int, inner_eth: tuple) -> tuple:
    """gre_gro_receive: the flags word, protocol and (with K) key; for GRE-TEB also
    eth_gro_receive on the inner Ethernet header and vlan_gro_receive on its tags
    (``inner_eth``). IPIP/SIT/ip6ip6/ip4ip6 add nothing."""
    if tun_type in (C.TUN_GRE, C.TUN_GRE_TEB):
        k = (tun_type, flags, proto, key if flags & C.GRE_KEY else 0)
        return k + inner_eth if tun_type == C.TUN_GRE_TEB else k
    return (tun_type,)


def udp_tunnel_key(tun_type: int, sport: int, dport: int, csum: int, flags: int, key: int,
                   proto: int, opt_len: int, opt_digest: int, inner_eth: tuple) -> tuple:
    """udp_gro_receive (tunnel branch): outer ports equal and checksum presence equal
    (``!uh->check ^ !uh2->check``); then vxlan_gro_prepare_receive (flags word and
    VNI word), geneve_gro_receive (the whole header with options: first word, VNI word,
    option bytes), gue_gro_receive (base word and optional fields) and, for inner
    Ethernet (VXLAN, Geneve 0x6558), eth_gro_receive."""
    k = (tun_type, sport, dport, csum != 0)
    if tun_type == C.TUN_VXLAN:
        k += (flags, key) + inner_eth
    elif tun_type == C.TUN_VXLAN_GPE:
        k += (flags, key)
    elif tun_type == C.TUN_GENEVE:
        k += (flags, key, opt_len, opt_digest)
        if proto == C.ETH_P_TEB:
            k += inner_eth
    elif tun_type == C.TUN_GUE:
        k += (flags, opt_len, opt_digest)
    return k


def tcp_gro_lookup_key(sport: int, dport: int) -> tuple:
    """tcp_gro_lookup: the 32-bit source|dest port word."""
    return (sport, dport)


def build_skbs(table: pa.Table, hashes: np.ndarray, config: GroConfig,
               coalesced=None, no_gro=None) -> list[Skb]:
    """One :class:`Skb` per row: the column values GRO reads, plus derived lengths/keys.

    ``coalesced``: a :class:`gropcap.gro.coalesced.CoalescedInput`; its frames arrive as TCP GSO
    skbs (count = segs, gso_size as inferred).
    """
    names = ["status", "wire_len", "epb_flags", "iface", "ts_ns", "eth_dst", "eth_src",
             "eth_type", "vlan_depth", "vlan_tpid0", "vlan_tci0", "vlan_tpid1", "vlan_tci1",
             "dsa_tag", "dsa_port", "tun_type", "tun_flags", "tun_proto", "tun_key",
             "tun_csum_ok", "encap_depth", "inner_eth_dst", "inner_eth_src",
             "inner_eth_type", "l4_proto", "sport", "dport", "tcp_seq", "tcp_ack",
             "tcp_flags", "tcp_doff", "tcp_window", "tcp_opt_len", "tcp_options",
             "l4_csum_state", "payload_len", "l4_offset", "outer_sport", "outer_dport",
             "outer_udp_csum", "tun_opt_len", "tun_opt_digest", "udp_len", "l4_csum",
             "outer_udp_len"] + ["inner_vlan_" + f for f in _VLAN_FIELDS]
    for prefix in ("ip_", "outer_ip_"):
        names += [f.name for f in S.PACKET_FIELDS if f.name.startswith(prefix)]
    cols = {name: _col(table, name) for name in names}
    profile = config.kernel
    queues = config.queues if config.model == "napi" else 1
    buckets = profile.hash_buckets
    hop_key = not profile.ipv6_hop_limit_flush
    flist = udp_mode(config) == "fraglist"
    tcp_flist = config.tcp_fraglist      # tcp4/6_check_fraglist_gro: is_flist
    outer_udp = udp_mode(config) != "off"
    out = []
    for i in range(table.num_rows):
        # The skb holds the whole frame as captured on the wire: Ethernet padding, any
        # trailer and a captured FCS (epb_flags FCS length: the NIC kept it, rx-fcs on)
        # all count as bytes received after the IP header (inet_gro_receive length check).
        end = cols["wire_len"][i]
        h = int(hashes[i])
        layers = []
        if cols["outer_ip_version"][i]:
            layers.append(_ip_layer(cols, "outer_ip_", i, end))
        if cols["ip_version"][i]:
            layers.append(_ip_layer(cols, "ip_", i, end))
        vlan_depth = cols["vlan_depth"][i]
        tpids = [cols["eth_type"][i], cols["vlan_tpid0"][i], cols["vlan_tpid1"][i]]
        bad_tpid = C.ETH_P_QINQ1 in tpids[:1 + min(vlan_depth, 2)]
        l2 = (gro_list_prepare_key(h if config.model == "napi" else 0, cols["iface"][i],
                                   cols["dsa_port"][i], cols["eth_dst"][i],
                                   cols["eth_src"][i], cols["eth_type"][i]),
              vlan_gro_receive_key(vlan_depth, cols["vlan_tpid0"][i], cols["vlan_tci0"][i],
                                   cols["vlan_tpid1"][i], cols["vlan_tci1"][i]))
        tun_type = cols["tun_type"][i]
        tun_flags = cols["tun_flags"][i]
        # eth_gro_receive (inner MACs and EtherType), then vlan_gro_receive per inner tag
        inner_vlan = tuple(cols["inner_vlan_" + f][i] for f in _VLAN_FIELDS)
        inner_eth = (cols["inner_eth_dst"][i], cols["inner_eth_src"][i],
                     cols["inner_eth_type"][i], vlan_gro_receive_key(*inner_vlan))
        udp_sock = (tun_type in _UDP_TUNNEL_KIND and config.udp_tunnel_socket(
            _UDP_TUNNEL_KIND[tun_type], cols["outer_dport"][i]))
        if tun_type == C.TUN_VXLAN_GPE and not profile.vxlan_gpe:
            udp_sock = False        # before v4.7 (e1e5314de08b) no VXLAN-GPE socket exists
        if fraglist_before_tunnel(config):
            udp_sock = False        # is_flist: udp_gro_receive_segment before the socket
        l4_proto, sport, dport = cols["l4_proto"][i], cols["sport"][i], cols["dport"][i]
        udp_len, udp_csum = cols["udp_len"][i], cols["l4_csum"][i]
        if (tun_type in _UDP_TUNNEL_KIND and not udp_sock and outer_udp and len(layers) == 2
                and cols["status"][i] == S.STATUS_OK):
            # udp_gro_receive with no tunnel socket but a UDP GRO mode: the outer UDP
            # datagram is what udp_gro_receive_segment aggregates (the tunnel header and
            # everything inside are its payload)
            layers = layers[:1]
            tun_type, tun_flags = C.TUN_NONE, 0
            l4_proto = C.IPPROTO_UDP
            sport, dport = cols["outer_sport"][i], cols["outer_dport"][i]
            udp_len, udp_csum = cols["outer_udp_len"][i], cols["outer_udp_csum"][i]
        if udp_sock:
            tkey = udp_tunnel_key(tun_type, cols["outer_sport"][i], cols["outer_dport"][i],
                                  cols["outer_udp_csum"][i], tun_flags, cols["tun_key"][i],
                                  cols["tun_proto"][i], cols["tun_opt_len"][i],
                                  cols["tun_opt_digest"][i], inner_eth)
        else:
            tkey = tunnel_key(tun_type, tun_flags, cols["tun_proto"][i], cols["tun_key"][i],
                              inner_eth)
        opt_len = cols["tcp_opt_len"][i]
        doff = cols["tcp_doff"][i]
        l4_len = 0
        udp_gro_len = 0
        if layers:
            inner = layers[-1]
            # skb_gro_len after the TCP header: to the end of the frame, padding included
            l4_len = inner.gro_len - inner.hdr_len - doff * 4
            if l4_proto == C.IPPROTO_UDP:
                udp_gro_len = inner.gro_len - inner.hdr_len    # from the UDP header on
                l4_len = udp_gro_len - 8
        skb = Skb(
            idx=i, status=cols["status"][i], hash=h,
            queue=int(rx_queue(h, queues)) if queues > 1 else 0,
            bucket=int(gro_bucket(h, buckets)) if config.model == "napi" else 0,
            dsa=cols["dsa_tag"][i] != 0, l2=l2, bad_tpid=bad_tpid, vlan_depth=vlan_depth,
            eth_type=cols["eth_type"][i],
            ip=layers,
            tun_type=tun_type, tun_flags=tun_flags, tun_key=tkey,
            tun_csum_ok=cols["tun_csum_ok"][i], encap_depth=cols["encap_depth"][i],
            l4_proto=l4_proto, sport=sport, dport=dport,
            seq=cols["tcp_seq"][i], ack=cols["tcp_ack"][i], flags=cols["tcp_flags"][i],
            doff=doff, window=cols["tcp_window"][i],
            options=bytes(cols["tcp_options"][i][:opt_len]), opt_len=opt_len,
            l4_csum_state=cols["l4_csum_state"][i], payload_len=cols["payload_len"][i],
            len=(max(l4_len, cols["payload_len"][i]) if l4_proto == cols["l4_proto"][i]
                 else l4_len),
            # dev_gro_receive runs after eth_type_trans pulled the 14-byte MAC header; an
            # in-band VLAN tag stays in skb->data and counts against gro_max_size
            p_len=(layers[0].gro_len if layers else 0) + 4 * vlan_depth,
            ts_ns=cols["ts_ns"][i], udp_sock=bool(udp_sock),
            udp_csum=(cols["outer_udp_csum"][i] if tun_type in _UDP_TUNNEL_KIND
                      else udp_csum),
            udp_len=udp_len, udp_gro_len=udp_gro_len, uh_check=udp_csum,
            flist=flist and l4_proto == C.IPPROTO_UDP,
            tcp_flist=tcp_flist and l4_proto == C.IPPROTO_TCP,
            inner_eth_type=cols["inner_eth_type"][i], inner_vlan=inner_vlan)
        ports = tcp_gro_lookup_key(skb.sport, skb.dport)
        skb.key = (l2, tuple(ip_key(x, hop_key) for x in layers), tkey, ports)
        skb.key_nohop = (l2, tuple(ip_key(x, False) for x in layers), tkey, ports)
        if coalesced is not None and coalesced.is_gso[i]:
            skb.gso_segs = int(coalesced.segs[i])
            skb.gso_size = int(coalesced.gso_size[i])
            fl = getattr(coalesced, "frag_list", None)
            # dev_gro_receive before 5eddb24901ee (v5.19): flush = skb_is_gso(skb) ||
            # skb_has_frag_list(skb), so every arriving GSO skb goes up unmerged
            skb.frag_list = (bool(fl[i]) if fl is not None else False) \
                or not profile.gso_skb_gro
        if no_gro is not None:
            skb.elide = bool(no_gro[i])
        out.append(skb)
    return out


# --- the per-layer receive functions ------------------------------------------------------

def gro_list_prepare_and_l2(skb: Skb, profile: KernelProfile,
                            config: GroConfig | None = None) -> int:
    """dev_gro_receive / vlan_gro_receive bail-outs before any L3 handler; 0 when none.

    A packet that bails is delivered at once and leaves held packets untouched.
    With ``config.native_gro`` off every frame bails (netif_elide_gro). With the gro_cells
    stage modelled (``config.tunnel_gro`` not None) a DSA-tagged frame on the conduit bails
    (eth_type_trans gives ETH_P_XDSA, which has no packet_offload); its GRO happens on the
    user port (:mod:`gropcap.gro.stages`).
    """
    if skb.elide or (config is not None and not config.native_gro):
        return R.BYPASS_GRO_DISABLED    # dev_gro_receive: netif_elide_gro
    if skb.dsa and config is not None and config.tunnel_gro is not None:
        return R.BYPASS_NOT_IP          # ETH_P_XDSA on the conduit: no packet_offload
    if skb.dsa and not profile.dsa_gro:
        # before e131a5634830 (v5.8) DSA user ports delivered with netif_receive_skb
        return R.BYPASS_GRO_DISABLED
    if (config is not None and not config.vlan_gro
            and skb.eth_type in (C.ETH_P_8021Q, C.ETH_P_8021AD)):
        # no CONFIG_VLAN_8021Q: vlan_offload_init (vlan_core.c) registered no
        # packet_offload for 0x8100 / 0x88A8, so dev_gro_receive has no handler
        return R.BYPASS_NO_VLAN_GRO
    st = skb.status
    if st in (S.STATUS_NOT_IP, S.STATUS_UNSUPPORTED_LINKTYPE):
        return R.BYPASS_NOT_IP      # no packet_offload for the EtherType
    if st == S.STATUS_BAD_L4_HEADER and skb.l4_proto == C.IPPROTO_TCP:
        return R.BYPASS_TCP_HEADER  # tcp_gro_pull_header: doff*4 < 20 or not pullable
    if st in (S.STATUS_UNSUPPORTED_ENCAP, S.STATUS_BAD_TUNNEL_HEADER,
              S.STATUS_ENCAP_TOO_DEEP):
        return R.BYPASS_TUNNEL      # gre_gro_receive refuses version/routing; nested tunnels
    if st != S.STATUS_OK:
        return R.BYPASS_DECODE
    if skb.bad_tpid:
        return R.BYPASS_NOT_IP      # vlan_gro_receive / dev_gro_receive: 0x9100 has no handler
    if not skb.ip:
        return R.BYPASS_NOT_IP
    return 0


def inet_gro_receive(h: IpHdr) -> int:
    """inet_gro_receive bail-outs (``goto out``: packet delivered, p untouched); 0 if none."""
    if h.proto not in _L4_WITH_GRO:
        return R.BYPASS_NO_L4_OFFLOAD          # no inet_offloads[proto]->gro_receive
    if h.hdr_len != 20:
        return R.BYPASS_IP_OPTIONS             # *(u8 *)iph != 0x45
    if h.mf or h.frag_off:
        return R.BYPASS_IP_FRAGMENT            # ip_is_fragment
    if not h.csum_ok:
        return R.BYPASS_IP_CSUM                # ip_fast_csum(iph, 5)
    return 0


def ipv6_gro_receive(h: IpHdr, profile: KernelProfile | None = None) -> int:
    """ipv6_gro_receive bail-outs; 0 if none.

    ipv6_gro_pull_exthdrs skips headers whose inet6_offloads entry has
    INET6_PROTO_GSO_EXTHDR: Routing, Destination Options and Hop-by-Hop (hbh_offload;
    before it ipv6_gso_pull_exthdrs skipped NEXTHDR_HOP explicitly). A Fragment header or
    AH/other header stops the walk with no gro_receive: the packet bails.
    """
    if h.ext_mask & (C.IP6_EXT_FRAGMENT | C.IP6_EXT_OTHER):
        return R.BYPASS_IPV6_EXTHDR
    if h.proto not in _L4_WITH_GRO:
        return R.BYPASS_NO_L4_OFFLOAD
    if (profile is not None and not profile.ip6_tunnel_gro
            and h.proto in (C.IPPROTO_IPIP, C.IPPROTO_IPV6)):
        return R.BYPASS_NO_L4_OFFLOAD          # ip6ip6 / ip4ip6 GRO only from v4.7
    return 0


def ip_skb_flush(h: IpHdr) -> int:
    """The ``NAPI_GRO_CB(skb)->flush`` an IP header sets (no bail): NOT_HELD_* or 0.

    inet_gro_receive: ``(u16)((tot_len ^ skb_gro_len) | (id_word & ~IP_DF))`` -> the IP
    length differs from the bytes received (Ethernet padding, trailer) or the reserved bit
    is set. ipv6_gro_receive: ``payload_len != skb_gro_len - 40``.
    """
    if h.version == 4:
        if (h.tot_len ^ h.gro_len) & 0xFFFF:
            return R.NOT_HELD_LENGTH
        if h.rf:
            return R.NOT_HELD_IP_RF
        return 0
    return R.NOT_HELD_LENGTH if h.tot_len != h.gro_len else 0


def tunnel_gro_receive(skb: Skb, config: GroConfig) -> int:
    """gre_gro_receive / ipip_gro_receive / sit_ip6ip6_gro_receive / udp tunnels: bail or 0."""
    t = skb.tun_type
    if t == C.TUN_NONE:
        return 0
    if skb.udp_sock:
        return udp_tunnel_gro_receive(skb, config)
    if t in _UDP_TUNNELS:
        # udp_gro_receive: no local tunnel socket owns the port -> plain UDP, and UDP GRO
        # (segment / fraglist) is off by default
        return R.BYPASS_UDP_NO_GRO
    if t not in _NATIVE_TUNNELS:
        return R.BYPASS_TUNNEL      # ERSPAN (S flag / no handler), FOU/GUE (not modelled)
    if skb.encap_depth > 1 or len(skb.ip) < 2:
        return R.BYPASS_TUNNEL      # encap_mark: no GRO of tunnel in tunnel
    if t in (C.TUN_GRE, C.TUN_GRE_TEB):
        if skb.tun_flags & ~(C.GRE_KEY | C.GRE_CSUM) & 0xFFFF:
            return R.BYPASS_TUNNEL  # gre_gro_receive: only K and C, version 0
        if skb.tun_flags & C.GRE_CSUM and not skb.tun_csum_ok:
            # skb_gro_checksum_simple_validate: a GRE checksum is computed by the sender's
            # stack, so a bad one is bad on the wire too (unlike offloaded TCP sums)
            return R.BYPASS_TUNNEL
        if t == C.TUN_GRE_TEB:
            return inner_eth_gro_receive(skb, config)
    return 0


def inner_eth_gro_receive(skb: Skb, config: GroConfig) -> int:
    """eth_gro_receive on an inner Ethernet header, then vlan_gro_receive per inner tag:
    each looks up a packet_offload for the type it carries (gro_find_receive_by_type) and
    flushes without one (``goto out``, p untouched): TPID 0x9100 never has one; 0x8100 /
    0x88A8 only with CONFIG_VLAN_8021Q (``config.vlan_gro``). Bail code or 0.
    The third and later tags' TPIDs are not recorded (``inner_vlan_*``), so not checked."""
    depth, _, _, tpid1, _ = skb.inner_vlan
    first = skb.inner_eth_type
    if first == C.ETH_P_QINQ1:
        return R.BYPASS_NOT_IP      # eth_gro_receive: no packet_offload for TPID 0x9100
    if not config.vlan_gro and first in (C.ETH_P_8021Q, C.ETH_P_8021AD):
        return R.BYPASS_NO_VLAN_GRO  # no vlan_gro_receive registered
    if depth >= 2 and tpid1 == C.ETH_P_QINQ1:
        return R.BYPASS_NOT_IP      # vlan_gro_receive: encapsulated type 0x9100
    return 0


def udp_tunnel_gro_receive(skb: Skb, config: GroConfig) -> int:
    """udp_gro_receive, tunnel branch (a local socket with gro_receive owns the port), and
    the tunnel's own gro_receive; bail code or 0.

    * encap_mark (v4.6): no tunnel inside a tunnel; FOU/GUE clear it (fou_gro_receive /
      gue_gro_receive), but the decoder keeps only the outer tunnel's header, so a GRE
      inside FOU (flags unknown) is not aggregated here;
    * the outer checksum: a non-zero one must be validated; by default the NIC did
      (CHECKSUM_UNNECESSARY), gropcap does not recompute it;
    * vxlan_gpe: version 0, O bit clear; geneve_gro_receive: version 0, O (OAM) bit clear.
    """
    t = skb.tun_type
    if len(skb.ip) < 2 or (skb.encap_depth > 1 and config.kernel.encap_mark):
        return R.BYPASS_TUNNEL
    if t == C.TUN_VXLAN_GPE:
        b0 = (skb.tun_flags >> 24) & 0xFF
        if b0 & C.GPE_VER_MASK or b0 & C.GPE_FLAG_O:
            return R.BYPASS_TUNNEL
        if not config.kernel.vxlan_gpe_gro and (skb.tun_flags & 0xFF) != C.GPE_NP_ETHERNET:
            # before b0b672c4d095 (v6.5) a GPE socket ran vxlan_gro_receive: its
            # eth_gro_receive reads the inner IP header as Ethernet, finds no handler for
            # that "EtherType" and flushes
            return R.BYPASS_TUNNEL
    elif t == C.TUN_GENEVE:
        if skb.tun_flags >> 30 or (skb.tun_flags >> 16) & C.GENEVE_FLAG_O:
            return R.BYPASS_TUNNEL
    if skb.inner_eth_type:
        return inner_eth_gro_receive(skb, config)
    return 0


def tcp_csum_and_header(skb: Skb, config: GroConfig, skb_flush: int) -> int:
    """tcp4_gro_receive / tcp6_gro_receive + tcp_gro_pull_header bail-outs; 0 if none.

    The checksum is validated only when no flush is pending ("don't bother verifying
    checksum if we're going to flush anyway"). By default the NIC validated it
    (CHECKSUM_UNNECESSARY); with ``verify_checksums`` a bad sum, or a CHECKSUM_PARTIAL one
    captured on the sender, fails software validation; an unverifiable (cut) one passes.
    """
    if (config.verify_checksums and not skb_flush
            and skb.l4_csum_state in (S.CSUM_BAD, S.CSUM_PARTIAL)):
        return R.BYPASS_L4_CSUM
    if skb.doff < 5:
        return R.BYPASS_TCP_HEADER
    return 0


def _tos_reason(a: int, b: int, outer: bool) -> int:
    if not ((a ^ b) & ~0x03):
        return R.FLUSH_OUTER_ECN if outer else R.FLUSH_ECN
    return R.FLUSH_OUTER_TOS if outer else R.FLUSH_TOS


def inet_gro_flush(h: IpHdr, ph: IpHdr, p: HeldEntry, layer: int, encap: bool,
                   profile: KernelProfile) -> int:
    """inet_gro_flush (v6.10+): TTL, whole TOS byte, DF, then the IP ID rule; reason or 0.

    ``layer`` 0 is the outer (or only) header, 1 the inner header of a tunnel. The ID mode
    (fixed or incrementing) is decided on the second segment (count == 1) and sticks:
    v6.10-6.17 one shared bit, fixed only with DF, the outer header with DF ignored;
    v6.18 one bit per header, no DF condition.
    """
    outer = encap and layer == 0
    if h.ttl != ph.ttl:
        return R.FLUSH_OUTER_TTL if outer else R.FLUSH_TTL
    if h.tos != ph.tos:
        return _tos_reason(h.tos, ph.tos, outer)
    if h.df != ph.df:
        return R.FLUSH_OUTER_DF if outer else R.FLUSH_DF
    ipid_offset = (h.id - ph.id) & 0xFFFF
    count = p.count & 0xFFFF
    if profile.two_bit_fixedid:
        bit = 1 << layer
        if count == 1 and ipid_offset == 0:
            p.ip_fixedid |= bit
        fixed = bool(p.ip_fixedid & bit)
    else:
        if outer and h.df:
            return 0                # outer header with DF: its ID is ignored
        if count == 1 and h.df and ipid_offset == 0:
            p.ip_fixedid = 1
        fixed = bool(p.ip_fixedid)
    if ipid_offset != (0 if fixed else count):
        return R.FLUSH_OUTER_IP_ID if outer else R.FLUSH_IP_ID
    return 0


def ipv6_gro_flush(h: IpHdr, ph: IpHdr, outer: bool, profile: KernelProfile) -> int:
    """ipv6_gro_flush: traffic class byte (incl. ECN), hop limit from 5.18; reason or 0."""
    if h.tos != ph.tos:
        return _tos_reason(h.tos, ph.tos, outer)
    if profile.ipv6_hop_limit_flush and h.ttl != ph.ttl:
        return R.FLUSH_OUTER_TTL if outer else R.FLUSH_TTL
    return 0


def l3_flush_old(h: IpHdr, ph: IpHdr, outer: bool, profile: KernelProfile) -> int:
    """Before v6.10 the IP layer loop ORed TTL/TOS/DF (IPv4) or TC/hop limit (IPv6) into
    ``NAPI_GRO_CB(p)->flush``; reason or 0 (the ID part is :func:`flush_id_old`)."""
    if h.version == 6:
        return ipv6_gro_flush(h, ph, outer, profile)
    if h.ttl != ph.ttl:
        return R.FLUSH_OUTER_TTL if outer else R.FLUSH_TTL
    if h.tos != ph.tos:
        return _tos_reason(h.tos, ph.tos, outer)
    if h.df != ph.df:
        return R.FLUSH_OUTER_DF if outer else R.FLUSH_DF
    return 0


def flush_id_old(skb: Skb, p: HeldEntry, profile: KernelProfile) -> int:
    """IP ID rule before v6.10, as tcp_gro_receive consumed ``NAPI_GRO_CB(p)->flush_id``.

    v4.7-v6.9 (inet_gro_receive per header, outer first; N.is_atomic starts true, then is
    the DF of the header just seen)::

        fid = (u16)(N.id - p.id); if !p.is_atomic || !N.DF: fid = fid == p.count ? 0 : 0xFFFF
        p.flush_id = fid if N.is_atomic else p.flush_id | fid     (IPv6: = 0 if N.is_atomic)
        tcp: if flush_id == 1 && count == 1 && p.is_atomic: p.is_atomic = 0 (incrementing)

    Before v4.7 only the innermost IPv4 ID is checked and must be p.id + count.
    """
    encap = len(skb.ip) > 1
    if not profile.fixed_id_support:
        h, ph = skb.ip[-1], p.skb.ip[-1]
        if h.version == 4 and h.id != (ph.id + p.count) & 0xFFFF:
            return R.FLUSH_IP_ID
        return 0
    n_atomic = True
    flush_id = 0
    culprit = -1
    for layer, (h, ph) in enumerate(zip(skb.ip, p.skb.ip)):
        if h.version == 4:
            fid = (h.id - ph.id) & 0xFFFF
            if not p.is_atomic or not h.df:
                fid = 0 if fid == (p.count & 0xFFFF) else 0xFFFF
            if n_atomic:
                flush_id, culprit = fid, (layer if fid else -1)
            else:
                if fid and culprit < 0:
                    culprit = layer
                flush_id |= fid
            n_atomic = h.df
        else:
            if n_atomic:
                flush_id, culprit = 0, -1
            n_atomic = True
    if flush_id == 1 and p.count == 1 and p.is_atomic:
        p.is_atomic = False         # second frame: the flow uses incrementing IDs
        return 0
    if flush_id:
        return R.FLUSH_OUTER_IP_ID if encap and culprit == 0 else R.FLUSH_IP_ID
    return 0


def _is_atomic_of(skb: Skb) -> bool:
    """NAPI_GRO_CB(skb)->is_atomic after the IP layers (before 6.10): DF of the last IPv4
    header, true when the last IP header is IPv6."""
    atomic = True
    for h in skb.ip:
        atomic = h.df if h.version == 4 else True
    return atomic


def _ts_offset(opts: bytes) -> int:
    """Offset of the timestamp option in the option bytes, -1 when absent (RFC 7323)."""
    i = 0
    while i < len(opts):
        kind = opts[i]
        if kind == C.TCPOPT_EOL:
            break
        if kind == C.TCPOPT_NOP:
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2:
            break
        if kind == C.TCPOPT_TIMESTAMP and opts[i + 1] == 10 and i + 10 <= len(opts):
            return i
        i += opts[i + 1]
    return -1


def _options_reason(a: bytes, b: bytes) -> int:
    """tcp_gro_receive: any option byte differs -> FLUSH_TCP_TS when only TSval/TSecr do."""
    if a == b:
        return 0
    ta, tb = _ts_offset(a), _ts_offset(b)
    if ta >= 0 and ta == tb and len(a) == len(b):
        if a[:ta + 2] + a[ta + 10:] == b[:tb + 2] + b[tb + 10:]:
            return R.FLUSH_TCP_TS
    return R.FLUSH_TCP_OPTIONS


def _flag_word_reason(skb: Skb, p: HeldEntry, profile: KernelProfile) -> int:
    """tcp_gro_receive: the 32-bit word doff|flags|window must match except FIN/PSH
    (and CWR before 6.15, 4e4f7cefb130)."""
    mask = ~(C.TCP_FLAG_FIN | C.TCP_FLAG_PSH)
    if not profile.cwr_in_flag_word:
        mask &= ~C.TCP_FLAG_CWR
    ph = p.skb
    diff = (skb.flags ^ (ph.flags | p.flags_or)) & mask
    if diff & _TCP_NEVER_EQUAL:
        return R.FLUSH_FLAGS_FINAL
    if diff:
        return R.FLUSH_TCP_FLAGS
    if skb.doff != ph.doff:
        return R.FLUSH_TCP_DOFF
    if skb.window != ph.window:
        return R.FLUSH_TCP_WINDOW
    return 0


def gro_max_size(config: GroConfig, p: HeldEntry) -> int:
    """skb_gro_receive's limit for p: netif_get_gro_max_size and the BIG TCP conditions.

    * before v5.16 no per-device knob: GRO_MAX_SIZE (64 KB);
    * ``p->protocol == ETH_P_IPV6`` -> gro_max_size, else (v6.3+) gro_ipv4_max_size; an
      in-band VLAN tag makes p->protocol 0x8100, so such frames take the IPv4 limit;
    * at or above GRO_LEGACY_MAX_SIZE (BIG TCP): v5.19-v6.2 only for p->protocol IPv6 whose
      next header is TCP directly (``ipv6_hdr(p)->nexthdr != IPPROTO_TCP`` refuses UDP and
      extension headers; no tunnel); from v6.3 only when ``NAPI_GRO_CB(skb)->proto ==
      IPPROTO_TCP``, so never for UDP GRO (``p->encapsulation`` is not set on received
      packets).
    """
    profile = config.kernel
    if profile.version < (5, 16):
        return GRO_LEGACY_MAX_SIZE
    outer = p.skb.ip[0]
    proto_v6 = outer.version == 6 and p.skb.vlan_depth == 0
    limit = config.max_size(6 if proto_v6 else 4)
    if limit > GRO_LEGACY_MAX_SIZE:
        if p.skb.l4_proto != C.IPPROTO_TCP:
            big_ok = False
        elif profile.big_tcp_ipv4:
            big_ok = True
        elif profile.version >= (5, 19):
            big_ok = proto_v6 and len(p.skb.ip) == 1 and outer.ext_len == 0
        else:
            big_ok = False
        if not big_ok:
            limit = GRO_LEGACY_MAX_SIZE
    return limit


def skb_gro_receive(p: HeldEntry, skb: Skb, skb_flush: int, config: GroConfig) -> int:
    """skb_gro_receive: -E2BIG when ``p->len + len >= gro_max_size`` or the skb carries a
    flush from a lower layer; reason or 0."""
    if p.len + skb.len >= gro_max_size(config, p):
        return R.FLUSH_SIZE_LIMIT
    if skb_flush:
        return _FLUSH_OF_NOT_HELD.get(skb_flush, R.FLUSH_LENGTH)
    return 0


def skb_gro_receive_list(p: HeldEntry, skb: Skb) -> int:
    """skb_gro_receive_list (UDP fraglist v5.6, TCP fraglist v6.10): -E2BIG when
    ``p->len + skb->len >= 65536`` with skb->len still counted from its network header;
    no gro_max_size and no check of the skb's own flush; reason or 0."""
    if p.len + skb.p_len >= GRO_LEGACY_MAX_SIZE:
        return R.FLUSH_SIZE_LIMIT
    return 0


def gro_complete(p: HeldEntry, end_reason: int, profile: KernelProfile,
                 payload_len: list) -> SegDraft:
    """gro_complete (+ inet/ipv6/tunnel/tcp completions): one super-packet for the stack.

    ``count == 1``: a plain packet (gso_size 0, no GSO type). Otherwise gso_size is the
    first packet's payload and gso_type comes from :func:`gropcap.gro.gso.gso_type_for`
    (tcp_gro_complete: CWR of the first header; tcp4_gro_complete: fixed-ID state).
    """
    payload = sum(payload_len[i] for i in p.packets)
    if p.count == 1:
        return SegDraft(list(p.packets), 1, payload, 0, 0, end_reason, p.skb.queue)
    inner = p.skb.ip[-1]
    if p.skb.tcp_flist:
        # tcp4/6_gro_complete, is_flist: gso_type |= SKB_GSO_FRAGLIST | SKB_GSO_TCPV4/6 and
        # return (no tcp_gro_complete: no ECN bit; no fixed-ID bit); tunnel bits first
        base = gso.gso_type_for(profile.version, inner.version, tun_type=p.skb.tun_type,
                                udp_csum=bool(p.skb.udp_csum) if p.skb.udp_sock else None,
                                inner_tun_type=_fou_inner_tun(p.skb))
        return SegDraft(list(p.packets), p.count, payload, p.gso_size,
                        base | gso.SKB_GSO_FRAGLIST, end_reason, p.skb.queue)
    if p.skb.l4_proto == C.IPPROTO_UDP:
        # udp_gro_complete_segment: SKB_GSO_UDP_L4; skb_gro_receive_list: | FRAGLIST.
        # In a tunnel socket the outer udp_gro_complete assigns UDP_TUNNEL[_CSUM] (FOU/GUE
        # then add their IP-in-IP bits), clears encap_mark, and the inner
        # udp4/6_gro_complete ORs UDP_L4 (is_flist: FRAGLIST | UDP_L4)
        gtype = gso.SKB_GSO_UDP_L4
        if p.skb.flist:
            gtype |= gso.SKB_GSO_FRAGLIST
        if p.skb.udp_sock:
            gtype |= udp_tunnel_gso_bits(profile.version, p.skb.tun_type,
                                         bool(p.skb.udp_csum), _fou_inner_tun(p.skb))
        return SegDraft(list(p.packets), p.count, payload, p.gso_size, gtype, end_reason,
                        p.skb.queue)
    fixed = (int(p.is_atomic) if profile.flush_id_era else p.ip_fixedid) \
        if inner.version == 4 else 0
    gtype = gso.gso_type_for(profile.version, inner.version, ip_fixedid=fixed,
                             cwr=bool(p.skb.flags & C.TCP_FLAG_CWR),
                             tun_type=p.skb.tun_type,
                             udp_csum=bool(p.skb.udp_csum) if p.skb.udp_sock else None,
                             inner_tun_type=_fou_inner_tun(p.skb))
    return SegDraft(list(p.packets), p.count, payload, p.gso_size, gtype, end_reason,
                    p.skb.queue)


def _new_entry(skb: Skb, jiffy: int, seq_no: int) -> HeldEntry:
    """dev_gro_receive: a packet held as a new p. A plain skb's gso_size becomes its
    payload; a GSO skb keeps its own."""
    return HeldEntry(skb=skb, packets=[skb.idx], count=skb.gso_segs, len=skb.p_len,
                     gro_len=skb.len, gso_size=skb.gso_size or skb.len, age=jiffy,
                     seq_no=seq_no, bucket=skb.bucket, is_atomic=_is_atomic_of(skb))


def _tcp_merge(p: HeldEntry, skb: Skb) -> None:
    """skb_gro_receive merged skb into p; tcp_gro_receive ORs FIN|PSH into p's header."""
    p.count += skb.gso_segs
    p.len += skb.len
    p.gro_len += skb.len
    p.packets.append(skb.idx)
    p.flags_or |= skb.flags & (C.TCP_FLAG_FIN | C.TCP_FLAG_PSH)

def _tcp_refused(p, skb, skb_flush: int, length: int, reason: int):
    """tcp_gro_receive when the merge is refused: p is completed (pp); the packet goes up
    now if it carries a flush of its own (a lower layer's, len < 1 / short GSO, a final
    flag: out_check_final), else it becomes a new head."""
    final = (skb_flush or (skb.flags & _TCP_FINAL)
             or (_gso_short(skb) if skb.gso_size else length < 1))
    return p, reason, ("delivered" if final else "held"), reason


def _tcp_merged(p, skb, length: int):
    """tcp_gro_receive after a merge: p is pushed up at once when the segment ends it
    (PSH/FIN/URG..., a short segment: out_check_final), else it stays held."""
    end = _end_reason(skb, length, p.gso_size)
    if not end and _gso_short(skb):
        end = R.END_SHORT_SEGMENT
    if end:
        return p, end, "merged", R.MERGED
    return None, 0, "merged", R.MERGED



def _fou_inner_tun(skb: Skb) -> int:
    """FOU/GUE carry an IP protocol whose gro_complete adds its own bits
    (ipip_gro_complete / sit_gro_complete / ip6ip6 / ip4ip6)."""
    if skb.tun_type not in (C.TUN_FOU, C.TUN_GUE) or len(skb.ip) < 2:
        return 0
    outer4, inner4 = skb.ip[0].version == 4, skb.ip[1].version == 4
    if outer4:
        return C.TUN_IPIP if inner4 else C.TUN_SIT
    return C.TUN_IP4IP6 if inner4 else C.TUN_IP6IP6


# --- one GRO instance (a NAPI's gro_node, or the ideal unlimited list) -----------------------

class GroNode:
    """The held packets of one NAPI instance: ``GRO_HASH_BUCKETS`` lists of at most
    ``MAX_GRO_SKBS`` entries (newest first), or one unlimited list (ideal model)."""

    def __init__(self, config: GroConfig, unlimited: bool):
        self.config = config
        self.profile = config.kernel
        self.unlimited = unlimited
        nb = 1 if unlimited else self.profile.hash_buckets
        self.buckets: list[list[HeldEntry]] = [[] for _ in range(nb)]
        # ideal model: same-flow key -> entries newest first (the same answer as a scan)
        self.index: dict[tuple, list[HeldEntry]] = {}
        self.nohop: dict[tuple, int] = {}
        self._seq = 0

    # -- list handling
    def any_held(self) -> bool:
        """``gro_bitmask != 0``: something is held."""
        if self.unlimited:
            return bool(self.index)
        return any(self.buckets)

    def _candidates(self, skb: Skb) -> list[HeldEntry]:
        """Entries still marked same_flow after every layer, in list order (newest first)."""
        if self.unlimited:
            return self.index.get(skb.key, [])
        return [p for p in self.buckets[skb.bucket] if p.skb.key == skb.key]

    def _hop_limit_twin(self, skb: Skb) -> bool:
        """Before 5.18: an entry that differs from skb only in an IPv6 hop limit."""
        if self.unlimited:
            return self.nohop.get(skb.key_nohop, 0) > 0
        return any(p.skb.key_nohop == skb.key_nohop for p in self.buckets[skb.bucket])

    def _remove(self, p: HeldEntry) -> None:
        if self.unlimited:
            lst = self.index[p.skb.key]
            lst.remove(p)
            if not lst:
                del self.index[p.skb.key]
            self.nohop[p.skb.key_nohop] -= 1
        else:
            self.buckets[p.bucket].remove(p)

    def _insert(self, p: HeldEntry) -> None:
        if self.unlimited:
            self.index.setdefault(p.skb.key, []).insert(0, p)
            self.nohop[p.skb.key_nohop] = self.nohop.get(p.skb.key_nohop, 0) + 1
        else:
            self.buckets[p.bucket].insert(0, p)

    # -- the receive path
    def dev_gro_receive(self, skb: Skb, jiffy: int) -> Outcome:
        """dev_gro_receive: run the chain, complete ``pp``, then merge / deliver / hold.

        Delivery order inside: the completed ``pp`` first, then an evicted oldest entry
        (``gro_flush_oldest``); a delivered packet comes after both.
        """
        cfg = self.config
        out = Outcome()
        bail = gro_list_prepare_and_l2(skb, self.profile, cfg)
        skb_flush = 0
        if not bail:
            bail, skb_flush = self._network_layers(skb)
        # udp4/6_gro_receive for plain UDP and for the inner UDP of a tunnel socket
        # (vxlan/geneve/fou/gue_gro_receive -> [eth_gro_receive ->] inet/ipv6_gro_receive
        # -> udp4/6_gro_receive): udp_gro_receive's lookup on the inner ports finds no
        # tunnel socket, so its first branch (UDP GRO mode) decides, as for plain UDP
        if not bail and skb.l4_proto == C.IPPROTO_UDP:
            if (cfg.verify_checksums and not skb_flush
                    and skb.l4_csum_state in (S.CSUM_BAD, S.CSUM_PARTIAL)):
                bail = R.BYPASS_L4_CSUM      # udp4_gro_receive: checksum_validate_zero_check
        elif not bail:
            bail = tcp_csum_and_header(skb, cfg, skb_flush)
        if bail:
            out.kind, out.reason = "delivered", bail
            return out
        if skb.l4_proto == C.IPPROTO_UDP:
            pp, pp_reason, kind, reason = self.udp_gro_receive_segment(skb, skb_flush)
        else:
            pp, pp_reason, kind, reason = self.tcp_gro_receive(skb, skb_flush)
        if pp is not None:
            self._remove(pp)
            out.completed.append((pp, pp_reason))
        out.kind, out.reason = kind, reason
        if kind != "held":
            return out
        bucket = self.buckets[0 if self.unlimited else skb.bucket]
        if not self.unlimited and len(bucket) >= MAX_GRO_SKBS:
            oldest = bucket[-1]                        # gro_flush_oldest: list tail
            self._remove(oldest)
            out.completed.append((oldest, R.END_BUCKET_FULL))
        self._seq += 1
        self._insert(_new_entry(skb, jiffy, self._seq))
        return out

    def _network_layers(self, skb: Skb) -> tuple[int, int]:
        """inet/ipv6_gro_receive for each IP header (outer first) and the tunnel layer.

        Returns ``(bail, skb_flush)``: a BYPASS_* code, and the first NOT_HELD_* flush an
        IP header set (length/padding, reserved bit).
        """
        skb_flush = 0
        native = (skb.tun_type in _NATIVE_TUNNELS or skb.udp_sock) and len(skb.ip) == 2
        for layer, h in enumerate(skb.ip):
            bail = (inet_gro_receive(h) if h.version == 4
                    else ipv6_gro_receive(h, self.profile))
            if bail:
                return bail, 0
            skb_flush = skb_flush or ip_skb_flush(h)
            if layer == 0 and skb.tun_type:
                # the outer header passed: the tunnel layer decides (gre/ipip/sit/udp)
                bail = tunnel_gro_receive(skb, self.config)
                if bail or not native:
                    return bail or R.BYPASS_TUNNEL, 0
        if skb.frag_list:
            skb_flush = skb_flush or R.NOT_HELD_FRAG_LIST   # flush = skb_has_frag_list
        if skb.l4_proto == C.IPPROTO_UDP:
            if udp_mode(self.config) == "off":
                return R.BYPASS_UDP_NO_GRO, 0   # udp_gro_receive: "no GRO"
            return 0, skb_flush
        if skb.l4_proto != C.IPPROTO_TCP:
            return R.BYPASS_NO_L4_OFFLOAD, 0
        return 0, skb_flush

    def tcp_gro_receive(self, skb: Skb, skb_flush: int):
        """tcp_gro_receive: find p (tcp_gro_lookup), run the flush checks, merge, decide.

        Returns ``(pp, pp_end_reason, kind, packet_reason)``. The first true flush item
        in kernel evaluation order is reported (docs/gro-model.md, "Reason precedence").
        """
        cands = self._candidates(skb)
        p = cands[0] if cands else None       # first same_flow entry, newest first
        length = skb.len
        if p is None:
            # out_check_final with mss = 1: len < 1 or URG/PSH/RST/SYN/FIN -> flush
            reason = skb_flush or _not_held_reason(skb, length) or _gso_short(skb)
            if reason:
                return None, 0, "delivered", reason
            if not self.profile.ipv6_hop_limit_flush and self._hop_limit_twin(skb):
                return None, 0, "held", R.FLUSH_HOP_LIMIT_FLOW
            return None, 0, "held", R.NO_HELD_PACKET
        if p.skb.tcp_flist:
            return self._tcp_flist_receive(p, skb, skb_flush, length)
        reason = self._pair_flush(p, skb, skb_flush)
        if not reason:
            reason = skb_gro_receive(p, skb, skb_flush, self.config)
        if reason:
            return _tcp_refused(p, skb, skb_flush, length, reason)
        _tcp_merge(p, skb)
        return _tcp_merged(p, skb, length)

    def _tcp_flist_receive(self, p: HeldEntry, skb: Skb, skb_flush: int, length: int):
        """tcp_gro_receive with ``NAPI_GRO_CB(p)->is_flist`` (v6.10): every check of the
        normal path (:meth:`_pair_flush`: CWR, flag word, ack, options, the IP headers,
        size, sequence), then the whole flag word (a PSH / FIN / CWR difference too,
        ``FLUSH_TCP_FLAGS``), the checksum state (one NIC verdict for all: equal) and
        ``count >= 64`` (``FLUSH_MAX_SEGS``); the merge is :func:`skb_gro_receive_list`
        (no check of the skb's own flush) and FIN/PSH are not ORed into p. Checked live on
        6.18 (tests/replay/test_kernel_replay_fraglist.py)."""
        reason = self._pair_flush(p, skb, skb_flush)
        if not reason and skb.flags != p.skb.flags:
            reason = R.FLUSH_TCP_FLAGS
        if not reason and p.count >= 64:
            reason = R.FLUSH_MAX_SEGS
        reason = reason or skb_gro_receive_list(p, skb)
        if reason:
            # mss = 1: out_check_final flushes on len < 1 or a final flag
            return _tcp_refused(p, skb, skb_flush, length, reason)
        # merged: skb_pull to the GRO offset (the TCP payload), p->len += skb->len
        p.count += skb.gso_segs
        p.len += length
        p.gro_len += length
        p.packets.append(skb.idx)
        return _tcp_merged(p, skb, length)

    def udp_gro_receive_segment(self, skb: Skb, skb_flush: int):
        """udp_gro_receive_segment (segment and fraglist modes); same return shape as
        :meth:`tcp_gro_receive`.

        A zero checksum or a UDP length that differs from the bytes received flushes the
        datagram (p untouched). With p: the L3 checks (v6.9+: gro_receive_network_flush)
        and a datagram longer than p's first complete p and start a new head; otherwise it
        merges, and p completes at once when this datagram was shorter than the first or
        p reached UDP_GRO_CNT_MAX segments.
        """
        if skb.uh_check == 0:
            return None, 0, "delivered", R.NOT_HELD_UDP_ZERO_CSUM
        if skb.udp_len <= 8 or skb.udp_len != skb.udp_gro_len:
            return None, 0, "delivered", R.NOT_HELD_UDP_LENGTH
        cands = self._candidates(skb)
        p = cands[0] if cands else None
        if p is None:
            if skb_flush:
                return None, 0, "delivered", skb_flush
            return None, 0, "held", R.NO_HELD_PACKET
        flush = self._l3_pair_flush(p, skb) if self.profile.udp_l3_checks else 0
        if skb.udp_len > p.skb.udp_len:
            return p, R.FLUSH_UDP_LARGER, "held", R.FLUSH_UDP_LARGER
        if flush:
            return p, flush, "held", flush
        # is_flist: skb_gro_receive_list (whole lengths, 65536, no flush check)
        r = (skb_gro_receive_list(p, skb) if skb.flist
             else skb_gro_receive(p, skb, skb_flush, self.config))
        if r:
            return p, r, ("delivered" if skb_flush else "held"), r
        p.count += 1
        p.len += skb.len
        p.gro_len += skb.len
        p.packets.append(skb.idx)
        if skb.udp_len != p.skb.udp_len:
            return p, R.END_SHORT_SEGMENT, "merged", R.MERGED
        if p.count >= UDP_GRO_CNT_MAX:
            return p, R.END_UDP_MAX_SEGS, "merged", R.MERGED
        return None, 0, "merged", R.MERGED

    def _l3_pair_flush(self, p: HeldEntry, skb: Skb) -> int:
        """The IP-header pair checks alone, era order: before 6.10 the IP loop's
        ``NAPI_GRO_CB(p)->flush`` then flush_id; from 6.10 inet_gro_flush /
        ipv6_gro_flush per header (gro_receive_network_flush)."""
        profile = self.profile
        encap = len(skb.ip) > 1
        if profile.flush_id_era:
            for layer, (h, ph) in enumerate(zip(skb.ip, p.skb.ip)):
                r = l3_flush_old(h, ph, encap and layer == 0, profile)
                if r:
                    return r
            return flush_id_old(skb, p, profile)
        for layer, (h, ph) in enumerate(zip(skb.ip, p.skb.ip)):
            r = (inet_gro_flush(h, ph, p, layer, encap, profile) if h.version == 4
                 else ipv6_gro_flush(h, ph, encap and layer == 0, profile))
            if r:
                return r
        return 0

    def _pair_flush(self, p: HeldEntry, skb: Skb, skb_flush: int) -> int:
        """The tcp_gro_receive flush items for the pair (p, skb), first true one, era order."""
        profile = self.profile
        encap = len(skb.ip) > 1
        if profile.flush_id_era:
            # before 6.10: NAPI_GRO_CB(p)->flush from the IP loops comes first
            for layer, (h, ph) in enumerate(zip(skb.ip, p.skb.ip)):
                r = l3_flush_old(h, ph, encap and layer == 0, profile)
                if r:
                    return r
                f = ip_skb_flush(h)
                if f:
                    return _FLUSH_OF_NOT_HELD[f]
        if skb.flags & C.TCP_FLAG_CWR:
            return R.FLUSH_CWR
        r = _flag_word_reason(skb, p, profile)
        if r:
            return r
        if skb.ack != p.skb.ack:
            return R.FLUSH_TCP_ACK
        r = _options_reason(skb.options, p.skb.options)
        if r:
            return r
        if profile.flush_id_era:
            r = flush_id_old(skb, p, profile)
        else:
            r = 0
            for layer, (h, ph) in enumerate(zip(skb.ip, p.skb.ip)):
                r = (inet_gro_flush(h, ph, p, layer, encap, profile) if h.version == 4
                     else ipv6_gro_flush(h, ph, encap and layer == 0, profile))
                if r:
                    break
        if r:
            return r
        mss = p.gso_size
        if skb.gso_size:
            if skb.gso_size != mss:                 # a GSO skb must carry p's gso_size
                return R.FLUSH_GSO_SIZE
        elif ((skb.len - 1) & 0xFFFFFFFF) >= mss:    # unsigned: zero payload or larger
            return R.FLUSH_ZERO_PAYLOAD if skb.len == 0 else R.FLUSH_PAYLOAD_LARGER
        if (p.skb.seq + p.gro_len) & 0xFFFFFFFF != skb.seq:
            return R.FLUSH_SEQ
        return 0

    # -- flushing
    def gro_flush(self, old_only: bool, jiffy: int, reason_all: int = R.END_POLL,
                  reason_old: int = R.END_POLL_OLD) -> list:
        """__gro_flush: buckets in increasing index, each from its oldest entry; with
        ``old_only`` a bucket's walk stops at the first entry held in this jiffy."""
        out = []
        if self.unlimited:
            entries = sorted((e for lst in self.index.values() for e in lst),
                             key=lambda e: e.seq_no)
            for e in entries:
                self._remove(e)
                out.append((e, reason_all))
            return out
        for lst in self.buckets:
            while lst:
                e = lst[-1]
                if old_only and e.age == jiffy:
                    break
                lst.pop()
                out.append((e, reason_old if old_only else reason_all))
        return out


# The kernel ORs every flush item of tcp_gro_receive into one ``flush``; the engines report
# the first true item. flush_checks lists all of them: it repairs the field behind each
# reason to the value p expects and runs the same checks again.
_IP_REPAIR = {R.FLUSH_TTL: "ttl", R.FLUSH_OUTER_TTL: "ttl", R.FLUSH_TOS: "tos",
              R.FLUSH_OUTER_TOS: "tos", R.FLUSH_ECN: "tos", R.FLUSH_OUTER_ECN: "tos",
              R.FLUSH_DF: "df", R.FLUSH_OUTER_DF: "df"}
_OUTER_REASONS = (R.FLUSH_OUTER_TTL, R.FLUSH_OUTER_TOS, R.FLUSH_OUTER_ECN, R.FLUSH_OUTER_DF,
                  R.FLUSH_OUTER_IP_ID)
_TCP_REPAIR = {R.FLUSH_TCP_DOFF: "doff", R.FLUSH_TCP_WINDOW: "window", R.FLUSH_TCP_ACK: "ack"}


def _repaired(skb: Skb, p: HeldEntry, reason: int, check) -> Skb | None:
    """A copy of ``skb`` whose field behind ``reason`` holds what p expects; None when the
    reason is not about one field of the pair (size limit, lower-layer flush)."""
    import copy

    new = copy.copy(skb)
    ph = p.skb
    if reason in _IP_REPAIR or reason in (R.FLUSH_IP_ID, R.FLUSH_OUTER_IP_ID):
        layer = 0 if reason in _OUTER_REASONS else len(skb.ip) - 1
        new.ip = list(skb.ip)
        h = new.ip[layer] = copy.copy(skb.ip[layer])
        if reason in _IP_REPAIR:
            setattr(h, _IP_REPAIR[reason], getattr(ph.ip[layer], _IP_REPAIR[reason]))
            return new
        # the ID p expects: incrementing (p.id + count) or fixed (p.id), whichever passes
        for ident in ((ph.ip[layer].id + p.count) & 0xFFFF, ph.ip[layer].id):
            h.id = ident
            if check(new) not in (R.FLUSH_IP_ID, R.FLUSH_OUTER_IP_ID):
                return new
        return None
    if reason in _TCP_REPAIR:
        setattr(new, _TCP_REPAIR[reason], getattr(ph, _TCP_REPAIR[reason]))
    elif reason == R.FLUSH_CWR:
        new.flags = skb.flags & ~C.TCP_FLAG_CWR
    elif reason in (R.FLUSH_TCP_FLAGS, R.FLUSH_FLAGS_FINAL):
        keep = C.TCP_FLAG_FIN | C.TCP_FLAG_PSH | C.TCP_FLAG_CWR
        new.flags = (skb.flags & keep) | ((ph.flags | p.flags_or) & ~keep)
    elif reason in (R.FLUSH_TCP_TS, R.FLUSH_TCP_OPTIONS):
        new.options, new.opt_len = ph.options, ph.opt_len
    elif reason in (R.FLUSH_PAYLOAD_LARGER, R.FLUSH_ZERO_PAYLOAD):
        new.len = p.gso_size
    elif reason == R.FLUSH_SEQ:
        new.seq = (ph.seq + p.gro_len) & 0xFFFFFFFF
    else:
        return None
    return new


def flush_checks(config: GroConfig, members: list[Skb], skb: Skb) -> list[int]:
    """Every tcp_gro_receive flush item that is true for ``skb`` against the held p made of
    ``members`` (p's packets in merge order), in the kernel's evaluation order.

    The kernel ORs these items into one ``flush`` and the engines report the first; a
    sequence gap after a lost segment also breaks an incrementing IP ID, so the first item
    alone can blame the ID for a loss. p is rebuilt by replaying the merges (so the IP ID
    mode decided on the second packet is the one the run used); then the field behind each
    true item is set to what p expects and the checks run again, until none is true or the
    item is not about one field (gro_max_size, a lower-layer flush: listed last).

    Returns:
        Reason codes (``gropcap.gro.reasons``), empty when skb would merge.
    """
    import copy

    node = GroNode(config, unlimited=True)
    p = _new_entry(members[0], 0, 0)
    for m in members[1:]:
        node._pair_flush(p, m, 0)           # sets the ID mode as the run did
        _tcp_merge(p, m)

    def check(s: Skb) -> int:
        return (node._pair_flush(copy.copy(p), s, 0)
                or skb_gro_receive(p, s, 0, config))

    found: list[int] = []
    reason = check(skb)
    while reason and reason not in found:
        found.append(reason)
        skb = _repaired(skb, p, reason, check)
        if skb is None:
            break
        reason = check(skb)
    return found


def _not_held_reason(skb: Skb, length: int) -> int:
    """Why a packet with nothing to merge into is not held (out_check_final, mss = 1).

    Precedence (docs/gro-model.md): SYN, RST, URG, FIN, PSH, then zero payload.
    """
    f = skb.flags
    for bit, reason in ((C.TCP_FLAG_SYN, R.NOT_HELD_SYN), (C.TCP_FLAG_RST, R.NOT_HELD_RST),
                        (C.TCP_FLAG_URG, R.NOT_HELD_URG), (C.TCP_FLAG_FIN, R.NOT_HELD_FIN),
                        (C.TCP_FLAG_PSH, R.NOT_HELD_PSH)):
        if f & bit:
            return reason
    if length < 1:
        return R.NOT_HELD_ZERO_PAYLOAD
    return 0


def _gso_short(skb: Skb) -> int:
    """out_check_final for a GSO skb: ``len != count * gso_size`` flushes."""
    if skb.gso_size and skb.len != skb.gso_segs * skb.gso_size:
        return R.NOT_HELD_GSO_SHORT
    return 0


def _end_reason(skb: Skb, length: int, mss: int) -> int:
    """out_check_final after a merge: FIN, PSH, URG, then a segment shorter than gso_size."""
    f = skb.flags
    if f & C.TCP_FLAG_FIN:
        return R.END_FIN
    if f & C.TCP_FLAG_PSH:
        return R.END_PSH
    if f & C.TCP_FLAG_URG:
        return R.END_URG
    if length < mss:
        return R.END_SHORT_SEGMENT
    return 0


# --- batch models -----------------------------------------------------------------------

@dataclass
class Poll:
    """One NAPI poll of one queue: the packets it processed and what it delivered."""

    time: int
    queue: int
    seq: int
    packets: list = field(default_factory=list)
    events: list = field(default_factory=list)   # SegDraft, delivery order
    poll_id: int = -1


class _Recorder:
    """Turns dev_gro_receive outcomes into packet verdicts and SegDrafts."""

    def __init__(self, n: int, profile: KernelProfile, payload_len: list):
        self.profile = profile
        self.payload_len = payload_len
        self.reason = np.zeros(n, dtype=np.uint8)
        self.seg_of: list = [None] * n

    def receive(self, node: GroNode, skb: Skb, jiffy: int, events: list) -> None:
        out = node.dev_gro_receive(skb, jiffy)
        self.reason[skb.idx] = out.reason
        for entry, why in out.completed:
            self.complete(entry, why, events)
        if out.kind == "delivered":
            segs = skb.gso_segs
            gtype = 0
            if segs > 1:    # a coalesced frame goes up as the TCP GSO packet it is
                gtype = gso.gso_type_for(self.profile.version, skb.ip[-1].version,
                                         cwr=bool(skb.flags & C.TCP_FLAG_CWR),
                                         tun_type=skb.tun_type if len(skb.ip) > 1 else 0)
            d = SegDraft([skb.idx], segs, self.payload_len[skb.idx],
                         skb.gso_size if segs > 1 else 0, gtype, out.reason, skb.queue)
            self.seg_of[skb.idx] = d
            events.append(d)

    def complete(self, entry: HeldEntry, why: int, events: list) -> None:
        d = gro_complete(entry, why, self.profile, self.payload_len)
        for i in d.packets:
            self.seg_of[i] = d
        events.append(d)

    def flush(self, node: GroNode, old_only: bool, jiffy: int, events: list) -> None:
        for entry, why in node.gro_flush(old_only, jiffy):
            self.complete(entry, why, events)


def _jiffy(t_ns: int, hz: int) -> int:
    return t_ns * hz // 1_000_000_000


class NapiQueue:
    """NAPI polls of one RX queue inferred from arrival times (docs/gro-model.md).

    Mirrors ``__napi_poll`` (full budget: flush all when HZ < 1000, else old entries) and
    ``napi_complete_done`` (gro_flush_timeout / napi_defer_hard_irqs: partial flush, timer,
    interrupt masked while the defer counter runs; before v4.20 no flush when the timer is
    armed) and ``napi_watchdog`` (before v5.7 no poll when nothing is held).
    """

    def __init__(self, queue: int, skbs: list, config: GroConfig, rec: _Recorder):
        self.q = queue
        self.skbs = skbs
        self.cfg = config
        self.rec = rec
        self.node = GroNode(config, unlimited=False)
        arr, t = [], None
        for s in skbs:                        # timestamps going backwards: row order wins
            t = s.ts_ns if t is None else max(t, s.ts_ns)
            arr.append(t)
        self.arr = arr
        self.polls: list[Poll] = []

    def _poll(self, time: int, batch: list) -> Poll:
        poll = Poll(time=time, queue=self.q, seq=len(self.polls))
        self.polls.append(poll)
        j = _jiffy(time, self.cfg.hz)
        for k in batch:
            skb = self.skbs[k]
            poll.packets.append(skb.idx)
            self.rec.receive(self.node, skb, j, poll.events)
        return poll

    def _take_gap(self, k: int, start: int) -> list:
        """Packets from k on: each joins while it arrives within poll_gap_ns of the previous
        one (or of the poll start for packets already waiting), up to budget."""
        cfg = self.cfg
        batch = [k]
        j = k + 1
        while (j < len(self.arr) and len(batch) < cfg.budget
               and self.arr[j] <= max(self.arr[j - 1], start) + cfg.poll_gap_ns):
            batch.append(j)
            j += 1
        return batch

    def _take_until(self, k: int, until: int) -> list:
        batch = []
        j = k
        while j < len(self.arr) and len(batch) < self.cfg.budget and self.arr[j] <= until:
            batch.append(j)
            j += 1
        return batch

    def run(self) -> list[Poll]:
        cfg = self.cfg
        T, D = cfg.gro_flush_timeout_ns, cfg.napi_defer_hard_irqs
        n = len(self.arr)
        k = 0
        timer = None          # pending hrtimer (ns)
        masked = False        # interrupt masked: arrivals wait for the timer
        defer = 0             # napi->defer_hard_irqs_count
        cont = None           # after a full-budget poll: ("gap" | "timer", time)
        while True:
            if cont is not None:
                kind, t0 = cont
                cont = None
                if k >= n:
                    break
                if kind == "timer" and self.arr[k] <= t0:
                    batch, now = self._take_until(k, t0), t0
                    was_timer = True
                else:
                    start = max(self.arr[k], t0)
                    batch = self._take_gap(k, start)
                    now = max(start, self.arr[batch[-1]])
                    was_timer = False
            elif timer is not None and (masked or k >= n or self.arr[k] >= timer):
                now, timer = timer, None
                batch = self._take_until(k, now)
                was_timer = True
                if not batch:
                    if not cfg.kernel.napi_defer_hard_irqs and not self.node.any_held():
                        # napi_watchdog before 6f8b12d661d0 (v5.7): `if (napi->gro_bitmask
                        # && ...) __napi_schedule_irqoff(napi)`: nothing held, no poll
                        masked = False
                        continue
                    # timer poll without work: no reload of the defer counter
                    poll = self._poll(now, [])
                    if defer > 0:
                        defer -= 1
                        self.rec.flush(self.node, True, _jiffy(now, cfg.hz), poll.events)
                        timer = now + T
                    else:
                        self.rec.flush(self.node, False, _jiffy(now, cfg.hz), poll.events)
                        masked = False
                    continue
            else:
                if k >= n:
                    break
                timer = None       # an interrupt-driven poll replaces the pending timer
                batch = self._take_gap(k, self.arr[k])
                now = self.arr[batch[-1]]
                was_timer = False
            poll = self._poll(now, batch)
            k += len(batch)
            j = _jiffy(now, cfg.hz)
            if len(batch) == cfg.budget:
                # __napi_poll: "Flush too old packets. If HZ < 1000, flush all packets."
                self.rec.flush(self.node, cfg.hz >= 1000, j, poll.events)
                cont = ("timer" if was_timer else "gap", now)
                continue
            # napi_complete_done(work > 0)
            timeout = T if self.node.any_held() else 0
            defer = D
            if defer > 0:
                defer -= 1
                timeout = T
                masked = timeout != 0
            else:
                masked = False
            if not timeout:
                self.rec.flush(self.node, False, j, poll.events)
            elif cfg.kernel.timeout_flushes_old:
                # 605108acfe62 (v4.20): napi_gro_flush(n, !!timeout), then the timer
                self.rec.flush(self.node, True, j, poll.events)
            # else before it: `if (timeout) hrtimer_start(...); else napi_gro_flush(n,
            # false);`: a poll that arms the timer flushes nothing
            timer = now + timeout if timeout else None
        if self.node.any_held():
            last = self.polls[-1]
            self.rec.flush(self.node, False, _jiffy(last.time, cfg.hz), last.events)
        return self.polls


# --- entry point -------------------------------------------------------------------------

def _as_table(packets) -> pa.Table:
    if isinstance(packets, pa.RecordBatch):
        return pa.Table.from_batches([packets])
    if isinstance(packets, pa.Table):
        return packets
    raise ConfigError(f"simulate() needs a pyarrow Table, got {type(packets).__name__}")


def simulate(packets: pa.Table, config: GroConfig | None = None, *,
             polls: np.ndarray | None = None, coalesced=None,
             hashes: np.ndarray | None = None,
             no_gro: np.ndarray | None = None, runs: np.ndarray | None = None) -> GroResult:
    """Replay Linux GRO over a packet table and return every verdict and super-packet.

    Parameters:
        packets: table with :data:`gropcap.decode.schema.PACKET_SCHEMA` columns, rows in
            capture order (a ``pyarrow.RecordBatch`` is accepted too).
        config: kernel profile and receive model (:class:`GroConfig`); default 6.18 ideal.
        polls: ``napi`` model only: one non-decreasing int64 per packet; packets with the
            same value form one GRO window, flushed entirely at its end (live-kernel
            replay with deferred flushes). ``poll_id`` is then the window's ordinal.
        coalesced: a :class:`gropcap.gro.coalesced.CoalescedInput` (or ``True`` to detect with
            :func:`gropcap.gro.coalesced.coalesced_input`). Its frames arrive as TCP GSO skbs of
            ``segs`` segments, so a super-packet's ``count`` is the sum of its packets'
            segments and ``sum(count)`` exceeds the number of packets.
        hashes: ``napi`` model only: the RX hash per packet (``skb->hash``) instead of the
            Toeplitz hash of the headers (the gro_cells stage passes what decapsulation
            left: 0, or the outer L4 hash).
        no_gro: bool per packet: its receiving device has GRO off (netif_elide_gro), as
            for gro_cells devices without cells (ip6gre before v4.17) or DSA before v5.8.
        runs: the receiver run of each row, non-decreasing (None: one run): each run is
            replayed on a receiver of its own, from an empty GRO table, and flushed at
            its end; flows, super-packets and polls are numbered run after run (the
            numba engine's ``next_run``).

    Returns:
        :class:`GroResult` (contract in ``gropcap/gro/__init__.py``).

    Example::

        >>> from gropcap.decode.schema import empty_packet_table
        >>> simulate(empty_packet_table(), GroConfig()).num_superpackets
        0
    """
    config = config or GroConfig()
    table = _as_table(packets)
    bounds = run_bounds(runs, table.num_rows)
    if len(bounds) == 1:
        return _simulate_run(table, config, polls, coalesced, hashes, no_gro)[0]
    done = []
    for a, b in bounds:
        cut = lambda x: None if x is None or x is True else np.asarray(x)[a:b]  # noqa: E731
        co = coalesced
        if coalesced is not None and coalesced is not True:
            import copy
            co = copy.copy(coalesced)
            for name, value in vars(coalesced).items():
                if isinstance(value, np.ndarray) and value.ndim == 1:
                    setattr(co, name, value[a:b])
        done.append(_simulate_run(table.slice(a, b - a), config, cut(polls), co,
                                  cut(hashes), cut(no_gro)))
    return concat_runs([r for r, _ in done], [p for _, p in done])


def _simulate_run(table: pa.Table, config: GroConfig, polls, coalesced, hashes,
                  no_gro) -> tuple[GroResult, int]:
    """One receiver run of :func:`simulate`: its GroResult and the number of polls."""
    n = table.num_rows
    flow_id = assign_flow_ids(table)
    payload_len = _col(table, "payload_len")
    napi = config.model == "napi"
    if polls is not None:
        if not napi:
            raise ConfigError("explicit polls need the napi model",
                              hint="pass GroConfig(model='napi') with polls=")
        polls = np.asarray(polls, dtype=np.int64)
        if polls.shape != (n,):
            raise ConfigError(f"polls has {polls.shape} values for {n} packets")
        if n > 1 and np.any(np.diff(polls) < 0):
            raise ConfigError("polls must be non-decreasing")
    if hashes is not None and napi:
        hashes = np.asarray(hashes, dtype=np.uint32)
        if hashes.shape != (n,):
            raise ConfigError(f"hashes has {hashes.shape} values for {n} packets")
    else:
        hashes = (rss_hash(table, config.rss_key, config.rss == "toeplitz") if napi
                  else np.zeros(n, dtype=np.uint32))
    if coalesced is True:
        from gropcap.gro.coalesced import coalesced_input
        coalesced = coalesced_input(table)
    skbs = build_skbs(table, hashes, config, coalesced, no_gro)
    rec = _Recorder(n, config.kernel, payload_len)
    pkt_poll = np.full(n, -1, dtype=np.int64)
    ordered: list[tuple[SegDraft, int]] = []
    npolls = 0

    if not napi:
        # ideal: one unlimited list, no poll boundaries; what is held at the end is
        # flushed oldest first
        node = GroNode(config, unlimited=True)
        events: list = []
        for skb in skbs:
            rec.receive(node, skb, 0, events)
        for entry, _ in node.gro_flush(False, 0):
            rec.complete(entry, R.END_CAPTURE, events)
        ordered = [(d, -1) for d in events]
    elif polls is not None:
        nodes: dict[int, GroNode] = {}
        window = -1
        last = None
        events = []
        for skb in skbs:
            v = int(polls[skb.idx])
            if v != last:
                if last is not None:
                    _flush_window(nodes, rec, events, window, ordered)
                    events = []
                window += 1
                last = v
            node = nodes.setdefault(skb.queue, GroNode(config, unlimited=False))
            pkt_poll[skb.idx] = window
            rec.receive(node, skb, 0, events)
        if last is not None:
            _flush_window(nodes, rec, events, window, ordered)
        npolls = window + 1
    else:
        per_queue: dict[int, list] = {}
        for skb in skbs:
            per_queue.setdefault(skb.queue, []).append(skb)
        all_polls: list[Poll] = []
        for q in sorted(per_queue):
            all_polls += NapiQueue(q, per_queue[q], config, rec).run()
        all_polls.sort(key=lambda p: (p.time, p.queue, p.seq))
        for pid, poll in enumerate(all_polls):
            for i in poll.packets:
                pkt_poll[i] = pid
            ordered += [(d, pid) for d in poll.events]
        npolls = len(all_polls)
    return _build_result(n, flow_id, rec, ordered, pkt_poll, skbs, napi), npolls



def _flush_window(nodes: dict, rec: _Recorder, events: list, window: int,
                  ordered: list) -> None:
    """End of an explicit GRO window: every queue flushes everything (END_POLL)."""
    for q in sorted(nodes):
        rec.flush(nodes[q], False, 0, events)
    ordered += [(d, window) for d in events]


def _build_result(n: int, flow_id: np.ndarray, rec: _Recorder, ordered: list,
                  pkt_poll: np.ndarray, skbs: list, napi: bool) -> GroResult:
    m = len(ordered)
    seg = {name: np.zeros(m, dtype=np.int64) for name in
           ("first", "last", "count", "payload", "gso_size", "gso_type", "end", "queue",
            "poll")}
    gro_seg = np.zeros(n, dtype=np.int64)
    role = np.zeros(n, dtype=np.uint8)
    for sid, (d, pid) in enumerate(ordered):
        seg["first"][sid] = d.packets[0]
        seg["last"][sid] = d.packets[-1]
        seg["count"][sid] = d.count
        seg["payload"][sid] = d.payload_len
        seg["gso_size"][sid] = d.gso_size
        seg["gso_type"][sid] = d.gso_type
        seg["end"][sid] = d.end_reason
        seg["queue"][sid] = d.queue
        seg["poll"][sid] = pid
        for k, i in enumerate(d.packets):
            gro_seg[i] = sid
            role[i] = R.ROLE_ALONE if d.count == 1 else (R.ROLE_HEAD if k == 0
                                                         else R.ROLE_MERGED)
    rx = np.array([s.queue for s in skbs], dtype=np.uint16) if napi \
        else np.zeros(n, dtype=np.uint16)
    return GroResult(
        flow_id=flow_id, gro_seg=gro_seg, gro_role=role, reason=rec.reason,
        rx_queue=rx, poll_id=pkt_poll,
        seg_flow_id=flow_id[seg["first"]] if m else np.zeros(0, np.int64),
        seg_first_packet=seg["first"], seg_last_packet=seg["last"],
        seg_count=seg["count"], seg_payload_len=seg["payload"],
        seg_gso_size=seg["gso_size"], seg_gso_type=seg["gso_type"],
        seg_end_reason=seg["end"], seg_rx_queue=seg["queue"], seg_poll_id=seg["poll"])
