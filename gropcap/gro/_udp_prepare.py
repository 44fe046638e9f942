"""UDP GRO and UDP tunnel sockets in the numba engine: the per-packet part (numpy).

Layer: gro/, called by ``engine.prepare`` (and ``engine.partition_of``,
``engine._gso_table``); the per-pair rule is ``fast.udp._udp_receive``. Mirrors what
``reference.build_skbs``, ``GroNode._network_layers``, ``udp_tunnel_gro_receive`` and
``udp_mode`` decide per packet, for the two receive-path features the engine's TCP
preparation does not know:

* **UDP GRO** (``GroConfig.udp_gro``: socket UDP_GRO, rx-udp-gro-forwarding, fraglist;
  udp_gro_receive's first branch, net/ipv4/udp_offload.c): a UDP packet that passes every
  layer enters udp_gro_receive_segment (``Cols.udp``) instead of being delivered with
  BYPASS_UDP_NO_GRO; udp4/6_gro_receive's checksum check and udp_gro_receive_segment's
  per-packet refusals (zero checksum, ``uh->len`` != the bytes received) are bypass codes
  (the packet goes up alone, p untouched). A VXLAN / VXLAN-GPE / Geneve / FOU / GUE
  packet with no tunnel socket on its port is then the outer UDP datagram (the tunnel
  header and all inside are payload): its outer header is presented as the only IP
  header.
* **UDP tunnel sockets** (``GroConfig.udp_tunnels``; udp_gro_receive's tunnel branch and
  vxlan / vxlan-gpe / geneve / fou / gue gro_receive): the packet goes through the outer
  IP header, the tunnel and the inner IP header to tcp_gro_receive like a native tunnel
  (IPIP-shaped for the TCP preparation); the tunnel's own refusals are bypass codes at
  the tunnel layer's place in the order; the same-flow key gains udp_tunnel_key's
  fields (outer ports, checksum presence, VXLAN/Geneve/GUE header words, inner
  Ethernet); gro_complete's gso_type gets udp_gro_complete's UDP_TUNNEL[_CSUM] and, for
  FOU/GUE, the carried protocol's bits (gcodes from :data:`GCODE_TUNNEL`). An inner UDP
  datagram goes on to udp4/6_gro_receive like plain UDP (a UDP GRO mode: udp_gro_receive's
  first branch, no tunnel socket on the inner port) and completes UDP_TUNNEL[_CSUM] |
  UDP_L4 [| FRAGLIST] (:data:`GCODE_TUNNEL_UDP`).

The TCP preparation runs unchanged over :attr:`UdpView.table`, a copy of the batch with
those columns rewritten; flow ids and RSS hashes are computed from the original table.
"""

from __future__ import annotations

import types

import numpy as np
import pyarrow as pa

from gropcap import constants as C
from gropcap.arrays import arrow_numeric
from gropcap.decode import schema as S
from gropcap.gro import fast as K
from gropcap.gro import reasons as R
from gropcap.gro.config import (UDP_TUNNEL_KIND as _UDP_TUNNEL_KIND,
                                UDP_TUNNELS as _UDP_TUNNELS, GroConfig,
                                fraglist_before_tunnel, udp_mode)
from gropcap.gro.rss import ColumnReader
from gropcap.gro.gso import (SKB_GSO_FRAGLIST, SKB_GSO_UDP_L4, gso_type_for,
                             udp_tunnel_gso_bits)

GRO_LEGACY_MAX_SIZE = 65536
# gcodes past the TCP table (engine._gso_table: 0..63 completed, +64 delivered alone)
GCODE_UDP = 128           # udp_gro_complete_segment: SKB_GSO_UDP_L4 (+1: | FRAGLIST)
GCODE_TUNNEL = 256        # + (csum * 2 + outer IPv6) * 128 + the TCP gcode (+64 delivered)
# inner UDP of a tunnel socket: + (csum * 2 + outer IPv6) * 128 + 32 * inner IPv6
# + 2 * tun_type + fraglist (+64 delivered)
GCODE_TUNNEL_UDP = GCODE_TUNNEL + 4 * 128
_IP_FIELDS = [f.name[len("outer_ip_"):] for f in S.PACKET_SCHEMA
              if f.name.startswith("outer_ip_")]
