#!/usr/bin/env python3
"""Long fuzz run of gropcap's capture readers, decoders and GRO engines.

    nice python scripts/fuzz_long.py --minutes 30 --seed 1 --workdir /tmp/gropcap-fuzz

A supervisor process starts a worker that mutates seed captures (``tests/fuzz/harness.py``)
and checks every invariant of ``docs/fuzzing.md`` on each input. The supervisor watches
from outside, which catches what the worker cannot report itself:

- a hang, including one inside a numba kernel that no signal interrupts: the worker
  writes each input to ``current.bin`` before checking it; when it makes no progress for
  ``--hang-seconds`` the worker is killed and the input saved as a finding;
- a crash (segfault, abort) or exit: the input being checked is saved;
- memory: the worker is killed when its resident set exceeds ``--max-rss-mb``.

The worker restarts with the next seed after each of these. ``--replay FILE`` checks one
saved finding again (exit 1 while it still breaks an invariant). Findings land in
``WORKDIR/findings/`` as ``<kind>-<n>.<ext>`` with a ``.txt`` note; copy the ones that
are real bugs into ``tests/fuzz/corpus/`` (``tests/fuzz/test_regressions_fuzz.py`` replays
them). At the end ``WORKDIR/summary.json`` holds the counts (inputs tried per mode,
inputs gropcap refused with a located error, findings, elapsed time), also printed.

With ``--atheris`` (if installed) the worker is driven by atheris/libFuzzer with coverage
feedback over ``gropcap`` instead of the seeded random mutator; the same checks run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODES = ("capture", "capture+gro", "compressed", "pipeline", "deep_nesting", "random_frames")
MODE_WEIGHTS = (56, 8, 8, 6, 11, 11)
_EXT = {"gzip": ".gz", "zstd": ".zst", "xz": ".xz", "bzip2": ".bz2"}


# --- worker -------------------------------------------------------------------------------

def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Worker:
    """Checks inputs until killed; progress and counts go to files in ``workdir``."""

    def __init__(self, workdir: Path, seed: int):
        from tests.fuzz import harness as H

        self.H = H
        self.work = workdir
        self.rng = random.Random(seed)
        self.seed = seed
        self.findings = workdir / "findings"
        self.findings.mkdir(exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="w", dir=workdir))
        self.seeds = H.all_seeds()
        self.names = sorted(self.seeds)
        self.meta = {n: (H.frame_spans(self.seeds[n]), H.length_fields(self.seeds[n]))
                     for n in self.names}
        self.counts = {m: 0 for m in MODES}
        self.refused = 0
        self.found = 0
        self.statuses: dict[str, int] = {}
        H.warm_up()

    def _current(self, kind: str, name: str, data: bytes) -> None:
        """Record the input about to be checked (read by the supervisor on a hang/crash)."""
        _write_atomic(self.work / "current.json",
                      json.dumps({"kind": kind, "name": name, "seed": self.seed}).encode())
        _write_atomic(self.work / "current.bin", data)

    def _finding(self, kind: str, name: str, data: bytes, message: str) -> None:
        self.found += 1
        ext = name.split(".", 1)[1] if "." in name else "bin"
        base = self.findings / f"{kind}-{self.seed}-{self.found}"
        Path(f"{base}.{ext}").write_bytes(data)
        Path(f"{base}.txt").write_text(f"{kind} from seed file {name} (worker seed "
                                       f"{self.seed})\n{message}\n")
        print(f"FINDING {base}: {message[:300]}", flush=True)

    def one(self) -> None:
        H, rng = self.H, self.rng
        mode = rng.choices(MODES, MODE_WEIGHTS)[0]
        self.counts[mode] += 1
        if mode == "pipeline":            # the whole user path: analyze .. Parquet
            name = rng.choice(self.names)
            data = H.mutate(self.seeds[name], rng, *self.meta[name])
            self._current(mode, name, data)
            p = self.scratch / name
            p.write_bytes(data)
            try:
                if H.check_pipeline(p, rng, outdir=self.scratch) < 0:
                    self.refused += 1
            except H.InvariantError as e:
                self._finding("invariant", name, data, str(e))
            return
        if mode.startswith("capture") or mode == "compressed":
            name = rng.choice(self.names)
            data = H.mutate(self.seeds[name], rng, *self.meta[name])
            if mode == "compressed":      # damage the capture, then compress it
                kind = rng.choice(H.COMPRESSORS)
                data = H.compress(data, kind)
                if rng.random() < 0.3:    # and sometimes cut the compressed stream
                    data = data[:rng.randrange(len(data) + 1)]
                name = name.split(".")[0] + ".pcap" + _EXT[kind]
            self._current(mode, name, data)
            try:
                out = H.check_capture_bytes(data, self.scratch, name, gro=mode.endswith("gro"),
                                            memory=rng.random() < 0.25, time_budget=0,
                                            pipe=rng.random() < 0.3)
            except H.InvariantError as e:
                self._finding("invariant", name, data, str(e))
                return
            self.refused += bool(out.error)
            for k, v in out.statuses.items():
                self.statuses[k] = self.statuses.get(k, 0) + v
            return
        from tests.craft import make_batch

        if mode == "deep_nesting":
            frames = [f for f, _ in H.deep_nesting_frames(rng, rng.randint(1, 30))]
            lts = [1] * len(frames)
        else:
            from gropcap import constants as C

            lts_all = list(C.SUPPORTED_LINKTYPES) + [2, 147]
            frames, lts = [], []
            for _ in range(rng.randint(1, 30)):
                seed_name = rng.choice(self.names)
                spans = self.meta[seed_name][0]
                s, e = rng.choice(spans)
                f = bytearray(self.seeds[seed_name][s:e])
                for _ in range(rng.randint(0, 4)):
                    if f:
                        f[rng.randrange(len(f))] = rng.randrange(256)
                if rng.random() < 0.3:
                    del f[rng.randrange(len(f) + 1):]
                frames.append(bytes(f))
                lts.append(rng.choice(lts_all) if rng.random() < 0.2 else 1)
        # wire lengths below, at and far above the captured length; a DSA tag sometimes
        wires = [max(0, min(len(f) + rng.choice((0, 0, 0, -4, 1, 60, 1500, 70000)),
                            2**32 - 1)) for f in frames]
        options = H.FUZZ_OPTIONS
        if rng.random() < 0.2:
            from gropcap.decode.options import DecodeOptions

            options = DecodeOptions(dsa_tag=rng.choice(("dsa", "edsa", "brcm", "brcm-prepend")),
                                    gue_ports=(6080,), fou_ports=((5555, 4), (5556, 41)))
        blob = b"".join(len(f).to_bytes(4, "little") + bytes([lt & 0xFF]) +
                        w.to_bytes(4, "little") + f for f, lt, w in zip(frames, lts, wires))
        self._current(mode, mode + ".frames", blob)
        try:
            st = H.check_batch(make_batch(frames, linktype=lts, wire_lens=wires), options,
                               gro=True, what=f"{mode} ({options.dsa_tag or 'no'} DSA tag)")
        except H.InvariantError as e:
            self._finding("invariant", mode + ".frames", blob, str(e))
            return
        for k, v in st.items():
            self.statuses[k] = self.statuses.get(k, 0) + v

    def report(self) -> None:
        _write_atomic(self.work / f"counts-{self.seed}.json", json.dumps({
            "seed": self.seed, "inputs": self.counts, "refused_with_located_error":
            self.refused, "findings": self.found, "statuses": self.statuses}).encode())

    def run(self) -> None:
        last = time.monotonic()
        while True:
            self.one()
            if time.monotonic() - last > 2:
                self.report()
                last = time.monotonic()


def _atheris_worker(workdir: Path, seed: int) -> None:
    import atheris

    # numba compiles from bytecode: its modules must not be instrumented
    with atheris.instrument_imports(include=["gropcap"], exclude=[
            "gropcap.capture.fast", "gropcap.decode._fast_kernels", "gropcap.gro.fast",
            "gropcap.gro.rss"]):
        import gropcap.capture.pcap  # noqa: F401
        import gropcap.capture.pcapng  # noqa: F401
        import gropcap.decode.reference  # noqa: F401
    w = Worker(workdir, seed)
    names = w.names

    def target(data: bytes) -> None:
        if not data:
            return
        name = names[data[0] % len(names)]
        body = data[1:]
        w.counts["capture"] += 1
        w._current("capture", name, body)
        try:
            out = w.H.check_capture_bytes(body, w.scratch, name, memory=False, time_budget=0)
        except w.H.InvariantError as e:
            w._finding("invariant", name, body, str(e))
            return
        w.refused += bool(out.error)
        if w.counts["capture"] % 200 == 0:
            w.report()

    corpus = workdir / "atheris-corpus"
    corpus.mkdir(exist_ok=True)
    for i, n in enumerate(names):
        (corpus / f"seed{i}").write_bytes(bytes([i]) + w.seeds[n])
    atheris.Setup([sys.argv[0], str(corpus), f"-seed={seed}", "-max_len=8192",
                   "-rss_limit_mb=0", "-timeout=0"], target)
    atheris.Fuzz()


# --- supervisor ---------------------------------------------------------------------------

def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _save_current(workdir: Path, kind: str, why: str, n: int) -> None:
    cur, meta = workdir / "current.bin", workdir / "current.json"
    if not cur.exists():
        return
    info = json.loads(meta.read_text()) if meta.exists() else {}
    name = info.get("name", "input.bin")
    ext = name.split(".", 1)[1] if "." in name else "bin"
    base = workdir / "findings" / f"{kind}-sup-{n}"
    shutil.copy(cur, f"{base}.{ext}")
    Path(f"{base}.txt").write_text(f"{kind}: {why}\ninput: {json.dumps(info)}\n")
    print(f"FINDING {base}: {kind}: {why}", flush=True)


def supervise(args) -> dict:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "findings").mkdir(exist_ok=True)
    deadline = time.monotonic() + args.minutes * 60
    started = time.time()
    seed = args.seed
    restarts = []
    n = 0
    while time.monotonic() < deadline:
        for f in ("current.bin", "current.json"):
            (workdir / f).unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "--worker", "--seed", str(seed), "--workdir",
               str(workdir)] + (["--atheris"] if args.atheris else [])
        proc = subprocess.Popen(cmd, start_new_session=True)
        warm_deadline = time.monotonic() + args.warmup_seconds
        why = ""
        while time.monotonic() < deadline:
            time.sleep(1)
            if proc.poll() is not None:
                why = f"worker exited with status {proc.returncode}"
                if not (workdir / "current.bin").exists():
                    # died before its first input: a set-up problem, not a finding
                    print(f"fuzz_long: worker failed to start ({why}); stopping",
                          file=sys.stderr)
                    deadline = 0
                    why = ""
                break
            cur = workdir / "current.bin"
            if cur.exists():
                idle = time.time() - cur.stat().st_mtime
                if idle > args.hang_seconds and time.monotonic() > warm_deadline:
                    why = f"hang: no progress for {idle:.0f} s"
                    break
            rss = _rss_mb(proc.pid)
            if rss > args.max_rss_mb:
                why = f"memory: worker RSS {rss:.0f} MiB > {args.max_rss_mb} MiB"
                break
        if proc.poll() is None:
            # Out of time: let the worker write its counts. A hung worker gets SIGKILL.
            os.killpg(proc.pid, signal.SIGKILL if why else signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if why:
            n += 1
            kind = why.split(":")[0].split()[0]
            _save_current(workdir, kind if kind in ("hang", "memory") else "crash", why, n)
            restarts.append({"seed": seed, "why": why})
            seed += 1000
    summary = {"minutes": round((time.time() - started) / 60, 1), "seed": args.seed,
               "restarts": restarts, "inputs": {m: 0 for m in MODES},
               "refused_with_located_error": 0, "findings": 0, "statuses": {}}
    for f in workdir.glob("counts-*.json"):
        c = json.loads(f.read_text())
        for m, v in c["inputs"].items():
            summary["inputs"][m] = summary["inputs"].get(m, 0) + v
        summary["refused_with_located_error"] += c["refused_with_located_error"]
        summary["findings"] += c["findings"]
        for k, v in c["statuses"].items():
            summary["statuses"][k] = summary["statuses"].get(k, 0) + v
    summary["findings"] += len(restarts)
    summary["total_inputs"] = sum(summary["inputs"].values())
    summary["finding_files"] = sorted(p.name for p in (workdir / "findings").glob("*.txt"))
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return summary


def replay(path: str) -> int:
    """Check one saved input again (a capture file, or a ``.frames`` blob of frames)."""
    from tests.craft import make_batch
    from tests.fuzz import harness as H

    data = Path(path).read_bytes()
    try:
        if path.endswith(".frames"):
            frames, lts, wires, p = [], [], [], 0
            while p + 9 <= len(data):
                n = int.from_bytes(data[p:p + 4], "little")
                lts.append(data[p + 4])
                wires.append(int.from_bytes(data[p + 5:p + 9], "little"))
                frames.append(data[p + 9:p + 9 + n])
                p += 9 + n
            st = H.check_batch(make_batch(frames, linktype=lts, wire_lens=wires), gro=True)
            print(f"ok: {len(frames)} frames, statuses {st}")
        else:
            out = H.check_capture_file(path, gro=True)
            print(f"ok: {out.records} records, statuses {out.statuses}, error {out.error!r}")
    except H.InvariantError as e:
        print(f"INVARIANT BROKEN: {e}")
        return 1
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget")
    ap.add_argument("--seed", type=int, default=1, help="first worker seed")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gropcap-fuzz"),
                    help="findings, counts and summary.json go here (reused counts-* "
                         "files from an older run are summed: use a fresh directory)")
    ap.add_argument("--hang-seconds", type=float, default=60.0,
                    help="no progress for this long is a hang")
    ap.add_argument("--warmup-seconds", type=float, default=600.0,
                    help="grace period for JIT compilation when a worker starts")
    ap.add_argument("--max-rss-mb", type=float, default=2048.0,
                    help="worker resident memory limit")
    ap.add_argument("--atheris", action="store_true",
                    help="coverage-guided mutation with atheris (pip install atheris)")
    ap.add_argument("--replay", metavar="FILE",
                    help="check one saved finding again and exit (1 if still broken)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    if args.worker:
        os.environ.setdefault("PYTHONHASHSEED", "0")
        wd = Path(args.workdir)
        if args.atheris:
            _atheris_worker(wd, args.seed)
            return 0
        w = Worker(wd, args.seed)
        signal.signal(signal.SIGTERM, lambda *_: (w.report(), sys.exit(0)))
        try:
            w.run()
        finally:
            w.report()
        return 0
    summary = supervise(args)
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
