"""fast == reference for UDP GRO (socket, forwarding, fraglist) and UDP tunnel sockets
(vxlan, vxlan-gpe, geneve, fou, gue): the numba engine against the plain-Python reference
model, bit for bit (every GroResult array), on crafted random UDP / tunnel traffic, on
the UDP sample captures, batch by batch, over partitions, and through the gro_cells
stage."""

from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gropcap import constants as C
from gropcap.decode import schema as S
from gropcap.decode.options import DecodeOptions
from gropcap.decode.reference import decode_batch
from gropcap.gro import reasons as R
from gropcap.gro import reference
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.engine import assemble, partition_of, simulate, simulate_batch
from gropcap.gro.stages import simulate_stages
from gropcap.run.memory import decode_files
from tests.gro.test_gro_engine_equal import KERNELS, assert_same
from tests.craft import (
    eth, geneve, gre, gue, ipv4, ipv6, make_batch, tcp, tcp_ts, udp, vxlan, vxlan_gpe,
)
from where import TESTS

HERE = TESTS
SAMPLES = os.path.join(HERE, "..", "sample_pcaps")
UDP_SAMPLES = sorted(glob.glob(os.path.join(SAMPLES, "pairs", "udpgso.*.pcap"))) + [
    os.path.join(SAMPLES, name) for name in
    ("real_vxlan.pcap", "crafted_geneve.pcap", "crafted_vxlan_gpe.pcap", "real_ipv4.pcap")]
FOU4, FOU6, GUE = 5555, 5556, 6080
OPTIONS = DecodeOptions(fou_ports=((FOU4, 4), (FOU6, 41)), gue_ports=(GUE,))
ALL_SOCKETS = f"vxlan:4789,vxlan-gpe:4790,geneve:6081,fou:{FOU4},fou:{FOU6},gue:{GUE}"
MODES = ["socket", "forward", "fraglist"]
KINDS = ["udp4", "udp6", "vxlan", "gpe", "geneve", "fou", "gue", "gre_udp", "vxlan6", "tcp4"]
# receive models and knobs the UDP rules meet
MODELS = [
    dict(),
    dict(model="napi"),
    dict(model="napi", queues=3, budget=8, hz=1000),
    dict(model="napi", gro_flush_timeout_ns=200_000, napi_defer_hard_irqs=2),
    dict(verify_checksums=True, gro_max_size=16384, gro_ipv4_max_size=20000),
    dict(model="napi", gro_max_size=200000, gro_ipv4_max_size=100000),
]


def _flow(rng, i, kind):
    return dict(kind=kind, i=i, seq=int(rng.integers(0, 2**32)), id=int(rng.integers(0, 65536)),
                oid=int(rng.integers(0, 65536)),
                idmode=str(rng.choice(["inc", "fixed", "random"])),
                df=bool(rng.random() < 0.7), size=int(rng.choice([1400, 1000, 500, 64])),
                csum="zero" if rng.random() < 0.1 else "good",
                ocsum="zero" if rng.random() < 0.5 else "good",
                inner=str(rng.choice(["tcp", "tcp", "udp"])), v6=bool(rng.random() < 0.4),
                ttl=64, tos=0, vni=int(rng.integers(1, 4)), sport=40000 + i)


def _next_id(f, key):
    if f["idmode"] == "inc":
        f[key] = (f[key] + 1) & 0xFFFF
    elif f["idmode"] == "random":
        f[key] = int(np.random.default_rng(f[key] + 7).integers(0, 65536))
    return f[key]