_TUNNEL_COLS = ("tun_flags", "tun_proto", "tun_key", "tun_opt_len", "tun_opt_digest",
                "inner_eth_dst", "inner_eth_src", "inner_eth_type", "inner_vlan_depth",
                "inner_vlan_tpid0", "inner_vlan_tci0", "inner_vlan_tpid1", "inner_vlan_tci1")


def needed(config: GroConfig) -> bool:
    """True when ``config`` has a UDP GRO mode the kernel knows, or a tunnel socket."""
    return udp_mode(config) != "off" or bool(config.udp_tunnels)


def _socket_rows(c: ColumnReader, config: GroConfig) -> np.ndarray:
    """reference.build_skbs ``udp_sock``: a local socket of the packet's tunnel kind owns
    its outer destination port (no VXLAN-GPE socket before v4.7, e1e5314de08b; fraglist
    before v5.13: reference.fraglist_before_tunnel)."""
    tun = c.native("tun_type")
    dport = c.native("outer_dport")
    sock = np.zeros(len(tun), np.bool_)
    if fraglist_before_tunnel(config):
        return sock
    kinds = {v: k for k, v in _UDP_TUNNEL_KIND.items()}
    for kind, port in config.udp_tunnels:
        t = kinds[kind]
        if t == C.TUN_VXLAN_GPE and not config.kernel.vxlan_gpe:
            continue
        sock |= (tun == t) & (dport == port)
    return sock


def _tunnel_bail(c: ColumnReader, config: GroConfig, sock: np.ndarray) -> np.ndarray:
    """udp_tunnel_gro_receive's refusals of a packet with a tunnel socket, past the
    ``len(ip) < 2`` / encap_mark check: vxlan_gpe_gro_receive (version, O bit; before
    v6.5 a non-Ethernet payload), geneve_gro_receive (version, O bit), then
    eth_gro_receive / vlan_gro_receive on an inner Ethernet header
    (reference.inner_eth_gro_receive). BYPASS_* code or 0 per row."""
    n = len(sock)
    tun = c.native("tun_type")
    fl = c("tun_flags", np.int64)
    kp = config.kernel
    two = (c.native("outer_ip_version") != 0) & (c.native("ip_version") != 0)
    if kp.encap_mark:
        two &= c.native("encap_depth") <= 1
    b0 = (fl >> 24) & 0xFF
    gpe = (tun == C.TUN_VXLAN_GPE) & (((b0 & C.GPE_VER_MASK) != 0) | ((b0 & C.GPE_FLAG_O) != 0))
    if not kp.vxlan_gpe_gro:
        gpe |= (tun == C.TUN_VXLAN_GPE) & ((fl & 0xFF) != C.GPE_NP_ETHERNET)
    gen = (tun == C.TUN_GENEVE) & (((fl >> 30) != 0) | (((fl >> 16) & C.GENEVE_FLAG_O) != 0))
    ie = c("inner_eth_type", np.int64)
    vlan = (ie == C.ETH_P_8021Q) | (ie == C.ETH_P_8021AD)
    deep9100 = (c.native("inner_vlan_depth") >= 2) & (c.native("inner_vlan_tpid1")
                                                      == C.ETH_P_QINQ1)
    eth = np.zeros(n, np.uint8)
    has = ie != 0
    eth[has & deep9100] = R.BYPASS_NOT_IP
    if not config.vlan_gro:
        eth[has & vlan] = R.BYPASS_NO_VLAN_GRO
    eth[has & (ie == C.ETH_P_QINQ1)] = R.BYPASS_NOT_IP
    out = np.where(gpe | gen, np.uint8(R.BYPASS_TUNNEL), eth)
    ok = sock & two & (c.native("status") == S.STATUS_OK)
    return np.where(ok, out, 0).astype(np.uint8)


