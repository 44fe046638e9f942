"""GSO description of GRO super-packets: SKB_GSO_* type bits and segment accounting.

Layer: GRO result (``gro/``) -> what a super-packet becomes on egress. The GRO engines call
:func:`gso_type_for` when they complete a super-packet of two or more segments
(``gro_complete`` -> ``inet_gro_complete`` / ``ipv6_gro_complete`` -> tunnel completions ->
``tcp4_gro_complete`` / ``tcp6_gro_complete`` -> ``tcp_gro_complete``); reports use
:func:`gso_type_names` and :func:`gso_segs`.

Bit values are the kernel's ``enum { SKB_GSO_* }`` in include/linux/skbuff.h. In v6.18
("net: gso: restore outer ip ids correctly") the fixed-ID bit moved: bit 3 became the
internal ``__SKB_GSO_TCP_FIXEDID`` (the NETIF_F_TSO_MANGLEID feature bit) and the GSO type
carries ``SKB_GSO_TCP_FIXEDID = 1 << 30`` (outer or only IPv4 header) and
``SKB_GSO_TCP_FIXEDID_INNER = 1 << 31`` (inner IPv4 header of a tunnelled packet).
"""

from __future__ import annotations

# include/linux/skbuff.h, enum { SKB_GSO_* } (values identical from v4.7 to v6.18 except
# where noted)
SKB_GSO_TCPV4 = 1 << 0
SKB_GSO_DODGY = 1 << 1
SKB_GSO_TCP_ECN = 1 << 2            # the TCP segment has CWR set (before v6.15 from GRO)
SKB_GSO_TCP_FIXEDID_LEGACY = 1 << 3  # SKB_GSO_TCP_FIXEDID 4.7-6.17; __SKB_GSO_TCP_FIXEDID 6.18
SKB_GSO_TCPV6 = 1 << 4
SKB_GSO_FCOE = 1 << 5
SKB_GSO_GRE = 1 << 6
SKB_GSO_GRE_CSUM = 1 << 7
SKB_GSO_IPXIP4 = 1 << 8
SKB_GSO_IPXIP6 = 1 << 9
SKB_GSO_UDP_TUNNEL = 1 << 10
SKB_GSO_UDP_TUNNEL_CSUM = 1 << 11
SKB_GSO_PARTIAL = 1 << 12
SKB_GSO_TUNNEL_REMCSUM = 1 << 13
SKB_GSO_SCTP = 1 << 14
SKB_GSO_ESP = 1 << 15
SKB_GSO_UDP = 1 << 16
SKB_GSO_UDP_L4 = 1 << 17
SKB_GSO_FRAGLIST = 1 << 18
SKB_GSO_TCP_ACCECN = 1 << 19        # v6.15 "gso: AccECN support" (023af5a72ab1)
SKB_GSO_TCP_FIXEDID = 1 << 30       # v6.18: fixed IDs in the outer (or only) IPv4 header
SKB_GSO_TCP_FIXEDID_INNER = 1 << 31  # v6.18: fixed IDs in the inner IPv4 header

GSO_TYPE_NAMES = {
    SKB_GSO_TCPV4: "tcpv4", SKB_GSO_DODGY: "dodgy", SKB_GSO_TCP_ECN: "tcp_ecn",
    SKB_GSO_TCP_FIXEDID_LEGACY: "tcp_fixedid", SKB_GSO_TCPV6: "tcpv6",
    SKB_GSO_FCOE: "fcoe", SKB_GSO_GRE: "gre", SKB_GSO_GRE_CSUM: "gre_csum",
    SKB_GSO_IPXIP4: "ipxip4", SKB_GSO_IPXIP6: "ipxip6", SKB_GSO_UDP_TUNNEL: "udp_tunnel",
    SKB_GSO_UDP_TUNNEL_CSUM: "udp_tunnel_csum", SKB_GSO_PARTIAL: "partial",
    SKB_GSO_TUNNEL_REMCSUM: "tunnel_remcsum", SKB_GSO_SCTP: "sctp", SKB_GSO_ESP: "esp",
    SKB_GSO_UDP: "udp", SKB_GSO_UDP_L4: "udp_l4", SKB_GSO_FRAGLIST: "fraglist",
    SKB_GSO_TCP_ACCECN: "tcp_accecn", SKB_GSO_TCP_FIXEDID: "tcp_fixedid",
    SKB_GSO_TCP_FIXEDID_INNER: "tcp_fixedid_inner",
}

