"""Input gropcap cannot analyse must not look like a finding.

Regressions: a pcap of link type 105 (IEEE 802.11) exited 0 with a full report of ratio
1.00; `--kernel 4.21` and `--kernel 5.20` (never released) were accepted; the README said
damaged captures exit 1 while a capture cut short exited 0 (now documented: cut inside a
record -> analysed up to it with a warning, exit 0; cut inside the file header or
damaged -> one error line, exit 1).
"""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from gropcap.capture.writer import write_pcap, write_pcapng
from gropcap.cli import main
from gropcap.gro.config import KERNEL_RELEASES, KernelProfile
from gropcap.run.progress import COMPILE_NOTE

from where import ROOT

SAMPLE = os.path.join(ROOT, "sample_pcaps", "real_ipv4_p4.pcap")
FRAME = bytes(14) + b"\x45" + bytes(59)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def wifi(tmp_path):
    p = tmp_path / "wifi.pcap"
    write_pcap(str(p), [FRAME] * 5, [0, 1, 2, 3, 4], linktype=105)
    return str(p)


WIFI_ERROR = ("gropcap: error: {}: link type 105 (IEEE 802.11) is not supported: none of "
              "its 5 frames can be decoded; gropcap reads Ethernet, raw IPv4/IPv6, "
              "NULL/LOOP, Linux SLL/SLL2 and DSA tags (281, 282, 284, 285); capture on "
              "the receiving host's interface (tcpdump -i IFACE, or -i any for Linux SLL2)")


@pytest.mark.parametrize("args", [("analyze",), ("analyze", "--no-stream"),
                                  ("analyze", "--decoder", "reference"),
                                  ("explain", "--flow", "0")])
def test_no_frame_of_a_supported_link_type_is_an_error(wifi, args):
    r = run(*args, wifi)
    assert r.exit_code == 1, r.output
    # on a cold kernel cache (the first test of a fresh clone) the compile note comes first
    stderr = r.stderr.removeprefix(f"gropcap: {COMPILE_NOTE}\n")
    assert r.stdout == "" and stderr == WIFI_ERROR.format(wifi) + "\n"


def test_decode_refuses_it_too(wifi, tmp_path):
    r = run("decode", wifi, "-o", tmp_path / "p.parquet")
    assert r.exit_code == 1 and r.stderr == WIFI_ERROR.format(wifi) + "\n"
    assert not (tmp_path / "p.parquet").exists()


def test_some_frames_unsupported_is_a_warning_and_status_codes(tmp_path):
    p = tmp_path / "mixed.pcapng"
    write_pcapng(str(p), [FRAME] * 4, [0, 1, 2, 3], linktypes=(1, 105), ifaces=[0, 1, 0, 1])
    r = run("analyze", p, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["status"]["UNSUPPORTED_LINKTYPE"] == 2
    assert s["files"][0]["warnings"] == [
        "2 of 4 frames have link type 105 (IEEE 802.11), which gropcap does not decode: "
        "they pass GRO alone with status UNSUPPORTED_LINKTYPE"]
    text = run("analyze", p).stdout
    assert "2 of 4 frames have link type 105" in text


@pytest.mark.parametrize("kernel", ["4.21", "5.20", "6.19", "4.3"])
def test_kernel_that_never_existed_is_refused_naming_the_option(kernel):
    r = run("analyze", SAMPLE, "--kernel", kernel)
    assert r.exit_code == 2
    assert "Invalid value for '--kernel'" in r.stderr
    assert "choose a release from 4.4-4.20, 5.0-5.19, 6.0-6.18" in r.stderr


def test_kernel_release_list_is_the_real_one():
    assert len(KERNEL_RELEASES) == 17 + 20 + 19
    for text in ("4.4", "4.20", "5.0", "5.19", "6.0", "6.18", "6.1.0-50-amd64"):
        KernelProfile.parse(text)


def test_capture_cut_inside_a_record_is_analysed_with_a_warning(tmp_path):
    data = open(SAMPLE, "rb").read()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:-7])
    r = run("analyze", cut, "--format", "json")
    assert r.exit_code == 0, r.output
    (w,) = json.loads(r.stdout)["files"][0]["warnings"]
    assert w.startswith("file ends inside record ") and "byte offset" in w, w


def test_capture_cut_inside_its_header_is_one_error_line(tmp_path):
    cut = tmp_path / "head.pcap"
    cut.write_bytes(open(SAMPLE, "rb").read()[:10])
    r = run("analyze", cut)
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.startswith(f"gropcap: error: {cut}: ") and r.stderr.count("\n") == 1
