"""fast decoder == reference decoder, bit for bit (gropcap.decode.fast vs .reference).

Sample captures, a corpus of every encapsulation built with tests/craft.py, hypothesis-
generated stacks, and mutations of the corpus (truncation at every length, bit flips,
16-bit fields forced to 0 / 1 / 0xFFFF, odd wire lengths). Every comparison is of whole
Arrow batches (all columns, the encap dictionary included).
"""

from __future__ import annotations

import glob
import os
import random
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap import constants as C
from gropcap.capture import read_capture
from gropcap.decode import fast as F
from gropcap.decode import reference as R
from gropcap.decode import schema as S
from gropcap.decode.options import DecodeOptions
from gropcap.errors import DecodeError
from tests import craft as K

from where import ROOT

SAMPLES = sorted(glob.glob(os.path.join(ROOT, "sample_pcaps", "*.pcap*")))

FOU_IP, FOU_IP6, FOU_GRE, GUE_PORT = 5555, 5556, 5557, 6080
OPTS = {
    "default": DecodeOptions(),
    "udp_tunnels": DecodeOptions(fou_ports=((FOU_IP, 4), (FOU_IP6, 41), (FOU_GRE, 47)),
                                 gue_ports=(GUE_PORT,), vxlan_ports=(4789, 8472)),
    "brcm": DecodeOptions(dsa_tag="brcm"),
    "brcm-prepend": DecodeOptions(dsa_tag="brcm-prepend"),
    "dsa": DecodeOptions(dsa_tag="dsa"),
    "edsa": DecodeOptions(dsa_tag="edsa"),
}


def assert_same(batch, options=F.DEFAULT_OPTIONS, file_index=0):
    """Decode ``batch`` with both decoders; fail naming the first differing cell."""
    ref = R.decode_batch(batch, options, file_index=file_index)
    got = F.decode_batch(batch, options, file_index=file_index)
    assert got.schema.equals(S.PACKET_SCHEMA)
    if got.equals(ref):
        return ref
    for name in S.PACKET_COLUMNS:
        a, b = ref.column(name).to_pylist(), got.column(name).to_pylist()
        if a != b:
            i = next(k for k, (x, y) in enumerate(zip(a, b)) if x != y)
            raise AssertionError(
                f"column {name} row {i}: reference {a[i]!r} fast {b[i]!r}; frame "
                f"{batch.frame(i).hex()} linktype {batch.linktype[i]} wire "
                f"{batch.wire_len[i]}")
    # same values, different dictionary layout
    assert got.column("encap").dictionary.equals(ref.column("encap").dictionary)
    raise AssertionError("batches differ outside the compared values")


# --- a corpus of every encapsulation ----------------------------------------------------

A4, B4, A6, B6 = "10.0.0.1", "10.0.0.2", "2001:db8::1", "2001:db8::2"


def _tcp(seq=1000, payload=b"x" * 40, options=K.tcp_ts(7, 9), flags=C.TCP_FLAG_ACK):
    return K.tcp(40000, 5201, seq=seq, ack=77, flags=flags, options=options, payload=payload)


def _inner4(proto=6, l4=None, **kw):
    return K.ipv4("192.168.1.1", "192.168.1.2", proto, l4 if l4 is not None else _tcp(), **kw)


def _inner6(nh=6, l4=None, **kw):
    return K.ipv6("fd00::1", "fd00::2", nh, l4 if l4 is not None else _tcp(), **kw)


def _eth(payload: bytes, etype: int | None = None, **kw) -> bytes:
    """craft.eth with the EtherType taken from the IP version when not given."""
    if etype is None:
        etype = C.ETH_P_IPV6 if payload[:1] and payload[0] >> 4 == 6 else C.ETH_P_IP
    return K.eth(payload, etype=etype, **kw)