def _frame(rng, f):
    """The next frame of flow ``f``, with random disturbances."""
    size = f["size"]
    r = rng.random()
    if r < 0.1:
        size = int(rng.integers(1, size))
    elif r < 0.14:
        size += 100
    if rng.random() < 0.03:
        f["ttl"] = 63 if f["ttl"] == 64 else 64
    if rng.random() < 0.02:
        f["tos"] ^= int(rng.choice([0x01, 0x04]))
    df = f["df"] if rng.random() > 0.03 else not f["df"]
    csum = f["csum"]
    x = rng.random()
    if x < 0.03:
        csum = "bad"
    elif x < 0.05:
        csum = "partial"
    body = bytes(size)
    length = None
    if rng.random() < 0.02:
        length = 8 + size + 4              # uh->len != the bytes received
    kind = f["kind"]
    n = f["i"]
    pad = size < 20 and rng.random() < 0.5
    mf = rng.random() < 0.01
    if kind in ("udp4", "udp6", "gre_udp"):
        dgram = udp(f["sport"], 5000 + n, body, length)
        if kind == "udp6":
            return eth(ipv6(f"fd00::{n}:1", "fd00::9", 17, dgram, hlim=f["ttl"], tc=f["tos"],
                            l4_csum=csum), etype=C.ETH_P_IPV6, pad=pad)
        inner = ipv4(f"10.0.{n}.1", "10.9.0.2", 17, dgram, ttl=f["ttl"], tos=f["tos"],
                     ident=_next_id(f, "id"), df=df, mf=mf, l4_csum=csum)
        if kind == "gre_udp":
            return eth(ipv4("192.0.2.1", "198.51.100.1", 47, gre(0x0800, inner, key=7),
                            ident=_next_id(f, "oid"), df=True))
        return eth(inner, pad=pad)
    # a TCP or UDP segment inside
    seg_len = size
    if f["inner"] == "tcp":
        flags = C.TCP_FLAG_ACK | (C.TCP_FLAG_PSH if rng.random() < 0.05 else 0)
        if rng.random() < 0.03:
            f["seq"] += 1000                                   # a loss
        l4 = tcp(20000 + n, 443, seq=f["seq"] & 0xFFFFFFFF, ack=1, flags=flags,
                 options=tcp_ts(1, 2), payload=body)
        f["seq"] += seg_len
        proto = 6
    else:
        l4 = udp(20000 + n, 443, body, length)
        proto = 17
    v6 = f["v6"] and kind in ("vxlan", "gpe", "geneve", "gue", "vxlan6", "fou")
    if v6:
        ip_in = ipv6(f"fd01::{n}:1", "fd01::9", proto, l4, hlim=f["ttl"], tc=f["tos"],
                     l4_csum=csum)
    else:
        ip_in = ipv4(f"172.16.{n}.1", "172.16.9.2", proto, l4, ttl=f["ttl"], tos=f["tos"],
                     ident=_next_id(f, "id"), df=df, l4_csum=csum)
    ether_in = eth(ip_in, etype=C.ETH_P_IPV6 if v6 else C.ETH_P_IP,
                   dst=0x0A0000000002, src=0x0A0000000001 + (rng.random() < 0.02))
    vni = f["vni"] if rng.random() > 0.03 else f["vni"] + 1
    if kind in ("vxlan", "vxlan6"):
        payload, dport = vxlan(ether_in, vni, flags=0x08 if rng.random() > 0.02 else 0x0C), 4789
    elif kind == "gpe":
        eth_np = rng.random() < 0.3
        payload = vxlan_gpe(ether_in if eth_np else ip_in, vni,
                            C.GPE_NP_ETHERNET if eth_np else (2 if v6 else 1),
                            flags=0x0C | (0x01 if rng.random() < 0.03 else 0))
        dport = 4790
    elif kind == "geneve":
        teb = f["i"] % 2 == 0
        opts = b"" if rng.random() > 0.05 else b"\x01\x02\x03\x01" + bytes(4)
        payload = geneve(ether_in if teb else ip_in, vni,
                         proto=C.ETH_P_TEB if teb else (C.ETH_P_IPV6 if v6 else C.ETH_P_IP),
                         options=opts, oam=rng.random() < 0.03)
        dport = 6081
    elif kind == "fou":
        payload, dport = ip_in, FOU6 if v6 else FOU4
    else:
        payload = gue(ip_in, 41 if v6 else 4, flags=0 if rng.random() > 0.03 else 0x8000)
        dport = GUE
    outer = udp(f["sport"] + (rng.random() < 0.02), dport, payload)
    if kind == "vxlan6":
        return eth(ipv6("2001:db8::1", "2001:db8::2", 17, outer, hlim=64,
                        l4_csum=f["ocsum"]), etype=C.ETH_P_IPV6)
    return eth(ipv4("192.0.2.1", "198.51.100.1", 17, outer, ident=_next_id(f, "oid"),
                    df=True, l4_csum=f["ocsum"]))


