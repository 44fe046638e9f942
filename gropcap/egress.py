"""Egress: what each GRO super-packet becomes on the way out (GSO segmentation
accounting per egress scenario, device features and MTU).

Layer: after GRO (``gro/``), on its results; ``run/memory.Analysis.egress`` and the
report's egress section use it.
"""

from __future__ import annotations

from gropcap.gro.gso import (SKB_GSO_DODGY, SKB_GSO_FRAGLIST, SKB_GSO_GRE, SKB_GSO_GRE_CSUM,
                             SKB_GSO_IPXIP4, SKB_GSO_IPXIP6, SKB_GSO_TCP_ACCECN,
                             SKB_GSO_TCP_ECN, SKB_GSO_TCP_FIXEDID, SKB_GSO_TCP_FIXEDID_INNER,
                             SKB_GSO_TCP_FIXEDID_LEGACY, SKB_GSO_TCPV4, SKB_GSO_TCPV6,
                             SKB_GSO_UDP_L4, SKB_GSO_UDP_TUNNEL, SKB_GSO_UDP_TUNNEL_CSUM,
                             decap_gso_type)  # noqa: F401  (decap_gso_type: egress decap)

# --- egress: what each super-packet becomes on the way out -------------------------------

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


def _first_packet_fields(c, scenario: str):
    """``(hdr_len, df, ip_hdr_len, mangleid_df)`` from column getter ``c`` (a name -> an
    int64 array of the rows wanted): :func:`egress_headers` and :func:`mangleid_df`."""
    import numpy as np
    l4_end = c("l4_offset") + np.where(c("l4_proto") == 17, 8, c("tcp_doff") * 4)
    outer = (c("outer_ip_version") != 0) & (scenario == "encap")
    off = np.where(outer, c("outer_ip_offset"), c("ip_offset"))
    ver = np.where(outer, c("outer_ip_version"), c("ip_version"))
    df = (np.where(outer, c("outer_ip_df"), c("ip_df")) != 0) | (ver == 6)
    ihl = np.where(outer, c("outer_ip_hdr_len"), c("ip_hdr_len"))
    mdf = (c("ip_df") != 0) | (c("ip_version") == 6)
    return l4_end - off, df, ihl, mdf


def _rows_getter(packets, first_packet):
    import numpy as np
    idx = np.asarray(first_packet, dtype=np.int64)
    return lambda name: packets.column(name).to_numpy(
        zero_copy_only=False)[idx].astype(np.int64)


def mangleid_df(packets, first_packet):
    """Per super-packet, the DF bit gso_features_check reads for NETIF_F_TSO_MANGLEID:
    the innermost IPv4 header (an encapsulated GRO packet has ``skb->encapsulation`` set,
    so ``inner_ip_hdr``; after decapsulation it is the only one); True for IPv6."""
    return _first_packet_fields(_rows_getter(packets, first_packet), "encap")[3]


def egress_headers(packets, first_packet, scenario: str = "encap"):
    """``(hdr_len, df, ip_hdr_len)`` per super-packet from its first packet's columns:
    the egress packet's outermost IP header through TCP/UDP (outer for ``encap``, inner
    after ``decap``); ``df`` True for IPv6."""
    return _first_packet_fields(_rows_getter(packets, first_packet), scenario)[:3]


# --- egress counted part by part (the bounded-memory core) -------------------------------

def header_codes(packets, scenario: str = "encap"):
    """Per row of ``packets``, what :func:`egress` reads of a super-packet's first packet,
    packed into an int64 (:func:`unpack_header_codes`): :func:`egress_headers`'
    ``hdr_len`` (32 bits), ``ip_hdr_len`` (16 bits: IPv6 extension headers) and ``df``,
    and :func:`mangleid_df`.
    A run keeps these 8 bytes per row instead of the decoded table."""
    import numpy as np

    from gropcap.arrays import numpy_of
    hdr, df, ihl, mdf = _first_packet_fields(
        lambda name: numpy_of(packets.column(name)).astype(np.int64), scenario)
    return ((hdr & 0xFFFFFFFF) | ((ihl & 0xFFFF) << 32)
            | (df.astype(np.int64) << 48) | (mdf.astype(np.int64) << 49))


def unpack_header_codes(codes):
    """:func:`header_codes` -> ``(hdr_len, df, ip_hdr_len, mangleid_df)``."""
    import numpy as np
    codes = np.asarray(codes, np.int64)
    hdr = (codes & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)
    return hdr, (codes >> 48) & 1 != 0, (codes >> 32) & 0xFFFF, (codes >> 49) & 1 != 0


class EgressCounts:
    """One model's egress totals (:meth:`EgressResult.totals`, every one a sum over
    super-packets) counted part by part: :meth:`add` takes some super-packets and their
    first packets' :func:`header_codes`, :meth:`merge` another part's counts. What
    :func:`egress` over all the super-packets at once totals, with the options of the
    in-memory ``Analysis.egress`` (``gso_max_segs``/``gso_max_size`` not checked)."""

    def __init__(self, scenario: str, features: int, feature_text: str, mtu,
                 kernel_version: tuple[int, int]):
        self.scenario, self.features, self.feature_text = scenario, features, feature_text
        self.mtu, self.kernel_version = mtu, tuple(kernel_version)
        self.totals: dict[str, int] = {}

    @classmethod
    def of(cls, options, kernel_version) -> "EgressCounts":
        """For ``run.options.EgressOptions``."""
        return cls(options.scenario, options.features, options.feature_text, options.mtu,
                   kernel_version)

    def add(self, count, gso_size, gso_type, payload_len, codes) -> None:
        if not len(count):
            return
        hdr, df, ihl, mdf = unpack_header_codes(codes)
        r = egress(count, gso_size, gso_type, payload_len, scenario=self.scenario,
                   features=self.features, kernel_version=self.kernel_version,
                   hdr_len=hdr, df=df, ip_hdr_len=ihl, mtu=self.mtu, mangleid_df=mdf)
        for k, v in r.totals().items():
            self.totals[k] = self.totals.get(k, 0) + v

    def merge(self, later: "EgressCounts") -> "EgressCounts":
        for k, v in later.totals.items():
            self.totals[k] = self.totals.get(k, 0) + v
        return self

    def as_dict(self) -> dict:
        """The summary's ``egress`` entry of the model (``Analysis.egress``)."""
        empty = egress([], [], [], []).totals()
        return {"scenario": self.scenario, "features": self.feature_text, "mtu": self.mtu,
                **{k: self.totals.get(k, 0) for k in empty}}
