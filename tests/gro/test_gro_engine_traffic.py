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


# --- random traffic for property tests (shared by the engine tests) --------------------

# tunnel kinds for random traffic: (tun_type, outer IP version, GRE flags word, overhead)
TUNNELS = {
    "gre": (1, 4, 0x0000), "gre_key": (1, 4, 0x2000), "gre_csum": (1, 4, 0x8000),
    "gre_seq": (1, 4, 0x1000), "gretap": (2, 4, 0x2000), "ipip": (5, 4, 0),
    "sit": (6, 4, 0), "ip6ip6": (7, 6, 0), "ip4ip6": (8, 6, 0), "ip6gre": (1, 6, 0x2000),
    "vxlan": (9, 4, 0x08000000),
}


def encapsulate(row: dict, kind: str, outer: dict) -> dict:
    """Wrap a tcp_row in an outer IP header and tunnel header (column values only).

    ``outer``: src, dst, ttl, tos, id, df, flow_label, key, csum_ok.
    """
    tun_type, ov, flags = TUNNELS[kind]
    inner_v = row["ip_version"]
    off = row["ip_offset"]                       # where the outer header now starts
    ohl = 20 if ov == 4 else 40
    if tun_type in (1, 2):
        over = 4 + 4 * (bool(flags & 0x8000) + bool(flags & 0x2000) + bool(flags & 0x1000))
        if tun_type == 2:
            over += 14
        proto = 47
    elif tun_type == 9:
        over = 8 + 8 + 14
        proto = 17
    else:
        over = 0
        proto = 4 if inner_v == 4 else 41
    shift = ohl + over
    inner_tot = row["ip_tot_len"]
    row = dict(row)
    row["ip_offset"] += shift
    row["l4_offset"] += shift
    row["wire_len"] += shift
    row["cap_len"] += shift
    row.update(
        outer_ip_version=ov, outer_ip_offset=off, outer_ip_hdr_len=ohl,
        outer_ip_tot_len=ohl + over + inner_tot, outer_ip_src=addr16(outer["src"][ov]),
        outer_ip_dst=addr16(outer["dst"][ov]), outer_ip_proto=proto,
        outer_ip_ttl=outer["ttl"], outer_ip_tos=outer["tos"],
        outer_ip_id=outer["id"] if ov == 4 else 0, outer_ip_df=outer["df"] and ov == 4,
        outer_ip_csum_ok=True, outer_ip_flow_label=outer["flow_label"] if ov == 6 else 0,
        tun_type=tun_type, tun_offset=off + ohl, tun_flags=flags, encap_depth=1,
        encap=f"eth/ipv{ov}/{kind}/ipv{inner_v}/tcp",
        eth_type=0x0800 if ov == 4 else 0x86DD,
    )
    if tun_type in (1, 2):
        row.update(tun_proto=0x6558 if tun_type == 2 else (0x0800 if inner_v == 4 else 0x86DD),
                   tun_key=outer["key"] if flags & 0x2000 else 0,
                   tun_csum_ok=outer["csum_ok"] if flags & 0x8000 else True)
    if tun_type == 2:
        row.update(inner_eth_dst=0x0A0000000002, inner_eth_src=0x0A0000000001,
                   inner_eth_type=0x0800 if inner_v == 4 else 0x86DD)
    if tun_type == 9:
        row.update(outer_l4_proto=17, outer_sport=40000 + outer["key"] % 1000,
                   outer_dport=4789, outer_udp_len=8 + 8 + 14 + inner_tot,
                   tun_key=outer["key"] << 8,
                   inner_eth_dst=0x0A0000000002, inner_eth_src=0x0A0000000001,
                   inner_eth_type=0x0800 if inner_v == 4 else 0x86DD)
    return row