def udp_traffic(seed: int, n: int, nflows: int) -> pa.Table:
    """Seeded random UDP / UDP-tunnel (and some TCP) traffic, decoded."""
    rng = np.random.default_rng(seed)
    flows = [_flow(rng, i, str(rng.choice(KINDS))) for i in range(nflows)]
    frames, ts = [], []
    t = 1_700_000_000_000_000_000
    for _ in range(n):
        f = flows[int(rng.integers(0, nflows))]
        t += int(rng.choice([500, 2000, 10_000, 300_000, 5_000_000],
                            p=[0.45, 0.3, 0.15, 0.07, 0.03]))
        if f["kind"] == "tcp4":          # plain TCP between the UDP flows
            f["seq"] += 1000
            frames.append(eth(ipv4("10.1.0.1", "10.1.0.2", 6,
                                   tcp(1234, 80, seq=f["seq"] & 0xFFFFFFFF, ack=1,
                                       payload=bytes(1000)), ident=_next_id(f, "id"))))
        else:
            frames.append(_frame(rng, f))
        ts.append(t)
    return pa.Table.from_batches([decode_batch(make_batch(frames, ts_ns=ts), OPTIONS)])


def udp_config(mode: str, sockets: str, kernel: str, model: dict) -> GroConfig:
    return GroConfig(udp_gro=mode, udp_tunnels=sockets, kernel=KernelProfile.parse(kernel),
                     **model)


def check_udp_invariants(res, table, config) -> int:
    """GroResult.check_invariants, where a tunnel packet aggregated as its outer UDP
    datagram (no tunnel socket, a UDP GRO mode) is counted in the unit its gso_size
    measures: dev_gro_receive's gso_size is skb_gro_len after the outer UDP header, the
    whole outer UDP payload, while its payload_len column is the inner L4 payload
    (docs/gro-model.md). Such a super-packet is one outer UDP flow for the kernel but
    may hold several flows of flow_id (keyed by the innermost headers): only those may
    mix flows. Every other packet is checked as is. Returns the number of such outer
    datagrams."""
    from gropcap.gro import _udp_prepare
    from gropcap.gro.rss import ColumnReader
    payload = table.column("payload_len").to_numpy().astype(np.int64)
    outer = np.zeros(table.num_rows, bool)
    if _udp_prepare.needed(config):
        outer = _udp_prepare.UdpView(table, config, ColumnReader(table)).outer
    if not outer.any():
        res.check_invariants(payload)
        return 0
    udp_payload = table.column("outer_udp_len").to_numpy().astype(np.int64) - 8
    units = np.where(outer, udp_payload, payload)
    seg = np.bincount(res.gro_seg, weights=units, minlength=res.num_superpackets)
    seg_flow = res.seg_flow_id[res.gro_seg]
    assert np.all(outer[res.flow_id != seg_flow]), "a super-packet mixes flows"
    dataclasses.replace(res, seg_payload_len=seg.astype(np.int64),
                        flow_id=np.where(outer, seg_flow, res.flow_id)).check_invariants(units)
    return int(outer.sum())


def both(table, config, **kw):
    f = simulate(table, config, **kw)
    r = reference.simulate(table, config, **kw)
    check_udp_invariants(f, table, config)
    return f, r


# --- needs_reference ---------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["off"] + MODES)
@pytest.mark.parametrize("sockets", ["", "vxlan:4789", "vxlan-gpe:4790", "geneve:6081",
                                     f"fou:{FOU4}", f"gue:{GUE}", ALL_SOCKETS])
def test_udp_configs_run_on_the_fast_engine(mode, sockets):
    config = GroConfig(udp_gro=mode, udp_tunnels=sockets)
    assert reference.needs_reference(config) is False
    from gropcap.run.engines import simulate as run_simulate
    t = udp_traffic(1, 40, 4)
    # run/engines.py takes the numba engine: the same result as engine.simulate
    assert_same(run_simulate(t, config, engine="fast"), simulate(t, config), "run.engines")


# --- generated traffic ---------------------------------------------------------------------

