"""GRO layer: packet columns (decode/schema.py) -> GRO verdicts and super-packets.

Contract shared by the reference model (``gro/reference.py``, plain Python written from
the kernel source) and the numba engine (``gro/engine.py``); tests hold them equal bit for
bit. Both expose::

    simulate(packets: pyarrow.Table, config: GroConfig) -> GroResult

``packets`` has :data:`gropcap.decode.schema.PACKET_SCHEMA` (rows in capture order; row i is
"packet i"). :class:`GroResult` holds numpy arrays:

per packet (length = number of packets):
    flow_id   int64   flows.assign_flow_ids(packets) (same in both engines)
    gro_seg   int64   seg_id of the super-packet the packet ended up in
    gro_role  uint8   reasons.ROLE_ALONE / ROLE_HEAD / ROLE_MERGED
    reason    uint8   reasons.* (MERGED, or why it did not merge)
    rx_queue  uint16  RSS queue (0 in the ideal model or with one queue)
    poll_id   int64   NAPI poll the packet was received in (global counter in time order,
                      -1 in the ideal model)

per super-packet (one row per packet the stack receives, IN DELIVERY ORDER; seg_id is the
row number):
    seg_id, flow_id (int64), first_packet, last_packet (int64 packet row numbers),
    count (int32, = gso_segs), payload_len (int64, sum of merged payload_len),
    gso_size (int32: payload of the first packet when count > 1, else 0),
    gso_type (uint32, SKB_GSO_* bits, gro/gso.py), end_reason (uint8),
    rx_queue (uint16), poll_id (int64).

Invariants (tests assert them): every packet is in exactly one super-packet; sum(count) ==
number of packets; sum(payload_len) over super-packets == sum over packets; a super-packet's
packets are of one flow; gso_size * (count - 1) < payload_len <= gso_size * count when
count > 1.
"""
