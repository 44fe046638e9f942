"""Reason codes: why a packet did not merge, and why a super-packet ended.

Every packet row gets one ``reason`` (uint8) and every super-packet one ``end_reason``:

- ``reason`` of a packet: ``MERGED`` when it was merged into the super-packet held before
  it; otherwise why it was not merged: it skipped GRO (``BYPASS_*``, the packet overtakes
  whatever its flow holds), it was not held (``NOT_HELD_*``: delivered at once), it found no
  held packet of its flow (``NO_HELD_PACKET``), or a held packet existed and a per-pair check
  refused the merge (``FLUSH_*``, which also completed that held packet).
- ``end_reason`` of a super-packet: what completed it. A super-packet of one packet that was
  delivered at once carries that packet's ``reason``. Otherwise one of ``END_*``, or the
  ``FLUSH_*`` code of the next packet of its flow that could not merge.

The codes are grouped by range so reports can bucket them; numba kernels use the integer
constants, reports use :data:`REASONS` for names and plain-English explanations.
"""

from __future__ import annotations

from typing import NamedTuple

MERGED = 0
NO_HELD_PACKET = 1            # first packet of a new super-packet: nothing of its flow held

# --- skipped GRO entirely: delivered at once, held packets of the flow untouched ---------
BYPASS_GRO_DISABLED = 10      # dev_gro_receive: netif_elide_gro (GRO off on the device)
BYPASS_NOT_IP = 11            # dev_gro_receive: no packet_offload for the EtherType / status
BYPASS_DECODE = 12            # packet could not be decoded (status != OK)
BYPASS_NO_L4_OFFLOAD = 13     # inet_gro_receive / ipv6_gro_receive: no gro_receive for proto
BYPASS_IP_OPTIONS = 14        # inet_gro_receive: first byte != 0x45
BYPASS_IP_FRAGMENT = 15       # inet_gro_receive: ip_is_fragment
BYPASS_IP_CSUM = 16           # inet_gro_receive: ip_fast_csum != 0
BYPASS_IPV6_EXTHDR = 17       # ipv6_gro_receive: extension header without GRO support (frag)
BYPASS_L4_CSUM = 18           # tcp4/6_gro_receive: skb_gro_checksum_validate failed
BYPASS_TCP_HEADER = 19        # tcp_gro_pull_header: doff*4 < sizeof(tcphdr)
BYPASS_TUNNEL = 20            # gre/udp tunnel gro_receive refused (flags, nested, OAM, ...)
BYPASS_UDP_NO_GRO = 21        # udp_gro_receive: no UDP GRO for this socket/device
BYPASS_NO_VLAN_GRO = 22       # dev_gro_receive: kernel without CONFIG_VLAN_8021Q has no
                              # packet_offload for 0x8100 / 0x88A8 (no vlan_gro_receive)

# --- not held: the packet goes up at once (skb flush), no held packet of its flow -------
NOT_HELD_ZERO_PAYLOAD = 30    # tcp_gro_receive out_check_final: len < mss with mss = 1
NOT_HELD_SYN = 31             # tcp_gro_receive: flags & SYN
NOT_HELD_RST = 32
NOT_HELD_URG = 33
NOT_HELD_PSH = 34
NOT_HELD_FIN = 35
NOT_HELD_LENGTH = 36          # inet_gro_receive/ipv6_gro_receive: IP length != bytes received
                              # (Ethernet padding, trailer, FCS) -> NAPI_GRO_CB(skb)->flush
NOT_HELD_IP_RF = 37           # inet_gro_receive: reserved ("evil") bit set
NOT_HELD_GSO = 38             # dev_gro_receive: arriving GSO skb that is not plain TCP GSO
NOT_HELD_GSO_SHORT = 39       # tcp_gro_receive: arriving TCP GSO skb, len != count * gso_size
NOT_HELD_UDP_ZERO_CSUM = 40   # udp_gro_receive_segment: zero UDP checksum ("symmetry with GSO")
NOT_HELD_UDP_LENGTH = 41      # udp_gro_receive_segment: uh->len <= 8 or != skb_gro_len
NOT_HELD_FRAG_LIST = 42       # dev_gro_receive: flush = skb_has_frag_list (a GRO packet built
                              # past MAX_SKB_FRAGS, arriving again at a gro_cells device);
                              # before 5eddb24901ee (v5.19) also skb_is_gso: any GSO skb

