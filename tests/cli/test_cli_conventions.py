"""CLI conventions (issue 16 item 9): one spelling per option across commands, old
spellings kept as hidden aliases, help in sections, `-` for stdin, errors that name the
option, compare settings by option name, explain as JSON. Exact output where text matters.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gropcap.cli import main

from where import TESTS

HERE = TESTS
SAMPLES = os.path.join(HERE, "..", "sample_pcaps")
REAL = os.path.join(SAMPLES, "real_ipv4.pcap")
GRE = os.path.join(SAMPLES, "crafted_gre.pcap")


def invoke(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], prog_name="gropcap",
                              terminal_width=80, **kw)


def ok(*args, **kw):
    r = invoke(*args, **kw)
    assert r.exit_code == 0, r.output
    return r.stdout     # stderr has progress and the closing line


# --- help -------------------------------------------------------------------------------

TOP_HELP = """\
Usage: gropcap [OPTIONS] COMMAND [ARGS]...

  Replay Linux GRO over packet captures: how far would the kernel aggregate this
  traffic, why does each packet stop aggregating, and how many segments does
  each super-packet become again.

  Exit status: 0 success; 1 an error, reported in one line (a damaged
  capture, no frame of a supported link type, an output that cannot be
  written: checked before any packet is read); 2 bad usage; 130
  interrupted (nothing left behind).

Options:
  --version   Show the version and exit.
  -h, --help  Show this message and exit.

Commands:
  analyze        Simulate GRO over captures and summarise how far it aggregates
                 and why it stops.
  baseline       Regression baselines: record GRO metrics of captures, check
                 later runs against them.
  calibrate      Fit a host's receive parameters to a wire view and the kernel's
                 post-GRO view of the same traffic, and write a profile for
                 --receiver.
  compare        Two captures side by side (A B), or one capture under two
                 configurations (A --set-b kernel=6.1).
  decode         Decode captures into a packet table (Parquet), one row per
                 frame.
  explain        Walk one flow packet by packet: which super-packet each packet
                 joined and, at every break, the header field that differed
                 (held value -> new value, expected value).
  kernel-replay  Replay capture FILES through this machine's kernel GRO (veth,
                 root) and compare the super-packets it builds with the
                 simulator's.
  tune           Rank the receive-side changes (gro_flush_timeout +
                 napi_defer_hard_irqs, BIG TCP, RX queues, rx-gro-list, GRO on
                 tunnel devices, UDP tunnel sockets) by the napi model's
                 aggregation on the captures, with the command for each.
"""


def test_bare_gropcap_prints_the_help_and_exits_0():
    r = invoke()
    assert r.exit_code == 0
    assert r.output == TOP_HELP
    assert ok("--help") == TOP_HELP


def test_command_list_is_not_cut_with_dots():
    """Regression: click cut each command's sentence to fit 80 columns ("...")."""
    out = ok("--help")
    assert "..." not in out.split("Commands:")[1]
    assert "(held value -> new value, expected value)." in out
    assert max(len(line) for line in out.splitlines()) <= 80


DECODE_HELP = """\
Usage: gropcap decode [OPTIONS] FILES...

  Decode captures into a packet table (Parquet), one row per frame.

Input options:
  --decoder [fast|reference]      Capture reader and header decoder: numba over
                                  a memory map, or the plain-Python reference
                                  (identical tables).  [default: fast]
  --dsa-tag [dsa|edsa|brcm|brcm-prepend]
                                  Ethernet capture taken on a DSA conduit: tag
                                  to strip.

Tunnel options:
  --vxlan-port INTEGER RANGE      UDP port decoded as VXLAN (repeatable; default
                                  4789).  [1<=x<=65535]
  --geneve-port INTEGER RANGE     UDP port decoded as Geneve (default 6081).
                                  [1<=x<=65535]
  --vxlan-gpe-port INTEGER RANGE  UDP port decoded as VXLAN-GPE (default 4790).
                                  [1<=x<=65535]
  --fou-port PORT:PROTO           Foo-over-UDP receive port and the IP protocol
                                  it carries (4, 41 or 47), e.g. 5555:4.
  --gue-port INTEGER RANGE        UDP port decoded as GUE.  [1<=x<=65535]

Output options:
  -o, --out FILE  Parquet file to write the packet table to.  [required]
  --force         Replace an existing output file.

Other options:
  -h, --help  Show this message and exit.
"""