@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 250), flows=st.integers(1, 8),
       kernel=st.sampled_from(KERNELS + ["5.0", "5.6", "5.12", "6.4", "6.5", "6.8", "6.9"]),
       mode=st.sampled_from(["off"] + MODES),
       sockets=st.sampled_from(["", "vxlan:4789", ALL_SOCKETS]),
       model=st.sampled_from(MODELS))
def test_equal_generated_udp(seed, n, flows, kernel, mode, sockets, model):
    table = udp_traffic(seed, n, flows)
    config = udp_config(mode, sockets, kernel, model)
    f, r = both(table, config)
    assert_same(f, r, f"seed={seed} n={n} flows={flows} {config}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sockets", ["", ALL_SOCKETS])
@pytest.mark.parametrize("kernel", ["5.15", "6.1", "6.9", "6.18"])
@pytest.mark.parametrize("model", [MODELS[0], MODELS[2]])
def test_equal_udp_modes_and_sockets(mode, sockets, kernel, model):
    """Every mode x socket set, IPv4 and IPv6 (udp6, vxlan6 and IPv6 inner flows are in
    the mix), both batch models."""
    table = udp_traffic(7, 400, 10)
    config = udp_config(mode, sockets, kernel, model)
    f, r = both(table, config)
    assert_same(f, r, str(config))
    if mode != "off" and config.kernel.version >= (5, 6):
        assert (f.reason == R.MERGED).any()


@pytest.mark.parametrize("kind", ["vxlan", "vxlan6", "gpe", "geneve", "fou", "gue"])
@pytest.mark.parametrize("mode", ["off", "forward"])
@pytest.mark.parametrize("kernel", ["4.19", "6.1", "6.18"])
def test_equal_each_tunnel_kind(kind, mode, kernel):
    """One tunnel kind at a time (inner IPv4 and IPv6, TCP and UDP), with its socket and
    without (then the outer datagram is what UDP GRO sees)."""
    rng = np.random.default_rng(3)
    flows = [dict(_flow(rng, i, kind), inner="tcp" if i < 3 else "udp",
                  v6=bool(i % 2), ocsum="zero" if i == 2 else "good") for i in range(5)]
    frames = [_frame(rng, flows[int(rng.integers(0, 5))]) for _ in range(300)]
    table = pa.Table.from_batches([decode_batch(make_batch(frames), OPTIONS)])
    sockets = {"vxlan": "vxlan:4789", "vxlan6": "vxlan:4789", "gpe": "vxlan-gpe:4790",
               "geneve": "geneve:6081", "fou": f"fou:{FOU4},fou:{FOU6}", "gue": f"gue:{GUE}"}
    for s in ("", sockets[kind]):
        config = udp_config(mode, s, kernel, {})
        f, r = both(table, config)
        assert_same(f, r, f"{kind} {config}")
        if s:
            assert (f.reason == R.MERGED).any(), "the socket aggregates"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kernel", ["5.15", "6.18"])
def test_tunnel_socket_inner_udp_merges_in_both_engines(mode, kernel):
    """A tunnel socket's inner UDP flows reach udp_gro_receive_segment (udp4/6_gro_receive
    after the tunnel's gro_receive, no tunnel socket on the inner port): with a UDP GRO
    mode they merge in both engines, with UDP_TUNNEL[_CSUM] | UDP_L4 [| FRAGLIST]; none
    is BYPASS_TCP_HEADER (the old rule sent them to tcp_gro_pull_header)."""
    from gropcap.gro import gso
    table = udp_traffic(7, 400, 10)
    config = udp_config(mode, ALL_SOCKETS, kernel, {})
    f, r = both(table, config)
    assert_same(f, r, str(config))
    tun = np.isin(table.column("tun_type").to_numpy(), list(reference._UDP_TUNNEL_KIND))
    inner_udp = tun & (table.column("l4_proto").to_numpy() == C.IPPROTO_UDP) & (
        table.column("status").to_numpy() == S.STATUS_OK)
    assert inner_udp.any()
    assert not (f.reason[inner_udp] == R.BYPASS_TCP_HEADER).any()
    segs = np.unique(f.gro_seg[inner_udp & (f.reason == R.MERGED)])
    assert len(segs)
    want = gso.SKB_GSO_UDP_L4 | (gso.SKB_GSO_FRAGLIST if mode == "fraglist" else 0)
    tbits = gso.SKB_GSO_UDP_TUNNEL | gso.SKB_GSO_UDP_TUNNEL_CSUM
    assert np.all(f.seg_gso_type[segs] & want == want)
    assert np.all(f.seg_gso_type[segs] & tbits)


