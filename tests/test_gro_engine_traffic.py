"""Packet-table builders for the GRO engine tests (and a check that they build valid tables).

``packet_table(rows)`` turns a list of column dicts into a PACKET_SCHEMA table, every
missing column zero; ``tcp4`` / ``tcp6`` make one realistic Ethernet/IP/TCP row.
"""

from __future__ import annotations

import ipaddress

import pyarrow as pa

from gropcap.constants import ETH_P_IP, ETH_P_IPV6, IPPROTO_TCP, TCP_FLAG_ACK
from gropcap.decode.schema import CSUM_GOOD, PACKET_SCHEMA, STATUS_OK


def _zero(field: pa.Field):
    t = field.type
    if pa.types.is_fixed_size_binary(t):
        return bytes(t.byte_width)
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_dictionary(t):
        return ""
    return 0


def addr16(text: str) -> bytes:
    """IPv6 as is, IPv4 as IPv4-mapped IPv6 (the schema's address convention)."""
    a = ipaddress.ip_address(text)
    if a.version == 4:
        return bytes(10) + b"\xff\xff" + a.packed
    return a.packed


def packet_table(rows: list[dict]) -> pa.Table:
    """PACKET_SCHEMA table from dicts; absent columns are zero (absent header)."""
    cols = {}
    for field in PACKET_SCHEMA:
        z = _zero(field)
        vals = [r.get(field.name, z) for r in rows]
        if field.name == "tcp_options":
            vals = [bytes(v).ljust(40, b"\0") for v in vals]
        if pa.types.is_dictionary(field.type):
            cols[field.name] = pa.array(vals, pa.string()).dictionary_encode().cast(field.type)
        else:
            cols[field.name] = pa.array(vals, field.type)
    return pa.table(cols, schema=PACKET_SCHEMA)


def tcp_row(version: int, src: str, dst: str, sport: int, dport: int, seq: int = 0,
            payload: int = 1448, *, ack: int = 1, flags: int = TCP_FLAG_ACK,
            ts_ns: int = 0, ttl: int = 64, tos: int = 0, ip_id: int = 0, df: bool = True,
            window: int = 512, options: bytes = b"", pad: int = 0, **extra) -> dict:
    """One Ethernet + IPv4/IPv6 + TCP frame as column values."""
    ip_hdr = 20 if version == 4 else 40
    opt = bytes(options)
    tcp_hdr = 20 + len(opt)
    tot = ip_hdr + tcp_hdr + payload
    wire = 14 + tot + pad
    row = dict(
        ts_ns=ts_ns, cap_len=wire, wire_len=wire, linktype=1, status=STATUS_OK,
        encap=f"eth/ipv{version}/tcp", eth_dst=0x020000000002, eth_src=0x020000000001,
        eth_type=ETH_P_IP if version == 4 else ETH_P_IPV6,
        dsa_port=-1, ip_version=version, ip_offset=14, ip_hdr_len=ip_hdr, ip_tot_len=tot,
        ip_src=addr16(src), ip_dst=addr16(dst), ip_proto=IPPROTO_TCP, ip_ttl=ttl,
        ip_tos=tos, ip_id=ip_id if version == 4 else 0, ip_df=df and version == 4,
        ip_csum_ok=True, l4_proto=IPPROTO_TCP, l4_offset=14 + ip_hdr, sport=sport,
        dport=dport, tcp_seq=seq & 0xFFFFFFFF, tcp_ack=ack, tcp_flags=flags,
        tcp_doff=tcp_hdr // 4, tcp_window=window, tcp_opt_len=len(opt), tcp_options=opt,
        tcp_wscale=-1, l4_csum_state=CSUM_GOOD, payload_len=payload,
    )
    row.update(extra)
    return row


def test_packet_table_builds_schema_table():
    t = packet_table([tcp_row(4, "10.0.0.1", "10.0.0.2", 1000, 2000, seq=5),
                      tcp_row(6, "fd00::1", "fd00::2", 1000, 2000, seq=7, payload=0)])
    assert t.schema == PACKET_SCHEMA
    assert t.column("ip_src")[0].as_py() == bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1])
    assert t.column("tcp_seq").to_pylist() == [5, 7]
    assert t.column("ip_tot_len").to_pylist() == [20 + 20 + 1448, 40 + 20]
    assert t.column("wire_len").to_pylist() == [14 + 1488, 14 + 60]