# --- a held packet of the flow existed and the pair check refused the merge --------------
FLUSH_CWR = 50                # tcp_gro_receive: th->cwr
FLUSH_TCP_FLAGS = 51          # tcp_gro_receive: flag word differs (flags other than FIN/PSH)
FLUSH_TCP_WINDOW = 52         # tcp_gro_receive: flag word differs in the window only
FLUSH_TCP_DOFF = 53           # tcp_gro_receive: flag word differs in data offset
FLUSH_TCP_ACK = 54            # tcp_gro_receive: ack_seq differs
FLUSH_TCP_TS = 55             # tcp_gro_receive: option bytes differ, only in TSval/TSecr
FLUSH_TCP_OPTIONS = 56        # tcp_gro_receive: option bytes differ otherwise
FLUSH_TTL = 57                # inet_gro_flush / ipv6_gro_flush: ttl / hop limit differs
FLUSH_TOS = 58                # inet_gro_flush / ipv6_gro_flush: DSCP differs
FLUSH_ECN = 59                # inet_gro_flush / ipv6_gro_flush: only the ECN bits differ
FLUSH_DF = 60                 # inet_gro_flush: DF differs
FLUSH_IP_ID = 61              # inet_gro_flush: ID neither fixed nor incrementing by count
FLUSH_OUTER_TTL = 62          # same checks on the outer header of a tunnelled packet
FLUSH_OUTER_TOS = 63
FLUSH_OUTER_ECN = 64
FLUSH_OUTER_DF = 65
FLUSH_OUTER_IP_ID = 66
FLUSH_SEQ = 67                # tcp_gro_receive: seq != p.seq + bytes merged so far
FLUSH_PAYLOAD_LARGER = 68     # tcp_gro_receive: (len - 1) >= mss, payload above gso_size
FLUSH_SIZE_LIMIT = 69         # skb_gro_receive: p->len + len >= gro_max_size (-E2BIG)
FLUSH_GSO_SIZE = 70           # tcp_gro_receive: arriving GSO packet with another gso_size
FLUSH_LENGTH = 71             # held p existed; the packet carries an skb flush (padding, ...)
FLUSH_FLAGS_FINAL = 72        # p existed, packet has URG/RST/SYN (cannot merge, not held)
FLUSH_ZERO_PAYLOAD = 73       # p existed, packet has no payload (pure ACK): p completed
FLUSH_UDP_LARGER = 74         # udp_gro_receive_segment: datagram longer than the first
FLUSH_HOP_LIMIT_FLOW = 75     # before 5.18: hop limit part of the IPv6 flow key (new entry)
FLUSH_IP_RF = 76              # held p existed; the packet has the IPv4 reserved bit (skb flush)
FLUSH_FRAG_LIST = 77          # held p existed; the packet carries a frag_list (skb flush)
FLUSH_MAX_SEGS = 78           # tcp_gro_receive, is_flist (v6.10): NAPI_GRO_CB(p)->count >= 64

# --- what ended a super-packet other than the next packet of its flow --------------------
END_PSH = 90                  # tcp_gro_receive: merged segment with PSH ends it
END_FIN = 91                  # merged segment with FIN ends it
END_SHORT_SEGMENT = 92        # merged segment shorter than gso_size ends it (len < mss)
END_POLL = 93                 # napi_complete_done: end of a NAPI poll flushes everything
END_POLL_OLD = 94             # full-budget poll / deferred flush: held since an older jiffy
END_BUCKET_FULL = 95          # gro_flush_oldest: bucket had MAX_GRO_SKBS entries
END_CAPTURE = 96              # ideal model: the capture ended with it still held
END_URG = 97                  # merged segment with URG ends it (cannot happen for TCP flags
                              # word equality; kept for completeness of out_check_final)
