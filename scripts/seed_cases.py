"""The seed threads' what-if cases on the bundled samples: the table in docs/seed-cases.md.

    python scripts/seed_cases.py            # print the markdown table
    python scripts/seed_cases.py --write    # rewrite the table in docs/seed-cases.md
    python scripts/seed_cases.py --check    # exit 1 when the doc's table is stale

Each case runs one capture under two configurations (A, B) through both GRO stages
(native, then gro_cells: gropcap.gro.stages) with the napi model, and, where the seed is
about egress, the GSO accounting of gropcap.egress.egress. Deterministic: crafted samples and
fixed recordings, reference engine.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gropcap.gro.config import GroConfig, KernelProfile  # noqa: E402
from gropcap.gro.stages import simulate_stages, stages_summary  # noqa: E402
from gropcap.egress import egress, egress_headers, parse_features  # noqa: E402
from gropcap.run.memory import decode_files  # noqa: E402

DOC = os.path.join(ROOT, "docs", "seed-cases.md")
BEGIN, END = "<!-- seed-cases:begin -->", "<!-- seed-cases:end -->"


def _cfg(kernel="6.18", **kw) -> GroConfig:
    return GroConfig(kernel=KernelProfile.parse(kernel), model="napi", **kw)


# (seed, capture, side A label + config + egress, side B label + config + egress)
# egress: None, or (scenario, features, stage) with stage "native" / "delivered"
CASES = [
    ("ip6gre gro_cells (+55%)", "crafted_ip6gre.pcap",
     ("4.16, native GRO off", _cfg("4.16", native_gro=False, tunnel_gro=True), None),
     ("4.17, native GRO off", _cfg("4.17", native_gro=False, tunnel_gro=True), None)),
    ("ip6erspan gro_cells (+55%)", "ip6erspan (crafted)",
     ("4.16", _cfg("4.16", tunnel_gro=True), None),
     ("4.17", _cfg("4.17", tunnel_gro=True), None)),
    ("ERSPAN II: only gro_cells aggregates", "crafted_erspan2.pcap",
     ("native only", _cfg(tunnel_gro=False), None),
     ("native + gro_cells", _cfg(tunnel_gro=True), None)),
    ("ERSPAN III: only gro_cells aggregates", "crafted_erspan3.pcap",
     ("native only", _cfg(tunnel_gro=False), None),
     ("native + gro_cells", _cfg(tunnel_gro=True), None)),
    ("DSA user port gro_cells (+35%)", "crafted_dsa_edsa.pcap",
     ("5.7", _cfg("5.7", tunnel_gro=True), None),
     ("5.8", _cfg("5.8", tunnel_gro=True), None)),
    ("DSA brcm tag", "crafted_dsa_brcm.pcap",
     ("5.7", _cfg("5.7", tunnel_gro=True), None),
     ("5.8", _cfg("5.8", tunnel_gro=True), None)),
    ("GRO off on the NIC, on for the tunnel (GRE)", "crafted_gre.pcap",
     ("both off", _cfg(native_gro=False, tunnel_gro=False), None),
     ("tunnel GRO only", _cfg(native_gro=False, tunnel_gro=True), None)),
    ("GRO off on the NIC, on for the tunnel (VXLAN)", "real_vxlan.pcap",
     ("both off", _cfg(native_gro=False, tunnel_gro=False, udp_tunnels="vxlan:4789"), None),
     ("tunnel GRO only", _cfg(native_gro=False, tunnel_gro=True,
                              udp_tunnels="vxlan:4789"), None)),
    ("VXLAN needs a tunnel socket", "real_vxlan.pcap",
     ("no vxlan device", _cfg(), None),
     ("vxlan:4789", _cfg(udp_tunnels="vxlan:4789"), None)),
    ("decap + forward, NIC TSO only (+60%)", "real_vxlan.pcap",
     ("4.5", _cfg("4.5", udp_tunnels="vxlan:4789"), ("decap", "tso")),
     ("4.6", _cfg("4.6", udp_tunnels="vxlan:4789"), ("decap", "tso"))),
    ("decap + forward GRE, NIC TSO only", "crafted_gre.pcap",
     ("4.5", _cfg("4.5"), ("decap", "tso")),
     ("4.6", _cfg("4.6"), ("decap", "tso"))),
    ("GRE forwarded encapsulated: GRE TSO (+20-25%)", "crafted_gre.pcap",
     ("tso", _cfg(), ("encap", "tso")),
     ("tso,tx-gre-segmentation", _cfg(), ("encap", "tso,tx-gre-segmentation"))),
    ("GRE with sequence numbers", "crafted_gre_seq.pcap",
     ("native only", _cfg(), None),
     ("native + gro_cells", _cfg(tunnel_gro=True), None)),
    ("GRE without vs with sequence numbers", "crafted_gre.pcap",
     ("no S flag (crafted_gre)", _cfg(), None),
     ("S flag (crafted_gre_seq)", _cfg(), None, "crafted_gre_seq.pcap")),
]


def _ip6erspan_capture(tmp: str) -> str:
    """ERSPAN type II over IPv6 (an ip6erspan device's traffic), built with the bundled
    samples' own builder (sample_pcaps/make_crafted.py: same bulk flow, same timing); no
    such sample is bundled."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_crafted", os.path.join(ROOT, "sample_pcaps", "make_crafted.py"))
    mc = importlib.util.module_from_spec(spec)
    sys.modules["make_crafted"] = mc
    spec.loader.exec_module(mc)
    mc.SNAPLEN = 192        # the headers of ERSPAN over IPv6 end past the samples' 128

    def frame(e, p):
        fwd = mc.Pkt(p.l3, p.v6, False, p.flow)
        seq = e.next_seq(fwd)
        body = mc.erspan2_hdr(mc.ERSPAN_SESSION, 0) + mc.inner_eth(p)
        return mc.over_ipv6(e, fwd, 47, mc.gre(0x88BE, body, seq=seq))

    from pathlib import Path
    s = mc.Sample("seed_ip6erspan.pcap", "ERSPAN II over IPv6", frame, 40 + 4 + 4 + 8 + 14)
    return str(mc.write_sample(s, Path(tmp)))