class UdpView:
    """One batch as the TCP preparation should see it under a UDP configuration, and
    the UDP-specific per-packet values (see the module docstring)."""

    def __init__(self, t: pa.Table, config: GroConfig, columns: ColumnReader):
        c = columns
        self.config = config
        self.mode = udp_mode(config)
        n = t.num_rows
        tun = c.native("tun_type")
        self.sock = _socket_rows(c, config)
        # build_skbs: no tunnel socket + a UDP GRO mode -> the outer UDP datagram
        self.outer = (np.isin(tun, list(_UDP_TUNNEL_KIND)) & ~self.sock & (self.mode != "off")
                      & (c.native("outer_ip_version") != 0) & (c.native("ip_version") != 0)
                      & (c.native("status") == S.STATUS_OK))
        self.tbail = _tunnel_bail(c, config, self.sock) if self.sock.any() else \
            np.zeros(n, np.uint8)
        self.orig = c
        self.table = self._rewrite(t, c)
        self.columns = ColumnReader(self.table)
        self.udp = np.zeros(n, np.uint8)

    @classmethod
    def of(cls, t: pa.Table, config: GroConfig, columns: ColumnReader) -> "UdpView | None":
        """The view of batch ``t``, or None when ``config`` needs none."""
        return cls(t, config, columns) if needed(config) else None

    def _rewrite(self, t: pa.Table, c: ColumnReader) -> pa.Table:
        out, sock = self.outer, self.sock
        if not out.any() and not sock.any():
            return t
        new: dict = {}

        def put(name, values):
            new[name] = values

        def pick(name, mask, values):
            cur = new.get(name)
            if cur is None:
                cur = c.bytes(name) if name.endswith(("_src", "_dst")) and "ip_" in name \
                    else c.native(name)
            m = mask[:, None] if cur.ndim == 2 else mask
            put(name, np.where(m, values, cur))

        if out.any():
            for f in _IP_FIELDS:
                o = "outer_ip_" + f
                src = c.bytes(o) if f in ("src", "dst") else c.native(o)
                pick("ip_" + f, out, src)
                pick(o, out, np.zeros_like(src))
            for name in ("tun_type", "encap_depth") + _TUNNEL_COLS:
                pick(name, out, 0)
            pick("l4_proto", out, C.IPPROTO_UDP)
            pick("sport", out, c.native("outer_sport"))
            pick("dport", out, c.native("outer_dport"))
            pick("udp_len", out, c.native("outer_udp_len"))
            pick("l4_csum", out, c.native("outer_udp_csum"))
        if sock.any():
            # the TCP preparation's IPIP: outer header, "not two headers / tunnel in
            # tunnel" -> BYPASS_TUNNEL, inner header; tunnel fields go to the key here
            pick("tun_type", sock, C.TUN_IPIP)
            for name in _TUNNEL_COLS:
                pick(name, sock, 0)
            depth = c.native("encap_depth")
            if not self.config.kernel.encap_mark:
                depth = np.minimum(depth, 1)        # before v4.6 no encap_mark
            pick("encap_depth", sock, np.where(self.tbail != 0, 2, depth))
        for name, values in new.items():
            i = t.schema.get_field_index(name)
            field = t.schema.field(i)
            if pa.types.is_fixed_size_binary(field.type):
                v = np.ascontiguousarray(values, np.uint8)
                arr = pa.FixedSizeBinaryArray.from_buffers(
                    field.type, len(v), [None, pa.py_buffer(v.tobytes())])
            else:
                arr = arrow_numeric(np.ascontiguousarray(
                    np.asarray(values).astype(field.type.to_pandas_dtype())), field.type)
            t = t.set_column(i, field, arr)
        return t

    # -- hooks of engine.prepare, in its order --------------------------------------------

    def fix_pre(self, pre: np.ndarray, sfl_out: np.ndarray, sfl_in: np.ndarray,
                sfl_fl: np.ndarray) -> np.ndarray:
        """The bypass codes of the TCP preparation, corrected where UDP GRO or a tunnel
        socket decides otherwise (reference.GroNode.dev_gro_receive order)."""
        v = self.columns
        cfg = self.config
        pre = pre.copy()
        # the tunnel socket's own refusals, at the tunnel layer (after the outer header)
        tb = (self.tbail != 0) & (pre == R.BYPASS_TUNNEL)
        pre[tb] = self.tbail[tb]
        if self.mode == "off":
            return pre
        # udp4/6_gro_receive reached with a UDP GRO mode (the TCP preparation's last UDP
        # check gave BYPASS_UDP_NO_GRO, past every layer)
        at_l4 = ((pre == R.BYPASS_UDP_NO_GRO) & (v.native("l4_proto") == C.IPPROTO_UDP)
                 & ~np.isin(v.native("tun_type"), _UDP_TUNNELS))
        flushing = (sfl_out != 0) | (sfl_in != 0) | (sfl_fl != 0)
        bad = np.isin(v.native("l4_csum_state"), (S.CSUM_BAD, S.CSUM_PARTIAL)) & ~flushing
        bad = bad if cfg.verify_checksums else np.zeros_like(bad)
        # plain UDP and a tunnel socket's inner UDP alike (udp4/6_gro_receive after the
        # tunnel's gro_receive; no tunnel socket on the inner port)
        u = at_l4
        ulen = v("udp_len", np.int64)
        gro_len = (v("wire_len", np.int64) - v("ip_offset", np.int64)
                   - v("ip_hdr_len", np.int64))
        code = np.where(bad, R.BYPASS_L4_CSUM,                    # checksum_validate_zero
                        np.where(v.native("l4_csum") == 0, R.NOT_HELD_UDP_ZERO_CSUM,
                                 np.where((ulen <= 8) | (ulen != gro_len),
                                          R.NOT_HELD_UDP_LENGTH, 0)))
        pre[u] = code[u]
        self.udp[u & (pre == 0)] = K.UDP_FRAGLIST if self.mode == "fraglist" \
            else K.UDP_SEGMENT
        return pre

    def view_state(self, state):
        """The tables the rewritten view's same-flow classes are numbered in, kept in
        ``state.udp_ids`` (the same object every batch): its own union classes (their
        keys are the view's headers, not the packets') and, with tunnel sockets, its own
        key and loose ids (the engine's are numbered by :meth:`tunnel_ids`); without
        them the engine's key and loose ids."""
        ids = state.udp_ids
        view = ids.get("view")
        if view is None:
            view = types.SimpleNamespace(
                union_ids=type(state.union_ids)(),
                flow_ids=type(state.flow_ids)(state.flow_ids.words),   # unused: flows of
                union_key=np.full(64, -1, np.int64))                    # the view's rows
            ids["view"] = view
        if self.config.udp_tunnels:
            if "key" not in ids:
                ids.update(key=type(state.key_ids)(state.key_ids.words),
                           loose=type(state.loose_ids)(state.loose_ids.words))
            view.key_ids, view.loose_ids = ids["key"], ids["loose"]
        else:
            view.key_ids, view.loose_ids = state.key_ids, state.loose_ids
        return view

    def tunnel_ids(self, key: np.ndarray, loose: np.ndarray, use: np.ndarray, state,
                   number):
        """reference.udp_tunnel_key: the TCP classes refined by the tunnel socket's fields
        (outer ports, checksum presence, VXLAN / Geneve / GUE header words, inner
        Ethernet), numbered in ``state.key_ids`` / ``loose_ids`` by ``number``
        (engine._global_ids)."""
        if not self.config.udp_tunnels:
            return key, loose
        extra = self._tunnel_words()
        key2 = number(np.vstack([key.astype(np.uint64)[None], extra]), use,
                           state.key_ids)
        if self.config.kernel.ipv6_hop_limit_flush:
            return key2, np.maximum(key2, 0)
        loose2 = number(np.vstack([loose.astype(np.uint64)[None], extra]), use,
                             state.loose_ids)
        return key2, np.maximum(loose2, 0)

    def _tunnel_words(self) -> np.ndarray:
        c = self.orig
        u = lambda name: c(name, np.uint64)  # noqa: E731
        n = len(self.sock)
        tun = c.native("tun_type")
        w = np.zeros((8, n), np.uint64)
        w[0] = (u("tun_type") | (u("outer_sport") << np.uint64(8))
                | (u("outer_dport") << np.uint64(24))
                | ((u("outer_udp_csum") != 0).astype(np.uint64) << np.uint64(40))
                | np.uint64(1 << 48))
        flags = np.isin(tun, (C.TUN_VXLAN, C.TUN_VXLAN_GPE, C.TUN_GENEVE, C.TUN_GUE))
        w[1] = np.where(flags, u("tun_flags"), 0)
        w[2] = np.where(np.isin(tun, _UDP_TUNNELS), u("tun_key"), 0)
        opts = np.isin(tun, (C.TUN_GENEVE, C.TUN_GUE))
        w[3] = np.where(opts, u("tun_opt_len"), 0)
        w[4] = np.where(opts, u("tun_opt_digest"), 0)
        eth = (tun == C.TUN_VXLAN) | ((tun == C.TUN_GENEVE)
                                      & (c.native("tun_proto") == C.ETH_P_TEB))
        w[5] = np.where(eth, u("inner_eth_dst") | (u("inner_eth_type") << np.uint64(48)), 0)
        w[6] = np.where(eth, u("inner_eth_src") | (u("inner_vlan_depth") << np.uint64(48)), 0)
        w[7] = np.where(eth, u("inner_vlan_tpid0") | (u("inner_vlan_tci0") << np.uint64(16))
                        | (u("inner_vlan_tpid1") << np.uint64(32))
                        | (u("inner_vlan_tci1") << np.uint64(48)), 0)
        w[:, ~self.sock] = 0
        return w

    def finish(self, cols: K.Cols) -> K.Cols:
        """The UDP values of the kernel columns: which packets enter
        udp_gro_receive_segment and their ``uh->len``, skb_gro_len after the UDP header,
        the size limit (no BIG TCP for UDP: GRO_LEGACY_MAX_SIZE above 64 KB, see
        reference.gro_max_size) and gso_type codes."""
        v, c = self.columns, self.orig
        udp = self.udp != 0
        l4 = v.native("l4_proto") == C.IPPROTO_UDP
        # build_skbs: skb_gro_len after the UDP header, at least payload_len when the
        # column's L4 is the one aggregated
        ln = (v("wire_len", np.int64) - v("ip_offset", np.int64) - v("ip_hdr_len", np.int64)
              - 8)
        same = c.native("l4_proto") == C.IPPROTO_UDP
        ln = np.where(same, np.maximum(ln, v("payload_len", np.int64)), ln)
        tlen = np.where(udp, ln, cols.tlen)
        limit = np.where(l4, np.minimum(cols.limit, GRO_LEGACY_MAX_SIZE), cols.limit)
        gcode = np.where(udp, GCODE_UDP + (self.mode == "fraglist"), cols.gcode)
        if self.sock.any():
            in6 = c.native("ip_version") == 6
            cwr = (c("tcp_flags", np.int64) & C.TCP_FLAG_CWR) != 0
            base = (2 * in6 + cwr) * 16 + (c("tun_type", np.int64) & 15)
            blk = 2 * (c.native("outer_udp_csum") != 0) + (c.native("outer_ip_version") == 6)
            gcode = np.where(self.sock, GCODE_TUNNEL + 128 * blk + base, gcode)
            tudp = GCODE_TUNNEL_UDP + 128 * blk + 32 * in6 + 2 * (c("tun_type", np.int64)
                                                                  & 15)
            gcode = np.where(self.sock & udp, tudp + (self.mode == "fraglist"), gcode)
        return cols._replace(
            udp=self.udp, udp_len=np.array(v.native("udp_len"), np.uint16),
            tlen=tlen.astype(np.int64), limit=limit.astype(np.int64),
            gcode=gcode.astype(np.int64))


