"""Small traffic programs that ``make_pairs.py`` runs inside its namespaces.

Not part of gropcap: plain sockets, run as ``python3 pair_apps.py ROLE ARGS``.

* ``udp-recv PORT COUNT``: a UDP socket with ``UDP_GRO`` (so the receiving device's GRO
  aggregates datagrams for it, ``udp_gro_receive`` socket branch); reads until COUNT bytes
  arrived or 3 s of silence.
* ``udp-send ADDR PORT GSO_SIZE SEGS SENDS GAP_US``: ``SENDS`` sendmsg calls of
  ``GSO_SIZE * SEGS`` bytes each with ``UDP_SEGMENT`` = GSO_SIZE (one UDP GSO skb per call;
  the sender's veth has GSO off, so it leaves as wire-sized datagrams), GAP_US apart.
* ``rr-server PORT REQ RESP``: accepts connections; per request reads REQ bytes and answers
  RESP bytes, until the client closes.
* ``rr-client ADDR PORT CONNS REQS REQ RESP``: CONNS short connections one after another,
  each REQS requests of REQ bytes, waiting for the RESP-byte answer to each.
"""

from __future__ import annotations

import socket
import sys
import time

SOL_UDP = 17      # include/uapi/linux/in.h IPPROTO_UDP
UDP_SEGMENT = 103  # include/uapi/linux/udp.h
UDP_GRO = 104      # include/uapi/linux/udp.h


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def udp_recv(port: int, count: int) -> None:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(SOL_UDP, UDP_GRO, 1)
    s.bind(("::", port))
    s.settimeout(3.0)
    got = 0
    print("ready", flush=True)
    try:
        while got < count:
            got += len(s.recv(65536))
    except socket.timeout:
        pass
    print(got, flush=True)


def udp_send(addr: str, port: int, gso: int, segs: int, sends: int, gap_us: int) -> None:
    s = socket.socket(_family(addr), socket.SOCK_DGRAM)
    s.setsockopt(SOL_UDP, UDP_SEGMENT, gso)
    buf = bytes(gso * segs)
    for _ in range(sends):
        s.sendto(buf, (addr, port))
        time.sleep(gap_us / 1e6)


def _read_exact(c: socket.socket, n: int) -> bool:
    while n > 0:
        b = c.recv(min(n, 65536))
        if not b:
            return False
        n -= len(b)
    return True


def rr_server(port: int, req: int, resp: int) -> None:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port))
    s.listen(16)
    s.settimeout(10.0)
    print("ready", flush=True)
    answer = bytes(resp)
    try:
        while True:
            c, _ = s.accept()
            with c:
                while _read_exact(c, req):
                    c.sendall(answer)
    except socket.timeout:
        pass


def rr_client(addr: str, port: int, conns: int, reqs: int, req: int, resp: int) -> None:
    data = bytes(req)
    for _ in range(conns):
        with socket.create_connection((addr, port), timeout=5) as c:
            for _ in range(reqs):
                c.sendall(data)
                if not _read_exact(c, resp):
                    raise SystemExit("rr-client: server closed early")


def main(argv: list[str]) -> None:
    role, args = argv[0], argv[1:]
    if role == "udp-recv":
        udp_recv(int(args[0]), int(args[1]))
    elif role == "udp-send":
        udp_send(args[0], *map(int, args[1:6]))
    elif role == "rr-server":
        rr_server(*map(int, args[:3]))
    elif role == "rr-client":
        rr_client(args[0], *map(int, args[1:6]))
    else:
        raise SystemExit(f"pair_apps.py: unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