def test_decode_help_exact():
    assert ok("decode", "--help") == DECODE_HELP


def _sections(text):
    return re.findall(r"^(\w[\w ]*) options:$", text, re.M)


@pytest.mark.parametrize("argv,sections", [
    (["analyze"], ["Input", "Kernel", "Receiver", "Tunnel", "Egress", "Output", "Run",
                   "Other"]),
    (["explain"], ["Input", "Kernel", "Receiver", "Tunnel", "Output", "Run", "Other"]),
    (["compare"], ["Input", "Kernel", "Receiver", "Tunnel", "Output", "Run", "Other"]),
    (["baseline", "save"], ["Input", "Kernel", "Receiver", "Tunnel", "Output", "Run",
                            "Other"]),
    (["baseline", "check"], ["Input", "Kernel", "Receiver", "Tunnel", "Run", "Other"]),
    (["kernel-replay"], ["Input", "Kernel", "Receiver", "Tunnel", "Output", "Run",
                         "Other"]),
])
def test_every_help_is_in_sections(argv, sections):
    out = ok(*argv, "--help")
    assert _sections(out) == sections
    other = out.split("Other options:\n", 1)[1]
    # only --help is left without a section: every gropcap option declares one
    assert other.strip() == "-h, --help  Show this message and exit."
    # hidden aliases stay out of the help
    for alias in ("--output", "--flush-timeout-us", "--json"):
        assert alias not in out


def test_a_command_run_on_its_own_keeps_both_help_options():
    """A command object run outside the group (as the API and some tests do) takes
    ``-h`` too, and a later run through the group still lists ``-h, --help``: click
    keeps the help option a command made first."""
    from gropcap.cli.replay import kernel_replay
    alone = CliRunner().invoke(kernel_replay, ["-h"])
    assert alone.exit_code == 0, alone.output
    assert "-h, --help" in alone.output
    assert "-h, --help  Show this message and exit." in ok("kernel-replay", "--help")


ANALYZE_KERNEL_SECTION = """\
Kernel options:
  --kernel X.Y[.Z]            Kernel release whose GRO rules apply: 4.4-4.20,
                              5.0-5.19 or 6.0-6.18 (default: newest modelled,
                              6.18); X.Y.Z adds the stable backports up to that
                              release.
  --hz INTEGER RANGE          CONFIG_HZ (jiffy length for the old-packet flush).
                              [default: 250; 1<=x<=10000]
  --vlan-gro / --no-vlan-gro  VLAN GRO (vlan_gro_receive); off for kernels built
                              without CONFIG_VLAN_8021Q: 802.1Q/802.1ad frames
                              skip GRO.  [default: vlan-gro]
"""


def test_analyze_help_kernel_section_exact():
    assert ANALYZE_KERNEL_SECTION in ok("analyze", "--help")


ANALYZE_INPUT_SECTION = """\
Input options:
  --captures [auto|continuous|separate]
                                  How several input files are replayed:
                                  continuous (one receiver, one timeline: the
                                  pieces of a rotated capture), separate (each
                                  file on a receiver of its own, the counts
                                  summed: copies, other hosts or days), auto (a
                                  file whose first timestamp is earlier than the
                                  latest one before it starts a new receiver;
                                  otherwise it continues). The report says
                                  which.  [default: auto]
  --decoder [fast|reference]      Capture reader and header decoder: numba over
                                  a memory map, or the plain-Python reference
                                  (identical tables).  [default: fast]
  --dsa-tag [dsa|edsa|brcm|brcm-prepend]
                                  Ethernet capture taken on a DSA conduit: tag
                                  to strip.

"""


def test_analyze_help_input_section_exact():
    """--captures (run/receivers.py) is an input option: how several files are read."""
    assert ANALYZE_INPUT_SECTION in ok("analyze", "--help")


# --- one spelling per option, old ones as hidden aliases ----------------------------------