def corpus() -> list[tuple[str, bytes, int, int]]:
    """(options key, frame, linktype, wire_len) for every layer the decoders know."""
    out = []

    def add(frame, lt=1, opts="default", wire=None):
        out.append((opts, frame, lt, len(frame) if wire is None else wire))

    t = _tcp()
    sack = b"\x01\x01\x05\x12" + bytes(16) + b"\x01\x01\x08\x0a" + bytes(8)
    syn_opts = b"\x02\x04\x05\xb4\x04\x02\x08\x0a" + bytes(8) + b"\x01\x03\x03\x07"
    add(_eth(K.ipv4(A4, B4, 6, t)))
    add(_eth(K.ipv4(A4, B4, 6, _tcp(options=sack), l4_csum="bad")))
    add(_eth(K.ipv4(A4, B4, 6, _tcp(options=syn_opts, flags=0x1C2, payload=b""),
                     l4_csum="partial", options=b"\x94\x04\x00\x00")))
    add(_eth(K.ipv4(A4, B4, 17, K.udp(1234, 53, b"q" * 30), l4_csum="zero")))
    add(_eth(K.ipv4(A4, B4, 17, K.udp(1234, 53, b"q" * 31))))
    add(_eth(K.ipv4(A4, B4, 1, b"\x08\x00" + bytes(30))))
    add(_eth(K.ipv4(A4, B4, 132, bytes(30))))
    add(_eth(K.ipv4(A4, B4, 6, t, mf=True, df=False)))
    add(_eth(K.ipv4(A4, B4, 6, b"z" * 40, frag_off=10, df=False)))
    add(_eth(K.ipv4(A4, B4, 17, K.udp(1, 4789, bytes(40)), mf=True, df=False)))
    add(_eth(K.ipv4(A4, B4, 6, t, tot_len=0)), wire=70000)           # BIG TCP
    add(_eth(K.ipv4(A4, B4, 6, t)), wire=9000)
    add(_eth(K.ipv4(A4, B4, 6, t), pad=True)[:40], wire=80)
    add(_eth(K.ipv6(A6, B6, 6, t)))
    add(_eth(K.ipv6(A6, B6, 6, t, plen=0)), wire=70100)
    add(_eth(K.ipv6(A6, B6, 17, K.udp(5, 6, b"abc"))))
    add(_eth(K.ipv6(A6, B6, 58, b"\x80\x00" + bytes(20))))
    add(_eth(K.ipv6(A6, B6, 6, t, ext=K.ext_opts(60) + K.ext_opts(6, 16),
                     first_nh=0)))
    add(_eth(K.ipv6(A6, B6, 6, t, ext=K.ext_routing(6, ["fd00::9", "fd00::8"]),
                     first_nh=43, pseudo_dst="fd00::9")))
    add(_eth(K.ipv6(A6, B6, 6, t, ext=K.ext_routing(6, ["fd00::9"], rtype=0), first_nh=43,
                     pseudo_dst="fd00::9")))
    add(_eth(K.ipv6(A6, B6, 6, t, ext=K.ext_frag(6, more=True), first_nh=44)))
    add(_eth(K.ipv6(A6, B6, 6, t, ext=K.ext_frag(6, offset=3), first_nh=44)))
    add(_eth(K.ipv6(A6, B6, 51, bytes(24))))
    add(_eth(K.ipv4(A4, B4, 6, t), vlans=[(C.ETH_P_8021Q, 5)]))
    add(_eth(K.ipv6(A6, B6, 6, t), etype=C.ETH_P_IPV6,
              vlans=[(C.ETH_P_8021AD, 7), (C.ETH_P_8021Q, 9), (C.ETH_P_QINQ1, 3)]))
    add(_eth(b"\x00" * 28, etype=C.ETH_P_ARP))
    # tunnels over IPv4 and IPv6 carriers
    for outer in ("4", "6"):
        def ip(proto, payload, outer=outer):
            return K.ipv4(A4, B4, proto, payload) if outer == "4" else K.ipv6(A6, B6, proto,
                                                                               payload)
        et = C.ETH_P_IP if outer == "4" else C.ETH_P_IPV6
        add(_eth(ip(47, K.gre(C.ETH_P_IP, _inner4())), etype=et))
        add(_eth(ip(47, K.gre(C.ETH_P_IPV6, _inner6(), key=42, seq=7, csum=True)), etype=et))
        add(_eth(ip(47, K.gre(C.ETH_P_TEB, _eth(_inner4(), vlans=[(C.ETH_P_8021Q, 2)]),
                               key=1)), etype=et))
        add(_eth(ip(47, K.gre(C.ETH_P_ERSPAN, K.erspan2(_eth(_inner4()), 17), seq=1)),
                  etype=et))
        add(_eth(ip(47, K.gre(C.ETH_P_ERSPAN2, K.erspan3(_eth(_inner6(), etype=C.ETH_P_IPV6),
                                                          9, o_bit=True))), etype=et))
        add(_eth(ip(47, K.gre(C.ETH_P_IP, _inner4(), flags_extra=1)), etype=et))
        add(_eth(ip(4, _inner4()), etype=et))
        add(_eth(ip(41, _inner6()), etype=et))
        add(_eth(ip(17, K.udp(999, 4789, K.vxlan(_eth(_inner4()), 100))), etype=et))
        add(_eth(ip(17, K.udp(999, 4790, K.vxlan_gpe(_inner6(), 5, 2))), etype=et))
        add(_eth(ip(17, K.udp(999, 4790, K.vxlan_gpe(_eth(_inner4()), 5, 3))), etype=et))
        add(_eth(ip(17, K.udp(999, 6081, K.geneve(_eth(_inner4()), 3, options=bytes(8)))),
                  etype=et))
        add(_eth(ip(17, K.udp(999, 6081, K.geneve(_inner6(), 3, proto=C.ETH_P_IPV6))),
                  etype=et))
        add(_eth(ip(17, K.udp(999, FOU_IP, _inner4()))), opts="udp_tunnels")
        add(_eth(ip(17, K.udp(999, FOU_IP6, _inner6()))), opts="udp_tunnels")
        add(_eth(ip(17, K.udp(999, FOU_GRE, K.gre(C.ETH_P_IP, _inner4())))),
            opts="udp_tunnels")
        add(_eth(ip(17, K.udp(999, GUE_PORT, K.gue(_inner4(), 4, optional=bytes(4))))),
            opts="udp_tunnels")
        add(_eth(ip(17, K.udp(999, GUE_PORT, _inner6()))), opts="udp_tunnels")   # GUE v1
        add(_eth(ip(17, K.udp(999, 8472, K.vxlan(_eth(_inner4()), 1)))), opts="udp_tunnels")
    # nested tunnels: vxlan in gre in ipip (three deep), and too deep
    deep = _inner4()
    for _ in range(3):
        deep = K.ipv4(A4, B4, 4, deep)
    add(_eth(K.ipv4(A4, B4, 47, K.gre(C.ETH_P_IP, K.ipv4(A4, B4, 17, K.udp(
        9, 4789, K.vxlan(_eth(deep), 8)))))))
    too_deep = _inner4()
    for _ in range(C.MAX_ENCAP_DEPTH + 1):
        too_deep = K.ipv4(A4, B4, 4, too_deep)
    add(_eth(too_deep))
    # link types
    add(K.ipv4(A4, B4, 6, t), lt=C.LINKTYPE_RAW)
    add(K.ipv6(A6, B6, 6, t), lt=C.LINKTYPE_RAW_OPENBSD)
    add(K.ipv4(A4, B4, 6, t), lt=C.LINKTYPE_RAW_BSDOS)
    add(K.ipv4(A4, B4, 6, t), lt=C.LINKTYPE_IPV4)
    add(K.ipv6(A6, B6, 6, t), lt=C.LINKTYPE_IPV6)
    add(struct.pack("<I", 2) + K.ipv4(A4, B4, 6, t), lt=C.LINKTYPE_NULL)
    add(struct.pack(">I", 30) + K.ipv6(A6, B6, 6, t), lt=C.LINKTYPE_NULL)
    add(struct.pack(">I", 24) + K.ipv6(A6, B6, 6, t), lt=C.LINKTYPE_LOOP)
    add(K.sll(K.ipv4(A4, B4, 6, t)), lt=C.LINKTYPE_LINUX_SLL)
    add(K.sll(K.ipv4(A4, B4, 6, t), hatype=772), lt=C.LINKTYPE_LINUX_SLL)
    add(K.sll2(K.ipv6(A6, B6, 6, t), proto=C.ETH_P_IPV6), lt=C.LINKTYPE_LINUX_SLL2)
    add(K.ipv4(A4, B4, 6, t), lt=147)                        # unsupported link type
    # DSA tags, by link type and by option on plain Ethernet
    v4 = K.ipv4(A4, B4, 6, t)
    add(K.eth_with_tag(v4, K.brcm_tag(3)), lt=C.LINKTYPE_DSA_TAG_BRCM)
    add(K.eth_with_tag(v4, K.brcm_tag(3)), opts="brcm")
    add(K.eth_with_tag(v4, K.brcm_tag(3, opcode=1)), lt=C.LINKTYPE_DSA_TAG_BRCM)
    add(K.brcm_tag(4) + _eth(v4), lt=C.LINKTYPE_DSA_TAG_BRCM_PREPEND)
    add(K.brcm_tag(4) + _eth(v4), opts="brcm-prepend")
    dsa_plain = K.dsa_tag(5)
    dsa_vlan = K.dsa_tag(6, vlan_tci=0x1123)
    add(K.eth_with_tag(v4, dsa_plain[:2] + dsa_plain[2:])[:12] + dsa_plain
        + struct.pack("!H", C.ETH_P_IP) + v4, lt=C.LINKTYPE_DSA_TAG_DSA)
    add(_eth(v4)[:12] + dsa_vlan + struct.pack("!H", C.ETH_P_IP) + v4, opts="dsa")
    add(_eth(v4)[:12] + K.dsa_tag(1, cmd=1) + struct.pack("!H", C.ETH_P_IP) + v4,
        lt=C.LINKTYPE_DSA_TAG_DSA)
    edsa = struct.pack("!HH", C.ETH_P_EDSA, 0)
    add(_eth(v4)[:12] + edsa + dsa_vlan + struct.pack("!H", C.ETH_P_IP) + v4,
        lt=C.LINKTYPE_DSA_TAG_EDSA)
    add(_eth(v4)[:12] + edsa + dsa_plain + struct.pack("!H", C.ETH_P_IP) + v4, opts="edsa")
    add(_eth(v4)[:12] + b"\xda\xdb\x00\x00" + dsa_plain + struct.pack("!H", C.ETH_P_IP) + v4,
        opts="edsa")
    return out