def partition_table(t: pa.Table, config: GroConfig) -> pa.Table:
    """The table whose innermost addresses and ports engine.partition_of hashes: a UDP
    tunnel packet aggregated as its outer datagram is keyed by its outer header."""
    if not needed(config):
        return t
    return UdpView(t, config, ColumnReader(t)).table


def _fou_inner(tun: int, v6: int, out6: int) -> int:
    """reference._fou_inner_tun from the gcode's fields: the IP-in-IP protocol FOU/GUE
    carry (inner IPv6 ``v6``, outer IPv6 ``out6``), else 0."""
    if tun not in (C.TUN_FOU, C.TUN_GUE):
        return 0
    if out6:
        return C.TUN_IP6IP6 if v6 else C.TUN_IP4IP6
    return C.TUN_SIT if v6 else C.TUN_IPIP


def gso_rows(table: np.ndarray, config: GroConfig) -> np.ndarray:
    """engine._gso_table extended with the UDP gcodes: udp_gro_complete_segment
    (SKB_GSO_UDP_L4, fraglist: | SKB_GSO_FRAGLIST) and super-packets of a UDP tunnel
    socket (reference.gro_complete: UDP_TUNNEL[_CSUM] from udp_gro_complete, FOU/GUE add
    the carried protocol's bits; TCP fraglist as tcp4/6_gro_complete's is_flist)."""
    if not needed(config):
        return table
    rows = GCODE_TUNNEL_UDP + 4 * 128 if config.udp_tunnels else GCODE_UDP + 2
    out = np.zeros((rows, table.shape[1]), table.dtype)
    out[:len(table)] = table
    out[GCODE_UDP] = SKB_GSO_UDP_L4
    out[GCODE_UDP + 1] = SKB_GSO_UDP_L4 | SKB_GSO_FRAGLIST
    if not config.udp_tunnels:
        return out
    ver = config.kernel.version
    for csum in range(2):
        for out6 in range(2):
            blk = GCODE_TUNNEL + 128 * (2 * csum + out6)
            for base in range(64):
                v6, cwr, tun = base // 32, (base // 16) % 2, base % 16
                kw = dict(tun_type=tun, udp_csum=bool(csum),
                          inner_tun_type=_fou_inner(tun, v6, out6))
                for fx in range(table.shape[1]):
                    if config.tcp_fraglist:
                        t = gso_type_for(ver, 6 if v6 else 4, **kw) | SKB_GSO_FRAGLIST
                    else:
                        t = gso_type_for(ver, 6 if v6 else 4, ip_fixedid=0 if v6 else fx,
                                         cwr=bool(cwr), **kw)
                    out[blk + base, fx] = t
                out[blk + base + K.GCODE_DELIVERED] = table[base + K.GCODE_DELIVERED]
            # a tunnel socket's inner UDP (reference.gro_complete, udp_tunnel_gso_bits)
            for v6 in range(2):
                for tun in range(16):
                    bits = udp_tunnel_gso_bits(ver, tun, bool(csum), _fou_inner(tun, v6, out6))
                    row = GCODE_TUNNEL_UDP + 128 * (2 * csum + out6) + 32 * v6 + 2 * tun
                    out[row] = bits | SKB_GSO_UDP_L4
                    out[row + 1] = bits | SKB_GSO_UDP_L4 | SKB_GSO_FRAGLIST
    return out