def random_traffic(rng, n_packets: int = 200, n_flows: int = 4,
                   tunnels: bool = False) -> list[dict]:
    """Seeded random TCP traffic that exercises most GRO rules.

    Several IPv4/IPv6 flows (some in VLANs), bulk segments in sequence with random
    disturbances: PSH/FIN/SYN/RST/URG/CWR/ECE, pure ACKs, short and long segments, seq
    gaps and reordering, ACK/window/TTL/TOS/ECN/DF changes, timestamp and SACK options,
    fixed / incrementing / random IPv4 IDs, padding, IP options, fragments, bad checksums,
    non-TCP packets, and timestamp gaps for the NAPI poll model. With ``tunnels`` some
    flows run inside GRE / IPIP / SIT / ip6ip6 / ip4ip6 / GRE-TEB / VXLAN with their own
    outer TTL/TOS/DF/ID behaviour (fixed, incrementing or random outer IDs).
    """
    flows = []
    for f in range(n_flows):
        v = 4 if rng.random() < 0.6 else 6
        src = f"10.0.{f}.1" if v == 4 else f"fd00::{f}:1"
        dst = f"10.9.{f}.2" if v == 4 else f"fd00::9:{f}"
        flows.append(dict(v=v, src=src, dst=dst, sport=10000 + f, dport=443,
                          seq=int(rng.integers(0, 2**32)), ack=int(rng.integers(0, 2**32)),
                          id=int(rng.integers(0, 65536)),
                          idmode=rng.choice(["inc", "fixed", "random"]),
                          df=bool(rng.random() < 0.8), ts=int(rng.integers(0, 2**32)),
                          vlan=int(rng.integers(1, 4095)) if rng.random() < 0.2 else 0,
                          mss=int(rng.choice([1448, 1448, 1000, 536])),
                          tun=(str(rng.choice(list(TUNNELS))) if tunnels and rng.random() < 0.6
                               else ""),
                          oid=int(rng.integers(0, 65536)),
                          oidmode=rng.choice(["inc", "fixed", "random"]),
                          odf=bool(rng.random() < 0.6), key=int(rng.integers(1, 5)),
                          osrc={4: f"192.0.2.{f + 1}", 6: f"2001:db8::{f + 1}"},
                          odst={4: "198.51.100.1", 6: "2001:db8::ffff"}))
    rows = []
    t = 1_000_000_000
    for _ in range(n_packets):
        f = flows[int(rng.integers(0, n_flows))]
        t += int(rng.choice([500, 2000, 10_000, 50_000, 300_000, 5_000_000],
                            p=[0.4, 0.3, 0.15, 0.08, 0.05, 0.02]))
        payload = f["mss"]
        flags = 0x10
        extra = {}
        r = rng.random()
        if r < 0.05:
            payload = int(rng.integers(1, f["mss"]))
        elif r < 0.07:
            payload = f["mss"] + 100
        elif r < 0.12:
            payload = 0
        x = rng.random()
        if x < 0.05:
            flags |= 0x08
        elif x < 0.06:
            flags |= 0x01
        elif x < 0.065:
            flags |= int(rng.choice([0x02, 0x04, 0x20]))
        elif x < 0.08:
            flags |= 0x80
        elif x < 0.085:
            flags |= 0x40
        seq = f["seq"]
        y = rng.random()
        if y < 0.03:
            seq = (seq + 1448 * int(rng.integers(1, 4))) & 0xFFFFFFFF   # gap
        elif y < 0.05:
            seq = (seq - f["mss"]) & 0xFFFFFFFF                        # retransmission
        if rng.random() < 0.03:
            f["ack"] = (f["ack"] + 1000) & 0xFFFFFFFF
        window = 512 if rng.random() > 0.02 else 600
        if rng.random() < 0.1:
            f["ts"] = (f["ts"] + 1) & 0xFFFFFFFF
        opts = b"\x01\x01\x08\x0a" + f["ts"].to_bytes(4, "big") + b"\x00\x00\x00\x07"
        if rng.random() < 0.02:
            opts += b"\x01\x01\x05\x0a" + bytes(8)   # SACK block
        ttl = 64 if rng.random() > 0.02 else 63
        tos = 0 if rng.random() > 0.02 else int(rng.choice([0x01, 0x03, 0x20]))
        df = f["df"] if rng.random() > 0.01 else not f["df"]
        mode = f["idmode"]
        ip_id = f["id"] if mode == "fixed" else (
            int(rng.integers(0, 65536)) if mode == "random" else f["id"])
        if mode == "inc":
            f["id"] = (f["id"] + 1) & 0xFFFF
        z = rng.random()
        if z < 0.01 and f["v"] == 4:
            extra.update(ip_hdr_len=24)
        elif z < 0.02 and f["v"] == 4:
            extra.update(ip_mf=True)
        elif z < 0.025:
            extra.update(ip_csum_ok=False) if f["v"] == 4 else extra.update(
                ip_ext_mask=0x08, ip_ext_len=8, ip_ext_digest=12345)
        elif z < 0.035:
            extra.update(l4_proto=17, ip_proto=17)
        elif z < 0.045:
            extra.update(l4_csum_state=int(rng.choice([2, 3])))
        elif z < 0.05:
            extra.update(ip_rf=True)
        pad = 0
        if payload < 6 and f["v"] == 4 and rng.random() < 0.7:
            pad = 6 - payload
        if f["vlan"]:
            extra.update(eth_type=0x8100, vlan_depth=1, vlan_tpid0=0x8100,
                         vlan_tci0=f["vlan"])
        row = tcp_row(f["v"], f["src"], f["dst"], f["sport"], f["dport"], seq, payload,
                      ack=f["ack"], flags=flags, ts_ns=t, ttl=ttl, tos=tos, ip_id=ip_id,
                      df=df, window=window, options=opts, pad=pad,
                      tcp_has_ts=True, tcp_tsval=f["ts"], tcp_tsecr=7, **extra)
        if f["vlan"]:
            row["ip_offset"] += 4
            row["l4_offset"] += 4
            row["wire_len"] += 4
            row["cap_len"] += 4
        if "ip_hdr_len" in extra:
            row["ip_tot_len"] += 4
            row["l4_offset"] += 4
            row["wire_len"] += 4
            row["cap_len"] += 4
        if f["tun"]:
            omode = f["oidmode"]
            oid = f["oid"] if omode != "random" else int(rng.integers(0, 65536))
            if omode == "inc":
                f["oid"] = (f["oid"] + 1) & 0xFFFF
            outer = dict(src=f["osrc"], dst=f["odst"],
                         ttl=64 if rng.random() > 0.02 else 60,
                         tos=0 if rng.random() > 0.02 else 0x02,
                         id=oid, df=f["odf"] if rng.random() > 0.01 else not f["odf"],
                         flow_label=0 if rng.random() > 0.01 else 7, key=f["key"],
                         csum_ok=rng.random() > 0.02)
            row = encapsulate(row, f["tun"], outer)
        rows.append(row)
        if y >= 0.05 and payload > 0 and (flags & 0x02) == 0:
            f["seq"] = (seq + payload) & 0xFFFFFFFF
        # occasional reordering: swap with the previous row (same timestamps order kept)
        if len(rows) > 2 and rng.random() < 0.02:
            rows[-1], rows[-2] = rows[-2], rows[-1]
            rows[-1]["ts_ns"], rows[-2]["ts_ns"] = rows[-2]["ts_ns"], rows[-1]["ts_ns"]
    return rows