def batches_by_option(items):
    """Group (opts key, frame, linktype, wire) items into one RecordBatch per options."""
    groups: dict[str, list] = {}
    for key, frame, lt, wire in items:
        groups.setdefault(key, []).append((frame, lt, wire))
    for key, rows in groups.items():
        yield key, K.make_batch([r[0] for r in rows], linktype=[r[1] for r in rows],
                                wire_lens=[r[2] for r in rows])


CORPUS = corpus()


# --- tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_samples_identical(path):
    _, batch = read_capture(path)
    assert len(batch) > 0
    assert_same(batch, file_index=3)
    if "dsa" not in path:
        # a plain Ethernet capture read as if taken on a DSA conduit: mostly BAD_L2/NOT_IP
        assert_same(batch, DecodeOptions(dsa_tag="edsa"))


def test_corpus_identical_and_decoded():
    seen_status, seen_tun, seen_layers = set(), set(), set()
    for key, batch in batches_by_option(CORPUS):
        ref = assert_same(batch, OPTS[key])
        seen_status |= set(ref.column("status").to_pylist())
        seen_tun |= set(ref.column("tun_type").to_pylist())
        for e in ref.column("encap").to_pylist():
            seen_layers |= set(e.split("/"))
    # the corpus really exercises every tunnel type and most statuses
    assert seen_tun == set(C.TUN_NAMES), sorted(set(C.TUN_NAMES) - seen_tun)
    assert {S.STATUS_OK, S.STATUS_NOT_IP, S.STATUS_UNSUPPORTED_ENCAP, S.STATUS_ENCAP_TOO_DEEP,
            S.STATUS_UNSUPPORTED_LINKTYPE, S.STATUS_BAD_L2_HEADER} <= seen_status
    for name in ("null", "loop", "sll", "sll2", "dsa", "vlan", "frag", "icmp", "icmpv6",
                 "erspan2", "erspan3", "vxlan-gpe", "geneve", "fou", "gue", "ipproto-132"):
        assert name in seen_layers, name


