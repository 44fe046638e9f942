"""Input captured after GRO/TSO: which frames of a capture are already GSO super-packets,
and how many segments each holds (pcapng ``epb_flags``, IPv4/IPv6 length 0, frames longer
than the receiver's MTU).

Runs on the decoded packet columns before GRO: :class:`CoalescedStats` counts the evidence
batch by batch (the MTU inference of ``gro/mtu.py`` included), :func:`coalesced_input`
over a whole table; the GRO engines take a frame's ``segs`` as that many segments.
"""

from __future__ import annotations

import os

from gropcap.arrays import (arrow_indices, drop_pages, numpy_of, read_array, sorted_meet,
                            write_array)

# --- input captured after GRO/TSO: frames that are already GSO super-packets ----------------

GSO_SIZE_NONE = 0       # not a coalesced frame
GSO_SIZE_FROM_SYN = 1   # MSS option of the peer's SYN (minus this segment's option bytes)
GSO_SIZE_FROM_FLOW = 2  # most common payload of the flow's single segments
GSO_SIZE_FROM_MTU = 3   # mtu minus this frame's headers (1448 IPv4 / 1428 IPv6 with TS)


class CoalescedInput:
    """Which frames of a capture are already coalesced and how many segments each holds.

    Attributes (numpy arrays, one value per packet row):
        is_gso: bool, the frame is a GSO/GRO super-packet (pcapng epb_flags
            TCP_SEG_OFFLOAD, IPv4 total length 0 / IPv6 payload length 0 on a data frame, or
            an outermost IP packet longer than the MTU).
        gso_size: int32 inferred segment payload (0 where not coalesced).
        segs: int32 ``ceil(payload / gso_size)`` (1 where not coalesced).
        source: uint8 ``GSO_SIZE_*``: where gso_size came from.
    """

    def __init__(self, is_gso, gso_size, segs, source):
        self.is_gso, self.gso_size, self.segs, self.source = is_gso, gso_size, segs, source

    @property
    def num_coalesced(self) -> int:
        return int(self.is_gso.sum())


def _mix_words(cols):
    """A 64-bit mix of uint64 word columns, per row (a hash: equal rows mix equal)."""
    import numpy as np
    h = np.zeros(len(cols[0]), np.uint64)
    mul = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for w in cols:
            h = (h ^ w) * mul
            h ^= h >> np.uint64(31)
    return h


_KEY_COLUMNS = ["ip_src", "ip_dst", "sport", "dport"]
# CoalescedStats.add's columns, in _batch_kernels.marks' order, with their schema
# types (numpy dtype names: the module imports numpy only when it runs)
_MARK_COLUMNS = (("status", "u1"), ("l4_proto", "u1"), ("payload_len", "u4"),
                 ("epb_flags", "u4"), ("outer_ip_version", "u1"), ("ip_version", "u1"),
                 ("outer_ip_tot_len", "u4"), ("ip_tot_len", "u4"), ("linktype", "u2"),
                 ("eth_dst", "u8"), ("eth_src", "u8"), ("tcp_flags", "u2"),
                 ("tcp_mss", "u2"))
_INFER_COLUMNS = _KEY_COLUMNS + ["tcp_doff", "outer_ip_version", "outer_ip_offset",
                                 "ip_offset", "l4_offset", "payload_len"]


