"""The bundled sample captures (sample_pcaps/): they read, decode with status OK, hold what
sample_pcaps/README.md says, and carry the TCP flows the GRO tests rely on.

Expectations here are written from the capture design (README / make_crafted.py docstring),
not read back from the decoder: MSS values follow from MTU 1500 minus the encapsulation
overhead, tunnel fields from the constants the generator used.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gropcap import constants as C
from gropcap.capture import read_capture, write_pcap, write_pcapng
from gropcap.decode import schema as S

from where import TESTS

reference = pytest.importorskip("gropcap.decode.reference",
                                reason="reference decoder (gropcap/decode/reference.py) missing")

SAMPLES = Path(TESTS).parent / "sample_pcaps"
README = SAMPLES / "README.md"
SNAPLEN = 128
BASE_TS_NS = 1_767_225_600 * 1_000_000_000   # 2026-01-01T00:00:00Z
DATA_SEGS, PSH_AT, GAP_AFTER, TSVAL_EVERY, LAST_PAYLOAD = 32, 13, 20, 8, 700
SERVER_PORT = 5201


def v4(a: str) -> bytes:
    return bytes(10) + b"\xff\xff" + bytes(int(x) for x in a.split("."))


def v6(a: str) -> bytes:
    import ipaddress
    return ipaddress.IPv6Address(a).packed


IN4 = (v4("192.0.2.1"), v4("192.0.2.2"))
IN6 = (v6("2001:db8:1::1"), v6("2001:db8:1::2"))
OUT4 = (v4("198.51.100.1"), v4("198.51.100.2"))
OUT6 = (v6("2001:db8:ff::1"), v6("2001:db8:ff::2"))

# name: (encap, link type, frames, MSS, inner addresses, tunnel columns of every frame)
# MSS = 1500 - tunnel overhead - inner IP header - 20 TCP - 12 option bytes.
GRE_KEY, VNI, SESSION = 0x12345, 0xABCDEF, 0x155
ETH = C.LINKTYPE_ETHERNET
CRAFTED = {
    "crafted_gre.pcap": ("eth/ipv4/gre/ipv4/tcp", ETH, 35, 1424, IN4,
                         dict(tun_type=C.TUN_GRE, tun_proto=C.ETH_P_IP, tun_flags=0)),
    "crafted_gre_key.pcap": ("eth/ipv4/gre/ipv4/tcp", ETH, 35, 1420, IN4,
                             dict(tun_type=C.TUN_GRE, tun_key=GRE_KEY,
                                  tun_flags=C.GRE_KEY)),
    "crafted_gre_csum.pcap": ("eth/ipv4/gre/ipv4/tcp", ETH, 35, 1420, IN4,
                              dict(tun_type=C.TUN_GRE, tun_flags=C.GRE_CSUM,
                                   tun_csum_ok=True)),
    "crafted_gre_seq.pcap": ("eth/ipv4/gre/ipv4/tcp", ETH, 35, 1420, IN4,
                             dict(tun_type=C.TUN_GRE, tun_flags=C.GRE_SEQ)),
    "crafted_ip6gre.pcap": ("eth/ipv6/gre/ipv4/tcp", ETH, 35, 1404, IN4,
                            dict(tun_type=C.TUN_GRE, outer_ip_version=6)),
    "crafted_gretap.pcap": ("eth/ipv4/gre/eth/ipv4/tcp", ETH, 35, 1410, IN4,
                            dict(tun_type=C.TUN_GRE_TEB, tun_proto=C.ETH_P_TEB,
                                 inner_eth_type=C.ETH_P_IP)),
    "crafted_erspan2.pcap": ("eth/ipv4/gre/erspan2/eth/ipv4/tcp", ETH, 35, 1398, IN4,
                             dict(tun_type=C.TUN_ERSPAN2, tun_proto=C.ETH_P_ERSPAN,
                                  erspan_ver=1, erspan_session=SESSION)),
    "crafted_erspan3.pcap": ("eth/ipv4/gre/erspan3/eth/ipv4/tcp", ETH, 35, 1394, IN4,
                             dict(tun_type=C.TUN_ERSPAN3, tun_proto=C.ETH_P_ERSPAN2,
                                  erspan_ver=2, erspan_session=SESSION)),
    "crafted_ipip.pcap": ("eth/ipv4/ipv4/tcp", ETH, 35, 1428, IN4,
                          dict(tun_type=C.TUN_IPIP, outer_ip_proto=C.IPPROTO_IPIP)),
    "crafted_sit.pcap": ("eth/ipv4/ipv6/tcp", ETH, 35, 1408, IN6,
                         dict(tun_type=C.TUN_SIT, outer_ip_proto=C.IPPROTO_IPV6)),
    "crafted_ip6ip6.pcap": ("eth/ipv6/ipv6/tcp", ETH, 35, 1388, IN6,
                            dict(tun_type=C.TUN_IP6IP6, outer_ip_proto=C.IPPROTO_IPV6)),
    "crafted_ip4ip6.pcap": ("eth/ipv6/ipv4/tcp", ETH, 35, 1400, IN4,
                            dict(tun_type=C.TUN_IP4IP6, outer_ip_proto=C.IPPROTO_IPIP,
                                 outer_ip_ext_mask=C.IP6_EXT_DSTOPTS, outer_ip_ext_len=8,
                                 outer_ip_hdr_len=48)),
    "crafted_geneve.pcap": ("eth/ipv4/udp/geneve/eth/ipv4/tcp", ETH, 35, 1390, IN4,
                            dict(tun_type=C.TUN_GENEVE, tun_key=VNI << 8,
                                 tun_proto=C.ETH_P_TEB, tun_opt_len=8,
                                 outer_dport=C.GENEVE_PORT, outer_udp_csum=0)),
    "crafted_vxlan_gpe.pcap": ("eth/ipv4/udp/vxlan-gpe/ipv4/tcp", ETH, 35, 1412, IN4,
                               dict(tun_type=C.TUN_VXLAN_GPE, tun_key=VNI << 8,
                                    tun_proto=1, outer_dport=C.VXLAN_GPE_PORT)),
    "crafted_vlan.pcap": ("eth/vlan/ipv4/tcp", ETH, 35, 1448, IN4,
                          dict(vlan_depth=1, vlan_tpid0=C.ETH_P_8021Q, vlan_tci0=100,
                               eth_type=C.ETH_P_8021Q)),
    "crafted_qinq.pcap": ("eth/vlan/vlan/ipv4/tcp", ETH, 35, 1448, IN4,
                          dict(vlan_depth=2, vlan_tpid0=C.ETH_P_8021AD, vlan_tci0=10,
                               vlan_tpid1=C.ETH_P_8021Q, vlan_tci1=100)),
    "crafted_dsa_brcm.pcap": ("eth/dsa/ipv4/tcp", C.LINKTYPE_DSA_TAG_BRCM, 64, 1448, None,
                              dict(dsa_tag=C.DSA_BRCM)),
    "crafted_dsa_brcm_prepend.pcap": ("dsa/eth/ipv4/tcp", C.LINKTYPE_DSA_TAG_BRCM_PREPEND,
                                      64, 1448, None, dict(dsa_tag=C.DSA_BRCM_PREPEND)),
    "crafted_dsa_dsa.pcap": ("eth/dsa/ipv4/tcp", C.LINKTYPE_DSA_TAG_DSA, 64, 1448, None,
                             dict(dsa_tag=C.DSA_DSA, vlan_depth=0)),
    "crafted_dsa_edsa.pcap": ("eth/dsa/ipv4/tcp", C.LINKTYPE_DSA_TAG_EDSA, 64, 1448, None,
                              dict(dsa_tag=C.DSA_EDSA, vlan_depth=0)),
    "crafted_sll.pcap": ("sll/ipv4/tcp", C.LINKTYPE_LINUX_SLL, 35, 1448, IN4,
                         dict(eth_type=C.ETH_P_IP)),
    "crafted_sll2.pcap": ("sll2/ipv6/tcp", C.LINKTYPE_LINUX_SLL2, 35, 1428, IN6,
                          dict(eth_type=C.ETH_P_IPV6)),
    "crafted_raw.pcap": ("ipv4/tcp", C.LINKTYPE_RAW, 35, 1448, IN4, {}),
    "crafted_null.pcap": ("null/ipv4/tcp", C.LINKTYPE_NULL, 35, 1448, IN4, {}),
    "crafted_loop.pcap": ("loop/ipv6/tcp", C.LINKTYPE_LOOP, 35, 1428, IN6, {}),
    "crafted_two_ifaces.pcapng": (None, None, 70, 1448, None, {}),
    "crafted_nanosecond.pcap": ("eth/ipv4/tcp", ETH, 35, 1448, IN4, {}),
    "crafted_big_endian.pcap": ("eth/ipv6/tcp", ETH, 35, 1428, IN6, {}),
}

# name: (encap of the data connection, MSS, expected SYNs from the client to port 5201)
REAL = {
    "real_ipv4.pcap": ("eth/ipv4/tcp", 1448, 2),
    "real_ipv6.pcap": ("eth/ipv6/tcp", 1428, 2),
    "real_ipv4_p4.pcap": ("eth/ipv4/tcp", 1448, 5),
    "real_vxlan.pcap": ("eth/ipv4/udp/vxlan/eth/ipv4/tcp", 1398, 2),
}


def decode(path: Path) -> dict:
    """read_capture + reference decode_batch -> columns as Python lists."""
    _, batch = read_capture(path)
    table = reference.decode_batch(batch)
    return table.to_pydict()


@pytest.fixture(scope="module")
def decoded() -> dict:
    return {}


def get(decoded: dict, name: str) -> dict:
    if name not in decoded:
        decoded[name] = decode(SAMPLES / name)
    return decoded[name]


def rows(cols: dict, idx) -> list[dict]:
    return [{k: v[i] for k, v in cols.items()} for i in idx]


def readme_table() -> dict[str, tuple[int, int]]:
    """file -> (packets, bytes) from the README's table."""
    out = {}
    for m in re.finditer(r"^\| `([^`]+)` \|.*\| (\d+) \| ([\d,]+) \|$", README.read_text(),
                         re.M):
        out[m.group(1)] = (int(m.group(2)), int(m.group(3).replace(",", "")))
    return out


