"""The receiving device's MTU: ``--mtu`` / ``GroConfig.mtu``, and the MTU inferred from the
capture (gropcap/gro/mtu.py) on jumbo, overlay, loopback-sized and 1500-byte captures, with a
warning only when the evidence conflicts."""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from craft import eth, ipv4, ipv6, make_batch, tcp, udp, vxlan
from tests.replay.test_kernel_replay import live

from gropcap import constants as C
from gropcap.gro import coalesced
from gropcap import selftest_cases as ST
from gropcap.capture import write_pcap
from gropcap.cli import main
from gropcap.decode.reference import decode_batch
from gropcap.gro.config import GroConfig
from gropcap.run.memory import analyze

T0 = 1_700_000_000_000_000_000
SYN, ACK = C.TCP_FLAG_SYN, C.TCP_FLAG_ACK


def mss_opt(mss: int) -> bytes:
    return struct.pack("!BBH", 2, 4, mss)         # RFC 9293 3.2: kind 2, length 4


def _write(path, frames, gap_ns=1000):
    write_pcap(str(path), frames, [T0 + k * gap_ns for k in range(len(frames))])
    return str(path)


def _eth(ip, packet):
    return eth(packet, C.ETH_P_IPV6 if ip is ipv6 else C.ETH_P_IP)


def handshake(a="10.0.0.1", b="10.0.0.2", sport=40000, dport=5201, mss_a=1460, mss_b=1460,
              ip=ipv4):
    return [_eth(ip, ip(a, b, 6, tcp(sport, dport, seq=0, flags=SYN,
                                     options=mss_opt(mss_a)))),
            _eth(ip, ip(b, a, 6, tcp(dport, sport, seq=0, ack=1, flags=SYN | ACK,
                                     options=mss_opt(mss_b))))]


def bulk(n, payload, a="10.0.0.1", b="10.0.0.2", sport=40000, dport=5201, ip=ipv4, seq=1):
    return [_eth(ip, ip(a, b, 6, tcp(sport, dport, seq=seq + k * payload, ack=1,
                                     payload=bytes(payload)))) for k in range(n)]