# Tunnel completions (gre_gro_complete, ipip_gro_complete, sit_gro_complete,
# ip6ip6_gro_complete, ip4ip6_gro_complete), keyed by constants.TUN_* codes.
_TUN_GRE, _TUN_GRE_TEB, _TUN_IPIP, _TUN_SIT, _TUN_IP6IP6, _TUN_IP4IP6 = 1, 2, 5, 6, 7, 8
_TUN_VXLAN, _TUN_VXLAN_GPE, _TUN_GENEVE, _TUN_FOU, _TUN_GUE = 9, 10, 11, 12, 13
_UDP_TUNS = (_TUN_VXLAN, _TUN_VXLAN_GPE, _TUN_GENEVE, _TUN_FOU, _TUN_GUE)


def fixedid_bits(kernel_version: tuple[int, int], ip_fixedid: int) -> int:
    """GSO bits for the fixed-ID state of a super-packet (``tcp4_gro_complete``).

    ``ip_fixedid``: before v6.18 a single bit (``is_atomic`` before v6.10, ``ip_fixedid``
    v6.10-v6.17) -> ``SKB_GSO_TCP_FIXEDID`` (bit 3); from v6.18 two bits (bit 0 outer or
    only header, bit 1 inner) multiplied by ``SKB_GSO_TCP_FIXEDID`` (bit 30), so bit 1 lands
    on ``SKB_GSO_TCP_FIXEDID_INNER``. Before v4.7 there was no fixed-ID GSO type.

    >>> fixedid_bits((6, 18), 0b11) == SKB_GSO_TCP_FIXEDID | SKB_GSO_TCP_FIXEDID_INNER
    True
    >>> fixedid_bits((6, 1), 1) == SKB_GSO_TCP_FIXEDID_LEGACY
    True
    """
    if kernel_version < (4, 7) or not ip_fixedid:
        return 0
    if kernel_version >= (6, 18):
        return (ip_fixedid & 0b11) * SKB_GSO_TCP_FIXEDID
    return SKB_GSO_TCP_FIXEDID_LEGACY