def _path(cap: str, tmp: str) -> str:
    if cap == "ip6erspan (crafted)":
        return _ip6erspan_capture(tmp)
    return os.path.join(ROOT, "sample_pcaps", cap)


def run_side(path: str, config: GroConfig, egress_spec) -> dict:
    """Packets in, per-stage output, delivered, ratio, and the egress split."""
    packets, _ = decode_files(path)
    stages = simulate_stages(packets, config)
    for s in stages:
        s.check_invariants()
    summ = stages_summary(stages)
    out = {"packets": packets.num_rows,
           "native_out": summ["stages"]["native"]["superpackets_out"],
           "cells_out": summ["stages"].get("gro_cells", {}).get("superpackets_out"),
           "delivered": summ["delivered"], "ratio": summ["overall_ratio"]}
    if egress_spec:
        scenario, feats = egress_spec
        r = stages[0].result
        hdr, df, ihl = egress_headers(packets, r.seg_first_packet, scenario)
        e = egress(r.seg_count, r.seg_gso_size, r.seg_gso_type, r.seg_payload_len,
                   scenario=scenario, features=parse_features(feats),
                   kernel_version=config.kernel.version, hdr_len=hdr, df=df, ip_hdr_len=ihl)
        t = e.totals()
        out["egress"] = (f"{scenario}: {t['segments']} segs, {t['hardware_segments']} hw / "
                         f"{t['software_segments']} sw")
    return out


def table() -> str:
    """The markdown table (deterministic)."""
    lines = ["| seed case | capture | A | B | A: native out / cells out / delivered (ratio) "
             "| B: native out / cells out / delivered (ratio) | delivered change | egress A | "
             "egress B |",
             "|---|---|---|---|---|---|---|---|---|"]
    import tempfile

    tmp = tempfile.mkdtemp(prefix="gropcap-seed-")
    for case in CASES:
        name, cap, a, b = case[:4]
        cap_b = b[3] if len(b) > 3 else cap
        ra = run_side(_path(cap, tmp), a[1], a[2])
        rb = run_side(_path(cap_b, tmp), b[1], b[2])

        def cell(r):
            cells = "-" if r["cells_out"] is None else str(r["cells_out"])
            return f"{r['native_out']} / {cells} / {r['delivered']} ({r['ratio']:.2f})"

        change = (f"{(rb['delivered'] - ra['delivered']) / ra['delivered'] * 100:+.1f}%"
                  if ra["delivered"] else "")
        lines.append(f"| {name} | `{cap}` ({ra['packets']} pkts) | {a[0]} | {b[0]} | "
                     f"{cell(ra)} | {cell(rb)} | {change} | {ra.get('egress', '-')} | "
                     f"{rb.get('egress', '-')} |")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return "\n".join(lines) + "\n"


def doc_table(text: str) -> str:
    """The table between the markers of docs/seed-cases.md."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END)].strip("\n") + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite docs/seed-cases.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if the doc is stale")
    args = ap.parse_args(argv)
    t = table()
    if args.write or args.check:
        text = open(DOC).read()
        if args.check:
            if doc_table(text) != t:
                print("docs/seed-cases.md is stale: run scripts/seed_cases.py --write")
                return 1
            return 0
        start = text.index(BEGIN) + len(BEGIN)
        text = text[:start] + "\n" + t + text[text.index(END):]
        with open(DOC, "w") as f:
            f.write(text)
        return 0
    sys.stdout.write(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