def test_output_option_is_o_out_everywhere_and_output_still_works(tmp_path):
    for flag in ("-o", "--out", "--output"):
        out = tmp_path / f"p{flag.strip('-')}.parquet"
        ok("decode", REAL, flag, out)
        assert pq.read_table(out).num_rows > 0
    for flag in ("-o", "--out", "--output"):
        d = tmp_path / f"res{flag.strip('-')}"
        ok("analyze", GRE, flag, d, "--model", "ideal", "--format", "json")
        assert (d / "flows.parquet").exists()
    for flag in ("-o", "--out", "--output"):
        b = tmp_path / f"b{flag.strip('-')}.json"
        ok("baseline", "save", GRE, flag, b, "--model", "ideal")
        assert json.loads(b.read_text())["captures"]


def test_missing_output_names_the_shown_spelling():
    r = invoke("decode", REAL)
    assert r.exit_code == 2
    assert r.output.splitlines()[-1] == "Error: Missing option '-o' / '--out'."


def test_gro_flush_timeout_one_name_one_type():
    a = json.loads(ok("compare", GRE, "--gro-flush-timeout-us", "12.5", "--format", "json",
                      "--model", "ideal"))
    b = json.loads(ok("compare", GRE, "--flush-timeout-us", "12.5", "--format", "json",
                      "--model", "ideal"))
    assert a["a"]["config"]["gro_flush_timeout_ns"] == 12500
    assert a == b


# --- errors name the option ---------------------------------------------------------------

@pytest.mark.parametrize("argv,line", [
    (["analyze", REAL, "--kernel", "3.0"],
     "Error: Invalid value for '--kernel': kernel 3.0 is not modelled; choose a release "
     "from 4.4-4.20, 5.0-5.19, 6.0-6.18"),
    (["analyze", REAL, "--kernel", "banana"],
     "Error: Invalid value for '--kernel': kernel version 'banana' is not X.Y or X.Y.Z; "
     "give a release such as 6.18, 6.6 or 5.15, or a stable one such as 6.1.192"),
    (["analyze", REAL, "--kernel", "6.1.x"],
     "Error: Invalid value for '--kernel': kernel version '6.1.x' is not X.Y or X.Y.Z; "
     "give a release such as 6.18, 6.6 or 5.15, or a stable one such as 6.1.192"),
    (["analyze", REAL, "--udp-tunnel", "bogus:1"],
     "Error: Invalid value for '--udp-tunnel': unknown udp tunnel kind 'bogus'; use one "
     "of vxlan, vxlan-gpe, geneve, fou, gue"),
    (["explain", REAL, "--flow", "0", "--udp-tunnel", "vxlan"],
     "Error: Invalid value for '--udp-tunnel': udp tunnel 'vxlan' is not KIND:PORT; e.g. "
     "vxlan:4789,geneve:6081"),
    (["kernel-replay", REAL, "--kernel", "9.9"],
     "Error: Invalid value for '--kernel': kernel 9.9 is not modelled; choose a release "
     "from 4.4-4.20, 5.0-5.19, 6.0-6.18"),
    (["kernel-replay", REAL, "--udp-tunnel", "gre:1"],
     "Error: Invalid value for '--udp-tunnel': unknown udp tunnel kind 'gre'; use one of "
     "vxlan, vxlan-gpe, geneve, fou, gue"),
])
def test_bad_kernel_and_udp_tunnel_errors_name_the_option(argv, line):
    r = invoke(*argv)
    assert r.exit_code == 2
    assert r.output.splitlines()[-1] == line


# --- '-' reads the capture from stdin -----------------------------------------------------

def test_dash_reads_the_capture_from_stdin(tmp_path):
    data = open(GRE, "rb").read()
    from_file = json.loads(ok("analyze", GRE, "--format", "json"))
    from_stdin = json.loads(ok("analyze", "-", "--format", "json", input=data))
    assert from_stdin["models"] == from_file["models"]
    assert from_stdin["files"][0]["digest"] == from_file["files"][0]["digest"]
    assert from_stdin["files"][0]["path"].endswith("/stdin")    # reports name stdin
    out = tmp_path / "p.parquet"
    ok("decode", "-", "-o", out, input=data)
    assert pq.read_table(out).num_rows == from_file["packets"]
    flows = json.loads(ok("explain", "-", "--flow", "0", "--format", "json", input=data))
    assert flows["flows"][0]["packets_in"] > 0
    # compressed input on stdin: recognised by its content like a file
    import gzip
    gz = json.loads(ok("analyze", "-", "--format", "json", input=gzip.compress(data)))
    assert gz["models"] == from_file["models"]


