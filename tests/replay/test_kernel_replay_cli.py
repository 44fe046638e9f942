"""`gropcap kernel-replay` as a user meets it (issue 16 item 13): the settings it used and
why its counts differ from analyze's, unsupported files skipped without stopping a
multi-file run, an actionable message for a missing tunnel module, and the option names
shared with the other commands (item 9).

The command tests replace the kernel replay by the simulator (no root needed); the live
ones at the end need root and network namespaces and skip with the reason elsewhere.
"""

from __future__ import annotations

import json
import os

import click
import pytest
from click.testing import CliRunner

from gropcap import selftest_cases as ST
from gropcap.replay import _wire
from gropcap.replay.kernel import DeliveredUnit, KernelReplayResult, split_bursts
from tests.live import live

from where import ROOT

SAMPLES = os.path.join(ROOT, "sample_pcaps")
DSA = os.path.join(SAMPLES, "crafted_dsa_dsa.pcap")

SETTINGS = """\
replay: bursts of at most 63 frames, each one GRO window (a kick frame opens
  it); receiving veth: gro_flush_timeout 20000 us, napi_defer_hard_irqs 1,
  budget 64, UDP tunnel devices none
simulator: kernel 6.18 rules, napi model with the same bursts as polls, RSS off
  (veth), checksums verified, engine fast
note: counts can differ from `gropcap analyze`'s: here each burst is one GRO
  window by construction, while analyze infers NAPI polls from the capture's
  timestamps (--poll-gap-us, --budget) and spreads flows over RX queues (RSS)
"""

DSA_SKIPPED = (f"{DSA}: skipped: DSA-tagged link type 284: a veth cannot be a DSA conduit "
               f"(no tag stripping); `gropcap analyze --dsa-tag` models it")


@pytest.fixture
def fake_kernel(monkeypatch):
    """kernel.replay delivers what the simulator predicts; records its keyword args."""
    from gropcap.replay import kernel
    from gropcap.cli import replay as command
    from gropcap.replay.compare import simulate_replay

    calls = []

    def fake(frames, bursts=None, **kw):
        calls.append(kw)
        sent = [_wire.fix_frame(f, w)[0] for f, w in zip(frames, kw["wire_lens"])]
        r = KernelReplayResult(sent, ["kept"] * len(sent), split_bursts(bursts, len(sent)),
                               [], [], (6, 18), "6.18-fake",
                               {"flush_timeout_ns": kw["flush_timeout_ns"]})
        _p, sim = simulate_replay(r, kernel=(6, 18))
        r.units = [DeliveredUnit(tuple(range(int(a), int(b) + 1)), int(pl), int(g), int(t),
                                 True, 0)
                   for a, b, pl, g, t in zip(sim.seg_first_packet, sim.seg_last_packet,
                                             sim.seg_payload_len, sim.seg_gso_size,
                                             sim.seg_gso_type)]
        return r

    monkeypatch.setattr(kernel, "replay", fake)
    monkeypatch.setattr(command, "_warn_stale", lambda: None)   # no root needed here
    return calls


def _case(tmp_path, name="flags_psh"):
    p = tmp_path / f"{name}.pcap"
    ST.write_case_pcap(p, name, "ipv4")
    return str(p)


def run(*args):
    from gropcap.cli import main
    return CliRunner().invoke(main, ["kernel-replay", *map(str, args)],
                              prog_name="gropcap", terminal_width=80)


def test_prints_the_settings_and_why_counts_differ(fake_kernel, tmp_path):
    p = _case(tmp_path)
    r = run(p, "--kernel", "6.18")
    assert r.exit_code == 0, r.output
    assert r.output == SETTINGS + f"{p}: kernel 6.18: 3/3 super-packets agree\n"
    assert fake_kernel[0]["flush_timeout_ns"] == 20_000_000
    assert fake_kernel[0]["budget"] == 64 and fake_kernel[0]["defer"] == 1


def test_an_unsupported_file_does_not_stop_a_multi_file_run(fake_kernel, tmp_path):
    a, b = _case(tmp_path), _case(tmp_path, "data_same")
    r = run(a, DSA, b, "--kernel", "6.18")
    assert r.exit_code == 0, r.output
    lines = r.output[len(SETTINGS):].splitlines()
    assert lines[0] == f"{a}: kernel 6.18: 3/3 super-packets agree"
    assert "\n".join(lines[1:-2]).replace("\n  ", " ") == DSA_SKIPPED
    assert lines[-2].startswith(f"{b}: kernel 6.18: ") and "agree" in lines[-2]
    assert lines[-1] == "3 files: 2 agree, 0 differ, 1 skipped, 0 failed"
    assert len(fake_kernel) == 2          # the DSA file never reached the kernel