END_UDP_MAX_SEGS = 98         # udp_gro_receive_segment: count reached UDP_GRO_CNT_MAX (64)


class Reason(NamedTuple):
    code: int
    name: str
    text: str


_TEXT = {
    MERGED: "merged into the held super-packet",
    NO_HELD_PACKET: "started a super-packet: nothing of its flow was held",
    BYPASS_GRO_DISABLED: "GRO is off on the device: every packet goes up alone",
    BYPASS_NOT_IP: "not IPv4/IPv6 (or behind an unsupported L2): GRO has no handler",
    BYPASS_DECODE: "headers damaged or cut: the kernel could not parse them for GRO either",
    BYPASS_NO_L4_OFFLOAD: "transport protocol without GRO support (e.g. ICMP, SCTP)",
    BYPASS_IP_OPTIONS: "IPv4 options present: inet_gro_receive only aggregates 20-byte headers",
    BYPASS_IP_FRAGMENT: "IP fragment: fragments are never aggregated",
    BYPASS_IP_CSUM: "bad IPv4 header checksum",
    BYPASS_IPV6_EXTHDR: "IPv6 extension header GRO cannot skip (e.g. a fragment header)",
    BYPASS_L4_CSUM: "bad TCP/UDP checksum (only with --verify-checksums)",
    BYPASS_TCP_HEADER: "TCP data offset below 5",
    BYPASS_TUNNEL: "tunnel header GRO refuses (GRE seq/routing flags, nested tunnel, OAM)",
    BYPASS_UDP_NO_GRO: "UDP with no GRO path: no UDP GRO mode (--udp-gro) and no tunnel "
                       "socket on its port (--udp-tunnel KIND:PORT for VXLAN, Geneve, FOU, "
                       "GUE): delivered alone",
    BYPASS_NO_VLAN_GRO: "VLAN-tagged frame on a kernel built without 802.1Q support "
                        "(no VLAN GRO): delivered alone",
    NOT_HELD_ZERO_PAYLOAD: "no payload (pure ACK): never held",
    NOT_HELD_SYN: "SYN set: never held",
    NOT_HELD_RST: "RST set: never held",
    NOT_HELD_URG: "URG set: never held",
    NOT_HELD_PSH: "PSH set and nothing held to merge into: delivered at once",
    NOT_HELD_FIN: "FIN set and nothing held to merge into: delivered at once",
    NOT_HELD_LENGTH: "IP length differs from the bytes received (Ethernet padding, trailer)",
    NOT_HELD_IP_RF: "IPv4 reserved bit set",
    NOT_HELD_GSO: "arrived as a non-TCP GSO packet",
    NOT_HELD_UDP_ZERO_CSUM: "UDP checksum 0: UDP GRO refuses it (for symmetry with GSO)",
    NOT_HELD_UDP_LENGTH: "UDP length differs from the bytes received (padding) or no payload",
    NOT_HELD_FRAG_LIST: "arrived as a GRO packet with a frag_list (more than MAX_SKB_FRAGS "
                        "segments), or as any GSO packet before 5.19: never merged again",
    FLUSH_FRAG_LIST: "arrived with a frag_list: ends the held packet, delivered after it",
    FLUSH_MAX_SEGS: "TCP fraglist GRO: the held packet already had 64 segments",
    NOT_HELD_GSO_SHORT: "arrived coalesced (captured after TSO/GRO) with a short last "
                        "segment: delivered at once",
    FLUSH_CWR: "CWR set: a CWR segment never merges onto a held one",
    FLUSH_TCP_FLAGS: "TCP flags changed (other than PSH/FIN)",
    FLUSH_TCP_WINDOW: "TCP receive window changed: the window is part of the compared flag word",
    FLUSH_TCP_DOFF: "TCP header length changed",
    FLUSH_TCP_ACK: "ACK number changed: the receiver's ACKs advanced between segments",
    FLUSH_TCP_TS: "TCP timestamp changed: the sender starts a new TSval between bursts, "
                  "GRO cannot merge across it",
    FLUSH_TCP_OPTIONS: "TCP options changed (SACK blocks, MSS, ...)",
    FLUSH_TTL: "TTL / hop limit changed",
    FLUSH_TOS: "TOS / traffic class (DSCP) changed",
    FLUSH_ECN: "ECN bits changed (e.g. ECT to CE marking on the path)",
    FLUSH_DF: "DF bit changed",
    FLUSH_IP_ID: "IPv4 ID neither fixed nor incrementing by one per segment",
    FLUSH_OUTER_TTL: "outer (tunnel) TTL / hop limit changed",
    FLUSH_OUTER_TOS: "outer (tunnel) TOS changed",
    FLUSH_OUTER_ECN: "outer (tunnel) ECN bits changed",
    FLUSH_OUTER_DF: "outer (tunnel) DF bit changed",
    FLUSH_OUTER_IP_ID: "outer (tunnel) IPv4 ID neither fixed nor incrementing",
    FLUSH_SEQ: "sequence gap: loss, reordering or retransmission",
    FLUSH_PAYLOAD_LARGER: "segment larger than the first one of the super-packet (gso_size)",
    FLUSH_SIZE_LIMIT: "super-packet reached gro_max_size (64 KB by default)",
    FLUSH_GSO_SIZE: "arriving GSO packet with a different gso_size",
    FLUSH_LENGTH: "IP length differs from the bytes received (padding): ends the held packet",
    FLUSH_FLAGS_FINAL: "URG/RST/SYN set: ends the held packet, delivered after it",
    FLUSH_ZERO_PAYLOAD: "no payload (pure ACK): ends the held packet, delivered after it",
    FLUSH_UDP_LARGER: "UDP datagram longer than the first of the super-packet",
    FLUSH_HOP_LIMIT_FLOW: "hop limit changed: before 5.18 a separate flow entry",
    FLUSH_IP_RF: "IPv4 reserved bit set: ends the held packet, delivered after it",
    END_PSH: "PSH merged: the sender marked the end of a write, GRO pushes up",
    END_FIN: "FIN merged: end of the connection",
    END_SHORT_SEGMENT: "segment shorter than gso_size merged: ends the super-packet",
    END_POLL: "end of a NAPI poll: everything held is flushed",
    END_POLL_OLD: "held since an earlier jiffy at the end of a full-budget or deferred poll",
    END_BUCKET_FULL: "GRO bucket full (8 held flows): the oldest entry was flushed",
    END_CAPTURE: "capture ended while it was held",
    END_URG: "URG merged: ends the super-packet",
    END_UDP_MAX_SEGS: "UDP super-packet reached 64 segments",
}

_NAMES = {code: name for name, code in globals().items()
          if isinstance(code, int) and name.isupper() and code in _TEXT
          and name.split("_")[0] in {"MERGED", "NO", "BYPASS", "NOT", "FLUSH", "END"}}

REASONS: dict[int, Reason] = {code: Reason(code, _NAMES[code], text)
                              for code, text in sorted(_TEXT.items())}


def reason_name(code: int) -> str:
    """Symbolic name of a reason code, e.g. ``FLUSH_SEQ``; ``UNKNOWN_<n>`` otherwise."""
    r = REASONS.get(int(code))
    return r.name if r else f"UNKNOWN_{int(code)}"


# gro_role values
ROLE_ALONE = 0    # super-packet of one packet (held and flushed alone, or never held)
ROLE_HEAD = 1     # first packet of a super-packet of two or more
ROLE_MERGED = 2   # merged into the super-packet started by a head
ROLE_NAMES = {ROLE_ALONE: "alone", ROLE_HEAD: "head", ROLE_MERGED: "merged"}
