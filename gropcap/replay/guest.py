"""Live replay inside another kernel: a Debian kernel booted under qemu (virtme-ng).

Layer: validation, beside ``replay/kernel.py``. The host builds *jobs* (frames, bursts,
tunnel sockets: :func:`selftest_jobs`, :func:`sample_jobs`, :func:`file_jobs`), writes them
to a directory that the guest can write too, and boots the kernel image with the host's
root shared read-only (``vng --disable-kvm --run IMAGE --rwdir DIR --exec ...``; TCG, since
nested KVM is not available everywhere). Inside, ``python -m gropcap.replay.guest run``
replays every job through a veth pair of THAT kernel (``ReplaySession``; an XDP_PASS program
on the receiver before v5.13, see ``replay/_xdp.py``) and writes what it delivered as a
small JSON :class:`GuestResults`. Everything else (decoding, the simulator, the comparison)
runs on the host with ``--kernel X.Y`` of the guest: :func:`compare_results`. The guest
needs neither numba nor pyarrow.

The results are kept (``tests/live_results/<X.Y>.json``) so tests compare the simulator
with what 5.10, 6.1 and 6.12 delivered without booting anything; each job carries a digest
of the frames it sent, so a changed case or sample is noticed instead of compared wrongly.

Receiver settings in the guest: ``gro_flush_timeout`` :data:`GUEST_FLUSH_TIMEOUT_NS`
(100 ms instead of 20 ms: under TCG a burst of 63 frames takes longer than 10 ms to send)
and a 5 ms settle after each burst's kick frame (``KICK_SETTLE_S``; under TCG the kick's
own poll takes longer than the host's 0.5 ms).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

from gropcap.errors import GropcapError

__all__ = ["Job", "selftest_jobs", "sample_jobs", "file_jobs", "cells_jobs", "run_jobs",
           "boot_guest",
           "compare_results", "JobOutcome", "image_release", "GUEST_FLUSH_TIMEOUT_NS",
           "load_results", "kernel_of_release", "upstream_version"]

GUEST_FLUSH_TIMEOUT_NS = 100_000_000
GUEST_KICK_SETTLE_S = 0.005
BURST = 63                      # frames per burst (budget 64 minus the kick)
RESULTS_VERSION = 1
# Debian ABI release names (``uname -r``) carry no stable number; the upstream version of
# the guest kernels whose results are kept (``uname -v``: "Debian 5.10.223-1", ...), for
# the profile switches that stable backports moved (KernelProfile.stable)
DEBIAN_UPSTREAM = {"5.10.0-32-amd64": "5.10.223", "6.1.0-57-amd64": "6.1.192"}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Job:
    """One replay: ``name`` (``set/...``), Ethernet ``frames`` as captured, burst number per
    frame, optional wire lengths / checksum-not-ready flags, UDP tunnel sockets."""

    name: str
    frames: list
    bursts: list
    wire_lens: list | None = None
    csum_not_ready: list | None = None
    udp_tunnels: tuple = ()
    # "native": the veth's GRO (replay/kernel.py); "cells": the tunnel device's gro_cells
    # after it (replay/cells.py), with GRO on the veth on or off
    kind: str = "native"
    native_gro: bool = True
    gro_list: bool = False          # rx-gro-list on the receiving veth (no local socket)

    def to_dict(self) -> dict:
        return {"name": self.name, "frames": [bytes(f).hex() for f in self.frames],
                "bursts": list(self.bursts), "wire_lens": self.wire_lens,
                "csum_not_ready": self.csum_not_ready,
                "udp_tunnels": [list(t) for t in self.udp_tunnels], "kind": self.kind,
                "native_gro": self.native_gro, "gro_list": self.gro_list}

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        return cls(d["name"], [bytes.fromhex(h) for h in d["frames"]], d["bursts"],
                   d.get("wire_lens"), d.get("csum_not_ready"),
                   tuple((k, int(p)) for k, p in d.get("udp_tunnels") or ()),
                   d.get("kind", "native"), bool(d.get("native_gro", True)),
                   bool(d.get("gro_list", False)))

    def sent_frames(self) -> tuple[list[bytes], list[str]]:
        """The frames the replay injects (padding / checksum repair) and what was done."""
        import gropcap.replay._wire as _wire
        out, acts = [], []
        for i, f in enumerate(self.frames):
            wl = self.wire_lens[i] if self.wire_lens is not None else None
            cnr = bool(self.csum_not_ready[i]) if self.csum_not_ready is not None else False
            g, a = _wire.fix_frame(bytes(f), wl, fix_checksums=True, csum_not_ready=cnr)
            out.append(g)
            acts.append(a)
        return out, acts

    def digest(self) -> str:
        """sha256 (first 16 hex digits) of the sent frames and bursts."""
        h = hashlib.sha256()
        for f in self.sent_frames()[0]:
            h.update(len(f).to_bytes(4, "big") + f)
        h.update(json.dumps([list(self.bursts), [list(t) for t in self.udp_tunnels]]
                            + ([self.kind, self.native_gro, CELLS_METHOD[self.native_gro]]
                               if self.kind != "native" else []) + (["gro_list"] if self.gro_list else [])).encode())
        return h.hexdigest()[:16]


# ------------------------------------------------------------------ jobs (host)
def selftest_jobs(protos=None, names=None, gro_list: bool = False) -> list[Job]:
    """The selftest catalogue (``gropcap.selftest_cases``) as jobs ``selftest/PROTO/CASE``
    (with ``gro_list``: ``fraglist/PROTO/CASE``, rx-gro-list on, no local socket)."""
    from gropcap import selftest_cases as ST
    out = []
    for proto in protos or ST.PROTOS:
        for c in ST.cases_for(proto):
            if names and c.name not in names:
                continue
            out.append(Job(f"{'fraglist' if gro_list else 'selftest'}/{proto}/{c.name}",
                           c.frames(proto), c.bursts(proto), gro_list=gro_list))
    return out


def file_jobs(paths, prefix: str = "file", udp_tunnels=(),
              burst: int = BURST) -> tuple[list[Job], dict]:
    """Jobs for capture files (bursts of ``burst`` frames) and ``{path: why}`` for
    the files with nothing replayable (``replay.frames.unreplayable_reason``)."""
    from gropcap.capture import read_capture
    from gropcap.replay.frames import capture_frames, unreplayable_reason
    jobs, skipped = [], {}
    for p in paths:
        _info, batch = read_capture(p)
        frames, wires, cnr, _recs = capture_frames(batch)
        if not frames:
            skipped[str(p)] = unreplayable_reason(batch.linktype)
            continue
        jobs.append(Job(f"{prefix}/{os.path.basename(p)}", frames,
                        [i // burst for i in range(len(frames))], wires, cnr,
                        tuple(udp_tunnels)))
    return jobs, skipped


# UDP tunnel samples replayed with the tunnel socket in the receiving namespace
SAMPLE_TUNNEL_SOCKETS = {"real_vxlan.pcap": (("vxlan", 4789),),
                         "crafted_vxlan_gpe.pcap": (("vxlan-gpe", 4790),),
                         "crafted_geneve.pcap": (("geneve", 6081),)}


def sample_jobs(sample_dir: str | None = None) -> list[Job]:
    """Every replayable file of ``sample_pcaps/`` (``samples/NAME``), and the UDP tunnel
    samples again with their tunnel socket (``sockets/NAME``)."""
    import glob
    d = sample_dir or os.path.join(REPO, "sample_pcaps")
    paths = sorted(glob.glob(os.path.join(d, "*.pcap*")))
    jobs, _skipped = file_jobs(paths, "samples")
    for name, tun in SAMPLE_TUNNEL_SOCKETS.items():
        p = os.path.join(d, name)
        if os.path.exists(p):
            jobs += file_jobs([p], "sockets", tun)[0]
    return jobs


# the tunnel samples replayed into their tunnel device (the second stage on real devices)
CELLS_SAMPLES = ("crafted_gre.pcap", "crafted_gre_key.pcap", "crafted_gre_csum.pcap",
                 "crafted_gretap.pcap", "crafted_erspan2.pcap", "crafted_erspan3.pcap",
                 "crafted_ipip.pcap", "crafted_sit.pcap", "crafted_ip6gre.pcap",
                 "crafted_ip6ip6.pcap", "crafted_ip4ip6.pcap", "crafted_geneve.pcap",
                 "real_vxlan.pcap")
# ... and these again with the outer IPv4 header replaced by IPv6 (ip6gretap, ip6erspan)
CELLS_IPV6_OUTER = {"crafted_gretap.pcap": "ip6gretap", "crafted_erspan2.pcap": "ip6erspan2",
                    "crafted_erspan3.pcap": "ip6erspan3"}
# how a cells job is replayed (in its digest): GRO off 2: XDP + kick on the veth (1 was
# netif_rx and a deferred cell); GRO on 3: a kick opens each burst (2 had none: the first
# frame was polled at once, alone)
CELLS_METHOD = {False: 2, True: 3}
_OUTER6_SRC = bytes.fromhex("20010db800ff00000000000000000001")    # 2001:db8:ff::1
_OUTER6_DST = bytes.fromhex("20010db800ff00000000000000000002")    # 2001:db8:ff::2


def ipv6_outer(frame: bytes) -> bytes:
    """``frame`` (Ethernet, outer IPv4 without options, GRE without checksum) with an
    IPv6 outer header instead (2001:db8:ff::1 -> ::2, hop limit 64)."""
    import struct
    tot = struct.unpack_from("!H", frame, 16)[0]
    ip6 = struct.pack("!IHBB", 6 << 28, tot - 20, frame[23], 64) + _OUTER6_SRC + _OUTER6_DST
    return frame[:12] + b"\x86\xdd" + ip6 + frame[34:]


def cells_jobs(sample_dir: str | None = None) -> list[Job]:
    """The tunnel samples' data direction into their tunnel device, native GRO on and off
    (``cells/NAME/native-on``, ``.../native-off``)."""
    d = sample_dir or os.path.join(REPO, "sample_pcaps")
    out = []
    for name in CELLS_SAMPLES:
        p = os.path.join(d, name)
        if not os.path.exists(p):
            continue
        (j,), _s = file_jobs([p], "cells")
        keep = [i for i, f in enumerate(j.frames)
                if f[:6] == j.frames[0][:6] and f[12:14] == j.frames[0][12:14]
                and _outer_dst(f) == _outer_dst(j.frames[0])]
        variants = [(name, [j.frames[i] for i in keep], [j.wire_lens[i] for i in keep])]
        if name in CELLS_IPV6_OUTER:
            variants.append((CELLS_IPV6_OUTER[name] + ".pcap",
                             [ipv6_outer(j.frames[i]) for i in keep],
                             [j.wire_lens[i] + 20 for i in keep]))
        for vname, frames, wires in variants:
            for on in (True, False):
                out.append(Job(f"cells/{vname}/native-{'on' if on else 'off'}", frames,
                               [i // BURST for i in range(len(frames))], wires,
                               [False] * len(frames), (), "cells", on))
    return out


def _outer_dst(frame: bytes) -> bytes:
    return frame[30:34] if frame[12:14] == b"\x08\x00" else frame[38:54]


# ------------------------------------------------------------------ the guest side
def _runs(idx) -> list:
    """Index tuple -> runs ``[[a, b], ...]`` of consecutive numbers (compact JSON)."""
    out: list = []
    for i in idx:
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def _unruns(runs) -> tuple[int, ...]:
    return tuple(i for a, b in runs for i in range(a, b + 1))


def run_jobs(jobs_path: str, out_path: str) -> dict:
    """Replay every job of ``jobs_path`` through this (the guest's) kernel; write
    the results to ``out_path`` (JSON, see :func:`load_results`) and return them."""
    import gropcap.replay.kernel as K
    from gropcap.replay._netns import kernel_config_option
    from gropcap.replay._xdp import VETH_NAPI_WITHOUT_XDP
    from gropcap.selftest_cases import received_sizes

    K.KICK_SETTLE_S = GUEST_KICK_SETTLE_S
    with open(jobs_path) as fh:
        spec = json.load(fh)
    jobs = [Job.from_dict(d) for d in spec["jobs"]]
    flush_ns = int(spec.get("flush_timeout_ns", GUEST_FLUSH_TIMEOUT_NS))
    major, minor = K.running_kernel()
    vlan = kernel_config_option("CONFIG_VLAN_8021Q")
    results = {"version": RESULTS_VERSION, "release": os.uname().release,
               "kernel": f"{major}.{minor}", "vlan_gro": vlan in ("y", "m", None),
               "flush_timeout_ns": flush_ns, "kick_settle_s": GUEST_KICK_SETTLE_S,
               "xdp": (major, minor) < VETH_NAPI_WITHOUT_XDP, "jobs": {}}
    groups: dict[tuple, list[Job]] = {}
    for j in jobs:
        if j.kind == "native":
            groups.setdefault((j.udp_tunnels, j.gro_list), []).append(j)
    t0 = time.monotonic()
    for j in jobs:
        if j.kind == "cells":
            results["jobs"][j.name] = _run_cells(j, flush_ns)
            print(f"{time.monotonic() - t0:7.1f}s {j.name}", flush=True)
    for (tunnels, gro_list), group in groups.items():
        with K.ReplaySession(flush_timeout_ns=flush_ns, udp_tunnels=tunnels,
                             gro_list=gro_list) as s:
            results["xdp"] = s.xdp
            for j in group:
                results["jobs"][j.name] = _run_one(s, j, received_sizes)
                print(f"{time.monotonic() - t0:7.1f}s {j.name}", flush=True)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, sort_keys=True, separators=(",", ":"))
    os.replace(tmp, out_path)
    return results


def _run_cells(job: Job, flush_ns: int) -> dict:
    from gropcap.replay.cells import replay_gro_cells
    d: dict = {"digest": job.digest()}
    try:
        # a kick opens each burst, so the burst is one veth poll (as in replay/kernel.py);
        # GRO off on the veth: XDP gives it NAPI (a NIC with GRO off still polls in
        # batches), without it veth has none (netif_rx)
        r = replay_gro_cells(job.frames, job.bursts, wire_lens=job.wire_lens,
                             csum_not_ready=job.csum_not_ready, native_gro=job.native_gro,
                             flush_timeout_ns=flush_ns, pause_s=3 * flush_ns / 1e9 + 0.01,
                             xdp=None if job.native_gro else True, kick=True)
    except GropcapError as e:
        d["error"] = e.one_line()
        return d
    d["cells"] = [_runs(u) for u in r.units]
    d["lost"] = r.lost
    d["device"] = r.device
    d["xdp"] = r.xdp
    return d


def _run_one(session, job: Job, received_sizes) -> dict:
    d: dict = {"digest": job.digest()}
    try:
        r = session.replay(job.frames, job.bursts, wire_lens=job.wire_lens,
                           csum_not_ready=job.csum_not_ready)
    except GropcapError as e:
        d["error"] = e.one_line()
        return d
    d["units"] = [[_runs(u.indices), u.payload_len, u.gso_size, u.gso_type, int(u.gso_known)]
                  for u in r.units if u.matched]
    d["unmatched"] = [u.length for u in r.unmatched]
    d["lost"] = r.lost
    d["attempts"] = r.config.get("attempts", 1)
    d["slow_bursts"] = r.config.get("slow_bursts", [])
    if job.name.startswith(("selftest/", "fraglist/")):
        d["sizes"] = received_sizes(job.name.split("/")[1], [u.data for u in r.units])
    return d


# ------------------------------------------------------------------ booting (host)
def image_release(image: str) -> str:
    """The release of a kernel image named like Debian's (``vmlinuz-6.1.0-57-amd64``)."""
    base = os.path.basename(image)
    if not base.startswith("vmlinuz-"):
        raise GropcapError(f"{image}: cannot tell the kernel release from the file name",
                           hint="pass /boot/vmlinuz-<release> of an installed kernel package")
    return base[len("vmlinuz-"):]


def kernel_of_release(release: str) -> str:
    """``"6.1.0-57-amd64"`` -> ``"6.1"``."""
    major, minor = release.split(".")[:2]
    return f"{int(major)}.{int(''.join(c for c in minor if c.isdigit()))}"


def guest_unavailable(image: str) -> str | None:
    """Why ``image`` cannot be booted here (no vng / qemu / image / modules), or None."""
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    if _vng() is None:
        return "virtme-ng (vng) is not installed (pip install 'gropcap[guest]')"
    if not os.path.exists(image):
        return f"{image} does not exist (install the Debian linux-image package)"
    try:
        release = image_release(image)
    except GropcapError as e:
        return str(e)
    if not os.path.isdir(f"/lib/modules/{release}"):
        return f"/lib/modules/{release} is missing (the image's modules)"
    if os.geteuid() != 0:
        return "booting a guest for the replay needs root here (virtme shares / as root)"
    return None


def _vng() -> str | None:
    near = os.path.join(os.path.dirname(sys.executable), "vng")
    return near if os.path.exists(near) else shutil.which("vng")


def boot_guest(image: str, jobs: list[Job], workdir: str, *, memory: str = "2G",
               timeout_s: float = 3600, flush_timeout_ns: int = GUEST_FLUSH_TIMEOUT_NS,
               log=None) -> dict:
    """Boot ``image`` under qemu (TCG), replay ``jobs`` inside, return its results.

    ``workdir`` (created) holds the jobs, the guest's log and its results; it is the only
    directory the guest can write. Raises :class:`GropcapError` when the guest cannot boot
    or wrote no results (the log's last lines in the message).
    """
    why = guest_unavailable(image)
    if why:
        raise GropcapError(f"cannot boot {image}: {why}")
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    jobs_path = os.path.join(workdir, "jobs.json")
    out_path = os.path.join(workdir, "results.json")
    log_path = os.path.join(workdir, "guest.log")
    for p in (out_path, log_path):
        if os.path.exists(p):
            os.unlink(p)
    with open(jobs_path, "w") as fh:
        json.dump({"flush_timeout_ns": flush_timeout_ns,
                   "jobs": [j.to_dict() for j in jobs]}, fh)
    script = os.path.join(workdir, "run.sh")
    with open(script, "w") as fh:
        fh.write(f"cd {REPO}\nexport NUMBA_CACHE_DIR={workdir}/numba PYTHONDONTWRITEBYTECODE=1\n"
                 f"{sys.executable} -m gropcap.replay.guest run {jobs_path} {out_path} "
                 f"> {log_path} 2>&1\n")
    # vng from this interpreter's environment first (pip install 'gropcap[guest]')
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable),
                                                 os.environ.get("PATH", os.defpath)]))
    t0 = time.monotonic()
    try:
        p = subprocess.run(["vng", "--disable-kvm", "--run", image, "--memory", memory,
                            "--rwdir", workdir, "--exec", f"sh {script}"],
                           capture_output=True, timeout=timeout_s, cwd=workdir,
                           stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        raise GropcapError(f"the guest ({image}) did not finish in {timeout_s:g} s",
                           hint=f"see {log_path}") from None
    if log is not None:
        log(f"guest {image_release(image)}: {time.monotonic() - t0:.0f} s")
    if not os.path.exists(out_path):
        tail = ""
        for path in (log_path,):
            if os.path.exists(path):
                with open(path, errors="replace") as fh:
                    tail = " | ".join(fh.read().strip().splitlines()[-5:])
        tail = tail or p.stderr.decode(errors="replace").strip()[-400:]
        raise GropcapError(f"the guest ({image}) wrote no results: {tail}")
    return load_results(out_path)


def load_results(path: str) -> dict:
    """Results written by :func:`run_jobs` (also the committed tests/live_results files)."""
    with open(path) as fh:
        d = json.load(fh)
    if d.get("version") != RESULTS_VERSION:
        raise GropcapError(f"{path}: results version {d.get('version')}, "
                           f"expected {RESULTS_VERSION}")
    return d


# ------------------------------------------------------------------ comparing (host)
@dataclass
class JobOutcome:
    """One job compared: ``status`` is ``"agree"``, ``"differ"``, ``"error"`` (the guest
    could not replay it: ``detail`` says why) or ``"stale"`` (the job's frames are not the
    ones the results were made with); ``report`` the ReplayReport when compared."""

    name: str
    status: str
    detail: str = ""
    report: object = None
    lines: list = field(default_factory=list)


def kernel_result(job: Job, res: dict, results: dict):
    """The :class:`KernelReplayResult` of one job's guest results."""
    from gropcap.replay.kernel import DeliveredUnit, KernelReplayResult, split_bursts
    sent, actions = job.sent_frames()
    polls = split_bursts(job.bursts, len(sent), BURST)
    units = [DeliveredUnit(_unruns(runs), plen, gs, gt, bool(known), 0)
             for runs, plen, gs, gt, known in res["units"]]
    units += [DeliveredUnit((), 0, 0, 0, False, n, matched=False) for n in res["unmatched"]]
    major, minor = (int(x) for x in results["kernel"].split("."))
    cfg = {"flush_timeout_ns": results["flush_timeout_ns"], "defer": 1, "budget": 64,
           "udp_tunnels": ",".join(f"{k}:{p}" for k, p in job.udp_tunnels),
           "vlan_gro": results["vlan_gro"]}
    return KernelReplayResult(sent, actions, polls, units, list(res["lost"]),
                              (major, minor), results["release"], cfg)


def upstream_version(results: dict) -> str:
    """The guest's upstream kernel version X.Y.Z when known (a release name that carries
    it, ``6.12.117+deb12-amd64``, or :data:`DEBIAN_UPSTREAM`), else its X.Y."""
    release = results.get("release", "")
    if release in DEBIAN_UPSTREAM:
        return DEBIAN_UPSTREAM[release]
    parts = release.split("-")[0].split("+")[0].split(".")
    if len(parts) >= 3 and parts[2].isdigit() and int(parts[2]) \
            and kernel_of_release(release) == results["kernel"]:
        return ".".join(parts[:3])
    return results["kernel"]


def compare_results(jobs: list[Job], results: dict, *, kernel: str | None = None,
                    engine: str = "reference") -> list[JobOutcome]:
    """Simulate each job with ``--kernel`` (default: the guest's upstream version,
    :func:`upstream_version`) and compare with what the guest delivered. Jobs the results
    do not hold are left out."""
    from gropcap.replay.compare import compare, simulate_replay
    kernel = kernel or upstream_version(results)
    out = []
    for job in jobs:
        res = results["jobs"].get(job.name)
        if res is None:
            continue
        if "error" in res:
            out.append(JobOutcome(job.name, "error", res["error"]))
            continue
        if res["digest"] != job.digest():
            out.append(JobOutcome(job.name, "stale", "the frames differ from the replayed "
                                                     "ones: run the guest again"))
            continue
        if job.kind == "cells":
            out.append(_compare_cells(job, res, results, kernel))
            continue
        kr = kernel_result(job, res, results)
        # rx-gro-list on and no local socket: TCP fraglist GRO from 6.10
        # (tcp4/6_check_fraglist_gro), UDP in fraglist mode
        changes = dict(rx_gro_list=True, tcp_local_socket=False,
                       udp_gro="fraglist") if job.gro_list else {}
        packets, sim = simulate_replay(kr, kernel=kernel, engine=engine, **changes)
        rep = compare(packets, kr, sim)
        out.append(JobOutcome(job.name, "agree" if rep.ok else "differ",
                              rep.summary_line(), rep, [d.line() for d in rep.differences]))
    return out


def _compare_cells(job: Job, res: dict, results: dict, kernel: str) -> JobOutcome:
    """The tunnel device's units against ``simulate_cells`` (as sets of frame indices)."""
    from gropcap.replay.cells import CellsReplayResult, simulate_cells
    from gropcap.replay.kernel import split_bursts
    sent, _acts = job.sent_frames()
    polls = split_bursts(job.bursts, len(sent), 64)
    units = [_unruns(r) for r in res["cells"]]
    cr = CellsReplayResult(sent, polls, units, list(res["lost"]), res["device"],
                           bool(res["xdp"]))
    sim = simulate_cells(cr, native_gro=job.native_gro, kernel=kernel,
                         flush_timeout_ns=results["flush_timeout_ns"])
    k_only = sorted(set(units) - set(sim))
    s_only = sorted(set(sim) - set(units))
    same = len(set(units) & set(sim))
    ok = sorted(units) == sorted(sim) and not res["lost"]
    owner = {i: n for n, u in enumerate(sim) for i in u}
    inside = sum(len({owner.get(i, -1) for i in u}) == 1 for u in units)
    detail = (f"{res['device']}: {same}/{max(len(units), len(sim))} units equal, "
              f"{inside}/{len(units)} kernel units inside one simulator unit"
              + (f", lost {res['lost'][:10]}" if res["lost"] else ""))
    lines = [f"kernel only: {_fmt_units(k_only)}", f"simulator only: {_fmt_units(s_only)}"] \
        if not ok else []
    return JobOutcome(job.name, "agree" if ok else "differ", detail, None, lines)


def _fmt_units(units) -> str:
    return " ".join(f"#{u[0]}" if len(u) == 1 else f"#{u[0]}-{u[-1]}x{len(u)}"
                    for u in units[:12]) or "-"


def main(argv=None) -> int:
    """``python -m gropcap.replay.guest run JOBS OUT``: the guest side."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 3 or argv[0] != "run":
        print("usage: python -m gropcap.replay.guest run JOBS.json RESULTS.json",
              file=sys.stderr)
        return 2
    run_jobs(argv[1], argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