class CoalescedStats:
    """What :func:`coalesced_input` needs from the whole capture, gathered batch by batch.

    Per TCP direction (source and destination address and port): the MSS of its first SYN
    that carries one (and the device MTU it implies), and a histogram of the (outermost IP
    length, payload) pairs of its data frames that carry no mark of coalescing; per
    capture: a histogram of the outermost IP lengths of every other IP frame. :meth:`add`
    folds in the next rows in capture order, :meth:`merge` folds in the statistics of rows
    that come after (another file, another byte range). The receiving device's MTU
    (:attr:`mtu`) is the one given (``mtu``) or, when None, inferred from these statistics
    once everything is in (:meth:`mtu_inference`, rules in :mod:`gropcap.gro.mtu`); then
    :meth:`infer` gives any rows their :class:`CoalescedInput`: a frame's gso_size can
    depend on a SYN or on segments that come after it. The same statistics whatever the
    batches, so streaming and distributed runs infer what one pass over the whole table
    infers.

    Per direction the statistics are numpy arrays, not Python objects (a capture of
    800 000 flows held 370 MB of dictionaries): :meth:`syn_arrays` (direction keys, the
    36-byte rows of :meth:`_keys` as ``S36``, sorted; MSS; implied MTU) and
    :meth:`size_arrays` (direction keys; per (direction, size) entry its direction,
    ``(IP length << 20) | payload`` and frames, sorted). What :meth:`add` and
    :meth:`merge` bring waits in chunks and is folded in when read or once it outnumbers
    what is folded. ``syn_mss``, ``syn_mtu`` and ``sizes`` give them as dictionaries
    (tests, debugging).
    """

    def __init__(self, mtu: int | None = None):
        self.mtu_option = mtu
        # folded: SYN keys (sorted), MSS, implied MTU; size entries (their directions'
        # keys, sorted; per entry its direction, size code and frames, sorted)
        self._syn = (_no_keys(), _ints(), _ints())
        self._size = (_no_keys(), _ints(), _ints(), _ints())
        self._pending_syn: list = []        # (keys, mss, mtu) chunks, capture order
        self._pending_size: list = []       # (keys, code, frames) chunks
        self._pending = 0
        # folded pieces that come before the arrays above, in capture order (another
        # task's statistics, kept in its work directory: :meth:`spill`)
        self._parts: list[_Part] = []
        self._summ = None       # :meth:`summary`, until the next change
        from gropcap.gro._batch_kernels import LengthBins
        self._other = LengthBins()      # outermost IP length of other IP frames
        self._synd = LengthBins()       # the same of TCP SYNs carrying data
        self.hard = 0           # frames marked coalesced whatever the MTU
        self.eth_frames = 0     # Ethernet frames, and those with all-zero MACs (Linux lo)
        self.zero_mac = 0
        self._inference = None
        self._num = None

    def set_mtu(self, mtu: int | None) -> "CoalescedStats":
        """Use this MTU (None: infer it); returns self."""
        self.mtu_option = mtu
        self._inference = None
        return self

    def mtu_inference(self):
        """The :class:`gropcap.gro.mtu.MtuInference` of everything added so far."""
        if self._inference is None:
            from gropcap.gro.mtu import resolve_mtu
            self._inference = resolve_mtu(self)
            self._num = None
        return self._inference

    @property
    def mtu(self) -> int:
        """The receiving device's MTU in use: given, or inferred."""
        return self.mtu_inference().mtu

    @property
    def other_tot(self) -> dict[int, int]:
        """``{outermost IP length: frames}`` of the IP frames without TCP data."""
        return self._other.frames()

    @property
    def syn_data_tot(self) -> dict[int, int]:
        """``{outermost IP length: frames}`` of the TCP SYNs carrying data."""
        return self._synd.frames()

    @property
    def num(self) -> int:
        """Coalesced TCP data frames among the rows added."""
        inf = self.mtu_inference()
        if self._num is None:
            tot, frames = self.summary()[3:]
            self._num = self.hard + int(frames[tot > inf.mtu].sum()) \
                + sum(c for k, c in self.syn_data_tot.items() if k > inf.mtu)
        return self._num

    # ---- the per-direction arrays

    def _fold(self) -> None:
        """Fold the pending chunks into the sorted arrays."""
        import numpy as np
        if self._pending_syn:
            keys = np.concatenate([self._syn[0]] + [c[0] for c in self._pending_syn])
            mss = np.concatenate([self._syn[1]] + [c[1] for c in self._pending_syn])
            mtu = np.concatenate([self._syn[2]] + [c[2] for c in self._pending_syn])
            # a direction's first SYN: its first occurrence (chunks in capture order)
            keys, first = np.unique(keys, return_index=True)
            self._syn = (keys, mss[first], mtu[first])
            self._pending_syn = []
        if self._pending_size:
            old_keys, old_dir, old_code, old_n = self._size
            new_keys = np.concatenate([c[0] for c in self._pending_size])
            code = np.concatenate([old_code] + [c[1] for c in self._pending_size])
            frames = np.concatenate([old_n] + [c[2] for c in self._pending_size])
            # the pending entries' keys repeat (an entry per size a direction sent): the
            # distinct ones first, by a 64-bit mix (an integer sort), then sorted as
            # strings with the folded keys (a string sort of every entry's key was most
            # of a fold; folds were 0.75 s of a 20 M-packet run with 16 000 flows)
            ukeys, uinv = _distinct(new_keys)
            dkeys, inv = np.unique(np.concatenate([old_keys, ukeys]), return_inverse=True)
            inv = inv.ravel().astype(np.int64)
            direction = np.concatenate([inv[:len(old_keys)][old_dir],
                                        inv[len(old_keys):][uinv]])
            order = np.lexsort((code, direction))
            direction, code, frames = direction[order], code[order], frames[order]
            start = np.ones(len(order), np.bool_)
            start[1:] = (direction[1:] != direction[:-1]) | (code[1:] != code[:-1])
            at = np.flatnonzero(start)
            self._size = (dkeys, direction[at], code[at],
                          np.add.reduceat(frames, at) if len(at) else frames[:0])
            self._pending_size = []
        self._pending = 0

    def _push(self, syn=None, size=None) -> None:
        self._summ = None
        if syn is not None and len(syn[0]):
            self._pending_syn.append(syn)
            self._pending += len(syn[0])
        if size is not None and len(size[0]):
            self._pending_size.append(size)
            self._pending += len(size[0])
        if self._pending > max(len(self._syn[0]) + len(self._size[1]), FOLD_MIN):
            self._fold()

    def syn_arrays(self):
        """``(keys, mss, implied mtu)``: per direction with a SYN carrying an MSS (keys
        ``S36``, sorted), its first such SYN's. With parts (:meth:`spill`): all of them
        folded in memory (tests, debugging; the MTU inference reads :meth:`slices`)."""
        self._fold()
        return self._all()._syn if self._parts else self._syn

    def size_arrays(self):
        """``(keys, direction, code, frames)``: the directions with data frames (keys
        ``S36``, sorted) and per (direction, ``(IP length << 20) | payload``) entry, sorted
        by both, the direction's index in ``keys``, the code and the frames. With parts:
        as :meth:`syn_arrays`."""
        self._fold()
        return self._all()._size if self._parts else self._size

    # ---- parts: statistics of other tasks, left in their files

    def spill(self, path: str, min_entries: int | None = None) -> "CoalescedStats":
        """Move the per-direction arrays to ``.npy`` files in directory ``path`` (once
        they hold at least ``min_entries`` entries, default :data:`SPILL_MIN`): what is
        pickled then is the path, and whoever merges these statistics reads the arrays
        mapped, a key range at a time (:meth:`slices`), or looks keys up in them. A
        Dask task's statistics, so that the client holds none per direction (the
        directory must outlive every reader: the run's scratch). Returns self."""
        self._fold()
        if len(self._syn[0]) + len(self._size[1]) < (SPILL_MIN if min_entries is None
                                                     else min_entries):
            return self
        self._parts.append(_Part.save(path, self._syn, self._size))
        self._syn = (_no_keys(), _ints(), _ints())
        self._size = (_no_keys(), _ints(), _ints(), _ints())
        return self

    def _sources(self) -> list:
        """The folded pieces in capture order (parts, then the arrays in memory), the
        empty ones left out."""
        self._fold()
        return [p for p in self._parts + [_Part(self._syn, self._size)] if p.entries]

    def _all(self) -> "CoalescedStats":
        """Every piece folded into one statistics object in memory."""
        import numpy as np
        one = CoalescedStats()
        for p in self._sources():
            keys, direction, code, frames = (np.asarray(a) for a in p.size)
            one._push(syn=tuple(np.asarray(a) for a in p.syn),
                      size=(keys[direction], code, frames))
        one._fold()
        return one

    def slices(self):
        """The per-direction statistics a key range at a time, each a folded piece
        (``.syn``, ``.size`` as :meth:`syn_arrays`, :meth:`size_arrays`) that holds every
        entry of its directions: the pieces' entries in the range folded (the first SYN
        of a direction is the first piece's). One piece: that piece, whole. Ranges of
        about :data:`SLICE_KEYS` keys per piece; the mapped pages are dropped after
        each."""
        import numpy as np
        srcs = self._sources()
        if len(srcs) <= 1:
            yield from srcs
            return
        samples = [np.asarray(a[::SLICE_KEYS]) for p in srcs
                   for a in (p.syn[0], p.size[0]) if len(a)]
        bounds = np.unique(np.concatenate(samples))[1:]
        cuts = []
        for p in srcs:
            s = np.searchsorted(p.syn[0], bounds)
            d = np.searchsorted(p.size[0], bounds)
            e = np.searchsorted(p.size[1], d)
            edge = lambda c, n: np.concatenate([[0], c, [n]])  # noqa: E731
            cuts.append((edge(s, len(p.syn[0])), edge(d, len(p.size[0])),
                         edge(e, len(p.size[1]))))
        for i in range(len(bounds) + 1):
            one = CoalescedStats()
            for p, (s, d, e) in zip(srcs, cuts):
                keys, mss, mtu = p.syn
                if s[i + 1] > s[i]:
                    one._push(syn=(np.asarray(keys[s[i]:s[i + 1]]),
                                   np.asarray(mss[s[i]:s[i + 1]]),
                                   np.asarray(mtu[s[i]:s[i + 1]])))
                if e[i + 1] > e[i]:
                    dkeys, direction, code, frames = p.size
                    sub = np.asarray(direction[e[i]:e[i + 1]]) - d[i]
                    one._push(size=(np.asarray(dkeys[d[i]:d[i + 1]])[sub],
                                    np.asarray(code[e[i]:e[i + 1]]),
                                    np.asarray(frames[e[i]:e[i + 1]])))
            one._fold()
            yield _Part(one._syn, one._size)
            for p in srcs:
                p.drop_pages()

    def summary(self):
        """``(SYN directions, the largest MTU a first SYN implies (0: none), the first
        SYNs' MSS values (sorted, distinct), IP lengths of the data-frame entries
        (sorted, distinct), their frames)``: what the MTU inference needs of every
        direction, gathered a key range at a time."""
        import numpy as np
        if self._summ is None:
            n, top, mss = 0, 0, _ints()
            tots, counts = [_ints()], [_ints()]
            for s in self.slices():
                keys, smss, smtu = s.syn
                if len(keys):
                    n += len(keys)
                    top = max(top, int(smtu.max()))
                    mss = np.union1d(mss, smss)
                code, frames = s.size[2], s.size[3]
                if len(code):
                    u, inv = np.unique(code >> 20, return_inverse=True)
                    tots.append(u)
                    counts.append(np.bincount(inv.ravel(), weights=frames,
                                              minlength=len(u)).astype(np.int64))
            u, inv = np.unique(np.concatenate(tots), return_inverse=True)
            frames = np.bincount(inv.ravel(), weights=np.concatenate(counts),
                                 minlength=len(u)).astype(np.int64)
            self._summ = (n, top, mss, u, frames)
        return self._summ

    def syn_mss_of(self, keys):
        """The first-SYN MSS of each direction key in ``keys`` (``S36``; 0: none): the
        first piece's that has the key."""
        import numpy as np
        out = np.zeros(len(keys), np.int64)
        if not len(keys):
            return out
        found = np.zeros(len(keys), np.bool_)
        for p in self._sources():
            skeys, mss, _ = p.syn
            if not len(skeys):
                continue
            at = np.minimum(np.searchsorted(skeys, keys), len(skeys) - 1)
            hit = ~found & (np.asarray(skeys[at]) == keys)
            out[hit] = np.asarray(mss[at[hit]])
            found |= hit
        return out

    def peer_mss(self, keys):
        """Per direction key of ``keys`` (``S36``): the MSS a SYN of the other direction
        gave (what the receiver allowed), else one of this direction (0: none)."""
        import numpy as np
        rev = self.syn_mss_of(reverse_keys(keys))
        return np.where(rev != 0, rev, self.syn_mss_of(keys))

    def shares_syn(self, other: "CoalescedStats") -> bool:
        """Whether a direction has SYNs in both statistics (read a slice at a time)."""
        return any(sorted_meet(a.syn[0], b.syn[0], SLICE_KEYS)
                   for a in self._sources() for b in other._sources())

    @property
    def syn_mss(self) -> dict[bytes, int]:
        keys, mss, _ = self.syn_arrays()
        return dict(zip(_key_bytes(keys), mss.tolist()))

    @property
    def syn_mtu(self) -> dict[bytes, int]:
        """The device MTU each direction's first SYN's MSS implies."""
        keys, _, mtu = self.syn_arrays()
        return dict(zip(_key_bytes(keys), mtu.tolist()))

    @property
    def sizes(self) -> dict[bytes, dict[int, int]]:
        """Per direction: ``{(IP length << 20) | payload: frames}``."""
        keys, direction, code, frames = self.size_arrays()
        names = _key_bytes(keys)
        out: dict[bytes, dict[int, int]] = {}
        for d, k, c in zip(direction.tolist(), code.tolist(), frames.tolist()):
            out.setdefault(names[d], {})[k] = c
        return out

    def size_hist(self, key: bytes) -> dict[int, int]:
        """Payload sizes of the direction's single (not coalesced) data segments."""
        import numpy as np
        keys, direction, code, frames = self.size_arrays()
        d = np.searchsorted(keys, np.frombuffer(key, f"S{len(key)}"))[0] if len(keys) \
            else 0
        if d >= len(keys) or keys[d] != np.frombuffer(key, f"S{len(key)}")[0]:
            return {}
        lo, hi = np.searchsorted(direction, [d, d + 1])
        out: dict[int, int] = {}
        mtu = self.mtu
        for k, c in zip(code[lo:hi].tolist(), frames[lo:hi].tolist()):
            if (k >> 20) <= mtu:
                out[k & 0xFFFFF] = out.get(k & 0xFFFFF, 0) + c
        return out

    def __getstate__(self):
        self._fold()                    # (pickled compact)
        state = dict(self.__dict__)
        state.pop("_fkeys", None)       # _flow_keys' memo: rebuilt from the next batch
        return state

    @staticmethod
    def _keys(t, rows=None):
        """Direction keys, one fixed-width byte row per packet (addresses, then ports);
        of ``rows`` only when given (numpy indexing: an Arrow ``take`` would import
        ``pyarrow.compute`` on the warm path). The other direction's: :func:`reverse_keys`."""
        import numpy as np

        from gropcap.gro.flows import _column_bytes as fixed_bytes
        a, b, pa_, pb = "ip_src", "ip_dst", "sport", "dport"
        pick = (lambda x: x) if rows is None else (lambda x: x[rows])  # noqa: E731
        mat = np.concatenate([
            pick(fixed_bytes(t.column(a))), pick(fixed_bytes(t.column(b))),
            pick(numpy_of(t.column(pa_))).astype(">u2").view(np.uint8).reshape(-1, 2),
            pick(numpy_of(t.column(pb))).astype(">u2").view(np.uint8).reshape(-1, 2)],
            axis=1)
        return np.ascontiguousarray(mat)

    @staticmethod
    def _marks(t):
        """``(data, hard, tot)`` per row: a TCP data frame; one marked coalesced whatever
        the MTU (pcapng TCP_SEG_OFFLOAD, IPv4 total length 0, IPv6 payload length 0); the
        outermost IP length."""
        import numpy as np

        from gropcap import constants as C
        from gropcap.decode.schema import STATUS_OK
        col = lambda name: numpy_of(t.column(name))  # noqa: E731
        enc = col("outer_ip_version") != 0
        v = np.where(enc, col("outer_ip_version"), col("ip_version"))
        tot = np.where(enc, col("outer_ip_tot_len"), col("ip_tot_len")).astype(np.int64)
        data = ((col("status") == STATUS_OK) & (col("l4_proto") == C.IPPROTO_TCP)
                & (col("payload_len") != 0))
        hard = data & (((col("epb_flags") & C.EPB_FLAG_TCP_SEG_OFFLOAD) != 0)
                       | ((v == 4) & (tot == 0)) | ((v == 6) & (tot == 40)))
        return data, hard, tot

    @staticmethod
    def _tot_of(t, rows):
        """The outermost IP length of ``rows`` (int64)."""
        import numpy as np
        if not len(rows):
            return np.zeros(0, np.int64)
        outer = numpy_of(t.column("outer_ip_version"))[rows] != 0
        return np.where(outer, numpy_of(t.column("outer_ip_tot_len"))[rows],
                        numpy_of(t.column("ip_tot_len"))[rows]).astype(np.int64)

    def is_gso(self, t):
        """Per row: a TCP data frame captured already coalesced (pcapng TCP_SEG_OFFLOAD,
        IPv4 total length 0, IPv6 payload length 0, or an outermost IP packet above the
        MTU)."""
        data, hard, tot = self._marks(t)
        return hard | (data & (tot > self.mtu))

    def add(self, t, flow_id=None) -> None:
        """Fold in the next rows (capture order): first SYN MSS per direction, sizes of
        data frames, IP lengths of the other frames. ``flow_id``: the GRO engine's flow of
        each row when known (a flow has one direction, so its ids group the sizes with
        one count, where the direction keys take three sorts; a direction's sizes then come in
        another order, which nothing reads)."""
        import numpy as np

        from gropcap import constants as C
        from gropcap.decode.schema import STATUS_OK
        from gropcap.gro import _batch_kernels as K
        self._inference = None
        col = lambda name: numpy_of(t.column(name))  # noqa: E731
        # the masks of _marks and the IP-length histograms in one pass (the kernel's
        # docstring); the columns in their schema types (one compiled specialisation)
        scal = np.zeros(3, np.int64)
        other, synd = self._other.bins()[0], self._synd.bins()[0]
        codes = np.array([STATUS_OK, C.IPPROTO_TCP, C.EPB_FLAG_TCP_SEG_OFFLOAD,
                          C.LINKTYPE_ETHERNET, C.TCP_FLAG_SYN], np.int64)
        fid = np.zeros(0, np.int64) if flow_id is None else np.asarray(flow_id, np.int64)
        srows, rows, big_synd, big_other, size, pairs, by_flow = K.marks(
            *(np.asarray(col(name), dt) for name, dt in _MARK_COLUMNS), codes, scal, other,
            synd, fid)
        self.hard += int(scal[K.MK_HARD])
        self.eth_frames += int(scal[K.MK_ETH])
        self.zero_mac += int(scal[K.MK_ZERO_MAC])
        _count_lengths(self._synd, self._tot_of(t, big_synd))
        _count_lengths(self._other, self._tot_of(t, big_other))
        if not (len(srows) or len(rows)):
            return
        if len(srows):
            keys = self._keys(t, rows=srows)
            mss = col("tcp_mss")[srows]
            # advmss = MTU - 40 (IPv4) / 60 (IPv6) headers without options
            # (tcp_mss_to_mtu / ip_rt_get_advmss), plus any encapsulation outside it
            enc = col("outer_ip_version")[srows] != 0
            first = np.where(enc, col("outer_ip_offset")[srows], col("ip_offset")[srows])
            base = np.where(col("ip_version")[srows] == 6, 60, 40)
            implied = mss.astype(np.int64) + base + (col("ip_offset")[srows].astype(np.int64)
                                                    - first)
            self._push(syn=(_as_keys(keys), mss.astype(np.int64), implied))
        if len(rows):
            # size and, by flow, (flow, size) keys of the data rows: from marks' pass
            if by_flow:
                self._add_sizes_by_flow(t, rows, pairs)
                return
            direction, rep = self._directions(t, rows)
            # (direction, IP length, size) counted as one int64 key (36 bits of sizes)
            _, first, cnt = _unique_counts((direction << np.int64(36)) | size)
            keys = _as_keys(self._keys(t, rows=rep))
            self._push(size=(keys[direction[first]], size[first], cnt.astype(np.int64)))

    def _add_sizes_by_flow(self, t, rows, pairs) -> None:
        """:meth:`add`'s data-frame sizes, grouped by flow (ids below 2**27): ``pairs``,
        (flow, IP length, payload) of each of ``rows`` as one int64 key (36 bits of
        sizes)."""
        import numpy as np
        pairs, first, cnt = _unique_counts(pairs)
        flows, at, of = np.unique(pairs >> np.int64(36), return_index=True,
                                  return_inverse=True)
        keys = self._flow_keys(t, flows, rows[first[at]])
        self._push(size=(keys[of.ravel()], pairs & np.int64((1 << 36) - 1),
                         cnt.astype(np.int64)))

    def _flow_keys(self, t, flows, rows):
        """The direction key (``S36``) of each of ``flows`` (distinct flow ids, sorted;
        ``rows``: a row of each in ``t``). A flow id names one flow of the run for good
        (the engine's flow table keeps a returning flow's id), and the flow key holds
        the addresses and ports, so a flow's direction key is remembered from its first
        batch: building every flow's key again in every batch was 0.16 s of a 20 M-packet
        one-thread run with 16 000 flows. At most :data:`FLOW_KEYS_MAX` are remembered:
        past it, the batch's new flows replace them (none if they are more)."""
        import numpy as np
        ids, keys = getattr(self, "_fkeys", None) or (_ints(), _no_keys())
        out = np.empty(len(flows), f"S{KEY_BYTES}")
        hit = np.zeros(len(flows), np.bool_)
        if len(ids):
            at = np.minimum(np.searchsorted(ids, flows), len(ids) - 1)
            hit = ids[at] == flows
            out[hit] = keys[at[hit]]
        miss = np.flatnonzero(~hit)
        if len(miss):
            new = _as_keys(self._keys(t, rows=rows[miss]))
            out[miss] = new
            if len(ids) + len(miss) > FLOW_KEYS_MAX:
                ids, keys = _ints(), _no_keys()
            if len(miss) <= FLOW_KEYS_MAX:
                ids = np.concatenate([ids, flows[miss]])
                keys = np.concatenate([keys, new])
                order = np.argsort(ids, kind="stable")
                ids, keys = ids[order], keys[order]
            self._fkeys = (ids, keys)
        return out

    @staticmethod
    def _directions(t, rows):
        """Direction class of each of ``rows`` (numbered in sorted-hash order) and the row
        representing each class. Classes come from a 64-bit mix of the key words (one
        int64 sort instead of a sort of 36-byte rows) and are then checked word by word
        against their representative; on a hash collision the exact byte-row sort is
        used instead."""
        import numpy as np

        from gropcap.gro.flows import _column_bytes as fixed_bytes
        words = [np.ascontiguousarray(fixed_bytes(t.column(name))[rows]).view(np.uint64)
                 for name in ("ip_src", "ip_dst")]
        ports = (numpy_of(t.column("sport"))[rows].astype(np.uint64) << np.uint64(16)) \
            | numpy_of(t.column("dport"))[rows].astype(np.uint64)
        cols = [words[0][:, 0], words[0][:, 1], words[1][:, 0], words[1][:, 1], ports]
        grouped = _grouped(cols)
        if grouped is not None:
            first, inv = grouped
        else:
            keys = CoalescedStats._keys(t, rows=rows)
            view = keys.view(np.dtype((np.void, keys.shape[1]))).ravel()
            _, first, inv = np.unique(view, return_index=True, return_inverse=True)
            inv = inv.ravel().astype(np.int64)
        return inv, rows[first]

    def merge(self, later: "CoalescedStats") -> "CoalescedStats":
        """Fold in the statistics of rows that come after the ones seen so far (the first
        SYN stays the first); returns self. Parts of ``later`` (:meth:`spill`) stay
        where they are, after this one's arrays."""
        later._fold()
        if later._parts:
            self._fold()
            if len(self._syn[0]) or len(self._size[1]):
                self._parts.append(_Part(self._syn, self._size))
                self._syn = (_no_keys(), _ints(), _ints())
                self._size = (_no_keys(), _ints(), _ints(), _ints())
            self._parts.extend(later._parts)
            self._summ = None
        self._push(syn=later._syn)
        keys, direction, code, frames = later._size
        self._push(size=(keys[direction], code, frames))
        self._other.merge(later._other)
        self._synd.merge(later._synd)
        self.hard += later.hard
        self.eth_frames += later.eth_frames
        self.zero_mac += later.zero_mac
        self._inference = None
        return self

    def infer(self, t) -> CoalescedInput:
        """The :class:`CoalescedInput` of rows ``t`` (after every row went through
        :meth:`add`): see :func:`coalesced_input` for the rule."""
        import numpy as np
        n = t.num_rows
        mtu = self.mtu
        gso = self.is_gso(t)
        gso_size = np.zeros(n, np.int32)
        segs = np.ones(n, np.int32)
        source = np.zeros(n, np.uint8)
        rows = np.flatnonzero(gso)
        if len(rows):
            g = t.select(_INFER_COLUMNS).take(arrow_indices(rows)) if len(rows) < n else t
            col = lambda name: numpy_of(g.column(name)).astype(np.int64)  # noqa: E731
            keys = self._keys(g)
            opt = col("tcp_doff") * 4 - 20
            first = np.where(col("outer_ip_version") != 0, col("outer_ip_offset"),
                             col("ip_offset"))
            hdr = col("l4_offset") + col("tcp_doff") * 4 - first
            pl = col("payload_len")
            # per direction (few), then per row
            view = np.ascontiguousarray(keys).view(np.dtype((np.void, keys.shape[1]))).ravel()
            _, first_of, inv = np.unique(view, return_index=True, return_inverse=True)
            inv = inv.ravel()
            ukeys = _as_keys(keys[first_of])
            mss_k = self.peer_mss(ukeys)
            best_k = self._best_payload(ukeys, mtu)
            mss = mss_k[inv]
            best = best_k[inv]
            use_syn = (mss != 0) & (mss - opt > 0)
            use_flow = ~use_syn & (best != 0)
            size = np.where(use_syn, mss - opt, np.where(use_flow, best, mtu - hdr))
            src = np.where(use_syn, GSO_SIZE_FROM_SYN,
                           np.where(use_flow, GSO_SIZE_FROM_FLOW, GSO_SIZE_FROM_MTU))
            size = np.maximum(size, 1)
            gso_size[rows] = size
            segs[rows] = np.maximum(1, -(-pl // size))
            source[rows] = src
        return CoalescedInput(gso, gso_size, segs, source)


    def _best_payload(self, ukeys, mtu: int):
        """Per direction key of ``ukeys``: the most common payload of its data frames
        at most ``mtu`` IP bytes (the largest on ties; 0: none), over every piece."""
        import numpy as np
        best = np.zeros(len(ukeys), np.int64)
        if not len(ukeys):
            return best
        got = [_entries_of(p, ukeys, mtu) for p in self._sources()]
        if not got:
            return best
        owner, pl, n = (np.concatenate(x) for x in zip(*got))
        if not len(owner):
            return best
        # frames per (direction, payload), then per direction the most frames, the
        # largest payload on ties: the last of an ascending sort by (count, payload)
        order = np.lexsort((pl, owner))
        owner, pl, n = owner[order], pl[order], n[order]
        start = np.ones(len(owner), np.bool_)
        start[1:] = (owner[1:] != owner[:-1]) | (pl[1:] != pl[:-1])
        at = np.flatnonzero(start)
        owner, pl, n = owner[at], pl[at], np.add.reduceat(n, at)
        order = np.lexsort((pl, n, owner))
        owner, pl = owner[order], pl[order]
        last = np.ones(len(owner), np.bool_)
        last[:-1] = owner[1:] != owner[:-1]
        best[owner[last]] = pl[last]
        return best


def _entries_of(part, ukeys, mtu: int):
    """``(owner, payload, frames)``: the size entries of ``part`` at most ``mtu`` IP
    bytes whose direction is in ``ukeys`` (``owner``: its index in ``ukeys``)."""
    import numpy as np
    keys, direction, code, frames = part.size
    if not len(keys):
        return _ints(), _ints(), _ints()
    at = np.minimum(np.searchsorted(keys, ukeys), len(keys) - 1)
    found = np.flatnonzero(np.asarray(keys[at]) == ukeys)
    lo = np.searchsorted(direction, at[found])
    hi = np.searchsorted(direction, at[found], side="right")
    span = hi - lo
    owner = np.repeat(found, span)              # the ukeys index of each entry
    entry = np.arange(span.sum()) - np.repeat(np.cumsum(span) - span - lo, span)
    c = np.asarray(code[entry])
    keep = (c >> 20) <= mtu
    return owner[keep], c[keep] & 0xFFFFF, np.asarray(frames[entry])[keep]


class _Part:
    """One folded piece of :class:`CoalescedStats`: ``syn`` (keys, MSS, implied MTU) and
    ``size`` (keys, direction, code, frames) as its :meth:`~CoalescedStats.syn_arrays`
    and :meth:`~CoalescedStats.size_arrays`; in memory, or in the ``.npy`` files of a
    directory (:meth:`save`), mapped when first read and pickled as the path."""

    FILES = ("syn_keys", "syn_mss", "syn_mtu", "size_keys", "size_dir", "size_code",
             "size_frames")

    def __init__(self, syn=None, size=None, path: str | None = None):
        self.path, self._syn, self._size = path, syn, size

    @classmethod
    def save(cls, path: str, syn, size) -> "_Part":
        os.makedirs(path, exist_ok=True)
        for name, a in zip(cls.FILES, syn + size):
            write_array(os.path.join(path, name + ".npy"), a)
        return cls(path=path)

    def _load(self) -> None:
        if self._syn is None:
            a = [read_array(os.path.join(self.path, name + ".npy"),
                            f"S{KEY_BYTES}" if name.endswith("keys") else "int64")
                 for name in self.FILES]
            self._syn, self._size = tuple(a[:3]), tuple(a[3:])

    @property
    def syn(self):
        self._load()
        return self._syn

    @property
    def size(self):
        self._load()
        return self._size

    @property
    def entries(self) -> int:
        return len(self.syn[0]) + len(self.size[1])

    def drop_pages(self) -> None:
        """Drop the resident pages of the mapped files (``arrays.drop_pages``)."""
        if self.path is not None and self._syn is not None:
            for a in self._syn + self._size:
                drop_pages(a)

    def __getstate__(self):
        if self.path is not None:
            return {"path": self.path, "_syn": None, "_size": None}
        return self.__dict__


# CoalescedStats folds its pending chunks once they hold at least this many entries
FOLD_MIN = 1 << 16
# CoalescedStats._flow_keys: flows whose direction key is remembered, at most
FLOW_KEYS_MAX = 1 << 16
# CoalescedStats.spill leaves smaller statistics in memory (pickled with them)
SPILL_MIN = 1 << 12
# CoalescedStats.slices: keys per piece and range, about
SLICE_KEYS = 1 << 17
KEY_BYTES = 36          # a direction key: two 16-byte addresses, two 2-byte ports


def _no_keys():
    import numpy as np
    return np.zeros(0, f"S{KEY_BYTES}")


def _ints():
    import numpy as np
    return np.zeros(0, np.int64)


def _count_lengths(counts, past) -> None:
    """Add the IP lengths ``past`` the bins into ``counts`` (a ``LengthBins``, whose bins
    the kernel added into)."""
    import numpy as np
    if len(past):
        u, c = np.unique(past, return_counts=True)
        for k, n in zip(u.tolist(), c.tolist()):
            counts.add(k, n)


def _unique_counts(pairs):
    """``np.unique(pairs, return_index=True, return_counts=True)`` of non-negative int64
    keys: counted by hashing (``_batch_kernels.count_pairs``), only the few distinct
    keys sorted."""
    import numpy as np

    from gropcap.gro._batch_kernels import count_pairs
    keys, first, cnt = count_pairs(np.asarray(pairs, np.int64))
    order = np.argsort(keys)
    return keys[order], first[order], cnt[order]


def _distinct(keys):
    """``(distinct, inverse)`` of an ``S36`` key array, ``keys == distinct[inverse]``
    (``distinct`` in no particular order): grouped by a 64-bit mix of the key's words,
    the groups checked against the keys; on a collision, ``np.unique`` of the keys."""
    import numpy as np
    rows = np.zeros((len(keys), 40), np.uint8)
    rows[:, :KEY_BYTES] = np.ascontiguousarray(keys).view(np.uint8).reshape(-1, KEY_BYTES)
    words = rows.view(np.uint64)
    grouped = _grouped([words[:, w] for w in range(5)])
    if grouped is not None:
        first, inv = grouped
        return keys[first], inv
    distinct, inv = np.unique(keys, return_inverse=True)
    return distinct, inv.ravel().astype(np.int64)


def _grouped(cols):
    """``(first, inverse)`` grouping the rows of uint64 word columns ``cols`` that are
    equal in every column: by a 64-bit mix of the words (an integer sort), each group
    checked word by word; None when two different rows mixed alike (the caller then
    groups them exactly)."""
    import numpy as np
    _, first, inv = np.unique(_mix_words(cols), return_index=True, return_inverse=True)
    inv = inv.ravel().astype(np.int64)
    if not all(np.array_equal(w, w[first][inv]) for w in cols):
        return None
    return first, inv


def _as_keys(rows):
    """``(n, 36)`` uint8 direction-key rows -> an ``S36`` array (byte strings that sort
    and compare as the rows; equal width, so the trailing-NUL rule of numpy's byte
    strings cannot make two different rows equal)."""
    import numpy as np
    return np.ascontiguousarray(rows).view(f"S{KEY_BYTES}").ravel()


def _key_bytes(keys) -> list[bytes]:
    """An ``S36`` array's keys as 36-byte ``bytes`` (its items drop trailing NULs)."""
    import numpy as np
    rows = np.ascontiguousarray(keys).view(np.uint8).reshape(-1, KEY_BYTES)
    return [r.tobytes() for r in rows]


def reverse_keys(keys):
    """The other direction's key of each ``S36`` key (addresses swapped, ports swapped)."""
    import numpy as np
    r = np.ascontiguousarray(keys).view(np.uint8).reshape(-1, KEY_BYTES)
    return _as_keys(np.concatenate([r[:, 16:32], r[:, :16], r[:, 34:36], r[:, 32:34]],
                                   axis=1))


def coalesced_input(packets, mtu: int | None = None) -> CoalescedInput:
    """Detect frames captured after TSO/GRO and infer their gso_size and segment count.

    ``mtu``: the receiving device's MTU; None infers it from the capture
    (:func:`gropcap.gro.mtu.resolve_mtu`).

    ``packets`` is a PACKET_SCHEMA table. gso_size per frame, first that applies: the MSS
    option of a SYN sent the other way (what the receiver allowed), else of a SYN of the
    same direction, minus the frame's TCP option bytes; else the most common payload among
    the direction's single (not coalesced) data segments, largest on ties; else ``mtu``
    minus the frame's headers from the outermost IP header through TCP. (Vectorised over
    :class:`CoalescedStats`; ``tests/gro/test_coalesced_stats.py`` keeps the row-by-row
    statement of the rule as its oracle.)

    >>> from gropcap.decode.schema import empty_packet_table
    >>> coalesced_input(empty_packet_table()).num_coalesced
    0
    """
    stats = CoalescedStats(mtu)
    stats.add(packets)
    return stats.infer(packets)
