"""Receiver profiles: file format, --receiver on the commands, and the fit of
`gropcap calibrate` on a post-GRO view whose answer is known.

The fit test builds the kernel's view from the model itself under hidden parameters (each
super-packet becomes one frame carrying the merged payload, as tcpdump on the receiving
device shows it) and checks the fit finds parameters that reproduce it exactly, per flow,
where the defaults do not. The real pairs (recorded on the live kernel) are tested in
tests/receive/test_receiver_pairs.py.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner


import gropcap  # noqa: E402
from gropcap.cli import main  # noqa: E402
from gropcap.errors import ConfigError  # noqa: E402
from gropcap.gro.config import GroConfig  # noqa: E402
from gropcap.run.engines import simulate  # noqa: E402
from gropcap.run.memory import decode_files  # noqa: E402
from gropcap.calibrate import fit_tables, pair_view, residual  # noqa: E402
from gropcap.receive.profile import (  # noqa: E402
    apply_profile, load_profile, read_profile, save_profile,
)
from gropcap.cli.report import register  # noqa: E402

from where import TESTS

register(main)
SAMPLES = os.path.join(TESTS, "..", "sample_pcaps")
P4 = os.path.join(SAMPLES, "real_ipv4_p4.pcap")        # 4 parallel iperf3 streams
VALUES = {"queues": 2, "budget": 16, "poll_gap_us": 200.0, "hz": 1000,
          "gro_flush_timeout_us": 0.0, "napi_defer_hard_irqs": 0, "mtu": 1500}


def run(*args, code=0):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == code, (r.exit_code, r.output, r.exception)
    return r


# --- file format ---------------------------------------------------------------------

def test_profile_round_trip(tmp_path):
    path = tmp_path / "host.toml"
    fit = {"wire": "a.wire.pcap", "kernel_packets": 59, "fixed": ["hz"],
           "flows": [{"flow": "10.0.0.1:1 > 10.0.0.2:2 tcp", "kernel": 13, "model": 12,
                      "boundaries": 1}]}
    values = {**VALUES, "udp_gro": "socket", "udp_tunnels": "vxlan:4789", "tunnel_gro": False}
    save_profile(path, values, fit)
    assert load_profile(path) == values
    doc = read_profile(path)
    assert doc["fit"]["flows"] == fit["flows"]
    assert doc["fit"]["fixed"] == ["hz"]
    assert doc["format"] == 1
    # human-readable: one commented line per fitted value
    text = path.read_text()
    assert "poll_gap_us = 200.0" in text and "# NAPI budget" in text


def test_save_refuses_to_overwrite(tmp_path):
    path = tmp_path / "host.toml"
    save_profile(path, {"budget": 64})
    with pytest.raises(ConfigError, match="exists"):
        save_profile(path, {"budget": 8})
    save_profile(path, {"budget": 8}, force=True)
    assert load_profile(path) == {"budget": 8}


@pytest.mark.parametrize("body, key, what", [
    ('[receiver]\nbudget = "lots"\n', "budget", "expected an integer"),
    ("[receiver]\nbudget = 0\n", "budget", "must be positive"),
    ("[receiver]\npoll_gap_us = -3\n", "poll_gap_us", "non-negative"),
    ("[receiver]\ncolour = 3\n", "colour", "unknown key"),
    ("[receiver]\nmtu = 20\n", "mtu", "out of range"),
    ("[receiver]\nudp_gro = \"sometimes\"\n", "udp_gro", "unknown udp_gro mode"),
    ("[receiver\nbudget = 1\n", "line 1", "not a TOML"),
    ("budget = 64\n", "[receiver]", "no [receiver] table"),
])
def test_malformed_profile_is_one_line_naming_file_and_key(tmp_path, body, key, what):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_profile(path)
    line = e.value.one_line()
    assert str(path) in line and key in line and what in line, line
    r = CliRunner().invoke(main, ["analyze", P4, "--receiver", str(path)])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and key in lines[0], r.stderr
    assert "Traceback" not in r.output


def test_missing_profile_names_the_file(tmp_path):
    r = CliRunner().invoke(main, ["analyze", P4, "--receiver", str(tmp_path / "no.toml")])
    assert r.exit_code == 1
    assert "no.toml: receiver profile not found" in r.stderr


# --- applying a profile --------------------------------------------------------------

@pytest.fixture
def profile(tmp_path):
    """The NAPI values of VALUES (the MTU is left to the capture: builds with
    GroConfig.mtu apply it, and the comparisons below give no --mtu)."""
    path = tmp_path / "host.toml"
    save_profile(path, {k: v for k, v in VALUES.items() if k != "mtu"})
    return path


def _config_meta(out_dir):
    # packets.parquet, or the first part of the packets/ dataset a --jobs run writes
    path = os.path.join(out_dir, "packets.parquet")
    if not os.path.exists(path):
        path = os.path.join(out_dir, "packets", "part-00000.parquet")
    meta = pq.read_schema(path).metadata
    return (json.loads(meta[b"gropcap.config"]), json.loads(meta[b"gropcap.receiver"]))


def test_profile_values_apply_and_an_option_overrides_them(tmp_path, profile):
    out = tmp_path / "a"
    run("analyze", P4, "-q", "--receiver", profile, "--budget", 32, "--out", out)
    config, receiver = _config_meta(out)
    assert config["budget"] == 32                           # the option wins
    assert config["hz"] == 1000 and config["queues"] == 2   # the rest from the profile
    assert config["poll_gap_ns"] == 200_000
    assert config["receiver_profile"] == str(profile)
    assert receiver["overridden"] == ["budget"]
    assert "hz" in receiver["applied"] and "budget" not in receiver["applied"]
    # an option given with its default value still wins over the profile
    out2 = tmp_path / "b"
    run("analyze", P4, "-q", "--receiver", profile, "--hz", 250, "--out", out2)
    assert _config_meta(out2)[0]["hz"] == 250


def test_receiver_changes_the_napi_answer_like_the_options(profile):
    """--receiver gives exactly what the same values as options give."""
    as_profile = json.loads(run("analyze", P4, "-q", "--format", "json",
                                "--receiver", profile).output)
    as_options = json.loads(run("analyze", P4, "-q", "--format", "json", "--queues", 2,
                                "--budget", 16, "--poll-gap-us", 200, "--hz", 1000).output)
    default = json.loads(run("analyze", P4, "-q", "--format", "json").output)
    assert as_profile["models"] == as_options["models"]
    assert as_profile["models"]["napi"] != default["models"]["napi"]


@pytest.mark.parametrize("command", [
    ["compare", P4, "--set-b", "budget=64", "--format", "json"],
    ["explain", P4, "--flow", "0", "--breaks-only"],
])
def test_receiver_on_report_commands(profile, command):
    with_profile = run(*command, "--receiver", profile).output
    with_options = run(*command, "--queues", 2, "--budget", 16, "--poll-gap-us", 200,
                       "--hz", 1000).output
    assert with_profile == with_options


def test_baseline_with_receiver(tmp_path, profile):
    base = tmp_path / "base.json"
    run("baseline", "save", P4, "-o", base, "--receiver", profile)
    assert json.loads(base.read_text())["config"]["budget"] == 16
    run("baseline", "check", P4, "--against", base, "--receiver", profile)
    # without the profile the configuration differs: compared anyway, and one line says
    # what differs (the profile's values against the defaults)
    r = run("baseline", "check", P4, "--against", base)
    assert "differs from the baseline: configuration budget 16 -> 64" in r.stdout


def test_python_api_receiver(profile):
    a = gropcap.analyze(P4, GroConfig(budget=32), receiver=str(profile))
    assert a.config.budget == 32 and a.config.hz == 1000 and a.config.queues == 2
    assert a.receiver.path == str(profile) and "budget" in a.receiver.overridden
    assert json.loads(a.metadata()["gropcap.config"])["receiver_profile"] == str(profile)
    cfg, info = apply_profile(GroConfig(), load_profile(profile), explicit={"hz"})
    assert cfg.hz == 250 and cfg.budget == 16 and info.overridden == ("hz",)


# --- the fit -------------------------------------------------------------------------

def kernel_view(wire: pa.Table, result) -> pa.Table:
    """What tcpdump on the receiving device would show if the kernel built ``result``:
    one frame per super-packet, its first packet's headers carrying the merged payload."""
    first = np.asarray(result.seg_first_packet, np.int64)
    post = wire.take(pa.array(first))
    i = post.schema.get_field_index("payload_len")
    payload = pa.array(np.asarray(result.seg_payload_len),
                       type=post.schema.field("payload_len").type)
    return post.set_column(i, post.schema.field("payload_len"), payload)