def test_dash_spool_is_removed_and_twice_is_refused(tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    data = open(GRE, "rb").read()
    ok("analyze", "-", "--format", "json", "--model", "ideal", input=data)
    assert not list(tmp_path.glob("gropcap-stdin-*"))
    r = invoke("compare", "-", "-", input=data)
    assert r.exit_code == 2
    assert r.output.splitlines()[-1] == ("Error: Invalid value for '[B]': '-' given twice: "
                                         "stdin holds one capture")


# --- compare --set-a/--set-b take the option names ----------------------------------------

def _cmp(*settings):
    return json.loads(ok("compare", GRE, "--model", "napi", "--format", "json", *settings))


def test_compare_settings_by_option_name_equal_internal_names():
    by_option = _cmp("--set-b", "gro-flush-timeout-us=50", "--set-b", "poll-gap-us=20",
                     "--set-a", "kernel=6.1")
    internal = _cmp("--set-b", "gro_flush_timeout_ns=50000", "--set-b", "poll_gap_ns=20000",
                    "--set-a", "kernel=6.1")
    assert by_option == internal
    assert by_option["a"]["config"]["kernel"] == "6.1"
    assert by_option["b"]["config"]["gro_flush_timeout_ns"] == 50000
    assert by_option["b"]["config"]["poll_gap_ns"] == 20000
    off = _cmp("--set-b", "no-native-gro=true")
    assert off["b"]["config"]["native_gro"] is False
    tun = _cmp("--set-b", "udp-tunnel=vxlan:4789")
    assert tun["b"]["config"]["udp_tunnels"] == "vxlan:4789"


def test_compare_unknown_setting_says_what_is_valid():
    r = invoke("compare", GRE, "--set-b", "colour=blue")
    assert r.exit_code == 2
    assert r.output.splitlines()[-1] == (
        "Error: Invalid value for '--set-b': 'colour=blue' is not KEY=VALUE with KEY one of: "
        "budget, gro-flush-timeout-us, gro-ipv4-max-size, gro-max-size, hz, kernel, mtu, "
        "napi-defer-hard-irqs, native-gro, no-native-gro, no-poll-acks, no-rx-gro-list, "
        "no-tunnel-gro, no-vlan-gro, poll-acks, poll-gap-us, queues, receiver, rss, rss-key, rx-gro-list, tcp-forwarded, "
        "tcp-local-socket, tunnel-gro, udp-gro, udp-tunnel, "
        "verify-checksums, vlan-gro (GroConfig field names such as poll_gap_ns are "
        "accepted too)")
    r = invoke("compare", GRE, "--set-a", "poll-gap-us=-1")
    assert r.exit_code == 2
    assert r.output.splitlines()[-1] == ("Error: Invalid value for '--set-a': "
                                         "'poll-gap-us=-1': -1.0 is not in the range x>=0.")


# --- explain --format json ------------------------------------------------------------------

def test_explain_json_matches_the_text_walk():
    text = ok("explain", REAL, "--flow", "0")
    doc = json.loads(ok("explain", REAL, "--flow", "0", "--format", "json"))
    (flow,) = doc["flows"]
    assert text.splitlines()[0] == f"flow 0: {flow['flow']['title']}"
    assert f"{flow['packets_in']} packets -> {flow['superpackets_out']} super-packets" in text
    rows = [line.split() for line in text.splitlines()
            if re.match(r"^\s+\d+\s+\d+\.\d{3}\s", line)]
    assert [int(r[0]) for r in rows] == [p["packet"] for p in flow["packets"]]
    assert [r[-1] for r in rows] == [p["verdict"] for p in flow["packets"]]
    # every packet that did not merge is a break, with the text's `why:` detail
    assert [b["packet"] for b in flow["breaks"]] == \
        [p["packet"] for p in flow["packets"] if p["verdict"] != "MERGED"]
    whys = [line.strip()[len("why: "):] for line in text.splitlines()
            if line.strip().startswith("why: ")]
    details = [b["checks"][0]["detail"] for b in flow["breaks"] if b["checks"][0]["detail"]]
    assert [w[:40] for w in whys] == [d[:40] for d in details]
    assert sum(s["segments"] for s in flow["superpackets"]) == flow["packets_in"]
    brk = json.loads(ok("explain", REAL, "--flow", "0", "--format", "json", "--breaks-only"))
    assert [p["packet"] for p in brk["flows"][0]["packets"]] == \
        [b["packet"] for b in flow["breaks"]]


@pytest.mark.parametrize("given, advised", [(None, False), ("1", True)])
def test_the_command_line_turns_numpy_huge_pages_off_unless_asked(given, advised):
    """``gropcap.__main__.main`` sets NUMPY_MADVISE_HUGEPAGE=0 before numpy is imported
    (two-thread runs pay for zeroing fresh 2 MiB pages: docs/performance.md); a value
    the caller set stays."""
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if given is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = given
    out = _after_main("""
        try:
            from numpy._core.multiarray import _get_madvise_hugepage
        except ImportError:            # numpy 1
            from numpy.core.multiarray import _get_madvise_hugepage
        print("advised", _get_madvise_hugepage())
    """, env)
    assert f"advised {advised}" in out


def _after_main(tail: str, env: dict) -> str:
    """The stdout of a child that runs ``gropcap.__main__.main`` (``--version``) with
    ``env``, then ``tail``: an atexit callback, as ``main`` ends the process itself
    (``interrupt.exit_now``, which runs them)."""
    code = textwrap.dedent("""
        import atexit, sys
        sys.argv = ["gropcap", "--version"]
        import gropcap.__main__ as m


        def tail():
    """) + textwrap.indent(textwrap.dedent(tail), "    ") + textwrap.dedent("""


        atexit.register(tail)
        m.main()
    """)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
@pytest.mark.parametrize("given, kept", [(None, True), ("MALLOC_ARENA_MAX", False)])
def test_the_command_line_keeps_freed_blocks_unless_malloc_is_set(given, kept):
    """``gropcap.__main__.tune_malloc`` (run by ``main``): a freed 100 MB array stays in
    the heap (glibc would have mapped it and unmapped it); a ``MALLOC_*`` variable the
    caller set leaves glibc's defaults."""
    code = textwrap.dedent("""
        import gropcap.__main__ as m
        print("tuned", m.tune_malloc())
        import numpy as np
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
        a = np.ones(100 << 17)
        before = rss()
        del a
        print("kept", rss() > before - 50)
    """)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    if given is not None:
        env[given] = "8"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert f"tuned {kept}" in out and f"kept {kept}" in out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
@pytest.mark.parametrize("given, backend", [
    ({}, "system"), ({"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}, "jemalloc"),
    ({"MALLOC_ARENA_MAX": "8"}, None)])
def test_the_command_line_gives_arrow_glibcs_malloc(given, backend):
    """``gropcap.__main__.main`` makes glibc's malloc Arrow's pool when it tuned glibc
    (``arrow_pool``): a pool the caller chose stays, and with glibc left alone
    (``MALLOC_*`` set) so does Arrow's default."""
    import pyarrow as pa
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")
           and k not in ("GLIBC_TUNABLES", "ARROW_DEFAULT_MEMORY_POOL")}
    env.update(given)
    if "jemalloc" in given.values() and "jemalloc" not in pa.supported_memory_backends():
        pytest.skip("this pyarrow has no jemalloc")
    out = _after_main("""
        import pyarrow as pa
        print("backend", pa.default_memory_pool().backend_name)
    """, env)
    default = pa.default_memory_pool().backend_name if not os.environ.get(
        "ARROW_DEFAULT_MEMORY_POOL") else None
    assert f"backend {backend or default}" in out, out