def gso_type_for(kernel_version: tuple[int, int], inner_ip_version: int, *,
                 ip_fixedid: int = 0, cwr: bool = False, tun_type: int = 0,
                 udp_csum: bool | None = None, inner_tun_type: int = 0) -> int:
    """``skb_shinfo(skb)->gso_type`` of a completed TCP super-packet (count > 1).

    Parameters:
        kernel_version: ``(major, minor)`` of the modelled kernel.
        inner_ip_version: 4 or 6, the IP header right above TCP (``tcp4/tcp6_gro_complete``).
        ip_fixedid: fixed-ID state decided on the second segment (see :func:`fixedid_bits`);
            only IPv4 TCP sets it (``tcp4_gro_complete``).
        cwr: the first segment's TCP header has CWR (``tcp_gro_complete``):
            ``SKB_GSO_TCP_ECN`` before v6.15, ``SKB_GSO_TCP_ACCECN`` from v6.15.
        tun_type: ``constants.TUN_*`` of a natively aggregated tunnel: GRE/GRE-TEB ->
            ``SKB_GSO_GRE`` (``gre_gro_complete`` assigns it; the C flag does not add
            ``SKB_GSO_GRE_CSUM``), IPIP/SIT -> ``SKB_GSO_IPXIP4``, ip6ip6/ip4ip6 ->
            ``SKB_GSO_IPXIP6``; a UDP tunnel (VXLAN, VXLAN-GPE, Geneve, FOU, GUE)
            aggregated through its socket -> ``SKB_GSO_UDP_TUNNEL_CSUM`` when the outer
            checksum is non-zero (``udp_csum``), else ``SKB_GSO_UDP_TUNNEL``
            (udp_gro_complete assigns it), and FOU/GUE then add the bits of the IP protocol
            they carry (``inner_tun_type``: IPIP/SIT).

    >>> hex(gso_type_for((6, 18), 4, ip_fixedid=1))
    '0x40000001'
    >>> gso_type_for((6, 6), 6, cwr=True) == SKB_GSO_TCPV6 | SKB_GSO_TCP_ECN
    True
    """
    t = 0
    if tun_type in _UDP_TUNS:
        # udp_gro_complete: assignment before the inner completions OR their bits
        t = SKB_GSO_UDP_TUNNEL_CSUM if udp_csum else SKB_GSO_UDP_TUNNEL
        tun_type = inner_tun_type
    if tun_type in (_TUN_GRE, _TUN_GRE_TEB):
        t = t | SKB_GSO_GRE if t else SKB_GSO_GRE   # gre_gro_complete (outermost: assigns)
    elif tun_type in (_TUN_IPIP, _TUN_SIT):
        t |= SKB_GSO_IPXIP4                  # ipip_gro_complete / sit_gro_complete
    elif tun_type in (_TUN_IP6IP6, _TUN_IP4IP6):
        t |= SKB_GSO_IPXIP6                  # ip6ip6_gro_complete / ip4ip6_gro_complete
    if inner_ip_version == 4:
        t |= SKB_GSO_TCPV4 | fixedid_bits(kernel_version, ip_fixedid)  # tcp4_gro_complete
    else:
        t |= SKB_GSO_TCPV6                   # tcp6_gro_complete
    if cwr:                                  # tcp_gro_complete
        t |= SKB_GSO_TCP_ACCECN if kernel_version >= (6, 15) else SKB_GSO_TCP_ECN
    return t


def gso_type_names(gso_type: int) -> list[str]:
    """Names of the bits set in ``gso_type``, lowest bit first.

    Bit 3 is ``tcp_fixedid`` (before v6.18) and never set by GRO from v6.18 on.

    >>> gso_type_names(SKB_GSO_TCPV4 | SKB_GSO_TCP_FIXEDID)
    ['tcpv4', 'tcp_fixedid']
    """
    return [name for bit, name in sorted(GSO_TYPE_NAMES.items()) if gso_type & bit]


