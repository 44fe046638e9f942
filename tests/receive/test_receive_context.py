"""Say what was assumed: the receive context (gropcap/receive/context.py) in the text and JSON
reports, how much of the napi result depends on it, and UDP tunnels that met no tunnel
socket (report/receive.py)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from gropcap.cli import main
from gropcap.receive.context import ReceiveContext
from gropcap.gro.config import GroConfig
from gropcap.gro.reasons import BYPASS_UDP_NO_GRO, REASONS, reason_name
from gropcap.run.memory import analyze
from gropcap.run.hints import napi_dependence, tunnel_hint

from where import TESTS

SAMPLES = os.path.join(TESTS, os.pardir, "sample_pcaps")
VXLAN = os.path.join(SAMPLES, "real_vxlan.pcap")
GENEVE = os.path.join(SAMPLES, "crafted_geneve.pcap")
IPV4 = os.path.join(SAMPLES, "real_ipv4.pcap")


def cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


def test_sources_option_default_inferred_in_json():
    d = json.loads(cli("analyze", IPV4, "-q", "--format", "json", "--queues", "4",
                       "--hz", "250"))
    rc = d["receive"]
    # --hz 250 equals the default, but it was typed: "option"
    assert rc["queues"] == {"value": 4, "source": "option"}
    assert rc["hz"] == {"value": 250, "source": "option"}
    assert rc["budget"] == {"value": 64, "source": "default"}
    assert rc["mtu"] == {"value": 1500, "source": "inferred"}
    assert rc["gro_flush_timeout_us"] == {"value": 0, "source": "default"}
    given = json.loads(cli("analyze", IPV4, "-q", "--format", "json", "--mtu", "9000"))
    assert given["receive"]["mtu"] == {"value": 9000, "source": "option"}


def test_text_report_lists_the_context():
    out = cli("analyze", IPV4, "-q", "--queues", "4")
    assert "MTU 1500, inferred from the MSS option of 4 SYNs (MSS 1460)" in out
    assert "receive context, given: queues 4" in out
    assert "receive context, defaults: budget 64, hz 250," in " ".join(out.split())


def test_notebook_context_from_config():
    a = analyze(IPV4, GroConfig(budget=16))
    rc = a.summary()["receive"]
    assert rc["budget"] == {"value": 16, "source": "option"}
    assert rc["hz"]["source"] == "default" and rc["mtu"]["source"] == "inferred"


def test_apply_profile_marks_profile_and_options_win():
    rc = ReceiveContext.from_config(GroConfig(queues=2), given={"queues"})
    changes = rc.apply_profile({"queues": 8, "gro_flush_timeout_us": 200, "mtu": 9000})
    assert changes == {"gro_flush_timeout_ns": 200_000, "mtu": 9000}
    assert rc["queues"] == (2, "option")
    assert rc["gro_flush_timeout_us"] == (200, "profile")
    # an inferred MTU does not override the profile's
    from gropcap.gro.mtu import MtuInference
    assert rc.with_mtu(MtuInference(1500, "inferred", "x"))["mtu"] == (9000, "profile")
    with pytest.raises(KeyError):
        rc.apply_profile({"no_such": 1})
    cfg = GroConfig(queues=2).replace(**changes)
    assert (cfg.gro_flush_timeout_ns, cfg.mtu) == (200_000, 9000)


def test_napi_dependence_counts_context_end_reasons():
    a = analyze(IPV4, GroConfig(budget=8))
    s = a.summary()
    dep = s["napi_dependence"]
    ends = a.results["napi"].seg_end_reason
    n = len(ends)
    for name, share in dep["shares"].items():
        assert share == round(int(np.count_nonzero(
            [reason_name(int(e)) == name for e in ends])) / n, 4)
    assert dep["shares"]["END_POLL"] > 0.05         # budget 8: polls end super-packets
    assert dep["ideal_ratio"] == s["models"]["ideal"]["aggregation_ratio"]
    assert dep["napi_ratio"] < dep["ideal_ratio"]
    assert napi_dependence({"ideal": s["models"]["ideal"]}) is None
    out = " ".join(cli("analyze", IPV4, "-q", "--budget", "8").split())
    assert f"{100 * dep['shares']['END_POLL']:.0f}% by a poll end" in out


def test_vxlan_without_socket_says_so_and_models_the_option():
    a = analyze(VXLAN)
    hint = tunnel_hint(a)
    assert hint["tunnels"] == [{"kind": "vxlan", "port": 4789, "packets": 1973}]
    assert hint["option"] == "--udp-tunnel vxlan:4789"
    with_it = analyze(VXLAN, GroConfig(udp_tunnels="vxlan:4789")).summary()["models"]
    for m in ("ideal", "napi"):
        assert hint["models"][m]["ratio"] == 1.0
        assert hint["models"][m]["ratio_with"] == with_it[m]["aggregation_ratio"] > 5
    out = " ".join(cli("analyze", VXLAN, "-q").split())
    assert ("tunnel sockets: 1973 VXLAN packets on UDP 4789 met no tunnel socket" in out
            and f"(--udp-tunnel vxlan:4789) gives: ideal 1.00 -> "
                f"{with_it['ideal']['aggregation_ratio']:.2f}" in out)
    d = json.loads(cli("analyze", VXLAN, "-q", "--format", "json"))
    assert d["udp_tunnel_hint"]["option"] == "--udp-tunnel vxlan:4789"
    # with the socket configured: nothing to say
    out = cli("analyze", VXLAN, "-q", "--udp-tunnel", "vxlan:4789")
    assert "tunnel sockets:" not in out
    assert "udp_tunnel_hint" not in cli("analyze", VXLAN, "-q", "--format", "json",
                                        "--udp-tunnel", "vxlan:4789")


def test_geneve_without_socket():
    a = analyze(GENEVE)
    hint = tunnel_hint(a)
    assert [(t["kind"], t["port"]) for t in hint["tunnels"]] == [("geneve", 6081)]
    assert hint["option"] == "--udp-tunnel geneve:6081"
    with_it = analyze(GENEVE, GroConfig(udp_tunnels="geneve:6081")).summary()["models"]
    assert hint["models"]["ideal"]["ratio_with"] == with_it["ideal"]["aggregation_ratio"]
    assert with_it["ideal"]["aggregation_ratio"] > hint["models"]["ideal"]["ratio"]


def test_large_capture_hint_names_the_option_without_running():
    a = analyze(VXLAN)
    a._cache.pop("tunnel_hint", None)
    hint = tunnel_hint(a, max_rows=10, napi_max_rows=10)
    assert hint["models"] is None and hint["option"] == "--udp-tunnel vxlan:4789"
    assert hint["left_out"] == ["ideal", "napi"]
    a._cache.pop("tunnel_hint", None)
    hint = tunnel_hint(a, napi_max_rows=10)       # the ideal model runs on the tunnel rows
    assert list(hint["models"]) == ["ideal"] and hint["left_out"] == ["napi"]
    from gropcap.report.receive import tunnel_lines
    assert "napi not run again (too many rows)" in " ".join(" ".join(tunnel_lines(hint)).split())


def test_ideal_hint_on_the_tunnel_rows_equals_the_whole_capture(tmp_path):
    """The ideal model runs the tunnels' rows alone: on a capture mixing plain TCP and
    VXLAN the result equals a run of the whole capture with the socket."""
    import shutil
    d = tmp_path / "mixed"
    d.mkdir()
    shutil.copy(IPV4, d / "a.pcap")
    shutil.copy(VXLAN, d / "b.pcap")
    a = analyze(str(d))
    hint = tunnel_hint(a, napi_max_rows=10**9)
    whole = analyze(str(d), GroConfig(udp_tunnels="vxlan:4789")).summary()["models"]
    assert hint["models"]["ideal"]["ratio_with"] == whole["ideal"]["aggregation_ratio"]
    assert hint["models"]["napi"]["ratio_with"] == whole["napi"]["aggregation_ratio"]
    assert hint["models"]["ideal"]["ratio"] < whole["ideal"]["aggregation_ratio"]


def test_a_reference_run_runs_its_hint_on_the_reference_engine(monkeypatch):
    """The hint's models run again on the engine the analysis ran on: a run on the
    reference engine (the command line's first run on a cold cache) compiled the numba
    GRO engine for its hint alone (48 s of that 49 s first run on this sample). Same
    hint either way."""
    want = tunnel_hint(analyze(VXLAN))
    a = analyze(VXLAN, engine="reference", decoder="reference")
    assert a.engine == "reference"
    import gropcap.gro.engine as fast

    def no_fast(*args, **kwargs):
        raise AssertionError("the hint ran the numba engine")
    monkeypatch.setattr(fast, "simulate", no_fast)
    assert tunnel_hint(a) == want and set(want["models"]) == {"ideal", "napi"}


def test_reason_text_names_udp_tunnel():
    assert "--udp-tunnel" in REASONS[BYPASS_UDP_NO_GRO].text


def test_streamed_vxlan_hint_equals_in_memory(tmp_path):
    """A streamed run detects the tunnels while decoding, names the option and runs the
    models again on the tunnel rows (ideal) and the capture read back (napi), as the
    in-memory hint does."""
    from gropcap.report.summary import render_text
    from gropcap.run.stream import stream_analyze
    r = stream_analyze(VXLAN, tmp_dir=str(tmp_path), batch_records=500)
    a = analyze(VXLAN)
    assert r.udp_tunnel_hint == tunnel_hint(a)
    assert r.udp_tunnel_hint["tunnels"] == [{"kind": "vxlan", "port": 4789, "packets": 1973}]
    assert r.udp_tunnel_hint["option"] == "--udp-tunnel vxlan:4789"
    assert set(r.udp_tunnel_hint["models"]) == {"ideal", "napi"}
    out = " ".join(render_text(r).split())
    assert "tunnel sockets: 1973 VXLAN packets on UDP 4789 met no tunnel socket" in out
    assert render_text(r) == render_text(a)
    d = json.loads(cli("analyze", VXLAN, "-q", "--stream", "--format", "json"))
    assert d["udp_tunnel_hint"]["option"] == "--udp-tunnel vxlan:4789"
    assert d["receive"] == json.loads(cli("analyze", VXLAN, "-q", "--format",
                                          "json"))["receive"]


def test_report_says_when_the_capture_holds_the_receivers_acks():
    """real_ipv4.pcap holds both directions: the receiver's ACKs of each data direction.
    The timing-only napi run says so and names --poll-acks; a run with it does not; a
    one-direction capture (a pair's wire view) gets no hint."""
    from gropcap.api import analyze as api_analyze
    from gropcap.report.summary import render_text
    here = os.path.join(TESTS, "..", "sample_pcaps")
    a = api_analyze(os.path.join(here, "real_ipv4.pcap"))
    hint = a.summary()["poll_acks_hint"]
    flows = a.flows.to_pylist()
    data = [f for f in flows if f["l4_proto"] == 6 and f["payload_bytes"] > 0]
    assert hint == {"directions": len(data), "option": "--poll-acks"} and len(data) >= 2
    assert "--poll-acks infers the napi polls" in render_text(a, width=100)
    assert api_analyze(os.path.join(here, "real_ipv4.pcap"),
                       poll_acks=True).summary()["poll_acks_hint"] is None
    wire = api_analyze(os.path.join(here, "pairs", "bulk.wire.pcap"))
    assert wire.summary()["poll_acks_hint"] is None
    assert "--poll-acks" not in render_text(wire, width=100)