# --- samples -------------------------------------------------------------------------------

@pytest.mark.parametrize("path", UDP_SAMPLES, ids=os.path.basename)
@pytest.mark.parametrize("kw", [
    dict(udp_gro="socket"), dict(udp_gro="forward", model="napi"),
    dict(udp_gro="fraglist", model="napi", queues=4),
    dict(udp_tunnels="vxlan:4789"), dict(udp_tunnels="vxlan:4789", udp_gro="forward"),
    dict(udp_tunnels="geneve:6081,vxlan-gpe:4790", model="napi"),
    dict(udp_gro="forward", kernel=KernelProfile.parse("6.1")),
    dict(udp_gro="forward", verify_checksums=True, kernel=KernelProfile.parse("6.9")),
], ids=str)
def test_equal_udp_samples(path, kw):
    table, _ = decode_files(path)
    config = GroConfig(**kw)
    f, r = both(table, config)
    assert_same(f, r, f"{os.path.basename(path)} {config}")


# --- batches, partitions, gro_cells -----------------------------------------------------

@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 250), nbatch=st.integers(2, 5),
       mode=st.sampled_from(MODES), sockets=st.sampled_from(["", ALL_SOCKETS]),
       model=st.sampled_from(MODELS[:3]), kernel=st.sampled_from(["5.10", "6.18"]))
def test_batches_equal_reference(seed, n, nbatch, mode, sockets, model, kernel):
    """The engine state (held UDP entries, the tunnel-socket key tables) carried from
    batch to batch gives the one-pass reference result."""
    table = udp_traffic(seed, n, 6)
    config = udp_config(mode, sockets, kernel, model)
    cuts = np.linspace(0, n, nbatch + 1).astype(int)
    state, parts = None, []
    for k, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
        part, state = simulate_batch(table.slice(lo, hi - lo), config, state,
                                     final=k == nbatch - 1)
        parts.append(part)
    assert_same(assemble(parts, config), reference.simulate(table, config), str(config))


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 250), parts=st.integers(2, 4),
       mode=st.sampled_from(MODES), sockets=st.sampled_from(["", ALL_SOCKETS]),
       model=st.sampled_from(["ideal", "napi"]))
