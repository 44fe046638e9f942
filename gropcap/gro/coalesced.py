"""Input captured after GRO/TSO: which frames of a capture are already GSO super-packets,
and how many segments each holds (pcapng ``epb_flags``, IPv4/IPv6 length 0, frames longer
than the receiver's MTU).

Runs on the decoded packet columns before GRO: :class:`CoalescedStats` counts the evidence
batch by batch (the MTU inference of ``gro/mtu.py`` included), :func:`coalesced_input`
over a whole table; the GRO engines take a frame's ``segs`` as that many segments.
"""

from __future__ import annotations

from gropcap.arrays import arrow_indices, numpy_of

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
    """

    def __init__(self, mtu: int | None = None):
        self.mtu_option = mtu
        self.syn_mss: dict[bytes, int] = {}
        self.syn_mtu: dict[bytes, int] = {}   # device MTU the SYN's MSS implies
        # per direction: {(IP length << 20) | payload: frames}
        self.sizes: dict[bytes, dict[int, int]] = {}
        self.other_tot: dict[int, int] = {}   # outermost IP length of other IP frames
        self.syn_data_tot: dict[int, int] = {}  # the same of TCP SYNs carrying data
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
    def num(self) -> int:
        """Coalesced TCP data frames among the rows added."""
        inf = self.mtu_inference()
        if self._num is None:
            self._num = self.hard + sum(c for d in self.sizes.values()
                                        for k, c in d.items() if (k >> 20) > inf.mtu) \
                + sum(c for k, c in self.syn_data_tot.items() if k > inf.mtu)
        return self._num

    def size_hist(self, key: bytes) -> dict[int, int]:
        """Payload sizes of the direction's single (not coalesced) data segments."""
        out: dict[int, int] = {}
        mtu = self.mtu
        for k, c in self.sizes.get(key, {}).items():
            if (k >> 20) <= mtu:
                pl = k & 0xFFFFF
                out[pl] = out.get(pl, 0) + c
        return out

    @staticmethod
    def _keys(t, rev: bool = False, rows=None):
        """Direction keys, one fixed-width byte row per packet (addresses, then ports);
        of ``rows`` only when given (numpy indexing: an Arrow ``take`` would import
        ``pyarrow.compute`` on the warm path)."""
        import numpy as np

        from gropcap.gro.flows import _column_bytes as fixed_bytes
        a, b = ("ip_dst", "ip_src") if rev else ("ip_src", "ip_dst")
        pa_, pb = ("dport", "sport") if rev else ("sport", "dport")
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
        one sort, where the direction keys take three; a direction's sizes then come in
        another order, which nothing reads)."""
        import numpy as np

        from gropcap import constants as C
        from gropcap.decode.schema import STATUS_OK
        self._inference = None
        col = lambda name: numpy_of(t.column(name))  # noqa: E731
        data, hard, tot = self._marks(t)
        self.hard += int(hard.sum())
        eth = col("linktype") == C.LINKTYPE_ETHERNET
        self.eth_frames += int(eth.sum())
        self.zero_mac += int((eth & (col("eth_dst") == 0) & (col("eth_src") == 0)).sum())
        tcp = (col("l4_proto") == C.IPPROTO_TCP) & (col("status") == STATUS_OK)
        syn = tcp & ((col("tcp_flags") & C.TCP_FLAG_SYN) != 0) & (col("tcp_mss") != 0)
        synd = data & syn & ~hard      # data on a SYN: coalesced above the MTU, no size
        if synd.any():
            u, c = np.unique(tot[synd], return_counts=True)
            for k, n in zip(u.tolist(), c.tolist()):
                self.syn_data_tot[k] = self.syn_data_tot.get(k, 0) + n
        data = data & ~syn & ~hard
        ip = (col("ip_version") != 0) & ~data & ~hard & ~synd
        if ip.any():
            u, c = np.unique(tot[ip], return_counts=True)
            for k, n in zip(u.tolist(), c.tolist()):
                self.other_tot[k] = self.other_tot.get(k, 0) + n
        if not (syn.any() or data.any()):
            return
        if syn.any():
            srows = np.flatnonzero(syn)
            keys = self._keys(t, rows=srows)
            mss = col("tcp_mss")[srows]
            # advmss = MTU - 40 (IPv4) / 60 (IPv6) headers without options
            # (tcp_mss_to_mtu / ip_rt_get_advmss), plus any encapsulation outside it
            enc = col("outer_ip_version")[srows] != 0
            first = np.where(enc, col("outer_ip_offset")[srows], col("ip_offset")[srows])
            base = np.where(col("ip_version")[srows] == 6, 60, 40)
            implied = mss.astype(np.int64) + base + (col("ip_offset")[srows].astype(np.int64)
                                                    - first)
            for j in range(len(srows)):
                k = keys[j].tobytes()
                if k not in self.syn_mss:
                    self.syn_mss[k] = int(mss[j])
                    self.syn_mtu[k] = int(implied[j])
        if data.any():
            rows = np.flatnonzero(data)
            pl = np.minimum(col("payload_len")[rows].astype(np.int64), 0xFFFFF)
            size = (tot[rows] << np.int64(20)) | pl
            if flow_id is not None:
                fid = np.asarray(flow_id, np.int64)[rows]
                if int(fid.min()) >= 0 and int(fid.max()) < 1 << 27:
                    self._add_sizes_by_flow(t, rows, fid, size)
                    return
            direction, rep = self._directions(t, rows)
            # (direction, IP length, size) counted as one int64 sort (36 bits of sizes)
            pair = (direction << np.int64(36)) | size
            _, first, cnt = np.unique(pair, return_index=True, return_counts=True)
            keys = self._keys(t, rows=rep)
            for j, c in zip(first.tolist(), cnt.tolist()):
                d = self.sizes.setdefault(keys[direction[j]].tobytes(), {})
                k = int(size[j])
                d[k] = d.get(k, 0) + c

    def _add_sizes_by_flow(self, t, rows, fid, size) -> None:
        """:meth:`add`'s data-frame sizes, grouped by flow (ids below 2**27)."""
        import numpy as np
        # (flow, IP length, payload) counted as one int64 sort (36 bits of sizes)
        pairs, first, cnt = np.unique((fid << np.int64(36)) | size, return_index=True,
                                      return_counts=True)
        flows, at = np.unique(pairs >> np.int64(36), return_index=True)
        keys = self._keys(t, rows=rows[first[at]])
        key_of = {f: k.tobytes() for f, k in zip(flows.tolist(), keys)}
        low = (1 << 36) - 1
        for p, c in zip(pairs.tolist(), cnt.tolist()):
            d = self.sizes.setdefault(key_of[p >> 36], {})
            d[p & low] = d.get(p & low, 0) + c

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
        _, first, inv = np.unique(_mix_words(cols), return_index=True, return_inverse=True)
        inv = inv.ravel().astype(np.int64)
        if not all(np.array_equal(w, w[first][inv]) for w in cols):
            keys = CoalescedStats._keys(t, rows=rows)
            view = keys.view(np.dtype((np.void, keys.shape[1]))).ravel()
            _, first, inv = np.unique(view, return_index=True, return_inverse=True)
            inv = inv.ravel().astype(np.int64)
        return inv, rows[first]

    def merge(self, later: "CoalescedStats") -> "CoalescedStats":
        """Fold in the statistics of rows that come after the ones seen so far (the first
        SYN stays the first); returns self."""
        for k, v in later.syn_mss.items():
            if k not in self.syn_mss:
                self.syn_mss[k] = v
                self.syn_mtu[k] = later.syn_mtu[k]
        for k, d in later.sizes.items():
            mine = self.sizes.setdefault(k, {})
            for size, c in d.items():
                mine[size] = mine.get(size, 0) + c
        for mine, theirs in ((self.other_tot, later.other_tot),
                             (self.syn_data_tot, later.syn_data_tot)):
            for k, c in theirs.items():
                mine[k] = mine.get(k, 0) + c
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
            rkeys = self._keys(g, rev=True)
            opt = col("tcp_doff") * 4 - 20
            first = np.where(col("outer_ip_version") != 0, col("outer_ip_offset"),
                             col("ip_offset"))
            hdr = col("l4_offset") + col("tcp_doff") * 4 - first
            pl = col("payload_len")
            # per direction (few), then per row
            view = np.ascontiguousarray(keys).view(np.dtype((np.void, keys.shape[1]))).ravel()
            _, first_of, inv = np.unique(view, return_index=True, return_inverse=True)
            inv = inv.ravel()
            nk = len(first_of)
            mss_k = np.zeros(nk, np.int64)
            best_k = np.zeros(nk, np.int64)
            for u, j in enumerate(first_of.tolist()):
                k = keys[j].tobytes()
                mss_k[u] = self.syn_mss.get(rkeys[j].tobytes()) or self.syn_mss.get(k) or 0
                hist = self.size_hist(k)
                if hist:
                    # the most common size, the largest on ties
                    best_k[u] = max(hist.items(), key=lambda kv: (kv[1], kv[0]))[0]
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
