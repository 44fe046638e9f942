"""Reference decoder on damaged input: truncation at every byte, random bytes, odd lengths.

The contract: one row per record, a valid status, never an exception, and the fields decoded
before the damage are kept.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap import constants as C
from gropcap.decode import schema as S
from gropcap.decode.options import DecodeOptions
from gropcap.decode.reference import decode_batch, decode_frame
from tests.craft import (dsa_tag, erspan3, eth, eth_with_tag, ext_frag, ext_opts, geneve, gre,
                         ipv4, ipv6, make_batch, tcp, tcp_ts, udp, vxlan)

A4, B4 = "10.1.2.3", "10.4.5.6"
A6, B6 = "2001:db8::1", "2001:db8::2"
PAY = bytes(range(64))
OPTS = DecodeOptions(gue_ports=(6080,), fou_ports=((5555, 4),), dsa_tag=None)


def _seg():
    return tcp(1000, 80, seq=7, options=tcp_ts(1, 2), payload=PAY)


TUNNELLED = {
    "vlan_ipv6_gre_eth_ipv4_tcp": (1, eth(ipv6("2001:db8:ff::1", "2001:db8:ff::2", 47,
                                               gre(C.ETH_P_TEB, eth(ipv4(A4, B4, 6, _seg())),
                                                   key=9, seq=3)),
                                          etype=0x86DD, vlans=[(0x88A8, 5), (0x8100, 6)])),
    "vxlan": (1, eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                          udp(1, 4789, vxlan(eth(ipv4(A4, B4, 6, _seg())), 77))))),
    "geneve_opts_ipv6": (1, eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                                     udp(1, 6081, geneve(eth(ipv6(A6, B6, 6, _seg()),
                                                             etype=0x86DD), 5,
                                                         options=bytes(8)))))),
    "erspan3_o": (1, eth(ipv4("198.51.100.1", "198.51.100.2", 47,
                              gre(C.ETH_P_ERSPAN2, erspan3(eth(ipv4(A4, B4, 6, _seg())), 9,
                                                           o_bit=True), seq=1)))),
    "edsa_ipv6_ext": (C.LINKTYPE_DSA_TAG_EDSA,
                      eth_with_tag(ipv6(A6, B6, 6, _seg(),
                                        ext=ext_opts(44, 16) + ext_frag(6, 0, False),
                                        first_nh=0),
                                   struct.pack("!HH", 0xDADA, 0) + dsa_tag(3), etype=0x86DD)),
}


def _header_end(row: dict) -> int:
    return row["l4_offset"] + row["tcp_doff"] * 4


# Columns whose value legitimately depends on how much payload was captured.
_CAPTURE_DEPENDENT = {"cap_len", "l4_csum_state", "tun_csum_ok"}


@pytest.mark.parametrize("name", sorted(TUNNELLED))
def test_truncated_at_every_offset(name):
    lt, frame = TUNNELLED[name]
    full = decode_frame(frame, lt, len(frame), OPTS)
    assert full["status"] == S.STATUS_OK and full["payload_len"] == len(PAY)
    end = _header_end(full)
    for cut in range(len(frame) + 1):
        row = decode_frame(frame[:cut], lt, len(frame), OPTS)
        if cut < end:
            assert row["status"] == S.STATUS_TRUNCATED, (name, cut)
            # what was decoded is a prefix of the full decode
            assert full["encap"].startswith(row["encap"]), (name, cut, row["encap"])
        else:
            assert row["status"] == S.STATUS_OK, (name, cut)
            for col, v in full.items():
                if col not in _CAPTURE_DEPENDENT:
                    assert row[col] == v, (name, cut, col)
    # the whole sweep through decode_batch: one row per record
    frames = [frame[:cut] for cut in range(len(frame) + 1)]
    out = decode_batch(make_batch(frames, linktype=lt,
                                  wire_lens=[len(frame)] * len(frames)), OPTS)
    assert out.num_rows == len(frames)
    assert out.schema.equals(S.PACKET_SCHEMA)


def test_truncated_keeps_outer_fields():
    lt, frame = TUNNELLED["vxlan"]
    row = decode_frame(frame[:14 + 20 + 8 + 8 + 10], lt, len(frame))
    assert row["status"] == S.STATUS_TRUNCATED
    assert row["tun_type"] == C.TUN_VXLAN and row["tun_key"] == 77 << 8
    assert row["outer_dport"] == 4789 and row["outer_ip_version"] == 4
    assert row["ip_version"] == 0       # inner IP not reached: cleared, not the outer one
    assert row["encap"] == "eth/ipv4/udp/vxlan/eth"


_LINKTYPES = st.sampled_from(list(C.SUPPORTED_LINKTYPES) + [2, 147, 65535])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200), lt=_LINKTYPES, extra=st.integers(-50, 70000),
       dsa=st.sampled_from([None, "dsa", "edsa", "brcm", "brcm-prepend"]))
def test_garbage_bytes_never_raise(data, lt, extra, dsa):
    opts = DecodeOptions(dsa_tag=dsa, gue_ports=(6080,), fou_ports=((5555, 41),))
    wire = max(0, len(data) + extra)
    row = decode_frame(data, lt, wire, opts)
    assert row["status"] in S.STATUS_NAMES
    assert row["cap_len"] == len(data)
    out = decode_batch(make_batch([data], linktype=lt, wire_lens=[wire]), opts)
    assert out.num_rows == 1 and out.column("status")[0].as_py() == row["status"]


# Valid headers followed by mutated bytes reach deep decoder paths that pure noise misses.
_SEEDS = [f for _, f in TUNNELLED.values()] + [
    eth(ipv4(A4, B4, 17, udp(1, 6080, ipv4(A4, B4, 6, _seg())))),
    eth(ipv4(A4, B4, 17, udp(1, 5555, ipv6(A6, B6, 6, _seg())))),
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(_SEEDS))), pos=st.integers(0, 200),
       val=st.integers(0, 255), cut=st.integers(0, 300))
def test_mutated_headers_never_raise(seed, pos, val, cut):
    f = bytearray(_SEEDS[seed])
    f[pos % len(f)] = val
    f = bytes(f[:cut])
    lt = C.LINKTYPE_DSA_TAG_EDSA if seed == 4 else 1
    row = decode_frame(f, lt, len(_SEEDS[seed]), DecodeOptions(gue_ports=(6080,),
                                                              fou_ports=((5555, 41),)))
    assert row["status"] in S.STATUS_NAMES
    out = decode_batch(make_batch([f], linktype=lt, wire_lens=[len(_SEEDS[seed])]))
    assert out.num_rows == 1


def test_wire_len_below_cap_len_uses_cap_len():
    f = eth(ipv4(A4, B4, 6, _seg()))
    row = decode_frame(f, 1, 10)
    assert row["status"] == S.STATUS_OK and row["wire_len"] == 10


def test_huge_ipv6_extension_chain_fits_columns():
    # BIG TCP style IPv6 (payload_len 0) with 40 x 2 KiB destination options: > 64 KiB of
    # extension headers cannot be recorded in uint16 columns -> BAD_IP_HEADER, no crash.
    chain = b"".join(bytes([60, 255]) + bytes(2046) for _ in range(40))
    chain = chain[:-2048] + bytes([6, 255]) + bytes(2046)
    f = eth(ipv6(A6, B6, 6, _seg(), ext=chain, first_nh=60, plen=0, l4_csum="keep"),
            etype=0x86DD)
    row = decode_frame(f, 1, len(f))
    assert row["status"] == S.STATUS_BAD_IP_HEADER
    assert row["ip_hdr_len"] <= 0xFFFF
    assert decode_batch(make_batch([f])).num_rows == 1
