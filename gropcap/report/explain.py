"""`gropcap explain`: a packet-by-packet walk of one flow through GRO.

Layer: an :class:`Analysis` (packets + GroResult) -> text. For every packet of the flow:
which super-packet it joined and its verdict; for every packet that could not merge onto a
held super-packet, the header field that differed, with the held value, the new value and,
where the kernel expects a computed value (sequence number, IPv4 ID), what it expected.

The engine decides *that* a packet did not merge (its reason code); this module only
explains the code by reading the same header fields the kernel rule compared. Each helper
names the kernel function whose check it explains.
"""

from __future__ import annotations

import ipaddress
import re
import textwrap
from dataclasses import dataclass

import numpy as np

from gropcap import constants as C
from gropcap.errors import ConfigError
from gropcap.gro import reasons as R
from gropcap.gro.reasons import REASONS, ROLE_NAMES, reason_name
# per flow, the breaks a sequence jump explains, counted batch by batch
from gropcap.run.accumulators import FlowCauses, flow_causes_of

# decoded columns the explanation reads
_COLS = ("ts_ns", "wire_len", "cap_len", "encap", "status", "ip_version", "ip_offset",
         "ip_tot_len", "ip_ttl", "ip_tos", "ip_id", "ip_df", "outer_ip_version",
         "outer_ip_offset", "outer_ip_tot_len", "outer_ip_ttl", "outer_ip_tos", "outer_ip_id",
         "outer_ip_df", "l4_proto", "tcp_seq", "tcp_ack", "tcp_flags", "tcp_doff",
         "tcp_window", "tcp_opt_len", "tcp_options", "tcp_has_ts", "tcp_tsval", "tcp_tsecr",
         "tcp_sack_blocks", "udp_len", "payload_len", "l4_csum_state", "tun_type",
         "tun_flags", "ip_hdr_len", "ip_mf", "ip_frag_off", "ip_proto")

_FLAG_LETTERS = ((C.TCP_FLAG_SYN, "S"), (C.TCP_FLAG_FIN, "F"), (C.TCP_FLAG_RST, "R"),
                 (C.TCP_FLAG_PSH, "P"), (C.TCP_FLAG_ACK, "."), (C.TCP_FLAG_URG, "U"),
                 (C.TCP_FLAG_ECE, "E"), (C.TCP_FLAG_CWR, "W"), (C.TCP_FLAG_AE, "e"))
_FLAG_NAMES = ((C.TCP_FLAG_FIN, "FIN"), (C.TCP_FLAG_SYN, "SYN"), (C.TCP_FLAG_RST, "RST"),
               (C.TCP_FLAG_PSH, "PSH"), (C.TCP_FLAG_ACK, "ACK"), (C.TCP_FLAG_URG, "URG"),
               (C.TCP_FLAG_ECE, "ECE"), (C.TCP_FLAG_CWR, "CWR"), (C.TCP_FLAG_AE, "AE"))
_GRE_FLAGS = ((C.GRE_CSUM, "checksum (C)"), (C.GRE_ROUTING, "routing (R)"),
              (C.GRE_KEY, "key (K)"), (C.GRE_SEQ, "sequence (S)"),
              (C.GRE_STRICT, "strict source route"), (C.GRE_REC, "recursion"),
              (C.GRE_ACK, "ack (A)"))
_ECN = {0: "Not-ECT", 1: "ECT(1)", 2: "ECT(0)", 3: "CE"}


def flag_letters(flags: int) -> str:
    """tcpdump-style flag letters: ``S`` SYN, ``F`` FIN, ``P`` PSH, ``.`` ACK, ``W`` CWR..."""
    return "".join(ch for bit, ch in _FLAG_LETTERS if flags & bit) or "-"


def flag_names(flags: int) -> str:
    """``ACK|PSH`` style names of a TCP flag word (``none`` when empty)."""
    return "|".join(n for bit, n in _FLAG_NAMES if flags & bit) or "none"


# --- flow selection ----------------------------------------------------------------------

