"""Namespaces left by killed replays: owner records, the stale scan, --cleanup-stale.

Any user: owner liveness from /proc (exited, zombie, pid reused, other boot, other PID
namespace) and the scan over a fake /run/netns. Root with ``ip netns``: real namespace pairs
held by child processes, one SIGKILLed, one alive, plus an unrelated namespace; the CLI must
delete exactly the killed one's pair. Records go to a private directory (GROPCAP_RUN_DIR),
so replays of other users on this machine are neither seen nor touched.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gropcap.errors import GropcapError
from gropcap.replay import _netns as N
from gropcap.cli.replay import cleanup_lines, stale_hint

from where import ROOT

ROOT = Path(ROOT)
SAMPLE = ROOT / "sample_pcaps" / "real_ipv4.pcap"


def _live_reason() -> str | None:
    """Why real namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is missing"
    try:
        N.check_environment()
    except GropcapError as e:
        return str(e)
    return None


LIVE_REASON = _live_reason()
live = pytest.mark.skipif(LIVE_REASON is not None,
                          reason=f"real namespaces unavailable: {LIVE_REASON}")


def _own_stat_fields() -> list[str]:
    """/proc/self/stat split after the command name (an independent parse)."""
    data = Path("/proc/self/stat").read_text()
    return data[data.rindex(")") + 2:].split()


def _record(tag, names, **kw) -> N.OwnerRecord:
    base = N.current_owner(tag, names)
    return N.OwnerRecord(**{**base.__dict__, **kw})


def _exited_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# ------------------------------------------------------------------ any user
def test_owner_of_this_process_is_live_and_start_time_is_stat_field_22():
    rec = N.current_owner("0123abcd", ())
    assert rec.pid == os.getpid()
    assert rec.starttime == int(_own_stat_fields()[19])
    assert N.owner_state(rec) == ("live", f"owner pid {os.getpid()} is running")


def test_reused_pid_is_stale():
    """A live process with the recorded pid but another start time is not the owner."""
    rec = _record("0123abcd", (), starttime=N.current_owner("x", ()).starttime - 1)
    state, why = N.owner_state(rec)
    assert state == "stale" and "reused" in why


def test_exited_owner_is_stale():
    pid = _exited_pid()
    if os.path.exists(f"/proc/{pid}"):
        pytest.skip("the pid was reused at once")
    state, why = N.owner_state(_record("0123abcd", (), pid=pid))
    assert (state, why) == ("stale", f"owner pid {pid} exited")


def test_zombie_owner_is_stale():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        state, start = N._proc_stat(p.pid)
        rec = _record("0123abcd", (), pid=p.pid, starttime=start)
        assert N.owner_state(rec)[0] == "live"
        deadline = time.monotonic() + 20
        while N._proc_stat(p.pid)[0] != "Z":          # exited, not yet reaped
            assert time.monotonic() < deadline, "child never became a zombie"
            time.sleep(0.05)
        assert N.owner_state(rec) == ("stale", f"owner pid {p.pid} exited (zombie)")
    finally:
        p.kill()
        p.wait()


def test_other_boot_is_stale_other_pid_namespace_is_unknown():
    assert N.owner_state(_record("0123abcd", (), boot_id="not-this-boot"))[0] == "stale"
    assert N.owner_state(_record("0123abcd", (), pidns="pid:[1]"))[0] == "unknown"


