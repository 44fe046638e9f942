"""The packet table: one row per captured frame, fixed-width columns (Arrow).

This module is the contract between the decoders (reference dpkt path and the numba fast
path) and everything downstream (GRO engine, reports, Parquet). Both decoders must produce
exactly :data:`PACKET_SCHEMA`, column for column. Every column is documented in
``docs/schema.md``.

Conventions:
- Addresses are 16-byte binary: IPv6 as is, IPv4 as IPv4-mapped IPv6 (``::ffff:a.b.c.d``),
  all zero when absent.
- A header that is absent has all its columns zero (``*_version == 0`` for an absent IP
  header, ``l4_proto == 0`` with ``l4_offset == 0`` for an absent L4 header).
- ``ip_*`` is the innermost IP header; ``outer_ip_*`` the outermost IP header of an
  encapsulated packet (zero when the packet is not encapsulated).
- Offsets are byte offsets from the start of the captured frame.
"""

from __future__ import annotations

import pyarrow as pa

# --- status codes (uint8 ``status`` column) -------------------------------------------
STATUS_OK = 0                 # every header present was decoded
STATUS_TRUNCATED = 1          # a header needed for decoding is cut by the snap length
STATUS_NOT_IP = 2             # no IP layer (ARP, LLDP, unknown EtherType, ...)
STATUS_BAD_IP_HEADER = 3      # IP version/ihl/length fields inconsistent
STATUS_BAD_L4_HEADER = 4      # TCP doff < 5, UDP length < 8, ...
STATUS_UNSUPPORTED_ENCAP = 5  # a layer gropcap does not decode (e.g. GRE v1/PPTP)
STATUS_BAD_TUNNEL_HEADER = 6  # malformed GRE/VXLAN/Geneve/ERSPAN/GUE header
STATUS_BAD_LENGTH = 7         # IP length larger than the frame on the wire
STATUS_UNSUPPORTED_LINKTYPE = 8  # record's link type is not decoded
STATUS_ENCAP_TOO_DEEP = 9     # more than MAX_ENCAP_DEPTH layers of encapsulation
STATUS_BAD_L2_HEADER = 10     # malformed Ethernet/VLAN/DSA/SLL header

STATUS_NAMES = {
    STATUS_OK: "OK",
    STATUS_TRUNCATED: "TRUNCATED",
    STATUS_NOT_IP: "NOT_IP",
    STATUS_BAD_IP_HEADER: "BAD_IP_HEADER",
    STATUS_BAD_L4_HEADER: "BAD_L4_HEADER",
    STATUS_UNSUPPORTED_ENCAP: "UNSUPPORTED_ENCAP",
    STATUS_BAD_TUNNEL_HEADER: "BAD_TUNNEL_HEADER",
    STATUS_BAD_LENGTH: "BAD_LENGTH",
    STATUS_UNSUPPORTED_LINKTYPE: "UNSUPPORTED_LINKTYPE",
    STATUS_ENCAP_TOO_DEEP: "ENCAP_TOO_DEEP",
    STATUS_BAD_L2_HEADER: "BAD_L2_HEADER",
}

# --- L4 checksum state (uint8 ``l4_csum_state``) ---------------------------------------
CSUM_UNKNOWN = 0   # not verifiable: payload cut by the snap length, or no L4 header
CSUM_GOOD = 1
CSUM_BAD = 2
CSUM_PARTIAL = 3   # holds only the pseudo-header sum: sender-side offload (CHECKSUM_PARTIAL)
CSUM_ZERO = 4      # UDP checksum 0 (not computed), allowed over IPv4

ADDR = pa.binary(16)