def test_fit_reproduces_a_known_receiver_per_flow():
    wire, _ = decode_files(P4)
    hidden = GroConfig(model="napi", queues=2, budget=8, poll_gap_ns=20_000, hz=1000)
    post = kernel_view(wire, simulate(wire, hidden))
    view = pair_view(wire, post)
    assert len(view.flows) >= 4 and view.kernel_total == post.num_rows
    # the hidden receiver polls by timing; the sample's ACKs come from a receiver with
    # GRO off (docs/gro-model.md), so the fit must not take its polls from them
    fit = fit_tables(wire, post, fixed={"poll_acks": False})
    r = fit.residual
    assert r.score == 0 and r.model_total == post.num_rows, fit.values
    for _, k, m, b in r.flows:
        assert (k, b) == (m, 0)
    # the defaults do not fit, so the test can fail
    assert fit.default_residual.score > 0
    # the fitted values give the same answer through the ordinary pipeline
    cfg, _ = apply_profile(GroConfig(model="napi"), fit.values)
    again = simulate(wire, cfg)
    assert residual(view, again.seg_first_packet).score == 0


def test_fit_holds_fixed_values():
    wire, _ = decode_files(P4)
    post = kernel_view(wire, simulate(wire, GroConfig(model="napi", budget=8,
                                                     poll_gap_ns=20_000)))
    fit = fit_tables(wire, post, fixed={"budget": 300, "hz": 100, "poll_acks": False})
    assert fit.values["budget"] == 300 and fit.values["hz"] == 100
    assert set(fit.fixed) == {"budget", "hz", "poll_acks"}