def test_command_name_with_parentheses_and_spaces(tmp_path):
    """/proc/<pid>/stat field 2 is '(comm)' and comm may hold ') ('."""
    exe = tmp_path / "a) b (c"
    exe.symlink_to(sys.executable)
    p = subprocess.Popen([str(exe), "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while "a) b (c" not in Path(f"/proc/{p.pid}/stat").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        state, start = N._proc_stat(p.pid)
        assert state in "RSD" and start >= N.current_owner("x", ()).starttime
    finally:
        p.kill()
        p.wait()


def _fake_host(tmp_path):
    """A record dir and a fake /run/netns with every kind of namespace; returns names."""
    rec_dir, netns = tmp_path / "run", tmp_path / "netns"
    rec_dir.mkdir()
    netns.mkdir()
    names = {}

    def pair(kind, **kw):
        tag = secrets.token_hex(4)
        ns = (f"gropcap-tx-{tag}", f"gropcap-rx-{tag}")
        N.write_owner_record(_record(tag, ns, **kw), str(rec_dir))
        names[kind] = ns
        return ns

    for n in pair("live") + pair("dead", pid=_exited_pid()) + \
            pair("otherns", pidns="pid:[1]"):
        (netns / n).touch()
    pair("no_namespaces", pid=_exited_pid())       # killed before `ip netns add`
    # a damaged record naming a namespace outside its pair must not make it stale
    tag = secrets.token_hex(4)
    (rec_dir / f"replay-{tag}.json").write_text(json.dumps(
        {"namespaces": ["other-victim", f"gropcap-tx-{tag}"], "pid": _exited_pid(),
         "starttime": 1}))
    (rec_dir / f"replay-{secrets.token_hex(4)}.json").write_text("{not json")
    for n in ("other-victim", f"gropcap-tx-{tag}", "gropcap-tx-deadbeef", "other-1234"):
        (netns / n).touch()
    names["forged"] = f"gropcap-tx-{tag}"
    return rec_dir, netns, names


def test_scan_classifies_by_owner_and_ignores_foreign_namespaces(tmp_path):
    rec_dir, netns, names = _fake_host(tmp_path)
    scan = N.scan_namespaces(directory=str(rec_dir), netns_dir=str(netns))
    got = {n.name: n.state for n in scan.namespaces}
    want = {**{n: "live" for n in names["live"]}, **{n: "stale" for n in names["dead"]},
            **{n: "unknown" for n in names["otherns"]},
            names["forged"]: "unrecorded", "gropcap-tx-deadbeef": "unrecorded"}
    assert got == want                    # other-victim, other-1234: never looked at
    assert [n.name for n in scan.stale] == sorted(names["dead"])
    assert [r.namespaces for r in scan.stale_records] == [names["no_namespaces"]]


def test_dry_run_lists_and_removes_nothing(tmp_path):
    rec_dir, netns, names = _fake_host(tmp_path)
    before = sorted(os.listdir(rec_dir)), sorted(os.listdir(netns))
    rep = N.cleanup_stale(dry_run=True, directory=str(rec_dir), netns_dir=str(netns))
    assert (sorted(os.listdir(rec_dir)), sorted(os.listdir(netns))) == before
    assert [n.name for n in rep.removed] == sorted(names["dead"])
    assert rep.records_removed == 0 and rep.failed == ()
    out, err = cleanup_lines(rep)
    pid = rep.removed[0].owner.pid
    assert out == [f"stale {n} (owner pid {pid} exited)" for n in sorted(names["dead"])] + \
        ["2 stale gropcap namespaces (dry run: nothing removed)"]
    # the look-alike without a record and the unknown owner are named on stderr, not the
    # live pair
    assert any(names["forged"] in e and "no owner record" in e for e in err)
    assert sum(names["otherns"][0] in e for e in err) == 1
    assert not any(n in e for e in err for n in names["live"])


def test_stale_hint_names_the_command(tmp_path):
    rec_dir, netns, names = _fake_host(tmp_path)
    line = stale_hint(N.scan_namespaces(directory=str(rec_dir), netns_dir=str(netns)))
    assert line.startswith("gropcap: note: 2 stale gropcap namespaces")
    assert "gropcap kernel-replay --cleanup-stale" in line and "\n" not in line
    assert all(n in line for n in names["dead"])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert stale_hint(N.scan_namespaces(directory=str(empty), netns_dir=str(netns))) is None


def test_cli_option_errors():
    from gropcap.cli import main
    r = CliRunner().invoke(main, ["kernel-replay", "--dry-run"])
    assert r.exit_code == 2 and "--cleanup-stale" in r.output
    r = CliRunner().invoke(main, ["kernel-replay", "--cleanup-stale", str(SAMPLE)])
    assert r.exit_code == 2 and "takes no FILES" in r.output
    r = CliRunner().invoke(main, ["kernel-replay"])
    assert r.exit_code == 2 and "FILES" in r.output


# ------------------------------------------------------------------ root + ip netns
_HOLDER = {
    # a replay's own set-up (veth pair, GRO, AF_PACKET sockets), then waiting
    "replay": "from gropcap.replay.kernel import ReplaySession as P\n"
              "with P() as s:\n    print(s.pair.ns_tx, s.pair.ns_rx, flush=True)\n"
              "    time.sleep(600)\n",
    "pair": "from gropcap.replay._netns import VethPair as P\n"
            "with P() as p:\n    print(p.ns_tx, p.ns_rx, flush=True)\n    time.sleep(600)\n",
}


def _netns_exists(name: str) -> bool:
    return os.path.lexists(os.path.join(N.NETNS_RUN_DIR, name))


class _Host:
    """Child processes holding namespace pairs, and a guaranteed clean-up."""

    def __init__(self, rec_dir: Path):
        self.rec_dir = rec_dir
        self.env = {**os.environ, N.RUN_DIR_ENV: str(rec_dir)}
        self.children: list[subprocess.Popen] = []
        self.extra: list[str] = []

    def hold(self, kind: str) -> tuple[subprocess.Popen, tuple[str, str]]:
        p = subprocess.Popen([sys.executable, "-c", "import time\n" + _HOLDER[kind]],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                             cwd=ROOT)
        self.children.append(p)
        ready, _, _ = select.select([p.stdout], [], [], 60)
        line = p.stdout.readline().decode() if ready else ""
        if len(line.split()) != 2:
            p.kill()
            raise AssertionError(f"holder failed: {p.stderr.read().decode()[-2000:]}")
        self.extra += line.split()        # deleted at the end even if no record names them
        return p, tuple(line.split())

    def add(self, name: str) -> str:
        self.extra.append(name)
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        return name

    def close(self) -> None:
        for p in self.children:
            if p.poll() is None:
                p.kill()
            p.wait()
        names = set(self.extra)
        for f in self.rec_dir.glob("replay-*.json"):
            names.update(json.loads(f.read_text())["namespaces"])
        for n in names:
            if _netns_exists(n):
                subprocess.run(["ip", "netns", "del", n], capture_output=True)


@pytest.fixture
def host(tmp_path, monkeypatch):
    rec_dir = tmp_path / "run"
    monkeypatch.setenv(N.RUN_DIR_ENV, str(rec_dir))
    h = _Host(rec_dir)
    try:
        yield h
    finally:
        h.close()


def _cli(*args):
    from gropcap.cli import main
    r = CliRunner().invoke(main, ["kernel-replay", *args])
    return r.exit_code, r.stdout.splitlines(), r.stderr.splitlines()


@live
def test_cleanup_removes_exactly_the_killed_replays_namespaces(host, monkeypatch):
    killed, dead_ns = host.hold("replay")
    alive, live_ns = host.hold("pair")
    other = host.add(f"other-{secrets.token_hex(4)}")
    assert all(_netns_exists(n) for n in dead_ns + live_ns)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert all(_netns_exists(n) for n in dead_ns), "SIGKILL ran a clean-up?"
    dead_record = host.rec_dir / f"replay-{dead_ns[0].rsplit('-', 1)[1]}.json"
    assert dead_record.exists()

    scan = N.scan_namespaces()
    assert [n.name for n in scan.stale] == sorted(dead_ns)
    assert {n.name for n in scan.of_state("live")} == set(live_ns)

    # --dry-run: lists, removes nothing
    rc, out, _err = _cli("--cleanup-stale", "--dry-run")
    assert rc == 0
    assert out == [f"stale {n} (owner pid {killed.pid} exited)" for n in sorted(dead_ns)] + \
        ["2 stale gropcap namespaces (dry run: nothing removed)"]
    assert all(_netns_exists(n) for n in dead_ns + live_ns + (other,))
    assert dead_record.exists()

    # a normal replay only mentions them (one stderr line), it does not delete them
    import gropcap.replay.kernel as K

    def stop(*a, **kw):
        raise GropcapError("stopped by the test")
    monkeypatch.setattr(K, "replay", stop)
    rc, _out, err = _cli(str(SAMPLE))
    assert rc == 1
    hints = [e for e in err if "--cleanup-stale" in e]
    assert len(hints) == 1 and all(n in hints[0] for n in dead_ns)
    assert all(_netns_exists(n) for n in dead_ns)

    rc, out, _err = _cli("--cleanup-stale")
    assert rc == 0
    assert out == [f"removed {n} (owner pid {killed.pid} exited)" for n in sorted(dead_ns)] + \
        ["removed 2 stale gropcap namespaces"]
    assert not any(_netns_exists(n) for n in dead_ns) and not dead_record.exists()
    assert all(_netns_exists(n) for n in live_ns + (other,))
    assert alive.poll() is None

    rc, out, _err = _cli("--cleanup-stale")
    assert (rc, out) == (0, ["removed 0 stale gropcap namespaces"])
    assert all(_netns_exists(n) for n in live_ns + (other,))

    # the live replay still ends cleanly: namespaces and record gone on SIGTERM
    alive.send_signal(signal.SIGTERM)
    alive.wait(30)
    assert not any(_netns_exists(n) for n in live_ns)
    assert list(host.rec_dir.glob("replay-*.json")) == []


@live
def test_reused_pid_does_not_keep_or_revive_namespaces(host):
    """Real namespaces recorded for this (live) pid: kept with its start time, deleted
    with another start time (the pid was reused by a newer process)."""
    me = N.current_owner("x", ())
    pairs = {}
    for kind, start in (("mine", me.starttime), ("reused", me.starttime - 1)):
        tag = secrets.token_hex(4)
        ns = (f"gropcap-tx-{tag}", f"gropcap-rx-{tag}")
        N.write_owner_record(_record(tag, ns, starttime=start), str(host.rec_dir))
        for n in ns:
            host.add(n)
        pairs[kind] = ns
    rep = N.cleanup_stale()
    assert sorted(n.name for n in rep.removed) == sorted(pairs["reused"])
    assert "reused" in rep.removed[0].why and rep.records_removed == 1
    assert not any(_netns_exists(n) for n in pairs["reused"])
    assert all(_netns_exists(n) for n in pairs["mine"])
    assert {n.name for n in rep.kept} >= set(pairs["mine"])