_ENDPOINT = re.compile(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|(\d+\.\d+\.\d+\.\d+):(\d+)")
_PROTOS = {"tcp": C.IPPROTO_TCP, "udp": C.IPPROTO_UDP}


@dataclass(frozen=True)
class FlowSpec:
    """A 5-tuple (proto may be None: any) parsed from the command line."""

    src: str
    sport: int
    dst: str
    dport: int
    proto: int | None = None


def parse_flow_spec(text: str) -> int | FlowSpec:
    """``--flow`` value -> a flow id (int) or a :class:`FlowSpec`.

    Accepted: ``7`` (flow id); ``SRC:SPORT>DST:DPORT`` (also ``-``, ``->``, space or comma
    between the endpoints; IPv6 as ``[ADDR]:PORT``) optionally with ``tcp``/``udp`` before
    or after; ``PROTO,SRC,SPORT,DST,DPORT``.

    >>> parse_flow_spec("tcp 192.0.2.1:40000 > 192.0.2.2:5201")
    FlowSpec(src='192.0.2.1', sport=40000, dst='192.0.2.2', dport=5201, proto=6)
    >>> parse_flow_spec("[2001:db8::1]:1-[2001:db8::2]:2").dst
    '2001:db8::2'
    """
    text = text.strip()
    if text.isdigit():
        return int(text)
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 5:
        proto, src, sport, dst, dport = parts
        try:
            p = _PROTOS.get(proto.lower(), None)
            p = p if p is not None else int(proto)
            return FlowSpec(_norm_addr(src), int(sport), _norm_addr(dst), int(dport), p)
        except ValueError:
            pass
    ends = _ENDPOINT.findall(text)
    if len(ends) != 2:
        raise ConfigError(f"flow {text!r} is neither a flow id nor SRC:SPORT>DST:DPORT",
                          hint="e.g. --flow 3, --flow '192.0.2.1:40000>192.0.2.2:5201', "
                               "--flow 'tcp,2001:db8::1,40000,2001:db8::2,5201'")
    (a6, ap6, a4, ap4), (b6, bp6, b4, bp4) = ends
    rest = _ENDPOINT.sub(" ", text).lower()
    proto = next((v for k, v in _PROTOS.items() if re.search(rf"\b{k}\b", rest)), None)
    return FlowSpec(_norm_addr(a6 or a4), int(ap6 or ap4), _norm_addr(b6 or b4),
                    int(bp6 or bp4), proto)


def _norm_addr(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        raise ConfigError(f"{text!r} is not an IP address") from None


def find_flows(flows, spec: int | FlowSpec | str) -> list[int]:
    """Flow ids of the flows table matching a spec (see :func:`parse_flow_spec`).

    Raises:
        ConfigError: no flow matches (the hint names the reverse direction if it exists).
    """
    if isinstance(spec, str):
        spec = parse_flow_spec(spec)
    n = flows.num_rows
    if n == 0:
        raise ConfigError("the capture holds no packets, so no flows")
    if isinstance(spec, int):
        if not 0 <= spec < n:
            raise ConfigError(f"no flow {spec}", hint=f"flow ids run from 0 to {n - 1}")
        return [spec]
    src = flows.column("src").to_pylist()
    dst = flows.column("dst").to_pylist()
    sp = flows.column("sport").to_pylist()
    dp = flows.column("dport").to_pylist()
    pr = flows.column("l4_proto").to_pylist()

    def match(a, ap, b, bp):
        return [i for i in range(n) if src[i] == a and dst[i] == b and sp[i] == ap
                and dp[i] == bp and (spec.proto is None or pr[i] == spec.proto)]

    found = match(spec.src, spec.sport, spec.dst, spec.dport)
    if not found:
        rev = match(spec.dst, spec.dport, spec.src, spec.sport)
        hint = (f"the reverse direction is flow {', '.join(map(str, rev))}" if rev
                else "`gropcap analyze` lists the flows")
        raise ConfigError(f"no flow {spec.src}:{spec.sport} > {spec.dst}:{spec.dport}",
                          hint=hint)
    return found


# --- why a packet did not merge ---------------------------------------------------------

@dataclass
class _Held:
    """The held super-packet a packet was compared with (the kernel's ``p``)."""

    seg: int
    head: int          # row of p's first packet: p's headers are the first packet's
    last: int          # row of the last packet merged into p
    second: int        # row of p's second packet, -1 when p held one packet
    count: int         # NAPI_GRO_CB(p)->count when the new packet arrived
    payload: int       # skb_gro_len(p): payload merged so far
    gso_size: int
    members: tuple = ()  # rows merged into p, in order


@dataclass(frozen=True)
class Check:
    """One flush check that failed at a break: its reason code and name, and the header
    field behind it (``tcp_seq 1000 -> 2448, expected 1448 (...)``); ``detail`` is None
    when no single field explains it."""

    reason: int
    name: str
    detail: str | None


@dataclass(frozen=True)
class Break:
    """A packet that did not merge onto a held super-packet (or was not held).

    ``reason`` is the code the engine recorded (the kernel's first true flush item);
    ``checks`` lists every check that failed, that one first (the kernel ORs them into one
    flush); ``cause`` is the probable cause in plain English when the checks point to one
    (loss or reordering, retransmission), else None.
    """

    packet: int
    superpacket: int
    reason: int
    checks: tuple
    cause: str | None

    def to_dict(self) -> dict:
        """Plain data for JSON: ``{"packet", "superpacket", "reason", "checks": [{"reason",
        "detail"}], "cause"}`` with reasons as names."""
        return {"packet": self.packet, "superpacket": self.superpacket,
                "reason": reason_name(self.reason),
                "checks": [{"reason": c.name, "detail": c.detail} for c in self.checks],
                "cause": self.cause}


def _ip_id_detail(v, h: _Held, i: int, outer: bool, kernel) -> str:
    """inet_gro_flush: the ID must equal p.id (fixed) or p.id + count (incrementing)."""
    col = "outer_ip_id" if outer else "ip_id"
    name = "outer ip_id" if outer else "ip_id"
    pid, new, old = v[col][h.head], v[col][i], v[col][h.last]
    inc = (pid + h.count) & 0xFFFF
    if h.second >= 0:
        # the mode is decided on the second packet (count == 1) and then sticks
        fixed = v[col][h.second] == pid
        expect = f"{pid} (fixed mode)" if fixed else f"{inc} (incrementing mode)"
    else:
        df_col = "outer_ip_df" if outer else "ip_df"
        # before 6.18 a fixed ID is only accepted with DF (is_atomic)
        if kernel.two_bit_fixedid or v[df_col][i]:
            expect = f"{inc} (incrementing) or {pid} (fixed)"
        else:
            expect = f"{inc} (incrementing; fixed IDs need DF before 6.18)"
    return f"{name} {old} -> {new}, expected {expect}"


def _ip_detail(v, h: _Held, i: int, code: int, kernel) -> str | None:
    """inet_gro_flush / ipv6_gro_flush: TTL, TOS byte, DF, ID against p's first header."""
    outer = code in (R.FLUSH_OUTER_TTL, R.FLUSH_OUTER_TOS, R.FLUSH_OUTER_ECN,
                     R.FLUSH_OUTER_DF, R.FLUSH_OUTER_IP_ID)
    pre = "outer_ip_" if outer else "ip_"
    label = "outer " if outer else ""
    ver = v[pre + "version"][i]
    p, n = h.head, i
    if code in (R.FLUSH_TTL, R.FLUSH_OUTER_TTL, R.FLUSH_HOP_LIMIT_FLOW):
        name = "hop_limit" if ver == 6 else "ttl"
        return f"{label}{name} {v[pre + 'ttl'][p]} -> {v[pre + 'ttl'][n]}"
    if code in (R.FLUSH_TOS, R.FLUSH_OUTER_TOS):
        a, b = v[pre + "tos"][p], v[pre + "tos"][n]
        name = "tclass" if ver == 6 else "tos"
        return f"{label}{name} 0x{a:02x} -> 0x{b:02x} (DSCP {a >> 2} -> {b >> 2})"
    if code in (R.FLUSH_ECN, R.FLUSH_OUTER_ECN):
        a, b = v[pre + "tos"][p], v[pre + "tos"][n]
        return f"{label}ECN {_ECN[a & 3]} -> {_ECN[b & 3]} (tos 0x{a:02x} -> 0x{b:02x})"
    if code in (R.FLUSH_DF, R.FLUSH_OUTER_DF):
        return f"{label}DF {int(v[pre + 'df'][p])} -> {int(v[pre + 'df'][n])}"
    if code in (R.FLUSH_IP_ID, R.FLUSH_OUTER_IP_ID):
        return _ip_id_detail(v, h, i, outer, kernel)
    return None


def _tcp_detail(v, h: _Held, i: int, code: int) -> str | None:
    """tcp_gro_receive: flag word, ack_seq, option bytes, size and sequence checks."""
    p = h.head
    if code == R.FLUSH_SEQ:
        expect = (v["tcp_seq"][p] + h.payload) & 0xFFFFFFFF
        new = v["tcp_seq"][i]
        delta = (new - expect + 2**31) % 2**32 - 2**31
        what = (f"{delta} bytes missing: loss or reordering" if delta > 0
                else f"{-delta} bytes already merged: retransmission or reordering")
        return f"tcp_seq {v['tcp_seq'][h.last]} -> {new}, expected {expect} ({what})"
    if code == R.FLUSH_TCP_ACK:
        a, b = v["tcp_ack"][p], v["tcp_ack"][i]
        return f"tcp_ack {a} -> {b} ({(b - a + 2**31) % 2**32 - 2**31:+d})"
    if code == R.FLUSH_TCP_TS:
        parts = []
        for col, name in (("tcp_tsval", "TSval"), ("tcp_tsecr", "TSecr")):
            a, b = v[col][p], v[col][i]
            parts.append(f"{name} {a} -> {b}" if a != b else f"{name} {a} unchanged")
        return ", ".join(parts)
    if code == R.FLUSH_TCP_OPTIONS:
        a, b = v["tcp_sack_blocks"][p], v["tcp_sack_blocks"][i]
        if a != b:
            return f"SACK blocks {a} -> {b}"
        oa = bytes(v["tcp_options"][p])[:v["tcp_opt_len"][p]].hex()
        ob = bytes(v["tcp_options"][i])[:v["tcp_opt_len"][i]].hex()
        return f"option bytes {oa or '(none)'} -> {ob or '(none)'}"
    if code == R.FLUSH_TCP_WINDOW:
        return f"tcp_window {v['tcp_window'][p]} -> {v['tcp_window'][i]}"
    if code == R.FLUSH_TCP_DOFF:
        return f"tcp_doff {v['tcp_doff'][p]} -> {v['tcp_doff'][i]} (header " \
               f"{v['tcp_doff'][p] * 4} -> {v['tcp_doff'][i] * 4} bytes)"
    if code in (R.FLUSH_TCP_FLAGS, R.FLUSH_CWR, R.FLUSH_FLAGS_FINAL):
        return f"flags {flag_names(v['tcp_flags'][p])} -> {flag_names(v['tcp_flags'][i])}"
    if code == R.FLUSH_PAYLOAD_LARGER:
        return f"payload_len {v['payload_len'][i]} > gso_size {h.gso_size} (first segment)"
    if code == R.FLUSH_ZERO_PAYLOAD:
        return f"payload_len 0, flags {flag_names(v['tcp_flags'][i])}"
    if code == R.FLUSH_UDP_LARGER:
        return f"UDP payload {v['payload_len'][i]} > {v['payload_len'][p]} (first datagram)"
    return None


def _length_detail(v, i: int) -> str:
    """inet_gro_receive / ipv6_gro_receive: IP length must equal the bytes received."""
    outer = v["outer_ip_version"][i] != 0
    pre = "outer_ip_" if outer else "ip_"
    have = int(v["wire_len"][i]) - int(v[pre + "offset"][i])
    return f"IP length {v[pre + 'tot_len'][i]}, {have} bytes from the IP header to the " \
           f"end of the frame ({have - int(v[pre + 'tot_len'][i])} bytes of padding/trailer)"


def _bypass_detail(v, i: int, code: int) -> str | None:
    """The field that made a packet skip GRO (the packet alone decides these)."""
    from gropcap.decode.schema import STATUS_NAMES

    if code == R.BYPASS_TUNNEL:
        t, word = v["tun_type"][i], v["tun_flags"][i]
        name = C.TUN_NAMES.get(t, str(t))
        if t in (C.TUN_GRE, C.TUN_GRE_TEB, C.TUN_ERSPAN2, C.TUN_ERSPAN3):
            # gre_gro_receive: any flag other than K and C, or version != 0, bails
            bad = [n for bit, n in _GRE_FLAGS if word & bit and bit not in (C.GRE_KEY,
                                                                             C.GRE_CSUM)]
            if word & C.GRE_VERSION:
                bad.append(f"version {word & C.GRE_VERSION}")
            if bad:
                return f"GRE {', '.join(bad)} set: gre_gro_receive takes only K and C"
        return f"{name} header word 0x{word:08x}"
    if code == R.BYPASS_IP_OPTIONS:
        return f"IPv4 header {v['ip_hdr_len'][i]} bytes (20 without options)"
    if code == R.BYPASS_IP_FRAGMENT:
        return f"MF {int(v['ip_mf'][i])}, fragment offset {v['ip_frag_off'][i] * 8} bytes"
    if code == R.BYPASS_L4_CSUM:
        return f"TCP/UDP checksum state {v['l4_csum_state'][i]} (2 = bad)"
    if code == R.BYPASS_DECODE:
        return f"decode status {STATUS_NAMES.get(v['status'][i], v['status'][i])}"
    if code == R.BYPASS_NO_L4_OFFLOAD:
        return f"IP protocol {v['ip_proto'][i]}"
    return None


def _break_detail(v, h: _Held | None, i: int, code: int, config) -> str | None:
    """One line naming the field behind reason ``code`` for packet row ``i``."""
    if code in (R.NOT_HELD_LENGTH, R.FLUSH_LENGTH):
        return _length_detail(v, i)
    if code in (R.NOT_HELD_PSH, R.NOT_HELD_FIN, R.NOT_HELD_SYN, R.NOT_HELD_RST,
                R.NOT_HELD_URG):
        return f"flags {flag_names(v['tcp_flags'][i])}"
    if code == R.NOT_HELD_ZERO_PAYLOAD:
        return f"payload_len 0, flags {flag_names(v['tcp_flags'][i])}"
    bypass = _bypass_detail(v, i, code)
    if bypass:
        return bypass
    if h is None:
        return None
    if code == R.FLUSH_SIZE_LIMIT:
        limit = config.max_size(v["outer_ip_version"][i] or v["ip_version"][i])
        return f"{h.count} segments, {h.payload} + {v['payload_len'][i]} payload bytes " \
               f"would reach gro_max_size {limit}"
    return _ip_detail(v, h, i, code, config.kernel) or _tcp_detail(v, h, i, code)


def _seq_delta(v, h: _Held, i: int) -> int:
    """Signed bytes between the packet's sequence number and the one p expects."""
    expect = (v["tcp_seq"][h.head] + h.payload) & 0xFFFFFFFF
    return (v["tcp_seq"][i] - expect + 2**31) % 2**32 - 2**31


def probable_cause(codes, seq_delta: int = 0) -> str | None:
    """The probable cause of a break from the checks that failed (reason codes) and the
    sequence gap (bytes; > 0 ahead of p's end, < 0 behind it).

    >>> probable_cause([R.FLUSH_IP_ID, R.FLUSH_SEQ], 1448)
    'loss or reordering (1448 bytes missing)'
    """
    codes = set(codes)
    if R.FLUSH_SEQ in codes and seq_delta > 0:
        return f"loss or reordering ({seq_delta} bytes missing)"
    if R.FLUSH_SEQ in codes and seq_delta < 0:
        return f"retransmission or reordering ({-seq_delta} bytes already merged)"
    if codes & {R.FLUSH_IP_ID, R.FLUSH_OUTER_IP_ID} and len(codes) == 1:
        return "IP ID not p.id + count nor fixed: the sender or a middlebox sets IDs"
    return None


def flow_causes(analysis, model: str | None = None) -> list[str]:
    """Probable cause of each flow's breaks from the packet columns, one string per flow
    ("" when no sequence jump explains them).

    A FLUSH_* break whose TCP sequence number differs from the previous packet of the flow
    (its seq + payload) counts as ``loss or reordering`` when it jumps ahead and as
    ``retransmission`` when it goes back: the sequence gap that :func:`flow_breaks` finds
    with the held super-packet, read here from neighbouring rows for all flows at once.
    The cause with more breaks is named, e.g. ``loss or reordering at 12 of 15 breaks``.
    The primary model's are kept by the analysis (``Analysis.flow_causes``).
    """
    if model in (None, analysis.primary_model):
        return analysis.flow_causes
    return flow_causes_of(analysis, model)


def _break(v, h: _Held | None, i: int, code: int, config, skbs: dict) -> Break:
    """All failed checks at row ``i`` (reference.flush_checks for a TCP pair), each with
    its field detail, and the probable cause."""
    codes = [code]
    # a FLUSH_* code: a held p existed and the pair check refused the merge
    if (h is not None and R.FLUSH_CWR <= code <= R.FLUSH_ZERO_PAYLOAD
            and v["l4_proto"][i] == C.IPPROTO_TCP and i in skbs):
        from gropcap.gro.reference import flush_checks

        found = flush_checks(config, [skbs[m] for m in h.members], skbs[i])
        # the engine's reason first (the kernel's first true item), then the others
        codes += [c for c in found if c != code]
    checks = tuple(Check(c, reason_name(c), _break_detail(v, h, i, c, config))
                   for c in codes)
    delta = _seq_delta(v, h, i) if h is not None and R.FLUSH_SEQ in codes else 0
    return Break(packet=i, superpacket=-1, reason=code, checks=checks,
                 cause=probable_cause(codes, delta))


def _skbs(analysis, rows: np.ndarray) -> dict:
    """The reference model's Skb for each row of the flow (for flush_checks)."""
    import pyarrow as pa

    from gropcap.gro.reference import build_skbs

    t = analysis.decoded.take(pa.array(rows))
    skbs = build_skbs(t, np.zeros(len(rows), np.uint32), analysis.config)
    return dict(zip(rows.tolist(), skbs))


def flow_breaks(analysis, flow: int, *, model: str | None = None) -> list[Break]:
    """Every packet of a flow that did not merge (other than a first packet with nothing
    held), with every check that failed there.

    The data behind the ``why:`` lines of :func:`explain_flow`, for text and JSON alike.

    Args:
        analysis: an :class:`Analysis`.
        flow: the flow id (row of ``analysis.flows``).
        model: ``"ideal"`` or ``"napi"``; default the primary model.

    Returns:
        :class:`Break` per non-merged packet, in capture order.

    Example:
        >>> [b.to_dict() for b in flow_breaks(a, 0)][0]["checks"]   # doctest: +SKIP
        [{'reason': 'FLUSH_IP_ID', 'detail': 'ip_id 40454 -> 40456, expected 40455 ...'},
         {'reason': 'FLUSH_SEQ', 'detail': 'tcp_seq 1000 -> 2448, expected 1448 ...'}]
    """
    return [b for _, _, _, b in _walk(analysis, flow, model)[2] if b is not None]


def _walk(analysis, flow: int, model: str | None):
    """``(result, columns, [(row, super-packet, reason, Break or None)])`` for a flow."""
    model = model or analysis.primary_model
    if model not in analysis.results:
        raise ConfigError(f"model {model!r} was not run", hint=f"use one of {analysis.models}")
    res = analysis.results[model]
    rows = np.flatnonzero(res.flow_id == flow)
    if not len(rows):
        raise ConfigError(f"no flow {flow}")
    v = _columns(analysis, rows)
    skbs = _skbs(analysis, rows) if v["l4_proto"][int(rows[0])] == C.IPPROTO_TCP else {}
    # packets of each super-packet seen so far: p's count/payload when a packet arrives
    seen: dict[int, list[int]] = {}
    out = []
    for i in rows.tolist():
        s = int(res.gro_seg[i])
        code = int(res.reason[i])
        held = _held_before(res, seen, i, code)
        seen.setdefault(s, []).append(i)
        brk = None
        if code not in (R.MERGED, R.NO_HELD_PACKET):
            brk = _break(v, held, i, code, analysis.config, skbs)
            brk = Break(i, s, code, brk.checks, brk.cause)
        out.append((i, s, code, brk))
    return res, v, out


# --- the walk ----------------------------------------------------------------------------


def _columns(analysis, rows: np.ndarray) -> dict[str, list]:
    import pyarrow as pa

    t = analysis.decoded.take(pa.array(rows)).select(list(_COLS))
    d = t.to_pydict()
    # index by table row so helpers can use the packet row numbers directly
    return {k: dict(zip(rows.tolist(), vals)) for k, vals in d.items()}


def flow_title(flows, fid: int) -> str:
    """``192.0.2.1:40000 > 192.0.2.2:5201 TCP, eth/ipv4/tcp``."""
    row = {k: flows.column(k)[fid].as_py() for k in
           ("src", "dst", "sport", "dport", "l4_proto", "encap")}
    if not row["src"]:
        return f"(not IP), {row['encap']}"
    fmt = (lambda a, p: f"[{a}]:{p}") if ":" in row["src"] else (lambda a, p: f"{a}:{p}")
    proto = {C.IPPROTO_TCP: "TCP", C.IPPROTO_UDP: "UDP"}.get(row["l4_proto"],
                                                            f"proto {row['l4_proto']}")
    return f"{fmt(row['src'], row['sport'])} > {fmt(row['dst'], row['dport'])} {proto}, " \
           f"{row['encap']}"


def explain_flow(analysis, flow: int, *, model: str | None = None,
                 breaks_only: bool = False) -> str:
    """The packet-by-packet walk of one flow as text (what `gropcap explain` prints).

    Args:
        analysis: an :class:`Analysis`.
        flow: the flow id (row of ``analysis.flows``).
        model: ``"ideal"`` or ``"napi"``; default the primary model.
        breaks_only: print only the packets that did not merge and the super-packet ends.

    Returns:
        Text, one line per packet (time relative to the flow's first packet, TCP sequence
        number, payload length, flags, super-packet and verdict), an indented ``why:`` line
        under each packet that ended a held super-packet or was not held, and a ``= #N``
        line after the last packet of each super-packet (segments, bytes, gso_size, end
        reason; the poll and RX queue when a NAPI flush ended it). Lines fit 80 columns.

    Example:
        >>> print(explain_flow(gropcap.analyze("x.pcap"), 0))   # doctest: +SKIP
    """
    model = model or analysis.primary_model
    res, v, walk = _walk(analysis, flow, model)
    rows = np.array([w[0] for w in walk])
    segs = np.unique(res.gro_seg[rows])
    lines = [f"flow {flow}: {flow_title(analysis.flows, flow)}",
             f"model {model}, kernel {analysis.config.kernel.name}: {len(rows)} packets -> "
             f"{len(segs)} super-packets, aggregation ratio {len(rows) / len(segs):.2f}",
             "",
             f"{'pkt':>6} {'time_us':>11} {'seq':>10} {'len':>5} {'flags':<5} "
             f"{'super-pkt':>9} {'role':<6} verdict"]
    t0 = v["ts_ns"][int(rows[0])]
    used: set[int] = set()
    is_tcp = analysis.flows.column("l4_proto")[flow].as_py() == C.IPPROTO_TCP
    for i, s, code, brk in walk:
        role = ROLE_NAMES.get(int(res.gro_role[i]), "?")
        show = not breaks_only or code != R.MERGED
        if show:
            seq = str(v["tcp_seq"][i]) if is_tcp else ""
            flags = flag_letters(v["tcp_flags"][i]) if is_tcp else ""
            lines.append(f"{i:>6} {(v['ts_ns'][i] - t0) / 1000:>11.3f} {seq:>10} "
                         f"{v['payload_len'][i]:>5} {flags:<5} {'#' + str(s):>9} {role:<6} "
                         f"{reason_name(code)}")
            if brk is not None:
                lines.extend(_break_lines(brk))
        # a packet delivered alone for its own reason needs no summary line
        alone_same = int(res.seg_count[s]) == 1 and int(res.seg_end_reason[s]) == code
        if int(res.seg_last_packet[s]) == i and not alone_same:
            lines.append(_seg_line(res, s))
        used.add(code)
        used.update(c.reason for c in (brk.checks if brk else ()))
        used.add(int(res.seg_end_reason[s]))
    used.discard(R.MERGED)
    lines += ["", "reasons:"] + ["  " + line for line in reason_lines(sorted(used), 78)]
    return "\n".join(lines) + "\n"


def explain_dict(analysis, flow: int, *, model: str | None = None,
                 breaks_only: bool = False) -> dict:
    """The walk of :func:`explain_flow` as plain data (`gropcap explain --format json`).

    The same walk as the text (:func:`_walk`): every failed check at each break
    (:class:`Break`) and its probable cause.

    Returns:
        ``{"flow": {id, title, src, sport, dst, dport, l4_proto, encap}, "model",
        "kernel", "packets_in", "superpackets_out", "aggregation_ratio", "packets": [{packet,
        ts_ns, time_us, seq, payload_len, flags, superpacket, role, verdict}], "breaks":
        [{packet, superpacket, reason, checks: [{reason, detail}], cause}],
        "superpackets": [{superpacket, segments, payload_bytes, gso_size, end_reason,
        poll_id, rx_queue}]}`` with reasons as names; ``packets`` holds only the breaks
        when ``breaks_only``. ``cause`` is None where no probable cause is known.

    Example:
        >>> explain_dict(gropcap.analyze("x.pcap"), 0)["breaks"][0]   # doctest: +SKIP
        {'packet': 7, 'superpacket': 1, 'reason': 'FLUSH_PSH', 'checks': [...], 'cause': None}
    """
    model = model or analysis.primary_model
    res, v, walk = _walk(analysis, flow, model)
    rows = np.array([w[0] for w in walk])
    segs = np.unique(res.gro_seg[rows])
    keys = ("src", "sport", "dst", "dport", "l4_proto", "encap")
    head = {"id": int(flow), "title": flow_title(analysis.flows, flow),
            **{k: analysis.flows.column(k)[flow].as_py() for k in keys}}
    is_tcp = head["l4_proto"] == C.IPPROTO_TCP
    t0 = v["ts_ns"][int(rows[0])]
    packets, breaks = [], []
    for i, s, code, brk in walk:
        if brk is not None:
            breaks.append(brk.to_dict())
        if breaks_only and code == R.MERGED:
            continue
        packets.append({"packet": i, "ts_ns": v["ts_ns"][i],
                        "time_us": (v["ts_ns"][i] - t0) / 1000,
                        "seq": v["tcp_seq"][i] if is_tcp else None,
                        "payload_len": v["payload_len"][i],
                        "flags": flag_names(v["tcp_flags"][i]) if is_tcp else None,
                        "superpacket": s, "role": ROLE_NAMES.get(int(res.gro_role[i]), "?"),
                        "verdict": reason_name(code)})
    sps = [{"superpacket": int(s), "segments": int(res.seg_count[s]),
            "payload_bytes": int(res.seg_payload_len[s]),
            "gso_size": int(res.seg_gso_size[s]),
            "end_reason": reason_name(int(res.seg_end_reason[s])),
            "poll_id": int(res.seg_poll_id[s]), "rx_queue": int(res.seg_rx_queue[s])}
           for s in segs.tolist()]
    return {"flow": head, "model": model, "kernel": analysis.config.kernel.name,
            "packets_in": int(len(rows)), "superpackets_out": int(len(segs)),
            "aggregation_ratio": round(len(rows) / len(segs), 4),
            "packets": packets, "breaks": breaks, "superpackets": sps}


def _break_lines(brk: Break) -> list[str]:
    """``why:`` (one failed check) or ``why, every failed check:`` with one line each,
    then ``probable cause:``; wrapped to 80 columns."""
    def wrap(text):
        return textwrap.wrap(text, width=80, initial_indent=" " * 18,
                             subsequent_indent=" " * 23, break_on_hyphens=False)

    checks = [c for c in brk.checks if c.detail]
    out: list[str] = []
    if len(brk.checks) == 1 and checks:
        out += wrap(f"why: {checks[0].detail}")
    elif len(brk.checks) > 1:
        out += [" " * 18 + f"why, {len(brk.checks)} checks failed (the kernel ORs them):"]
        for c in brk.checks:
            out += textwrap.wrap(f"{c.name}: {c.detail or '(see below)'}", width=80,
                                 initial_indent=" " * 20, subsequent_indent=" " * 25,
                                 break_on_hyphens=False)
    if brk.cause:
        out += wrap(f"probable cause: {brk.cause}")
    return out


def _held_before(res, seen: dict[int, list[int]], i: int, code: int) -> _Held | None:
    """The held p a non-merged packet was checked against: the flow's most recent
    super-packet that ended with this packet's own reason (the pair check that refused the
    merge completed it). Bypassed packets in between do not disturb p, so look back a few."""
    if code == R.MERGED:
        return None
    for k, seg in enumerate(reversed(seen)):
        if k >= 8:
            break
        if int(res.seg_end_reason[seg]) == code and int(res.seg_last_packet[seg]) < i:
            members = seen[seg]
            return _Held(seg=seg, head=members[0], last=members[-1],
                         second=members[1] if len(members) > 1 else -1, count=len(members),
                         payload=int(res.seg_payload_len[seg]),
                         gso_size=int(res.seg_gso_size[seg]), members=tuple(members))
    return None


def _seg_line(res, s: int) -> str:
    n = int(res.seg_count[s])
    end = reason_name(int(res.seg_end_reason[s]))
    size = f", gso_size {int(res.seg_gso_size[s])}" if n > 1 else ""
    where = ""
    if int(res.seg_end_reason[s]) in (R.END_POLL, R.END_POLL_OLD, R.END_BUCKET_FULL) \
            and int(res.seg_poll_id[s]) >= 0:
        # napi model: which poll of which RX queue flushed it
        where = f" (poll {int(res.seg_poll_id[s])}, queue {int(res.seg_rx_queue[s])})"
    text = (f"= #{s}: {n} segment{'s' if n != 1 else ''}, "
            f"{int(res.seg_payload_len[s])} bytes{size}, ended by {end}{where}")
    return "\n".join(textwrap.wrap(text, width=80, initial_indent=" " * 8,
                                    subsequent_indent=" " * 12, break_on_hyphens=False))


def reason_lines(codes, width: int = 80) -> list[str]:
    """``NAME: plain-English text`` for each reason code, wrapped to ``width``."""
    out = []
    for c in codes:
        r = REASONS.get(int(c))
        if r is None:
            continue
        out.extend(textwrap.wrap(f"{r.name}: {r.text}", width=width,
                                 subsequent_indent="    ", break_on_hyphens=False))
    return out


__all__ = ["explain_flow", "explain_dict", "flow_breaks", "Break", "Check",
           "probable_cause", "flow_causes", "FlowCauses", "find_flows",
           "parse_flow_spec", "FlowSpec", "flow_title", "flag_letters", "flag_names",
           "reason_lines"]
