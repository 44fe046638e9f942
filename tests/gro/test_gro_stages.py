"""gro_cells second stage (gro/stages.py), egress accounting (egress.egress) and the seed doc."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from gropcap import constants as C
from gropcap import egress
from gropcap.gro import gso
from gropcap.decode.reference import decode_batch
from gropcap.gro import reasons as R
from gropcap.gro.config import GroConfig, KernelProfile
from gropcap.gro.stages import MAX_SKB_FRAGS, simulate_stages, stages_summary
from gropcap.run.memory import decode_files
from tests.craft import eth, gre, ipv4, make_batch, tcp

from where import ROOT

SAMPLES = os.path.join(ROOT, "sample_pcaps")


def sample(name):
    return decode_files(os.path.join(SAMPLES, name))[0]


def cfg(kernel="6.18", **kw):
    return GroConfig(kernel=KernelProfile.parse(kernel), **kw)


def stages(t, config):
    st = simulate_stages(t, config)
    for s in st:
        s.check_invariants()
    return st


@pytest.mark.parametrize("model", ["ideal", "napi"])
@pytest.mark.parametrize("name", ["crafted_erspan2.pcap", "crafted_erspan3.pcap",
                                  "crafted_gre_seq.pcap"])
def test_gro_cells_aggregates_what_native_gro_refuses(name, model):
    t = sample(name)
    native, cells = stages(t, cfg(model=model, tunnel_gro=True))
    assert native.superpackets_out == t.num_rows          # S flag: gre_gro_receive bails
    assert set(native.result.reason) == {R.BYPASS_TUNNEL}
    assert cells.packets_in == t.num_rows
    # the same inner flow as crafted_gre aggregates natively
    gre_native = stages(sample("crafted_gre.pcap"), cfg(model=model))[0]
    assert cells.superpackets_out == gre_native.superpackets_out
    assert np.array_equal(np.sort(cells.result.seg_count),
                          np.sort(gre_native.result.seg_count))
    # derived rows: inner headers in the outer position, no tunnel left
    assert set(cells.table.column("tun_type").to_pylist()) == {0}
    assert set(cells.table.column("outer_ip_version").to_pylist()) == {0}
    assert set(cells.table.column("eth_type").to_pylist()) == {C.ETH_P_IP}


def test_gro_cells_off_delivers_units_alone():
    t = sample("crafted_erspan2.pcap")
    native, cells = stages(t, cfg(tunnel_gro=False))
    assert cells.superpackets_out == t.num_rows
    assert set(cells.result.reason) == {R.BYPASS_GRO_DISABLED}
    assert stages_summary([native, cells])["delivered"] == t.num_rows


def test_ip6gre_cells_from_4_17_native_off():
    t = sample("crafted_ip6gre.pcap")
    before = stages_summary(stages(t, cfg("4.16", native_gro=False, tunnel_gro=True)))
    after = stages_summary(stages(t, cfg("4.17", native_gro=False, tunnel_gro=True)))
    assert before["delivered"] == t.num_rows
    native_only = stages(t, cfg("4.17"))[0]
    assert after["delivered"] == native_only.superpackets_out < t.num_rows
    # IPv4 GRE devices always had cells
    g = sample("crafted_gre.pcap")
    assert stages_summary(stages(g, cfg("4.16", native_gro=False,
                                        tunnel_gro=True)))["delivered"] < g.num_rows


@pytest.mark.parametrize("name", ["crafted_dsa_edsa.pcap", "crafted_dsa_dsa.pcap",
                                  "crafted_dsa_brcm.pcap", "crafted_dsa_brcm_prepend.pcap"])
def test_dsa_user_port_gro_from_5_8(name):
    t = sample(name)
    native, cells = stages(t, cfg("5.8", tunnel_gro=True, model="napi"))
    # the conduit: ETH_P_XDSA has no packet_offload
    assert set(native.result.reason) == {R.BYPASS_NOT_IP}
    assert cells.superpackets_out < t.num_rows
    assert len(np.unique(cells.device)) == 2          # two user ports
    # per port: a super-packet never mixes ports
    dev = cells.device
    for k in range(cells.superpackets_out):
        rows = np.flatnonzero(cells.result.gro_seg == k)
        assert len(set(dev[rows])) == 1
    old = stages(t, cfg("5.7", tunnel_gro=True, model="napi"))[1]
    assert old.superpackets_out == t.num_rows
    assert set(old.result.reason) == {R.BYPASS_GRO_DISABLED}
    # the single-stage model folds the user port's GRO into stage one: same count
    single = stages(t, cfg("5.8", model="napi"))[0]
    assert single.superpackets_out == cells.superpackets_out


def test_second_stage_receives_native_units_as_gso_packets():
    # native super-packets reach the gro_cells device as TCP GSO packets: one row each,
    # standing for count segments
    t = sample("crafted_gre.pcap")
    native, cells = stages(t, cfg(tunnel_gro=True))
    assert cells.packets_in == native.superpackets_out
    assert int(cells.segments.sum()) == t.num_rows
    assert int(cells.result.seg_count.sum()) == t.num_rows
    gso_rows = cells.segments > 1
    assert gso_rows.any()


def _gre_flow(n, mss=1000):
    frames = []
    for i in range(n):
        inner = ipv4("192.0.2.1", "192.0.2.2", 6, tcp(1, 2, seq=1 + mss * i,
                                                      payload=bytes(mss)), ident=i + 1)
        frames.append(eth(ipv4("198.51.100.1", "198.51.100.2", 47, gre(C.ETH_P_IP, inner),
                               ident=0x100 + i)))
    return frames


def test_gso_units_merge_again_and_frag_list_never_does():
    # units of more than MAX_SKB_FRAGS segments carry a frag_list and never merge again
    t = pa.Table.from_batches([decode_batch(make_batch(_gre_flow(40)))])
    native, cells = stages(t, cfg(tunnel_gro=True))
    assert list(native.result.seg_count) == [40]
    assert list(cells.result.reason) == [R.NOT_HELD_FRAG_LIST]
    assert 40 > MAX_SKB_FRAGS
    # a physical device limited to 8 segments (gro_max_size); the tunnel device has its
    # own default limit, so the 8-segment GSO units merge again there
    c2 = cfg(tunnel_gro=True, gro_max_size=8 * 1000 + 80, gro_ipv4_max_size=8 * 1000 + 80)
    native, cells = stages(t, c2)
    assert list(native.result.seg_count) == [8] * 5
    assert list(cells.result.gro_role) == [R.ROLE_HEAD] + [R.ROLE_MERGED] * 4
    assert list(cells.result.seg_count) == [40]
    # merged GSO units keep gso_size and sum their segments
    big = np.argmax(cells.result.seg_count)
    assert cells.result.seg_gso_size[big] == 1000
    # incrementing inner IDs, and no GRE bit: the tunnel is gone (iptunnel_pull_offloads)
    assert cells.result.seg_gso_type[big] == gso.SKB_GSO_TCPV4
    assert native.result.seg_gso_type[0] == gso.SKB_GSO_GRE | gso.SKB_GSO_TCPV4


def test_gro_cells_vxlan_only_with_socket():
    t = sample("real_vxlan.pcap")
    st = stages(t, cfg(tunnel_gro=True, native_gro=False))
    assert st[1].packets_in == 0
    st = stages(t, cfg(tunnel_gro=True, native_gro=False, udp_tunnels="vxlan:4789"))
    assert st[1].packets_in == t.num_rows
    assert st[1].superpackets_out < t.num_rows // 5


# --- egress ------------------------------------------------------------------------------

def test_egress_decap_strips_tunnel_bits_from_4_6():
    t = sample("real_vxlan.pcap")
    r = stages(t, cfg("4.6", udp_tunnels="vxlan:4789"))[0].result
    args = (r.seg_count, r.seg_gso_size, r.seg_gso_type, r.seg_payload_len)
    new = egress.egress(*args, scenario="decap", features=egress.parse_features("tso"),
                     kernel_version=(4, 6))
    old = egress.egress(*args, scenario="decap", features=egress.parse_features("tso"),
                     kernel_version=(4, 5))
    multi = r.seg_count > 1
    assert new.totals()["segments"] == old.totals()["segments"] == t.num_rows
    assert new.hardware[multi].all() and not old.hardware.any()
    assert not np.any(new.gso_type & gso.GSO_ENCAP_ALL)
    assert np.all(old.gso_type[multi] & gso.SKB_GSO_UDP_TUNNEL_CSUM)
    # still encapsulated: needs tx-udp_tnl-csum-segmentation
    enc = egress.egress(*args, features=egress.parse_features("tso,tx-udp_tnl-csum-segmentation"))
    assert enc.hardware[multi].all()


def test_egress_mtu_drop_with_df_fragments_without():
    count, size, payload = np.array([3, 1]), np.array([1400, 0]), np.array([4000, 500])
    gt = np.array([gso.SKB_GSO_TCPV4, 0])
    hdr = np.array([40, 40])
    e = egress.egress(count, size, gt, payload, features=egress.parse_features("tso"),
                   hdr_len=hdr, df=np.array([True, True]), mtu=1400)
    assert list(e.dropped) == [True, False] and list(e.segments) == [0, 1]
    e = egress.egress(count, size, gt, payload, features=egress.parse_features("tso"),
                   hdr_len=hdr, df=np.array([False, False]), mtu=1400)
    # 1420-byte segments over a 1400 MTU: two fragments each, made in software
    assert list(e.fragments) == [2, 1] and list(e.segments) == [6, 1]
    assert e.totals()["software_segments"] == 6 and e.totals()["hardware_segments"] == 0


def test_egress_bad_feature_name():
    from gropcap.errors import ConfigError
    with pytest.raises(ConfigError):
        egress.parse_features("tso,warp-drive")


# --- the seed cases doc ------------------------------------------------------------------

def test_seed_cases_doc_is_current():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "seed_cases.py"),
                        "--check"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_seed_cases_numbers_have_the_seed_direction():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import seed_cases
    p = os.path.join(SAMPLES, "crafted_ip6gre.pcap")
    a = seed_cases.run_side(p, cfg("4.16", model="napi", native_gro=False, tunnel_gro=True),
                            None)
    b = seed_cases.run_side(p, cfg("4.17", model="napi", native_gro=False, tunnel_gro=True),
                            None)
    assert b["delivered"] < a["delivered"] == a["packets"]


def test_compare_runs_reference_for_reference_only_rules():
    """compare with the default (fast) engine: a side using native_gro=false must still
    get its rule (the fast engine lacks it, so that side runs the reference)."""
    from click.testing import CliRunner

    from gropcap.cli import main
    import json

    import gropcap.cli.report as _cmds  # registers compare
    assert 'compare' in _cmds.COMMANDS

    r = CliRunner().invoke(main, ["compare", os.path.join(SAMPLES, "crafted_gre.pcap"),
                                  "--model", "ideal", "--format", "json",
                                  "--set-b", "native_gro=false"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.output)["metrics"]["ideal"]
    assert m["superpackets"] == [9, 35]


def test_compare_shows_stages_side_by_side():
    from click.testing import CliRunner

    from gropcap.cli import main
    import json

    import gropcap.cli.report as _cmds  # registers compare
    assert 'compare' in _cmds.COMMANDS

    r = CliRunner().invoke(main, ["compare", os.path.join(SAMPLES, "crafted_erspan2.pcap"),
                                  "--engine", "reference", "--model", "napi", "--format",
                                  "json", "--set-a", "tunnel_gro=false",
                                  "--set-b", "tunnel_gro=true"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["config_diff"]["tunnel_gro"] == [False, True]
    st = d["metrics"]["napi"]["stages"]
    assert st["gro_cells_in"] == [35, 35]
    assert st["delivered"][0] == 35 and st["delivered"][1] < 35