def test_partitions_merge_to_one_pass_udp(seed, n, parts, mode, sockets, model):
    """engine.partition_of keeps every UDP same-flow class together (a tunnel packet
    aggregated as its outer datagram is keyed by its outer header)."""
    from tests.run.test_partition_merge import by_partitions
    table = udp_traffic(seed, n, 6)
    config = GroConfig(udp_gro=mode, udp_tunnels=sockets, model=model, queues=4)
    assert by_partitions(table, config, parts, (n // 3,)).equals(simulate(table, config))


def test_outer_datagram_key_is_the_outer_header():
    """Two VXLAN flows with different inner headers on one outer 4-tuple and no socket
    are one UDP GRO flow: the same partition, one super-packet."""
    frames = []
    for k in range(4):
        inner = eth(ipv4(f"172.16.{k % 2}.1", "172.16.9.2", 6,
                         tcp(20000 + k % 2, 443, seq=1 + 1000 * (k // 2), ack=1,
                             payload=bytes(1000)), ident=k // 2),
                    dst=0x0A0000000002, src=0x0A0000000001)
        frames.append(eth(ipv4("192.0.2.1", "198.51.100.1", 17,
                               udp(40000, 4789, vxlan(inner, 5)), ident=100 + k)))
    table = pa.Table.from_batches([decode_batch(make_batch(frames), OPTIONS)])
    config = GroConfig(udp_gro="forward")
    assert len(set(partition_of(table, config, 8))) == 1
    f, r = both(table, config)
    assert_same(f, r, "outer datagram")
    assert list(f.seg_count) == [4]
    # the invariants hold on the outer UDP payloads; two inner flows, one super-packet
    assert check_udp_invariants(r, table, config) == 4
    assert len(set(f.flow_id)) == 2


@pytest.mark.parametrize("kind", ["fou", "gue"])
def test_fou_gue_without_socket_are_outer_datagrams(kind):
    """FOU / GUE on a port with no socket in udp_tunnels: udp_gro_receive finds no tunnel
    socket, so under a UDP GRO mode the outer datagrams are aggregated like VXLAN's
    (gso_size the outer UDP payload); with no mode they stay BYPASS_TUNNEL (docs)."""
    frames = []
    for i in range(4):
        inner = ipv4("192.0.2.1", "192.0.2.2", 6,
                     tcp(40000, 5201, seq=1 + 1000 * i, payload=bytes(1000)), ident=i + 1)
        tun = inner if kind == "fou" else gue(inner, 4)
        frames.append(eth(ipv4("198.51.100.1", "198.51.100.2", 17,
                               udp(50000, FOU4 if kind == "fou" else GUE, tun),
                               ident=500 + i)))
    table = pa.Table.from_batches([decode_batch(make_batch(frames), OPTIONS)])
    assert set(table.column("tun_type").to_pylist()) == {
        C.TUN_FOU if kind == "fou" else C.TUN_GUE}
    f, r = both(table, GroConfig(udp_gro="forward"))
    assert_same(f, r, kind)
    assert list(f.seg_count) == [4]
    assert f.seg_gso_size[0] == table.column("outer_udp_len").to_numpy()[0] - 8
    off, _ = both(table, GroConfig())
    assert set(off.reason) == {R.BYPASS_TUNNEL}


@pytest.mark.parametrize("mode", ["off"] + MODES)
@pytest.mark.parametrize("sockets", ["", "vxlan:4789", ALL_SOCKETS])
@pytest.mark.parametrize("model", ["ideal", "napi"])
def test_equal_with_gro_cells_stage(mode, sockets, model):
    """Native GRO then the gro_cells stage (tunnel_gro): both stages on both engines."""
    for table in (udp_traffic(11, 300, 8), decode_files(os.path.join(SAMPLES,
                                                                     "real_vxlan.pcap"))[0]):
        config = GroConfig(udp_gro=mode, udp_tunnels=sockets, model=model, tunnel_gro=True)
        fast = simulate_stages(table, config, engine="fast")
        ref = simulate_stages(table, config, engine="reference")
        assert [s.name for s in fast] == [s.name for s in ref]
        for a, b in zip(fast, ref):
            assert_same(a.result, b.result, f"{a.name} {config}")


@pytest.mark.parametrize("kw", [dict(udp_tunnels="vxlan:4789"),
                                dict(udp_tunnels="vxlan:4789", udp_gro="forward",
                                     model="napi"),
                                dict(udp_gro="fraglist"),
                                dict(udp_tunnels="vxlan:4789", rx_gro_list=True,
                                     tcp_local_socket=False)])
def test_equal_arriving_gso_packets_in_a_tunnel_socket(kw):
    """Frames that arrive as TCP GSO packets (coalesced=) inside a VXLAN socket: merged
    (UDP_TUNNEL_CSUM | TCPV4 completions) and delivered alone (their own GSO type)."""
    from gropcap.gro.coalesced import CoalescedInput
    table, _ = decode_files(os.path.join(SAMPLES, "real_vxlan.pcap"))
    n = table.num_rows
    rng = np.random.default_rng(5)
    pay = table.column("payload_len").to_numpy().astype(np.int32)
    is_gso = (rng.random(n) < 0.2) & (pay > 2)
    segs = np.where(is_gso, 2, 1).astype(np.int32)
    gsz = np.where(is_gso, (pay + 1) // 2, 0).astype(np.int32)
    co = CoalescedInput(is_gso, gsz, segs, np.zeros(n, np.uint8))
    config = GroConfig(**kw)
    f = simulate(table, config, coalesced=co)
    r = reference.simulate(table, config, coalesced=co)
    assert_same(f, r, str(config))
    assert (f.seg_count > 2).any()