def run_json(*args) -> dict:
    r = CliRunner().invoke(main, ["analyze", *map(str, args), "--format", "json", "-q"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def run_text(*args) -> str:
    r = CliRunner().invoke(main, ["analyze", *map(str, args), "-q"])
    assert r.exit_code == 0, r.output
    return r.stdout


def coalesced_warning(summary) -> bool:
    return any("already coalesced" in w for w in summary["warnings"])


# --- the example: 19 back-to-back 4056-byte segments on a 65535-MTU veth ---------

def test_veth_64k_mtu_19_segments_make_16_plus_3(tmp_path):
    """The live 6.18 kernel merges 19 segments of 4056 bytes into one 16-segment
    super-packet (65536-byte limit) plus 3. With --mtu 65535 the model agrees; with
    1500 they are taken as coalesced and delivered alone."""
    path = _write(tmp_path / "veth.pcap", bulk(19, 4056))
    got = run_json(path, "--mtu", "65535", "--model", "ideal")
    ideal = got["models"]["ideal"]
    assert (ideal["superpackets_out"], ideal["largest_superpacket"]) == (2, 16)
    assert got["mtu"]["mtu"] == 65535 and got["mtu"]["source"] == "option"
    assert not coalesced_warning(got)
    small = run_json(path, "--mtu", "1500", "--model", "ideal")
    assert small["models"]["ideal"]["superpackets_out"] == 19
    assert "NOT_HELD_GSO_SHORT" in small["models"]["ideal"]["end_reasons"]
    assert coalesced_warning(small)


def test_veth_64k_mtu_inferred_from_syn(tmp_path):
    """The same burst after a handshake on a 65535-MTU veth (MSS 65495): inferred."""
    path = _write(tmp_path / "veth_syn.pcap",
                  handshake(mss_a=65495, mss_b=65495) + bulk(19, 4056))
    got = run_json(path, "--model", "ideal")
    assert (got["mtu"]["mtu"], got["mtu"]["source"]) == (65535, "inferred")
    assert got["models"]["ideal"]["largest_superpacket"] == 16
    assert not coalesced_warning(got) and got["mtu"]["conflict"] is None


SELFTEST = [(p, c.name) for p in ST.PROTOS for c in ST.cases_for(p)]


@pytest.mark.parametrize("proto,name", SELFTEST, ids=[f"{p}-{n}" for p, n in SELFTEST])
def test_selftest_cases_equal_kernel_with_the_mtu(proto, name):
    """Every gro.c case through the coalesced-input detection: with --mtu 65535 (the live
    replay's veth) and with the inferred MTU the sizes are the kernel's. The "large" cases
    (4096-byte IP packets up to the 64 KiB limit) are the ones a 1500-byte MTU gets wrong
    (so the test can fail)."""
    from gropcap.gro.engine import simulate
    from tests.gro.test_gro_engine_selftest import _sizes

    case = ST.CASES[name]
    cf = case.case_frames(proto)
    table = pa.Table.from_batches([decode_batch(make_batch(cf.frames))])
    cfg = GroConfig(model="napi", rss="none", verify_checksums=True)
    polls = np.array(cf.bursts, dtype=np.int64)
    want = case.expected(proto, ST.NEWEST)

    def sizes(mtu):
        stats = coalesced.CoalescedStats(mtu)
        stats.add(table)
        co = stats.infer(table)
        res = simulate(table, cfg, polls=polls,
                       **({"coalesced": co} if co.num_coalesced else {}))
        return _sizes(res, cf.frames, proto), stats.mtu_inference()

    assert sizes(65535)[0] == want
    got, inferred = sizes(None)
    assert got == want
    if name.startswith("large"):
        assert (inferred.source, inferred.mtu) == ("inferred", 9000)
        assert sizes(1500)[0] != want
    else:
        assert sizes(1500)[0] == want


# --- inferred: jumbo, overlay, 1500 ---------------------------------------------------

def test_jumbo_capture_inferred_9000_no_coalesced_warning(tmp_path):
    frames = handshake(mss_a=8960, mss_b=8960) + bulk(30, 8960)
    got = run_json(_write(tmp_path / "jumbo.pcap", frames))
    assert (got["mtu"]["mtu"], got["mtu"]["source"]) == (9000, "inferred")
    assert not coalesced_warning(got) and got["mtu"]["conflict"] is None
    assert got["models"]["ideal"]["segments_in"] == got["packets"]
    assert got["models"]["ideal"]["largest_superpacket"] == 7   # 7 x 8960 <= 64 KiB
    text = run_text(tmp_path / "jumbo.pcap")
    assert "MTU 9000, inferred from the MSS option of 2 SYNs (MSS 8960)" in text
    assert "warning" not in text.replace("checksums", "")


def test_jumbo_capture_without_syn_inferred_from_full_segments(tmp_path):
    got = run_json(_write(tmp_path / "jumbo_nosyn.pcap", bulk(30, 8000)))
    assert (got["mtu"]["mtu"], got["mtu"]["source"]) == (9000, "inferred")
    assert not coalesced_warning(got)


def test_ipv6_jumbo_syn_adds_60_header_bytes(tmp_path):
    frames = (handshake("fd00::1", "fd00::2", mss_a=8940, mss_b=8940, ip=ipv6)
              + bulk(10, 8940, "fd00::1", "fd00::2", ip=ipv6))
    got = run_json(_write(tmp_path / "jumbo6.pcap", frames))
    assert (got["mtu"]["mtu"], got["mtu"]["source"]) == (9000, "inferred")
    assert not coalesced_warning(got)


def _vxlan_frames(inner_mss, n, payload):
    def outer(inner):
        return eth(ipv4("192.168.0.1", "192.168.0.2", 17,
                        udp(50000, 4789, vxlan(eth(inner), 42))))
    frames = [outer(ipv4("10.0.0.1", "10.0.0.2", 6,
                         tcp(40000, 5201, flags=SYN, options=mss_opt(inner_mss)))),
              outer(ipv4("10.0.0.2", "10.0.0.1", 6,
                         tcp(5201, 40000, ack=1, flags=SYN | ACK,
                             options=mss_opt(inner_mss))))]
    frames += [outer(ipv4("10.0.0.1", "10.0.0.2", 6,
                          tcp(40000, 5201, seq=1 + k * payload, ack=1, payload=bytes(payload))))
               for k in range(n)]
    return frames


@pytest.mark.parametrize("inner_mss,underlay", [(1460, 1550), (8910, 9000)])
def test_overlay_capture_inferred_with_the_encapsulation(tmp_path, inner_mss, underlay):
    """VXLAN over an underlay of 1550 or 9000 bytes: the inner SYN's MSS plus 40 inner
    header bytes plus 50 bytes of VXLAN is the underlay MTU; full frames are wire frames."""
    got = run_json(_write(tmp_path / "overlay.pcap", _vxlan_frames(inner_mss, 12, inner_mss)))
    assert (got["mtu"]["mtu"], got["mtu"]["source"]) == (underlay, "inferred")
    assert not coalesced_warning(got) and got["mtu"]["conflict"] is None
    assert got["models"]["ideal"]["segments_in"] == got["packets"]


def test_1500_capture_inferred_and_post_gro_frames_coalesced_without_conflict(tmp_path):
    """MSS 1460: MTU 1500. Frames of 4 x 1448 bytes after it carry more than the MSS:
    coalesced for certain (no conflict), reported as already coalesced."""
    frames = handshake() + bulk(5, 1460) + bulk(3, 4 * 1460, seq=1 + 5 * 1460)
    got = run_json(_write(tmp_path / "post_gro.pcap", frames), "--model", "ideal")
    assert (got["mtu"]["mtu"], got["mtu"]["source"], got["mtu"]["above"]) == (1500, "inferred",
                                                                              3)
    assert got["mtu"]["conflict"] is None
    assert coalesced_warning(got)
    assert got["models"]["ideal"]["segments_in"] == 5 + 3 * 4 + 2


def test_loopback_capture_without_syn(tmp_path):
    """tcpdump -i lo: Ethernet frames with all-zero MACs; 64 KiB segments are wire frames."""
    frames = [eth(ipv4("127.0.0.1", "127.0.0.1", 6,
                       tcp(40000, 5201, seq=1 + k * 32768, ack=1, payload=bytes(32768))),
                  dst=bytes(6), src=bytes(6)) for k in range(4)]
    got = run_json(_write(tmp_path / "lo.pcap", frames), "--model", "ideal")
    assert (got["mtu"]["mtu"], got["mtu"]["source"]) == (65536, "inferred")
    assert not coalesced_warning(got)
    assert got["models"]["ideal"]["segments_in"] == 4


def test_1500_capture_without_syn_is_the_default(tmp_path):
    got = run_json(_write(tmp_path / "plain.pcap", bulk(10, 1448)))
    assert (got["mtu"]["mtu"], got["mtu"]["source"]) == (1500, "default")
    assert got["mtu"]["conflict"] is None and not coalesced_warning(got)


# --- conflicting evidence ---------------------------------------------------------------

def test_conflicting_evidence_warns(tmp_path):
    """SYNs say 1500, but a flow without a SYN sends 8000-byte segments that fit no known
    MSS, and a UDP datagram of 6000 bytes: the evidence conflicts, once, as a warning."""
    frames = (handshake() + bulk(4, 1460)
              + bulk(6, 8000, sport=40001, dport=5202)
              + [eth(ipv4("10.0.0.3", "10.0.0.2", 17, udp(4000, 4001, bytes(6000))))])
    path = _write(tmp_path / "conflict.pcap", frames)
    got = run_json(path, "--model", "ideal")
    assert got["mtu"]["mtu"] == 1500
    conflicts = [w for w in got["warnings"] if w.startswith("MTU evidence conflicts")]
    assert len(conflicts) == 1 and "7 frames (up to 8040 IP bytes)" in conflicts[0]
    assert "warning: MTU evidence conflicts" in run_text(path)
    # stating the MTU settles it: no conflict
    given = run_json(path, "--mtu", "9000", "--model", "ideal")
    assert given["mtu"]["conflict"] is None
    assert not any("conflicts" in w for w in given["warnings"])


def test_no_conflict_without_larger_frames(tmp_path):
    got = run_json(_write(tmp_path / "ok.pcap", handshake() + bulk(8, 1460)))
    assert got["mtu"]["conflict"] is None
    assert not any("conflict" in w for w in got["warnings"])


# --- the option everywhere --------------------------------------------------------------

def test_mtu_in_config_metadata_and_load(tmp_path):
    from gropcap.io.load import load
    from gropcap.io.parquet import write_analysis

    path = _write(tmp_path / "m.pcap", bulk(19, 4056))
    a = analyze(path, GroConfig(mtu=65535), models=("ideal",))
    assert a.config.to_dict()["mtu"] == 65535
    assert json.loads(a.metadata()["gropcap.mtu"])["mtu"] == 65535
    write_analysis(a, tmp_path / "out")
    b = load(tmp_path / "out")
    assert b.config.mtu == 65535 and b.mtu == a.mtu
    assert b.summary()["mtu"] == a.summary()["mtu"]
    # the notebook keyword default infers; the config without mtu stays as before
    assert "mtu" not in GroConfig().to_dict()


def test_mtu_out_of_range_is_a_usage_error(tmp_path):
    path = _write(tmp_path / "m.pcap", bulk(2, 100))
    r = CliRunner().invoke(main, ["analyze", path, "--mtu", "40"])
    assert r.exit_code == 2 and "--mtu" in r.output
    from gropcap.errors import ConfigError
    with pytest.raises(ConfigError):
        GroConfig(mtu=70000)


def test_compare_set_mtu(tmp_path):
    path = _write(tmp_path / "c.pcap", bulk(19, 4056))
    r = CliRunner().invoke(main, ["compare", path, "--set-a", "mtu=1500", "--set-b",
                                  "mtu=65535", "--model", "ideal", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    text = json.dumps(d)
    assert '"mtu": 1500' in text and '"mtu": 65535' in text


def test_baseline_records_the_mtu(tmp_path):
    path = _write(tmp_path / "b.pcap", bulk(19, 4056))
    out = tmp_path / "base.json"
    r = CliRunner().invoke(main, ["baseline", "save", path, "-o", str(out), "--mtu", "65535"])
    assert r.exit_code == 0, r.output
    base = json.loads(out.read_text())
    assert base["config"]["mtu"] == 65535
    assert base["captures"]["b.pcap"]["mtu"] == {"mtu": 65535, "source": "option"}
    r = CliRunner().invoke(main, ["baseline", "check", path, "--against", str(out),
                                  "--mtu", "65535"])
    assert r.exit_code == 0, r.output
    # another MTU is another configuration: compared anyway (the frames fit both MTUs, so
    # the metrics hold), and the check says that the MTU differs
    r = CliRunner().invoke(main, ["baseline", "check", path, "--against", str(out)])
    assert r.exit_code == 0, r.output
    assert "MTU 9000 (inferred) (baseline 65535 (option))" in r.stdout


def test_explain_takes_mtu(tmp_path):
    path = _write(tmp_path / "e.pcap", bulk(19, 4056))
    r = CliRunner().invoke(main, ["explain", path, "--flow", "0", "--mtu", "65535",
                                  "--model", "ideal"])
    assert r.exit_code == 0, r.output
    assert "NOT_HELD_GSO_SHORT" not in r.output


# --- root: the live kernel on a 65535-MTU veth ------------------------------------------

@pytest.mark.root
@live
def test_live_veth_64k_mtu_19_segments(tmp_path):
    """The issue's example on the live kernel: 19 back-to-back 4056-byte segments through a
    veth whose MTU is raised to 65535 become 16 + 3 segments, and `analyze --mtu 65535`
    builds the same super-packets (with 1500 it would not)."""
    from gropcap.replay.kernel import replay

    frames = bulk(19, 4056)
    r = replay(frames, [0] * len(frames), mtu=65535)
    assert r.lost == [] and r.config["mtu"] == 65535
    kernel = r.payload_sizes(stop_at_fin=False)
    assert kernel == [16 * 4056, 3 * 4056]
    path = _write(tmp_path / "live.pcap", frames)
    res = analyze(path, GroConfig(mtu=65535), models=("ideal",)).results["ideal"]
    assert res.seg_payload_len.tolist() == kernel
    res = analyze(path, GroConfig(mtu=1500), models=("ideal",)).results["ideal"]
    assert res.seg_payload_len.tolist() != kernel


def test_kernel_replay_sets_the_veth_mtu(monkeypatch, tmp_path):
    """`kernel-replay --mtu` reaches the veth set-up (the replay's `mtu`)."""
    from tests.replay.test_kernel_replay import _fake_replay

    from gropcap.cli import replay as cli_replay
    from gropcap.cli.replay import kernel_replay
    kernel, fake = _fake_replay(False)
    # the replay is faked: no stale-namespace check (root, ip, ethtool)
    monkeypatch.setattr(cli_replay, "_warn_stale", lambda: None)
    seen = []

    def spy(frames, bursts=None, **kw):
        seen.append(kw.get("mtu"))
        return fake(frames, bursts, **kw)
    monkeypatch.setattr(kernel, "replay", spy)
    path = _write(tmp_path / "k.pcap", bulk(4, 1000))
    for args, want in (([], 65535), (["--mtu", "9000"], 9000)):
        r = CliRunner().invoke(kernel_replay, [path, "--kernel", "6.18", *args])
        assert r.exit_code == 0, r.output
        assert seen[-1] == want
