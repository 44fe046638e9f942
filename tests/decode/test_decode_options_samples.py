"""DecodeOptions validation, and the reference decoder over the bundled sample captures."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from gropcap import constants as C
from gropcap.decode import schema as S
from gropcap.decode.digest import fnv1a64, fold16, inet_checksum, ones_sum
from gropcap.decode.options import DecodeOptions
from gropcap.decode.reference import decode_batch
from gropcap.errors import ConfigError

from where import TESTS

SAMPLES = Path(TESTS).parent / "sample_pcaps"


# --- options ----------------------------------------------------------------------------

def test_defaults():
    o = DecodeOptions()
    assert o.vxlan_ports == (4789,) and o.vxlan_gpe_ports == (4790,)
    assert o.geneve_ports == (6081,) and o.fou_ports == () and o.gue_ports == ()
    assert o.dsa_tag is None and o.dsa_kind == C.DSA_NONE
    assert o.udp_tunnel(4789) == (C.TUN_VXLAN, 0) and o.udp_tunnel(53) == (C.TUN_NONE, 0)


def test_lists_normalised_and_hashable():
    o = DecodeOptions(vxlan_ports=[8472, 4789], fou_ports=[[5555, 4]], dsa_tag="edsa")
    assert o.vxlan_ports == (8472, 4789) and o.fou_ports == ((5555, 4),)
    assert o.dsa_kind == C.DSA_EDSA and o.udp_tunnel(5555) == (C.TUN_FOU, 4)
    assert hash(o) == hash(DecodeOptions(vxlan_ports=(8472, 4789), fou_ports=((5555, 4),),
                                         dsa_tag="edsa"))


@pytest.mark.parametrize("kw", [
    dict(vxlan_ports=(0,)), dict(geneve_ports=(70000,)), dict(gue_ports=("x",)),
    dict(fou_ports=((5555, 17),)), dict(fou_ports=(5555,)), dict(dsa_tag="ocelot"),
    dict(vxlan_ports=(6081,)),                      # also the default Geneve port
])
def test_invalid_options_raise_config_error(kw):
    with pytest.raises(ConfigError):
        DecodeOptions(**kw)


# --- digest / checksum helpers ----------------------------------------------------------

def test_fnv1a64_known_vectors():
    # FNV-1a 64 test vectors (draft-eastlake-fnv test suite)
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_inet_checksum_rfc1071_example():
    data = bytes([0x00, 0x01, 0xF2, 0x03, 0xF4, 0xF5, 0xF6, 0xF7])   # RFC 1071 3.
    assert fold16(ones_sum(data)) == 0xDDF2
    assert inet_checksum(data) == 0x220D
    assert fold16(ones_sum(b"\x01")) == 0x0100                      # odd byte padded


# --- sample captures --------------------------------------------------------------------

def _read(name):
    reader = pytest.importorskip("gropcap.capture.reader")
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"{name} not bundled")
    return reader.read_capture(str(path))[1]


@pytest.mark.parametrize("name", ["real_ipv4.pcap", "real_ipv6.pcap", "real_vxlan.pcap"])
def test_real_sender_captures_decode_ok_with_partial_checksums(name):
    """tcpdump on a Linux sender with TX checksum offload: every TCP checksum is the
    pseudo-header sum (CHECKSUM_PARTIAL), and every record decodes although cut at 128."""
    batch = _read(name)
    t = decode_batch(batch).to_pydict()
    assert len(t["status"]) == len(batch)
    assert set(t["status"]) == {S.STATUS_OK}
    assert set(t["l4_csum_state"]) == {S.CSUM_PARTIAL}
    # payload from IP lengths, not from the 128-byte snap
    full = [p for p, w in zip(t["payload_len"], t["wire_len"]) if w >= 1500]
    assert full and max(t["cap_len"]) == 128
    mss = {"real_ipv4.pcap": 1448, "real_ipv6.pcap": 1428, "real_vxlan.pcap": 1398}[name]
    assert collections.Counter(t["payload_len"]).most_common(1)[0][0] == mss
    if name == "real_vxlan.pcap":
        assert set(t["tun_type"]) == {C.TUN_VXLAN}
        assert {k >> 8 for k in t["tun_key"]} == {4242}


@pytest.mark.parametrize("name,encap,tun_type", [
    ("crafted_gre_key.pcap", "eth/ipv4/gre/ipv4/tcp", C.TUN_GRE),
    ("crafted_gretap.pcap", "eth/ipv4/gre/eth/ipv4/tcp", C.TUN_GRE_TEB),
    ("crafted_erspan2.pcap", "eth/ipv4/gre/erspan2/eth/ipv4/tcp", C.TUN_ERSPAN2),
    ("crafted_erspan3.pcap", "eth/ipv4/gre/erspan3/eth/ipv4/tcp", C.TUN_ERSPAN3),
    ("crafted_ip6gre.pcap", "eth/ipv6/gre/ipv4/tcp", C.TUN_GRE),
    ("crafted_sit.pcap", "eth/ipv4/ipv6/tcp", C.TUN_SIT),
    ("crafted_ip6ip6.pcap", "eth/ipv6/ipv6/tcp", C.TUN_IP6IP6),
    ("crafted_ip4ip6.pcap", "eth/ipv6/ipv4/tcp", C.TUN_IP4IP6),
    ("crafted_geneve.pcap", "eth/ipv4/udp/geneve/eth/ipv4/tcp", C.TUN_GENEVE),
    ("crafted_vxlan_gpe.pcap", "eth/ipv4/udp/vxlan-gpe/ipv4/tcp", C.TUN_VXLAN_GPE),
    ("crafted_qinq.pcap", "eth/vlan/vlan/ipv4/tcp", C.TUN_NONE),
    ("crafted_sll2.pcap", "sll2/ipv6/tcp", C.TUN_NONE),
    ("crafted_dsa_edsa.pcap", "eth/dsa/ipv4/tcp", C.TUN_NONE),
])
def test_crafted_samples(name, encap, tun_type):
    batch = _read(name)
    t = decode_batch(batch).to_pydict()
    assert set(t["status"]) == {S.STATUS_OK}
    assert set(t["encap"]) == {encap}
    assert set(t["tun_type"]) == {tun_type}
    assert set(t["sport"]) | set(t["dport"]) >= {5201}
    # 700-byte last segment of the crafted bulk flow (sample_pcaps/README.md)
    assert 700 in t["payload_len"]
    if name == "crafted_gre_key.pcap":
        assert set(t["tun_key"]) == {0x12345}
    if name.startswith("crafted_erspan"):
        assert set(t["erspan_session"]) == {0x155}
    if name == "crafted_dsa_edsa.pcap":
        assert set(t["dsa_port"]) == {1, 2}