def _ip_group(prefix: str) -> list[pa.Field]:
    """Columns of one IP header; ``prefix`` is ``ip_`` (innermost) or ``outer_ip_``."""
    p = prefix
    return [
        pa.field(p + "version", pa.uint8()),      # 4, 6, or 0 when absent
        pa.field(p + "offset", pa.uint16()),      # header start in the frame
        pa.field(p + "hdr_len", pa.uint16()),     # IPv4 ihl*4; IPv6 40 + extension headers
        pa.field(p + "tot_len", pa.uint32()),     # IPv4 tot_len; IPv6 40 + payload_len
        pa.field(p + "src", ADDR),
        pa.field(p + "dst", ADDR),
        pa.field(p + "proto", pa.uint8()),        # IPv4 protocol; IPv6 last next-header
        pa.field(p + "ttl", pa.uint8()),          # hop limit for IPv6
        pa.field(p + "tos", pa.uint8()),          # traffic class for IPv6 (DSCP + ECN)
        pa.field(p + "id", pa.uint16()),          # IPv4 identification (0 for IPv6)
        pa.field(p + "df", pa.bool_()),
        pa.field(p + "mf", pa.bool_()),           # IPv4 MF, or IPv6 fragment header M
        pa.field(p + "rf", pa.bool_()),           # IPv4 reserved ("evil") bit
        pa.field(p + "frag_off", pa.uint16()),    # fragment offset in 8-byte units
        pa.field(p + "csum_ok", pa.bool_()),      # IPv4 header checksum valid (IPv6: True)
        pa.field(p + "flow_label", pa.uint32()),  # IPv6 only
        pa.field(p + "ext_mask", pa.uint8()),     # IPv6 extension headers, IP6_EXT_* bits
        pa.field(p + "ext_len", pa.uint16()),     # bytes of IPv6 extension headers
        pa.field(p + "ext_digest", pa.uint64()),  # 64-bit FNV-1a of the extension bytes
    ]