def gso_segs(payload_len: int, gso_size: int) -> int:
    """Segments a super-packet becomes on egress: ``ceil(payload / gso_size)``.

    GRO merges only segments of exactly ``gso_size`` bytes except the last (a shorter one
    ends the super-packet, a longer one is refused), so this equals GRO's ``count`` and
    ``tcp_gro_complete``'s ``gso_segs``; software GSO (``tcp_gso_segment``) and TSO
    reproduce the original segment boundaries. A plain packet (``gso_size == 0``) is one.

    >>> gso_segs(2 * 1448 + 100, 1448)
    3
    """
    if gso_size <= 0:
        return 1
    return max(1, -(-int(payload_len) // int(gso_size)))


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
    once everything is in (:meth:`mtu_inference`, rules in :mod:`gropcap.mtu`); then
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
        """The :class:`gropcap.mtu.MtuInference` of everything added so far."""
        if self._inference is None:
            from gropcap.mtu import resolve_mtu
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
    def _keys(t, rev: bool = False):
        """Direction keys, one fixed-width byte row per packet (addresses, then ports)."""
        import numpy as np

        from gropcap.gro.flows import _column_bytes as fixed_bytes
        a, b = ("ip_dst", "ip_src") if rev else ("ip_src", "ip_dst")
        pa_, pb = ("dport", "sport") if rev else ("sport", "dport")
        mat = np.concatenate([
            fixed_bytes(t.column(a)), fixed_bytes(t.column(b)),
            t.column(pa_).to_numpy().astype(">u2").view(np.uint8).reshape(-1, 2),
            t.column(pb).to_numpy().astype(">u2").view(np.uint8).reshape(-1, 2)], axis=1)
        return np.ascontiguousarray(mat)

    @staticmethod
    def _marks(t):
        """``(data, hard, tot)`` per row: a TCP data frame; one marked coalesced whatever
        the MTU (pcapng TCP_SEG_OFFLOAD, IPv4 total length 0, IPv6 payload length 0); the
        outermost IP length."""
        import numpy as np

        from gropcap import constants as C
        from gropcap.decode.schema import STATUS_OK
        col = lambda name: t.column(name).to_numpy()  # noqa: E731
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

    def add(self, t) -> None:
        """Fold in the next rows (capture order): first SYN MSS per direction, sizes of
        data frames, IP lengths of the other frames."""
        import numpy as np

        from gropcap import constants as C
        from gropcap.decode.schema import STATUS_OK
        self._inference = None
        col = lambda name: t.column(name).to_numpy()  # noqa: E731
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
            keys = self._keys(t.select(_KEY_COLUMNS).take(srows))
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
            direction, rep = self._directions(t, rows)
            # (direction, IP length, size) counted as one int64 sort (36 bits of sizes)
            pair = (direction << np.int64(36)) | size
            _, first, cnt = np.unique(pair, return_index=True, return_counts=True)
            keys = self._keys(t.select(_KEY_COLUMNS).take(rep))
            for j, c in zip(first.tolist(), cnt.tolist()):
                d = self.sizes.setdefault(keys[direction[j]].tobytes(), {})
                k = int(size[j])
                d[k] = d.get(k, 0) + c

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
        ports = (t.column("sport").to_numpy()[rows].astype(np.uint64) << np.uint64(16)) \
            | t.column("dport").to_numpy()[rows].astype(np.uint64)
        cols = [words[0][:, 0], words[0][:, 1], words[1][:, 0], words[1][:, 1], ports]
        _, first, inv = np.unique(_mix_words(cols), return_index=True, return_inverse=True)
        inv = inv.ravel().astype(np.int64)
        if not all(np.array_equal(w, w[first][inv]) for w in cols):
            keys = CoalescedStats._keys(t.select(_KEY_COLUMNS).take(rows))
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
            g = t.select(_INFER_COLUMNS).take(rows) if len(rows) < n else t
            col = lambda name: g.column(name).to_numpy().astype(np.int64)  # noqa: E731
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
    (:func:`gropcap.mtu.resolve_mtu`).

    ``packets`` is a PACKET_SCHEMA table. gso_size per frame, first that applies: the MSS
    option of a SYN sent the other way (what the receiver allowed), else of a SYN of the
    same direction, minus the frame's TCP option bytes; else the most common payload among
    the direction's single (not coalesced) data segments, largest on ties; else ``mtu``
    minus the frame's headers from the outermost IP header through TCP. (Vectorised over
    :class:`CoalescedStats`; ``tests/test_coalesced_stats.py`` keeps the row-by-row
    statement of the rule as its oracle.)

    >>> from gropcap.decode.schema import empty_packet_table
    >>> coalesced_input(empty_packet_table()).num_coalesced
    0
    """
    stats = CoalescedStats(mtu)
    stats.add(packets)
    return stats.infer(packets)


# --- egress: what each super-packet becomes on the way out -------------------------------

# NETIF_F_GSO_ENCAP_ALL (include/linux/netdev_features.h): cleared on decapsulation from
# v4.6 (iptunnel_pull_offloads, b311341e0bd9 "tunnels: Remove encapsulation offloads on
# decap")
GSO_ENCAP_ALL = (SKB_GSO_GRE | SKB_GSO_GRE_CSUM | SKB_GSO_IPXIP4 | SKB_GSO_IPXIP6
                 | SKB_GSO_UDP_TUNNEL | SKB_GSO_UDP_TUNNEL_CSUM)

# ethtool feature names (net/ethtool/common.c netdev_features_strings) -> the SKB_GSO_* bit
# each covers: net_gso_ok() needs a feature for every bit of gso_type
EGRESS_FEATURES = {
    "tso": SKB_GSO_TCPV4, "tx-tcp-segmentation": SKB_GSO_TCPV4,
    "tso6": SKB_GSO_TCPV6, "tx-tcp6-segmentation": SKB_GSO_TCPV6,
    "tx-tcp-ecn-segmentation": SKB_GSO_TCP_ECN,
    "tx-tcp-accecn-segmentation": SKB_GSO_TCP_ACCECN,
    "tx-tcp-mangleid-segmentation": (SKB_GSO_TCP_FIXEDID_LEGACY | SKB_GSO_TCP_FIXEDID
                                     | SKB_GSO_TCP_FIXEDID_INNER),
    "tx-gre-segmentation": SKB_GSO_GRE, "tx-gre-csum-segmentation": SKB_GSO_GRE_CSUM,
    "tx-ipxip4-segmentation": SKB_GSO_IPXIP4, "tx-ipxip6-segmentation": SKB_GSO_IPXIP6,
    "tx-udp_tnl-segmentation": SKB_GSO_UDP_TUNNEL,
    "tx-udp_tnl-csum-segmentation": SKB_GSO_UDP_TUNNEL_CSUM,
    "tx-udp-segmentation": SKB_GSO_UDP_L4, "tx-gso-list": SKB_GSO_FRAGLIST,
}
EGRESS_SCENARIOS = ("encap", "decap")


def parse_features(text) -> int:
    """``"tso,tx-gre-segmentation"`` (or a list) -> the SKB_GSO_* bits the device offloads.

    >>> parse_features("tso") == SKB_GSO_TCPV4
    True
    """
    from gropcap.errors import ConfigError

    if not text:
        return 0
    items = text.split(",") if isinstance(text, str) else list(text)
    bits = 0
    for name in items:
        name = name.strip().lower()
        if not name:
            continue
        if name not in EGRESS_FEATURES:
            raise ConfigError(f"unknown egress feature {name!r}",
                              hint="use ethtool names: " + ", ".join(sorted(EGRESS_FEATURES)))
        bits |= EGRESS_FEATURES[name]
    return bits


def decap_gso_type(gso_type, kernel_version: tuple[int, int]):
    """gso_type after decapsulation: the tunnel bits are stripped from v4.6 on
    (iptunnel_pull_offloads); before, they stayed set ("stale")."""
    import numpy as np

    t = np.asarray(gso_type, dtype=np.uint64)
    if kernel_version >= (4, 6):
        return (t & ~np.uint64(GSO_ENCAP_ALL)).astype(np.uint32)
    return t.astype(np.uint32)


class EgressResult:
    """Per super-packet egress accounting (numpy arrays) and totals.

    Attributes:
        gso_type: the type on egress (tunnel bits stripped after decapsulation, v4.6+).
        segments: packets the device puts on the wire per super-packet (0 when dropped);
            IP fragments count as packets.
        hardware: the segments come from the device (TSO/USO; net_gso_ok: a feature for
            every gso_type bit) rather than software GSO (skb_gso_segment).
        fragments: IP fragments per segment (1 when the segment fits the MTU).
        dropped: the segments exceed the egress MTU with DF set (or IPv6): ICMP
            "fragmentation needed" / "packet too big", not forwarded.
    """

    def __init__(self, gso_type, segments, hardware, fragments, dropped):
        self.gso_type, self.segments, self.hardware = gso_type, segments, hardware
        self.fragments, self.dropped = fragments, dropped

    def totals(self) -> dict:
        """``{"superpackets", "segments", "hardware_segments", "software_segments",
        "superpackets_hardware", "superpackets_software", "dropped", "fragmented",
        "unsegmented"}``; ``segments == hardware_segments + software_segments +
        unsegmented``."""
        import numpy as np

        hw = np.asarray(self.hardware) & (self.segments > 0)
        sw = ~hw & (self.segments > 1)
        return {
            "superpackets": int(len(self.segments)),
            "segments": int(self.segments.sum()),
            "hardware_segments": int(self.segments[hw].sum()),
            "software_segments": int(self.segments[sw].sum()),
            "superpackets_hardware": int(hw.sum()),
            "superpackets_software": int(sw.sum()),
            "dropped": int(self.dropped.sum()),
            "fragmented": int((self.fragments > 1).sum()),
            # super-packets of one packet leave unchanged: segments = hardware + software
            # + unsegmented (dropped super-packets put none on the wire)
            "unsegmented": int(self.segments[~hw & ~sw].sum()),
        }


GSO_MAX_SEGS = 65535           # include/linux/netdevice.h: dev->gso_max_segs default
GSO_MAX_SIZE = 65536           # GSO_LEGACY_MAX_SIZE: dev->gso_max_size default
_MANGLEID = (SKB_GSO_TCP_FIXEDID_LEGACY | SKB_GSO_TCP_FIXEDID | SKB_GSO_TCP_FIXEDID_INNER)


def egress(count, gso_size, gso_type, payload_len, *, scenario: str = "encap",
           features=0, kernel_version: tuple[int, int] = (6, 18), hdr_len=None,
           df=None, ip_hdr_len=None, mtu: int | None = None, mangleid_df=None,
           gso_max_segs: int | None = None, gso_max_size: int | None = None,
           l2_len: int = 14) -> EgressResult:
    """What each super-packet becomes when it leaves through an egress device.

    Parameters:
        count, gso_size, gso_type, payload_len: the super-packets (GroResult ``seg_*``).
        scenario: ``"encap"`` (forwarded still encapsulated: tunnel GSO bits kept) or
            ``"decap"`` (decapsulated, then forwarded: bits stripped from v4.6, see
            :func:`decap_gso_type`).
        features: SKB_GSO_* bits the egress device offloads (:func:`parse_features`).
        kernel_version: ``(major, minor)``.
        hdr_len: per super-packet, header bytes from the egress packet's outermost IP
            header through TCP/UDP (needed with ``mtu``).
        df, ip_hdr_len: per super-packet, DF of that IP header (True for IPv6: routers
            never fragment) and its length.
        mtu: egress MTU; None: every segment fits.
        mangleid_df: per super-packet, DF of the IPv4 header gso_features_check reads (the
            inner one of an encapsulated packet, else the only one; True for IPv6): without
            DF the device's NETIF_F_TSO_MANGLEID is cleared, so a fixed-ID super-packet
            goes to software GSO. None: not checked.
        gso_max_segs, gso_max_size, l2_len: the egress device's limits (defaults
            GSO_MAX_SEGS 65535, GSO_MAX_SIZE 65536); gso_features_check (6.x source) clears
            every GSO feature for more segments than gso_max_segs or ``skb->len``
            (``l2_len`` + ``hdr_len`` + payload) at or above gso_max_size: software GSO.
            None: not checked (the release that added the size check is not pinned here).
            The size rule needs ``hdr_len``.

    Every super-packet becomes ``count`` segments (tcp_gso_segment / TSO keep the original
    boundaries; a plain packet is 1). Hardware segmentation needs a feature for every bit
    of its gso_type (net_gso_ok; SKB_GSO_DODGY ignored); otherwise software GSO makes the
    same segments. A segment above the MTU: dropped with DF / IPv6 (ip_forward:
    ip_exceeds_mtu -> ICMP), else software GSO then IP fragmentation of each segment
    (ip_finish_output_gso).

    >>> r = egress([3], [1000], [SKB_GSO_TCPV4 | SKB_GSO_GRE], [2500], scenario="decap",
    ...            features=parse_features("tso"))
    >>> r.totals()["hardware_segments"], egress([3], [1000], [SKB_GSO_TCPV4 | SKB_GSO_GRE],
    ...     [2500], scenario="decap", features=parse_features("tso"),
    ...     kernel_version=(4, 5)).totals()["software_segments"]
    (3, 3)
    """
    import numpy as np

    from gropcap.errors import ConfigError

    if scenario not in EGRESS_SCENARIOS:
        raise ConfigError(f"unknown egress scenario {scenario!r}",
                          hint=f"use one of {EGRESS_SCENARIOS}")
    count = np.asarray(count, dtype=np.int64)
    gso_size = np.asarray(gso_size, dtype=np.int64)
    payload = np.asarray(payload_len, dtype=np.int64)
    gtype = np.asarray(gso_type, dtype=np.uint32)
    if scenario == "decap":
        gtype = decap_gso_type(gtype, kernel_version)
    segs = np.where(count > 1, count, 1)
    need = gtype.astype(np.uint64) & ~np.uint64(SKB_GSO_DODGY)
    feats = np.full(len(count), np.uint64(int(features)), dtype=np.uint64)
    if mangleid_df is not None:
        # gso_features_check: "clear the IPv4 ID mangling feature if the IPv4 header has
        # the potential to be fragmented"
        no_df = ~np.asarray(mangleid_df, dtype=bool) & ((gtype & SKB_GSO_TCPV4) != 0)
        feats = np.where(no_df, feats & ~np.uint64(_MANGLEID), feats)
    hardware = (count > 1) & ((need & ~feats) == 0)
    # gso_features_check: gso_segs > gso_max_segs or skb->len >= gso_max_size
    if gso_max_segs is not None:
        hardware &= count <= gso_max_segs
    if gso_max_size is not None and hdr_len is not None:
        skb_len = l2_len + np.asarray(hdr_len, dtype=np.int64) + payload
        hardware &= skb_len < gso_max_size
    fragments = np.ones(len(count), dtype=np.int64)
    dropped = np.zeros(len(count), dtype=bool)
    if mtu is not None:
        if hdr_len is None:
            raise ConfigError("an egress MTU needs the header lengths (hdr_len)")
        hdr = np.asarray(hdr_len, dtype=np.int64)
        ihl = np.asarray(ip_hdr_len if ip_hdr_len is not None else np.full(len(count), 20),
                         dtype=np.int64)
        dfs = np.asarray(df if df is not None else np.ones(len(count), bool), dtype=bool)
        seg_payload = np.where(count > 1, gso_size, payload)
        too_big = hdr + seg_payload > mtu
        dropped = too_big & dfs
        unit = np.maximum((mtu - ihl) // 8 * 8, 8)
        frag = -(-(hdr - ihl + seg_payload) // unit)
        fragments = np.where(too_big & ~dfs, frag, 1)
        hardware = hardware & ~too_big           # ip_finish_output_gso segments in software
        segs = np.where(dropped, 0, segs * fragments)
    return EgressResult(gtype, segs, hardware, fragments, dropped)


def mangleid_df(packets, first_packet):
    """Per super-packet, the DF bit gso_features_check reads for NETIF_F_TSO_MANGLEID:
    the innermost IPv4 header (an encapsulated GRO packet has ``skb->encapsulation`` set,
    so ``inner_ip_hdr``; after decapsulation it is the only one); True for IPv6."""
    import numpy as np

    idx = np.asarray(first_packet, dtype=np.int64)
    df = packets.column("ip_df").to_numpy(zero_copy_only=False)[idx].astype(bool)
    v6 = packets.column("ip_version").to_numpy(zero_copy_only=False)[idx] == 6
    return df | v6


def egress_headers(packets, first_packet, scenario: str = "encap"):
    """``(hdr_len, df, ip_hdr_len)`` per super-packet from its first packet's columns:
    the egress packet's outermost IP header through TCP/UDP (outer for ``encap``, inner
    after ``decap``); ``df`` True for IPv6."""
    import numpy as np

    idx = np.asarray(first_packet, dtype=np.int64)

    def c(name):
        return packets.column(name).to_numpy(zero_copy_only=False)[idx].astype(np.int64)

    l4_end = c("l4_offset") + np.where(c("l4_proto") == 17, 8, c("tcp_doff") * 4)
    outer = (c("outer_ip_version") != 0) & (scenario == "encap")
    off = np.where(outer, c("outer_ip_offset"), c("ip_offset"))
    ver = np.where(outer, c("outer_ip_version"), c("ip_version"))
    df = np.where(outer, c("outer_ip_df"), c("ip_df")).astype(bool) | (ver == 6)
    ihl = np.where(outer, c("outer_ip_hdr_len"), c("ip_hdr_len"))
    return l4_end - off, df, ihl