def test_truncation_at_every_length():
    for key, frame, lt, wire in CORPUS:
        frames = [frame[:k] for k in range(len(frame) + 1)]
        batch = K.make_batch(frames, linktype=lt, wire_lens=[wire] * len(frames))
        ref = assert_same(batch, OPTS[key])
        assert S.STATUS_TRUNCATED in ref.column("status").to_pylist() or lt == 147


def test_length_fields_forced_to_0_1_ffff():
    for key, frame, lt, wire in CORPUS:
        frames = []
        for pos in range(0, min(len(frame), 160) - 1):
            for v in (0, 1, 0xFFFF):
                m = bytearray(frame)
                m[pos:pos + 2] = struct.pack("!H", v)
                frames.append(bytes(m))
        assert_same(K.make_batch(frames, linktype=lt, wire_lens=[wire] * len(frames)),
                     OPTS[key])


def test_bit_flips():
    rng = random.Random(1234)
    for key, frame, lt, wire in CORPUS:
        frames = []
        for bit in range(min(len(frame), 120) * 8):       # every single-bit flip up front
            m = bytearray(frame)
            m[bit // 8] ^= 1 << (bit % 8)
            frames.append(bytes(m))
        for _ in range(100):                               # random multi-bit damage
            m = bytearray(frame)
            for _ in range(rng.randint(2, 6)):
                m[rng.randrange(len(m))] ^= 1 << rng.randrange(8)
            frames.append(bytes(m[:rng.randint(1, len(m))]))
        assert_same(K.make_batch(frames, linktype=lt, wire_lens=[wire] * len(frames)),
                     OPTS[key])


def test_wire_len_below_and_above_cap_len():
    frames, wires = [], []
    for key, frame, lt, wire in CORPUS:
        if key != "default" or lt != 1:
            continue
        for w in (0, 1, len(frame) - 1, 65535, 65536 + 200, 0xFFFFFFFF):
            frames.append(frame)
            wires.append(w)
    assert_same(K.make_batch(frames, wire_lens=wires))


def test_absurd_vlan_stack_falls_back_to_reference_rows():
    # more layers than the kernel's layer list: rows come from the reference decoder
    tags = [(C.ETH_P_8021Q, k) for k in range(100)]
    frames = [K.eth(K.ipv4(A4, B4, 6, _tcp()), vlans=tags), K.eth(K.ipv4(A4, B4, 6, _tcp())),
              K.eth(b"", vlans=tags)[:-2] + b"\x81\x00"]
    ref = assert_same(K.make_batch(frames))
    assert ref.column("encap")[0].as_py().count("vlan") == 100


def test_many_distinct_encaps_grow_the_dictionary():
    frames = [K.eth(K.ipv4(A4, B4, p, bytes(8))) for p in range(256)] * 6
    ref = assert_same(K.make_batch(frames))
    assert len(ref.column("encap").dictionary) > 200


def test_empty_batch_and_bad_batch():
    ref = assert_same(K.make_batch([]))
    assert ref.num_rows == 0
    b = K.make_batch([bytes(60)])
    fields = b._asdict()
    fields["cap_len"] = np.zeros(2, np.uint32)     # (RecordBatch._replace trips on __len__)
    with pytest.raises(DecodeError, match="cap_len"):
        F.decode_batch(type(b)(**fields))


@pytest.mark.parametrize("first", [0, 5, 2500])
def test_vlan_dsa_tunnel_columns_from_their_first_frame_on(first):
    """The columns of VLAN, DSA and tunnel headers are left alone until the first frame
    of the batch that has one (here at ``first``, in a later chunk than the start), then
    are cleared for every record before it: same rows as the reference either way."""
    plain = K.eth(K.ipv4(A4, B4, 6, _tcp()))
    vlan = K.eth(K.ipv4(A4, B4, 6, _tcp()), vlans=[(C.ETH_P_8021Q, 7), (C.ETH_P_8021AD, 9)])
    tun = K.eth(K.ipv4(A4, B4, 17, K.udp(5, 4789, K.vxlan(K.eth(K.ipv6(A6, B6, 6, _tcp())),
                                                         vni=42))))
    frames = [plain] * first + [vlan] + [plain] * 1500 + [tun] + [plain] * 10
    F.decode_batch(K.make_batch([tun, vlan] * 2000))     # leaves recycled memory dirty
    assert_same(K.make_batch(frames))
    assert_same(K.make_batch([plain] * first + [tun] + [plain] * 1500))
    plain_only = assert_same(K.make_batch([plain] * (first + 3)))
    assert set(plain_only.column("dsa_port").to_pylist()) == {-1}
    assert set(plain_only.column("outer_ip_src").to_pylist()) == {bytes(16)}
    dsa = K.make_batch([plain] * first + [plain[:12] + bytes(4) + plain[12:]] + [plain] * 9)
    assert_same(dsa, DecodeOptions(dsa_tag="brcm"))


def test_output_memory_is_reused_only_once_released():
    """decode_batch recycles its output memory: a batch still referred to is never
    overwritten by later batches; a dropped one's memory is handed out again."""
    from gropcap.decode import _fast_kernels as FK
    frames_a = [K.eth(K.ipv4(A4, B4, 6, _tcp())) for _ in range(300)]
    frames_b = [K.eth(K.ipv6(A6, B6, 17, K.udp(1, 2, b"x")), vlans=[(C.ETH_P_8021Q, 7)])
                for _ in range(300)]
    batch_a, batch_b = K.make_batch(frames_a), K.make_batch(frames_b)
    expect_a = R.decode_batch(batch_a)
    kept = [F.decode_batch(batch_a) for _ in range(4)]     # more than the cache keeps
    for _ in range(4):
        F.decode_batch(batch_b)                              # dropped at once
    for out in kept:
        assert out.equals(expect_a)
    del kept, out
    slabs = [id(FK.alloc_out(300)[0].u8.base) for _ in range(3)]
    assert len(set(slabs)) == 1 and slabs[0] in map(id, FK._SLABS.slabs)
    assert F.decode_batch(batch_b).equals(R.decode_batch(batch_b))


# --- generated stacks -------------------------------------------------------------------

@st.composite
def stacks(draw):
    """A random valid frame (any encapsulation), optionally damaged."""
    l4 = draw(st.sampled_from(["tcp", "udp", "icmp", "other"]))
    payload = draw(st.binary(max_size=64))
    if l4 == "tcp":
        opts = draw(st.sampled_from([b"", K.tcp_ts(1, 2), b"\x02\x04\x05\xb4",
                                     b"\x01\x03\x03\x0e", b"\x05\x0a" + bytes(8),
                                     draw(st.binary(max_size=40))]))
        seg = K.tcp(draw(st.integers(0, 65535)), draw(st.integers(0, 65535)),
                    seq=draw(st.integers(0, 2**32 - 1)), flags=draw(st.integers(0, 0x1FF)),
                    options=opts[:40], payload=payload)
        proto = 6
    elif l4 == "udp":
        seg, proto = K.udp(draw(st.integers(1, 65535)), draw(st.integers(1, 65535)), payload), 17
    elif l4 == "icmp":
        seg, proto = b"\x08\x00" + payload, 1
    else:
        seg, proto = payload, draw(st.integers(0, 255))
    v6 = draw(st.booleans())
    csum = draw(st.sampled_from(["good", "bad", "partial", "zero"]))
    if v6:
        if proto == 1:
            proto = 58
        ext = draw(st.sampled_from(["", "hop", "frag", "rt"]))
        if ext == "hop":
            pkt = K.ipv6(A6, B6, proto, seg, ext=K.ext_opts(proto), first_nh=0, l4_csum=csum)
        elif ext == "frag":
            pkt = K.ipv6(A6, B6, proto, seg, ext=K.ext_frag(proto, draw(st.integers(0, 3)),
                                                           draw(st.booleans())), first_nh=44)
        elif ext == "rt":
            pkt = K.ipv6(A6, B6, proto, seg, ext=K.ext_routing(proto, ["fd00::7"]),
                         first_nh=43, pseudo_dst="fd00::7", l4_csum=csum)
        else:
            pkt = K.ipv6(A6, B6, proto, seg, tc=draw(st.integers(0, 255)),
                         flow=draw(st.integers(0, 0xFFFFF)), l4_csum=csum)
    else:
        pkt = K.ipv4(A4, B4, proto, seg, ttl=draw(st.integers(0, 255)),
                     ident=draw(st.integers(0, 65535)), df=draw(st.booleans()),
                     options=draw(st.sampled_from([b"", b"\x01\x01\x01\x00"])), l4_csum=csum)
    et = C.ETH_P_IPV6 if v6 else C.ETH_P_IP
    tun = draw(st.sampled_from(["none", "gre", "gretap", "erspan2", "erspan3", "ipip", "vxlan",
                                "gpe", "geneve", "fou", "gue"]))
    inner_eth = K.eth(pkt, etype=et)
    if tun == "gre":
        body, oproto = K.gre(et, pkt, key=draw(st.none() | st.integers(0, 2**32 - 1)),
                             csum=draw(st.booleans())), 47
    elif tun == "gretap":
        body, oproto = K.gre(C.ETH_P_TEB, inner_eth), 47
    elif tun == "erspan2":
        body, oproto = K.gre(C.ETH_P_ERSPAN, K.erspan2(inner_eth, 3), seq=5), 47
    elif tun == "erspan3":
        body, oproto = K.gre(C.ETH_P_ERSPAN2, K.erspan3(inner_eth, 3,
                                                        o_bit=draw(st.booleans()))), 47
    elif tun == "ipip":
        body, oproto = pkt, (41 if v6 else 4)
    elif tun == "vxlan":
        body, oproto = K.udp(7, 4789, K.vxlan(inner_eth, draw(st.integers(0, 2**24 - 1)))), 17
    elif tun == "gpe":
        body, oproto = K.udp(7, 4790, K.vxlan_gpe(pkt, 1, 2 if v6 else 1)), 17
    elif tun == "geneve":
        body, oproto = K.udp(7, 6081, K.geneve(inner_eth, 9,
                                               options=draw(st.sampled_from([b"", bytes(8)])))), 17
    elif tun == "fou":
        body, oproto = K.udp(7, FOU_IP6 if v6 else FOU_IP, pkt), 17
    elif tun == "gue":
        body, oproto = K.udp(7, GUE_PORT, K.gue(pkt, 41 if v6 else 4)), 17
    if tun == "none":
        l3, oet = pkt, et
    elif draw(st.booleans()):
        l3, oet = K.ipv6("2001:db8::a", "2001:db8::b", oproto, body), C.ETH_P_IPV6
    else:
        l3, oet = K.ipv4("172.16.0.1", "172.16.0.2", oproto, body), C.ETH_P_IP
    link = draw(st.sampled_from(["eth", "vlan", "qinq", "sll", "sll2", "raw", "null"]))
    if link == "eth":
        frame, lt = K.eth(l3, etype=oet), 1
    elif link == "vlan":
        frame, lt = K.eth(l3, etype=oet, vlans=[(C.ETH_P_8021Q, draw(st.integers(0, 65535)))]), 1
    elif link == "qinq":
        frame, lt = K.eth(l3, etype=oet, vlans=[(C.ETH_P_8021AD, 1), (C.ETH_P_8021Q, 2)]), 1
    elif link == "sll":
        frame, lt = K.sll(l3, proto=oet), C.LINKTYPE_LINUX_SLL
    elif link == "sll2":
        frame, lt = K.sll2(l3, proto=oet), C.LINKTYPE_LINUX_SLL2
    elif link == "raw":
        frame, lt = l3, C.LINKTYPE_RAW
    else:
        frame, lt = struct.pack("<I", 30 if oet == C.ETH_P_IPV6 else 2) + l3, C.LINKTYPE_NULL
    wire = len(frame)
    damage = draw(st.sampled_from(["none", "none", "cut", "flip", "word"]))
    if damage == "cut":
        frame = frame[:draw(st.integers(0, len(frame)))]
    elif damage == "flip":
        m = bytearray(frame)
        for _ in range(draw(st.integers(1, 4))):
            m[draw(st.integers(0, len(m) - 1))] ^= 1 << draw(st.integers(0, 7))
        frame = bytes(m)
    elif damage == "word":
        m = bytearray(frame)
        p = draw(st.integers(0, len(m) - 2))
        m[p:p + 2] = struct.pack("!H", draw(st.sampled_from([0, 1, 0xFFFF])))
        frame = bytes(m)
    return frame, lt, wire


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stacks(), min_size=1, max_size=12))
def test_generated_stacks_identical(items):
    batch = K.make_batch([f for f, _, _ in items], linktype=[lt for _, lt, _ in items],
                         wire_lens=[w for _, _, w in items])
    assert_same(batch, OPTS["udp_tunnels"])


