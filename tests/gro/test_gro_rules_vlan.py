"""GroConfig.vlan_gro: a kernel built without CONFIG_VLAN_8021Q has no vlan_gro_receive, so
in-band 802.1Q / 802.1ad frames skip GRO (BYPASS_NO_VLAN_GRO), in both engines."""

from __future__ import annotations

import numpy as np
import pytest

from gropcap.gro import reasons as R
from gropcap.gro import reference
from gropcap.gro.config import GroConfig
from gropcap.gro.engine import simulate as fast_simulate
from tests.gro.test_gro_engine_traffic import packet_table, tcp_row

from where import TESTS


def _flow(tag: dict | None):
    rows = [tcp_row(4, "10.0.0.1", "10.0.0.2", 1, 2, seq=i * 1448, ip_id=i) for i in range(4)]
    for r in rows:
        if tag:
            r.update(tag)
    return packet_table(rows)


@pytest.mark.parametrize("simulate", [fast_simulate, reference.simulate],
                         ids=["fast", "reference"])
@pytest.mark.parametrize("tag", [dict(eth_type=0x8100, vlan_depth=1, vlan_tpid0=0x0800,
                                      vlan_tci0=100),
                                 dict(eth_type=0x88A8, vlan_depth=2, vlan_tpid0=0x8100,
                                      vlan_tci0=10, vlan_tpid1=0x0800, vlan_tci1=20)],
                         ids=["dot1q", "qinq"])
def test_tagged_frames_bypass_without_vlan_gro(simulate, tag):
    t = _flow(tag)
    on = simulate(t, GroConfig())
    assert on.seg_count.tolist() == [4]               # vlan_gro_receive: merged
    off = simulate(t, GroConfig(vlan_gro=False))
    assert off.reason.tolist() == [R.BYPASS_NO_VLAN_GRO] * 4
    assert off.seg_count.tolist() == [1, 1, 1, 1]
    off.check_invariants(t.column("payload_len").to_numpy())


@pytest.mark.parametrize("simulate", [fast_simulate, reference.simulate],
                         ids=["fast", "reference"])
def test_untagged_frames_unaffected(simulate):
    t = _flow(None)
    a, b = simulate(t, GroConfig()), simulate(t, GroConfig(vlan_gro=False))
    assert np.array_equal(a.reason, b.reason) and a.seg_count.tolist() == [4]


def test_vlan_gro_in_config_dict_only_when_off():
    assert "vlan_gro" not in GroConfig().to_dict()
    assert GroConfig(vlan_gro=False).to_dict()["vlan_gro"] is False
    assert R.REASONS[R.BYPASS_NO_VLAN_GRO].name == "BYPASS_NO_VLAN_GRO"
    assert "802.1Q" in R.REASONS[R.BYPASS_NO_VLAN_GRO].text


def test_cli_no_vlan_gro_on_tagged_sample():
    import json
    import os

    from click.testing import CliRunner

    from gropcap.cli import main

    path = os.path.join(TESTS, "..", "sample_pcaps", "crafted_vlan.pcap")
    if not os.path.exists(path):
        pytest.skip("sample_pcaps/crafted_vlan.pcap missing")
    out = {}
    for flag in ("--vlan-gro", "--no-vlan-gro"):
        r = CliRunner().invoke(main, ["analyze", path, "--model", "ideal", "--format", "json",
                                      flag])
        assert r.exit_code == 0, r.output
        out[flag] = json.loads(r.stdout)["models"]["ideal"]
    n = out["--no-vlan-gro"]["packets_in"]
    # every frame of the sample is 802.1Q-tagged: without VLAN GRO none merges
    assert out["--no-vlan-gro"]["reasons"] == {"BYPASS_NO_VLAN_GRO": n}
    assert out["--no-vlan-gro"]["superpackets_out"] == n
    assert out["--vlan-gro"]["superpackets_out"] < n