# --- the directory as a whole ------------------------------------------------------------

def test_readme_lists_every_sample_with_its_count_and_size():
    files = sorted(p.name for p in SAMPLES.iterdir() if p.suffix in (".pcap", ".pcapng"))
    table = readme_table()
    assert sorted(table) == files
    assert set(files) == set(CRAFTED) | set(REAL)
    for name in files:
        info, batch = read_capture(SAMPLES / name)
        assert (len(batch), (SAMPLES / name).stat().st_size) == table[name], name
    total = sum((SAMPLES / f).stat().st_size for f in files)
    m = re.search(r"(\d+) files, ([\d,]+) bytes", README.read_text())
    assert m and (int(m.group(1)), int(m.group(2).replace(",", ""))) == (len(files), total)


def test_samples_stay_small():
    total = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert total < 10 * 1024 * 1024


# --- crafted captures --------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_reads_with_exact_records(name):
    info, batch = read_capture(SAMPLES / name)
    n = CRAFTED[name][2]
    assert len(batch) == n
    gap = 11_111 if name == "crafted_nanosecond.pcap" else 12_000
    assert batch.ts_ns.tolist() == [BASE_TS_NS + i * gap for i in range(n)]
    assert (batch.cap_len == batch.wire_len.clip(max=SNAPLEN)).all()
    assert info.ts_resolution_ns == (1 if name in ("crafted_nanosecond.pcap",
                                                   "crafted_two_ifaces.pcapng") else 1000)
    assert info.byte_order == ("big" if name == "crafted_big_endian.pcap" else "little")
    if name == "crafted_two_ifaces.pcapng":
        assert info.format == "pcapng"
        assert info.linktypes == [C.LINKTYPE_ETHERNET, C.LINKTYPE_RAW]
        assert sorted(set(zip(batch.iface.tolist(), batch.linktype.tolist()))) == \
            [(0, C.LINKTYPE_ETHERNET), (1, C.LINKTYPE_RAW)]
    else:
        assert info.format == "pcap"
        assert set(batch.linktype.tolist()) == {CRAFTED[name][1]}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_decodes_to_the_designed_headers(name, decoded):
    encap, _lt, n, mss, addrs, tun = CRAFTED[name]
    cols = get(decoded, name)
    assert cols["status"] == [S.STATUS_OK] * n
    if name == "crafted_two_ifaces.pcapng":
        want = ["eth/ipv4/tcp" if i == 0 else "ipv4/tcp" for i in cols["iface"]]
        assert cols["encap"] == want
    else:
        assert cols["encap"] == [encap] * n
    for col, value in tun.items():
        assert cols[col] == [value] * n, col
    tunnelled = bool(tun.get("tun_type"))
    assert cols["encap_depth"] == [1 if tunnelled else 0] * n
    assert cols["l4_proto"] == [C.IPPROTO_TCP] * n
    if addrs is not None:
        assert {(s, d) for s, d in zip(cols["ip_src"], cols["ip_dst"])} == \
            {addrs, addrs[::-1]}
    # Full-size segments fill the 1500-byte MTU with their outermost IP packet.
    outer_len = cols["outer_ip_tot_len"] if tunnelled else cols["ip_tot_len"]
    full = [i for i in range(n) if cols["payload_len"][i] == mss]
    flows = 2 if n in (64, 70) else 1
    assert len(full) == flows * (DATA_SEGS - 1)
    assert {outer_len[i] for i in full} == {1500}
    assert max(cols["payload_len"]) == mss