PACKET_FIELDS: list[pa.Field] = [
    # --- record ---
    pa.field("ts_ns", pa.int64()),               # capture timestamp, ns since the epoch
    pa.field("cap_len", pa.uint32()),            # bytes captured
    pa.field("wire_len", pa.uint32()),           # original length on the wire
    pa.field("linktype", pa.uint16()),
    pa.field("iface", pa.uint16()),              # interface index (pcapng IDB order; 0 for pcap)
    pa.field("file_index", pa.uint16()),         # position of the source file in the input list
    pa.field("record", pa.uint64()),             # record number within the file, from 0
    pa.field("file_offset", pa.uint64()),        # byte offset of the record in the (decompressed) file
    pa.field("epb_flags", pa.uint32()),          # pcapng epb_flags (0 for pcap)
    pa.field("status", pa.uint8()),              # STATUS_* above
    pa.field("encap", pa.dictionary(pa.int32(), pa.string())),  # e.g. "eth/vlan/ipv4/tcp"
    pa.field("encap_depth", pa.uint8()),         # number of tunnel layers
    # --- L2 ---
    pa.field("eth_dst", pa.uint64()),            # 48-bit MAC in the low bits (0 if no Ethernet)
    pa.field("eth_src", pa.uint64()),
    pa.field("eth_type", pa.uint16()),           # first EtherType after the MACs (0x8100 if tagged)
    pa.field("vlan_depth", pa.uint8()),          # in-band tags
    pa.field("vlan_tpid0", pa.uint16()),         # outer tag
    pa.field("vlan_tci0", pa.uint16()),
    pa.field("vlan_tpid1", pa.uint16()),         # inner tag (QinQ)
    pa.field("vlan_tci1", pa.uint16()),
    pa.field("dsa_tag", pa.uint8()),             # DSA_* kind stripped, 0 none
    pa.field("dsa_port", pa.int16()),            # source switch port from the tag, -1 none
    # --- outermost IP (encapsulated packets only) and its L4 (UDP tunnels) ---
    *_ip_group("outer_ip_"),
    pa.field("outer_l4_proto", pa.uint8()),      # 17 for UDP tunnels, else 0
    pa.field("outer_sport", pa.uint16()),
    pa.field("outer_dport", pa.uint16()),
    pa.field("outer_udp_len", pa.uint16()),
    pa.field("outer_udp_csum", pa.uint16()),     # raw value: 0 = no checksum
    # --- tunnel header (the outermost tunnel) ---
    pa.field("tun_type", pa.uint8()),            # TUN_* in constants.py
    pa.field("tun_offset", pa.uint16()),         # tunnel header start (GRE/VXLAN/...; IPIP: inner IP)
    pa.field("tun_flags", pa.uint32()),          # GRE flags+version word; VXLAN/GPE first word; Geneve first word; GUE first word
    pa.field("tun_proto", pa.uint16()),          # GRE protocol; Geneve protocol type; GPE next protocol
    pa.field("tun_key", pa.uint32()),            # GRE key; VXLAN/Geneve VNI<<8|reserved (second word)
    pa.field("tun_seq", pa.uint32()),            # GRE sequence number
    pa.field("tun_csum_ok", pa.bool_()),         # GRE checksum valid (True when absent or unverifiable)
    pa.field("tun_opt_len", pa.uint16()),        # Geneve options / GUE optional-field bytes
    pa.field("tun_opt_digest", pa.uint64()),     # FNV-1a of those bytes
    pa.field("erspan_ver", pa.uint8()),          # 1 (type II) or 2 (type III), 0 none
    pa.field("erspan_session", pa.uint16()),
    pa.field("inner_eth_dst", pa.uint64()),      # inner Ethernet (TEB/VXLAN/Geneve/ERSPAN)
    pa.field("inner_eth_src", pa.uint64()),
    pa.field("inner_eth_type", pa.uint16()),
    # --- innermost IP ---
    *_ip_group("ip_"),
    # --- innermost L4 ---
    pa.field("l4_proto", pa.uint8()),            # 6 TCP, 17 UDP, other IP protocol, 0 none
    pa.field("l4_offset", pa.uint16()),
    pa.field("sport", pa.uint16()),
    pa.field("dport", pa.uint16()),
    pa.field("tcp_seq", pa.uint32()),
    pa.field("tcp_ack", pa.uint32()),
    pa.field("tcp_flags", pa.uint16()),          # 9 bits: FIN..CWR plus AE (0x100)
    pa.field("tcp_doff", pa.uint8()),            # header length in 32-bit words
    pa.field("tcp_window", pa.uint16()),
    pa.field("tcp_urg_ptr", pa.uint16()),
    pa.field("tcp_opt_len", pa.uint8()),         # option bytes (doff*4 - 20)
    pa.field("tcp_options", pa.binary(40)),      # option bytes, zero-padded: exact comparison
    pa.field("tcp_mss", pa.uint16()),            # MSS option, 0 absent
    pa.field("tcp_wscale", pa.int8()),           # window scale option, -1 absent
    pa.field("tcp_sack_perm", pa.bool_()),
    pa.field("tcp_sack_blocks", pa.uint8()),     # number of SACK blocks
    pa.field("tcp_has_ts", pa.bool_()),
    pa.field("tcp_tsval", pa.uint32()),
    pa.field("tcp_tsecr", pa.uint32()),
    pa.field("udp_len", pa.uint16()),
    pa.field("l4_csum", pa.uint16()),            # raw TCP/UDP checksum field
    pa.field("l4_csum_state", pa.uint8()),       # CSUM_* above
    pa.field("payload_len", pa.uint32()),        # L4 payload from IP lengths, not cap_len
    # --- VLAN tags inside the outermost tunnel's Ethernet (gretap, VXLAN, Geneve, ERSPAN) ---
    pa.field("inner_vlan_depth", pa.uint8()),    # in-band tags after inner_eth_* (saturates)
    pa.field("inner_vlan_tpid0", pa.uint16()),   # first tag (its TPID is inner_eth_type)
    pa.field("inner_vlan_tci0", pa.uint16()),
    pa.field("inner_vlan_tpid1", pa.uint16()),   # second tag
    pa.field("inner_vlan_tci1", pa.uint16()),
]

PACKET_SCHEMA = pa.schema(PACKET_FIELDS)
PACKET_COLUMNS = [f.name for f in PACKET_FIELDS]


def empty_packet_table() -> pa.Table:
    """A zero-row table with :data:`PACKET_SCHEMA` (``Schema.empty_table`` imports
    pandas, which a run never needs otherwise: ``gropcap/arrays.py``)."""
    return pa.Table.from_batches([], schema=PACKET_SCHEMA)
