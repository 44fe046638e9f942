"""A minimal XDP_PASS program on a veth, for kernels whose veth has GRO only with XDP.

Layer: replay plumbing (beside ``_netns.py``). Before v5.13 ("veth: allow enabling NAPI
even without XDP", d3256efd8e8b) a veth hands frames to its peer's NAPI instance, and so to
``napi_gro_receive`` (``veth_xdp_rcv``), only while a native XDP program is attached
(``veth_xmit``: ``use_napi = rcu_access_pointer(rq->xdp_prog)``); otherwise ``netif_rx``
and no GRO. The program here is two instructions, ``r0 = XDP_PASS; exit``, loaded with the
``bpf(2)`` syscall and attached in driver mode through an ``RTM_SETLINK`` netlink message
(``IFLA_XDP``): no compiler, no BPF object file, no libbpf.

``veth_xdp_set`` refuses native XDP while the PEER's MTU exceeds one page minus XDP
headroom, the Ethernet header and ``skb_shared_info`` (:data:`VETH_XDP_MAX_MTU`, 3506 on
x86-64 in 5.10): the sending end must be set to at most that first.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct

from gropcap.errors import GropcapError

__all__ = ["attach_xdp_pass", "load_xdp_pass", "VETH_XDP_MAX_MTU", "VETH_NAPI_WITHOUT_XDP"]

# 4096 - VETH_XDP_HEADROOM (256 + NET_IP_ALIGN 0) - ETH_HLEN - SKB_DATA_ALIGN(320):
# veth_xdp_set in drivers/net/veth.c (5.10, x86-64)
VETH_XDP_MAX_MTU = 3506
VETH_NAPI_WITHOUT_XDP = (5, 13)      # d3256efd8e8b, "veth: allow enabling NAPI even without XDP"

_NR_BPF = 321                        # arch/x86/entry/syscalls/syscall_64.tbl
_BPF_PROG_LOAD = 5                   # include/uapi/linux/bpf.h enum bpf_cmd
_BPF_PROG_TYPE_XDP = 6               # enum bpf_prog_type
_XDP_PASS = 2                        # enum xdp_action
# struct bpf_insn {u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm}
_INSNS = (struct.pack("<BBhi", 0xB7, 0, 0, _XDP_PASS)     # BPF_ALU64|BPF_MOV|BPF_K: r0 = 2
          + struct.pack("<BBhi", 0x95, 0, 0, 0))           # BPF_JMP|BPF_EXIT
_RTM_SETLINK = 19                    # include/uapi/linux/rtnetlink.h
_NLM_F_REQUEST, _NLM_F_ACK = 0x1, 0x4
_NLMSG_ERROR = 2
_IFLA_XDP = 43                       # include/uapi/linux/if_link.h
_NLA_F_NESTED = 0x8000
_IFLA_XDP_FD, _IFLA_XDP_FLAGS = 1, 3
_XDP_FLAGS_DRV_MODE = 1 << 2


def load_xdp_pass() -> int:
    """Load ``r0 = XDP_PASS; exit`` as an XDP program; returns its file descriptor."""
    libc = ctypes.CDLL(None, use_errno=True)
    insns = ctypes.create_string_buffer(_INSNS, len(_INSNS))
    lic = ctypes.create_string_buffer(b"GPL")
    # union bpf_attr, BPF_PROG_LOAD part: prog_type, insn_cnt, insns, license, log_level,
    # log_size, log_buf, kern_version, prog_flags, prog_name[16]; the rest stays zero
    attr = struct.pack("<IIQQIIQII16s", _BPF_PROG_TYPE_XDP, len(_INSNS) // 8,
                       ctypes.addressof(insns), ctypes.addressof(lic), 0, 0, 0, 0, 0,
                       b"gropcap_pass")
    buf = ctypes.create_string_buffer(attr.ljust(120, b"\0"), 120)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(ctypes.c_long(_NR_BPF), ctypes.c_long(_BPF_PROG_LOAD), buf,
                      ctypes.c_uint(120))
    if fd < 0:
        err = ctypes.get_errno()
        raise GropcapError(f"cannot load an XDP program (bpf: {os.strerror(err)})",
                           hint="the kernel needs CONFIG_BPF_SYSCALL and root")
    return int(fd)


def _nla(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("<HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def attach_xdp_pass(ifindex: int) -> None:
    """Attach an XDP_PASS program in driver mode to ``ifindex`` of the CALLER's network
    namespace (enter it first); raises :class:`GropcapError` with the kernel's errno."""
    fd = load_xdp_pass()
    try:
        xdp = _nla(_IFLA_XDP_FD, struct.pack("<i", fd)) + \
            _nla(_IFLA_XDP_FLAGS, struct.pack("<I", _XDP_FLAGS_DRV_MODE))
        body = struct.pack("<BBHiII", socket.AF_UNSPEC, 0, 0, ifindex, 0, 0) + \
            _nla(_IFLA_XDP | _NLA_F_NESTED, xdp)
        msg = struct.pack("<IHHII", 16 + len(body), _RTM_SETLINK,
                          _NLM_F_REQUEST | _NLM_F_ACK, 1, 0) + body
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as nl:
            nl.bind((0, 0))
            nl.send(msg)
            reply = nl.recv(65536)
        _len, typ, _fl, _seq, _pid = struct.unpack_from("<IHHII", reply)
        if typ == _NLMSG_ERROR:
            (code,) = struct.unpack_from("<i", reply, 16)
            if code:
                raise GropcapError(f"cannot attach XDP to ifindex {ifindex}: "
                                   f"{os.strerror(-code)}",
                                   hint=f"a veth's peer MTU must be at most "
                                        f"{VETH_XDP_MAX_MTU} for native XDP")
    finally:
        os.close(fd)