def test_fixed_size_binary_columns_are_zero_padded():
    batch = K.make_batch([K.eth(K.ipv4(A4, B4, 6, _tcp(options=b"\x02\x04\x05\xb4")))])
    got = F.decode_batch(batch)
    assert got.column("tcp_options")[0].as_py() == b"\x02\x04\x05\xb4" + bytes(36)
    assert got.column("ip_src")[0].as_py() == K.addr16(A4)
    assert got.column("tcp_mss")[0].as_py() == 1460
    assert got.column("encap")[0].as_py() == "eth/ipv4/tcp"
    assert pa.types.is_dictionary(got.schema.field("encap").type)


def _dst_chain(count: int, last_nh: int) -> bytes:
    """``count`` destination-options headers of 2048 bytes each (hdr ext len 255)."""
    out = b""
    for k in range(count):
        nh = last_nh if k == count - 1 else C.IPPROTO_DSTOPTS
        out += bytes([nh, 255]) + bytes(2046)
    return out


def test_giant_frames_with_headers_beyond_64k():
    # BIG TCP lengths (IPv6 payload length 0) and 62 KiB extension chains put headers past
    # offset 65535, where the uint16 offset columns end: both decoders stop the same way
    t = _tcp(payload=b"")
    frames, wires = [], []
    for outer_count, inner_count in ((31, 31), (20, 5)):
        inner = struct.pack("!IHBB", 6 << 28, 0, C.IPPROTO_DSTOPTS, 64) + bytes(32) + \
            _dst_chain(inner_count, C.IPPROTO_TCP) + t
        outer = struct.pack("!IHBB", 6 << 28, 0, C.IPPROTO_DSTOPTS, 64) + bytes(32) + \
            _dst_chain(outer_count, C.IPPROTO_IPV6) + inner
        frame = K.eth(outer, etype=C.ETH_P_IPV6)
        frames.append(frame)
        wires.append(len(frame) + 70000)     # payload > 64 KiB: length 0 is "the rest"
    # a chain longer than the uint16 header length allows
    too_long = struct.pack("!IHBB", 6 << 28, 0, C.IPPROTO_DSTOPTS, 64) + bytes(32) + \
        _dst_chain(33, C.IPPROTO_TCP) + t
    frames.append(K.eth(too_long, etype=C.ETH_P_IPV6))
    wires.append(len(frames[-1]) + 100)
    ref = assert_same(K.make_batch(frames, wire_lens=wires))
    status = ref.column("status").to_pylist()
    assert status == [S.STATUS_UNSUPPORTED_ENCAP, S.STATUS_OK, S.STATUS_BAD_IP_HEADER]
    assert ref.column("l4_offset")[1].as_py() > 50000
    assert ref.column("ip_offset")[0].as_py() > 60000          # inner IPv6 still recorded