def test_residual_counts_boundaries_not_only_totals():
    """Moving one super-packet boundary keeps the total but is a difference of 2."""
    wire, _ = decode_files(P4)
    res = simulate(wire, GroConfig(model="napi"))
    post = kernel_view(wire, res)
    view = pair_view(wire, post)
    first = np.asarray(res.seg_first_packet, np.int64)
    assert residual(view, first).score == 0
    counts = np.asarray(res.seg_count)
    j = int(np.flatnonzero((counts > 2) & (np.asarray(res.seg_payload_len) > 0))[0])
    moved = first.copy()
    moved[j] += 1            # the super-packet starts one segment later
    r = residual(view, moved)
    assert r.model_total == r.kernel_total and r.boundary_difference == 2


def test_calibrate_cli_refuses_existing_output_before_work(tmp_path):
    out = tmp_path / "host.toml"
    out.write_text("keep")
    r = CliRunner().invoke(main, ["calibrate", P4, P4, "-o", str(out)])
    assert r.exit_code == 1 and "exists" in r.stderr
    assert out.read_text() == "keep"


@pytest.mark.parametrize("mode", [[], ["--no-stream"], ["--jobs", "1", "--parallel", "workers"]])
def test_streamed_and_distributed_runs_record_the_profile(tmp_path, profile, mode):
    out = tmp_path / "o"
    run("analyze", P4, "-q", "--receiver", profile, "--budget", 32, "--out", out, *mode)
    config, receiver = _config_meta(out)
    assert config["budget"] == 32 and config["hz"] == 1000
    assert config["receiver_profile"] == str(profile) and receiver["overridden"] == ["budget"]


@pytest.mark.parametrize("changes", [
    {}, {"queues": 4, "budget": 8}, {"hz": 1000, "poll_gap_ns": 5_000},
    {"gro_flush_timeout_ns": 50_000, "napi_defer_hard_irqs": 2},
])
def test_rerun_prepared_equals_simulate(changes):
    """The fit's shortcut (prepare once, kernels per candidate) builds the super-packets
    a whole simulate() builds."""
    from gropcap.gro import engine as E
    wire, _ = decode_files(P4)
    cfg = GroConfig(model="napi", **changes)
    st = E.EngineState.new(cfg)
    cols, ts = E.prepare(wire, cfg, st)
    other = cfg.replace(budget=3, poll_gap_ns=1)       # a different candidate first
    E.rerun_prepared(cols, ts, other.replace(queues=cfg.queues), st)
    segs = E.rerun_prepared(cols, ts, cfg, st)
    got = np.sort(np.concatenate([s["first"] for s in segs]))
    want = np.sort(np.asarray(simulate(wire, cfg).seg_first_packet))
    np.testing.assert_array_equal(got, want)


def test_stream_api_takes_a_profile_path(tmp_path, profile):
    from gropcap.run.stream import stream_analyze
    res = stream_analyze(P4, GroConfig(budget=32), receiver=str(profile),
                         out_dir=str(tmp_path / "s"))
    config, receiver = _config_meta(tmp_path / "s")
    assert config["budget"] == 32 and config["hz"] == 1000 and config["queues"] == 2
    assert receiver["overridden"] == ["budget"]
    a = gropcap.analyze(P4, GroConfig(budget=32), receiver=str(profile))
    assert res.summary["models"] == a.summary()["models"]
