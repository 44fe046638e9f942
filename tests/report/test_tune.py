"""`gropcap tune`: variants ranked by the napi model's measured aggregation, each with a
well-formed command."""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
from click.testing import CliRunner

from gropcap.cli import main
from gropcap.gro.config import GroConfig
from gropcap.run.memory import analyze
from gropcap.report.tune import tune

from where import TESTS

SAMPLES = os.path.join(TESTS, os.pardir, "sample_pcaps")
IPV4 = os.path.join(SAMPLES, "real_ipv4_p4.pcap")
VXLAN = os.path.join(SAMPLES, "real_vxlan.pcap")

# one pattern per kind of command tune prints (DEV = eth0 here)
COMMANDS = [
    r"echo \d+ > /sys/class/net/eth0/gro_flush_timeout",
    r"echo \d+ > /sys/class/net/eth0/napi_defer_hard_irqs",
    r"ip link set dev eth0 gro_max_size \d+( gro_ipv4_max_size \d+)?",
    r"ethtool -L eth0 combined \d+",
    r"ethtool -K eth0 rx-gro-list on",
    r"ethtool -K eth0 rx-udp-gro-forwarding on",
    r"ethtool -K TUNDEV gro on",
    r"ip link add (vxlan0|geneve0) type (vxlan|geneve) dstport \d+( gpe)? external",
    r"ip fou add port \d+ (ipproto \d+|gue)",
]


def well_formed(cmd: str) -> bool:
    shlex.split(cmd)                      # quotes balance
    return any(re.fullmatch(p, cmd) for p in COMMANDS)


def _napi(path, config):
    return analyze(path, config, models=("napi",)).summary()["models"]["napi"]


@pytest.mark.parametrize("path,base", [(IPV4, GroConfig(queues=2)), (VXLAN, GroConfig())],
                         ids=["ipv4_p4", "vxlan"])
def test_ranked_by_measured_aggregation(path, base):
    r = tune(path, base, dev="eth0")
    ratios = [v["ratio"] for v in r["variants"]]
    assert ratios == sorted(ratios, reverse=True)
    assert r["current"]["ratio"] == _napi(path, base)["aggregation_ratio"]
    # each ratio is what analyze gives with that change (checked on the top and bottom)
    for v in (r["variants"][0], r["variants"][-1]):
        cfg = base.replace(**v["changes"])
        if cfg.tunnel_gro is None:
            assert v["ratio"] == _napi(path, cfg)["aggregation_ratio"]
        assert v["gain"] == round(v["ratio"] / r["current"]["ratio"] - 1, 4)
    for v in r["variants"]:
        assert v["commands"] and all(well_formed(c) for c in v["commands"]), v


def test_vxlan_ranks_the_tunnel_socket_first():
    r = tune(VXLAN, dev="eth0")
    top = r["variants"][0]
    assert top["name"] == "UDP tunnel socket: vxlan:4789"
    assert top["commands"] == ["ip link add vxlan0 type vxlan dstport 4789 external"]
    assert top["ratio"] > 5 * r["current"]["ratio"]


def test_variants_cover_the_knobs():
    names = [v["name"] for v in tune(IPV4, GroConfig(queues=2), dev="eth0")["variants"]]
    assert sum("gro_flush_timeout" in n for n in names) >= 3
    assert any(n.startswith("BIG TCP") for n in names)
    assert "1 RX queue" in names and "4 RX queues" in names
    # an old kernel has no BIG TCP: not offered
    old = tune(IPV4, GroConfig(kernel=GroConfig().kernel.parse("5.10")), dev="eth0")
    assert not any(v["name"].startswith("BIG TCP") for v in old["variants"])


def test_cli_text_and_json():
    r = CliRunner().invoke(main, ["tune", IPV4, "--dev", "eth0", "--queues", "2",
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["current"]["ratio"] > 1 and len(d["variants"]) >= 5
    r = CliRunner().invoke(main, ["tune", IPV4, "--dev", "eth0", "--queues", "2"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("napi model on ")
    top = d["variants"][0]
    assert re.search(rf"^\s+1\s+{re.escape(top['name'])}\s+{top['ratio']:.2f}", r.output,
                     re.M)
    assert f"  1. {top['commands'][0]}" in r.output