def test_nothing_replayable_and_damaged_files_exit_1(fake_kernel, tmp_path):
    r = run(DSA, "--kernel", "6.18")
    assert r.exit_code == 1
    assert r.output.endswith("gropcap: error: no file could be replayed\n")
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all, not at all")
    good = _case(tmp_path)
    r = run(bad, good, "--kernel", "6.18")
    assert r.exit_code == 1
    assert f"gropcap: error: {bad}: byte offset 0, record 0: not a pcap" in r.output
    assert f"{good}: kernel 6.18: 3/3 super-packets agree" in r.output
    assert r.output.splitlines()[-1] == "2 files: 1 agree, 0 differ, 0 skipped, 1 failed"


def test_json_format_and_hidden_aliases(fake_kernel, tmp_path):
    p = _case(tmp_path)
    new = run(p, DSA, "--kernel", "6.18", "--format", "json", "--gro-flush-timeout-us", "1500.5")
    old = run(p, DSA, "--kernel", "6.18", "--json", "--flush-timeout-us", "1500.5")
    assert new.exit_code == old.exit_code == 0, new.output
    assert new.output == old.output
    first, skipped = [json.loads(line) for line in new.output.splitlines()]
    assert first["ok"] and first["file"] == p
    assert first["settings"] == {"burst": 63, "budget": 64, "engine": "fast",
                                 "gro_flush_timeout_us": 1500.5, "napi_defer_hard_irqs": 1,
                                 "udp_tunnels": [], "mtu": 65535}
    assert skipped["file"] == DSA and skipped["skipped"].startswith("DSA-tagged link type 284")
    assert fake_kernel[0]["flush_timeout_ns"] == 1_500_500


def test_engine_default_is_the_same_in_every_command():
    from gropcap.cli import main
    ctx = click.Context(main)
    defaults = {}
    for name in ("analyze", "explain", "compare", "kernel-replay"):
        cmd = main.get_command(ctx, name)
        (p,) = [p for p in cmd.params if p.name == "engine"]
        defaults[name] = p.default
    for name in ("save", "check"):
        cmd = main.get_command(ctx, "baseline").get_command(ctx, name)
        (p,) = [p for p in cmd.params if p.name == "engine"]
        defaults[f"baseline {name}"] = p.default
    assert set(defaults.values()) == {"fast"}, defaults


@pytest.mark.parametrize("built,modules,msg,hint", [
    ("n", "n", "cannot create a geneve device: this kernel (R) lacks the geneve module "
               "(CONFIG_GENEVE is not set) and cannot load modules (CONFIG_MODULES is not "
               "set), so 'modprobe geneve' cannot help",
     "boot a kernel built with CONFIG_GENEVE=y or =m, or replay without geneve"),
    ("n", "y", "cannot create a geneve device: this kernel (R) was built without the geneve "
               "module (CONFIG_GENEVE is not set), so 'modprobe geneve' will not find it",
     "boot a kernel built with CONFIG_GENEVE=m or =y, or replay without geneve"),
    ("m", "y", "cannot create a geneve device: the geneve module of this kernel (R) is not "
               "loaded (Error: Unknown device type.)",
     "load it with 'modprobe geneve' (as root), then run again"),
    (None, None, "cannot create a geneve device: the geneve module of this kernel (R) is "
                 "not loaded (Error: Unknown device type.)",
     "load it with 'modprobe geneve' (as root), then run again"),
])
def test_missing_tunnel_module_message(built, modules, msg, hint):
    from gropcap.replay._netns import ReplayEnvironmentError, missing_device_error
    values = {"CONFIG_GENEVE": built, "CONFIG_MODULES": modules}
    e = missing_device_error("geneve", "Error: Unknown device type.", config=values.get)
    assert isinstance(e, ReplayEnvironmentError)
    assert e.one_line() == f"{msg}; {hint}".replace("(R)", f"({os.uname().release})")


# ------------------------------------------------------------------ root: the live kernel


@pytest.mark.root
@live
def test_live_multi_file_run_skips_the_dsa_sample():
    gre = os.path.join(SAMPLES, "crafted_gre.pcap")
    r = run(DSA, gre)
    assert r.exit_code == 0, r.output
    assert f"{gre}: kernel " in r.output and "9/9 super-packets agree" in r.output
    assert r.output.splitlines()[-1] == "2 files: 1 agree, 0 differ, 1 skipped, 0 failed"


@pytest.mark.root
@live
def test_live_missing_geneve_module_is_actionable():
    from gropcap.replay._netns import kernel_config_option
    if kernel_config_option("CONFIG_GENEVE") in ("y", "m"):
        pytest.skip("this kernel has geneve (CONFIG_GENEVE y/m): nothing is missing")
    gen = os.path.join(SAMPLES, "crafted_geneve.pcap")
    r = run(gen, gen, "--udp-tunnel", "geneve:6081")
    assert r.exit_code == 1
    errors = [line for line in r.output.splitlines() if line.startswith("gropcap: error")]
    assert len(errors) == 1, r.output      # the run stops: no file can be replayed here
    assert errors[0].startswith("gropcap: error: cannot create a geneve device: ")
    assert "modprobe geneve" in errors[0] and "CONFIG_GENEVE" in errors[0]