def _flows(cols: dict) -> dict[tuple, list[int]]:
    """(sport, dport, ip_src, ip_dst) -> row indexes, in capture order."""
    out: dict[tuple, list[int]] = {}
    for i in range(len(cols["status"])):
        key = (cols["sport"][i], cols["dport"][i], cols["ip_src"][i], cols["ip_dst"][i])
        out.setdefault(key, []).append(i)
    return out


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_tcp_flow_has_the_designed_gro_events(name, decoded):
    """32 data segments per flow: one lost segment, PSH at 13 and at the end, TSval
    stepping every 8 segments, IP ID +1 per segment, DF set, pure ACKs going back."""
    _encap, _lt, n, mss, _addrs, _tun = CRAFTED[name]
    cols = get(decoded, name)
    flows = _flows(cols)
    data = {k: v for k, v in flows.items() if k[1] == SERVER_PORT}
    acks = {k: v for k, v in flows.items() if k[0] == SERVER_PORT}
    two = n in (64, 70)
    assert len(data) == (2 if two else 1)
    for key, idx in data.items():
        r = rows(cols, idx)
        assert len(r) == DATA_SEGS
        assert [x["payload_len"] for x in r] == [mss] * (DATA_SEGS - 1) + [LAST_PAYLOAD]
        steps = [(b["tcp_seq"] - a["tcp_seq"]) % 2**32 for a, b in zip(r, r[1:])]
        want = [mss] * (DATA_SEGS - 1)
        want[GAP_AFTER] = 2 * mss        # the lost segment
        assert steps == want
        psh = [i for i, x in enumerate(r) if x["tcp_flags"] & C.TCP_FLAG_PSH]
        assert psh == [PSH_AT, DATA_SEGS - 1]
        assert all(x["tcp_flags"] & ~C.TCP_FLAG_PSH == C.TCP_FLAG_ACK for x in r)
        assert [x["tcp_tsval"] - r[0]["tcp_tsval"] for x in r] == \
            [i // TSVAL_EVERY for i in range(DATA_SEGS)]
        assert {x["tcp_ack"] for x in r} == {r[0]["tcp_ack"]}
        assert {(x["tcp_doff"], x["tcp_has_ts"], x["tcp_opt_len"]) for x in r} == {(8, True, 12)}
        assert {x["ip_ttl"] for x in r} == {64}
        if r[0]["ip_version"] == 4:
            assert [x["ip_id"] - r[0]["ip_id"] for x in r] == list(range(DATA_SEGS))
            assert all(x["ip_df"] and x["ip_csum_ok"] for x in r)
    if name.startswith("crafted_dsa"):
        assert acks == {}
        # flow 0 (192.0.2.1) enters on switch port 1, flow 1 (192.0.2.11) on port 2
        ports = {key[2]: {cols["dsa_port"][i] for i in idx} for key, idx in data.items()}
        assert ports == {v4("192.0.2.1"): {1}, v4("192.0.2.11"): {2}}
    else:
        assert [len(v) for v in acks.values()] == [3] * len(data)
        for idx in acks.values():
            assert {cols["payload_len"][i] for i in idx} == {0}
            assert {cols["tcp_flags"][i] for i in idx} == {C.TCP_FLAG_ACK}


@pytest.mark.parametrize("name", ["crafted_gre_seq.pcap", "crafted_erspan2.pcap",
                                  "crafted_erspan3.pcap"])
def test_crafted_gre_sequence_numbers_count_up(name, decoded):
    cols = get(decoded, name)
    fwd = [i for i in range(len(cols["status"]))
           if cols["outer_ip_src"][i] == OUT4[0]]
    if name == "crafted_gre_seq.pcap":
        assert [cols["tun_seq"][i] for i in fwd] == list(range(1000, 1000 + DATA_SEGS))
    else:   # mirrored: every frame, ACKs included, goes to the collector
        assert len(fwd) == 35
        assert [cols["tun_seq"][i] for i in fwd] == list(range(1000, 1035))
    assert all(cols["tun_flags"][i] & C.GRE_SEQ for i in fwd)


def test_crafted_ip4ip6_outer_is_ipv6_with_encap_limit(decoded):
    cols = get(decoded, "crafted_ip4ip6.pcap")
    assert set(zip(cols["outer_ip_src"], cols["outer_ip_dst"])) == {OUT6, OUT6[::-1]}
    assert set(cols["outer_ip_version"]) == {6}


def test_crafted_two_interfaces_have_one_flow_each(decoded):
    cols = get(decoded, "crafted_two_ifaces.pcapng")
    by_iface = {}
    for i, iface in enumerate(cols["iface"]):
        by_iface.setdefault(iface, set()).add((cols["ip_src"][i], cols["ip_dst"][i]))
    assert by_iface == {0: {IN4, IN4[::-1]},
                        1: {(v4("192.0.2.11"), v4("192.0.2.12")),
                            (v4("192.0.2.12"), v4("192.0.2.11"))}}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_checksums_verify_once_padded_with_zeros(name, tmp_path):
    """README promise: lengths and checksums describe the full frame with a zero payload."""
    info, batch = read_capture(SAMPLES / name)
    frames = [batch.frame(i) + bytes(int(batch.wire_len[i] - batch.cap_len[i]))
              for i in range(len(batch))]
    padded = tmp_path / name
    if info.format == "pcapng":
        write_pcapng(padded, frames, batch.ts_ns.tolist(), linktypes=info.linktypes,
                     ifaces=batch.iface.tolist())
    else:
        write_pcap(padded, frames, batch.ts_ns.tolist(), linktype=int(batch.linktype[0]))
    cols = decode(padded)
    n = len(frames)
    assert cols["status"] == [S.STATUS_OK] * n
    assert cols["l4_csum_state"] == [S.CSUM_GOOD] * n
    assert all(cols["ip_csum_ok"])
    assert all(cols["tun_csum_ok"][i] for i in range(n) if cols["tun_type"][i])
    assert all(cols["outer_ip_csum_ok"][i] for i in range(n) if cols["outer_ip_version"][i])


# --- real captures -----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(REAL))
def test_real_capture_decodes_and_has_wire_sized_tcp(name, decoded):
    encap, mss, syns = REAL[name]
    info, batch = read_capture(SAMPLES / name)
    cols = get(decoded, name)
    n = len(batch)
    assert n > 1000
    assert info.snaplen == SNAPLEN and info.linktypes == [C.LINKTYPE_ETHERNET]
    assert cols["status"] == [S.STATUS_OK] * n
    assert set(cols["encap"]) == {encap}
    assert batch.ts_ns.tolist() == sorted(batch.ts_ns.tolist())
    # sender TSO/GSO off: nothing above the 1500 MTU, and most data segments are MSS-sized
    assert max(batch.wire_len.tolist()) <= 1514
    assert max(cols["payload_len"]) == mss
    assert cols["payload_len"].count(mss) > 500
    syn = [i for i in range(n) if cols["tcp_flags"][i] & 0x1FF == C.TCP_FLAG_SYN]
    assert len(syn) == syns
    assert {cols["dport"][i] for i in syn} == {SERVER_PORT}
    # the capture starts with the handshake of the control connection
    assert syn[0] == 0 or all(cols["payload_len"][i] == 0 for i in range(syn[0]))
    assert {cols["tcp_mss"][i] for i in syn} == {mss + 12}
    if name == "real_vxlan.pcap":
        assert set(cols["tun_type"]) == {C.TUN_VXLAN}
        assert set(cols["tun_key"]) == {4242 << 8}
        assert set(cols["outer_dport"]) == {C.VXLAN_PORT}
        assert set(cols["inner_eth_src"]) | set(cols["inner_eth_dst"]) == \
            {0x020000004201, 0x020000004202}


# --- the generators ----------------------------------------------------------------------

def _load_script(name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, SAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod    # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_make_crafted_reproduces_the_committed_files(tmp_path):
    """The crafted captures are deterministic: regenerating gives the same bytes."""
    mk = _load_script("make_crafted")
    assert mk.main(["-o", str(tmp_path)]) == 0
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(n for n in CRAFTED)
    for n in made:
        assert (tmp_path / n).read_bytes() == (SAMPLES / n).read_bytes(), n


def _can_record() -> str | None:
    import os
    import shutil
    if os.geteuid() != 0:
        return "needs root (ip netns, veth, tcpdump)"
    missing = [t for t in ("ip", "iperf3", "tcpdump", "ethtool") if shutil.which(t) is None]
    return f"missing tools: {', '.join(missing)}" if missing else None


@pytest.mark.skipif(_can_record() is not None, reason=str(_can_record()))
def test_make_real_records_a_fresh_ipv4_capture(tmp_path):
    """The recording script still works here: netns + veth + iperf3 + tcpdump, cleaned up."""
    import subprocess
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    mk = _load_script("make_real")
    assert mk.main(["-o", str(tmp_path), "real_ipv4"]) == 0
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    # its namespaces removed (another test may have namespaces of its own meanwhile:
    # the suite runs on several workers)
    new = set(after.split()) - set(before.split())
    assert not [n for n in new if n.startswith(("gropcap-snd-", "gropcap-rcv-"))], new
    info, batch = read_capture(tmp_path / "real_ipv4.pcap")
    cols = reference.decode_batch(batch).to_pydict()
    n = len(batch)
    assert n > 200 and info.snaplen == SNAPLEN
    assert cols["status"] == [S.STATUS_OK] * n
    assert max(batch.wire_len.tolist()) <= 1514
    assert cols["payload_len"].count(1448) > 100
    assert sum(1 for f in cols["tcp_flags"] if f & 0x1FF == C.TCP_FLAG_SYN) == 2
