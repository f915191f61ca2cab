"""Step 1 of a stop (tools/engines/torchserve/drain.py): TorchServe stops accepting without resetting a connection the kernel
had already completed for it.

Shutting a listening socket down resets every connection in its accept queue: connections whose handshake the
kernel finished but the frontend had not yet accepted. Their clients had sent a request and get a reset, the
same as a request lost. So the listener is closed in two moves, from outside the frontend (a copy of each
socket taken with pidfd_getfd(2)):
1. a socket filter that drops a new connection's first packet (a SYN without ACK) is attached: no new
   connection enters the queues; the client's kernel sends its SYN again a second later;
2. once the accept queue is empty and no handshake is half done (or ACCEPT_QUEUE_WAIT_S has passed), the
   socket is shut down for reading: the SYN sent again is refused. Connections already accepted stay open.
Where the kernel refuses the filter (seen in podman containers on one kernel: EPERM for any filter on a TCP
socket, even privileged), the listener is shut at once, as before, and the stop says so.
The kernel's own view of each socket (/proc/<pid>/net/tcp and tcp6) says when the queues are empty, and,
for the drain's last check, whether a connection holds bytes the frontend has not read yet.
"""

from __future__ import annotations

import ctypes
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import psutil

from ...processes import net_connections

_PIDFD_GETFD = 438  # the same number on every Linux architecture (Linux 5.6+)
_SO_ATTACH_FILTER = 26  # asm-generic/socket.h; socket module does not name it
ACCEPT_QUEUE_WAIT_S = 2.0  # a handshake half done on a slow network completes within a round trip or two
POLL_S = 0.01
# Socket states as /proc/net/tcp writes them (include/net/tcp_states.h): a request socket counts as SYN_RECV.
ESTABLISHED, SYN_RECV, LISTEN = "01", "03", "0A"
# A classic BPF program run on each packet for the listener (the kernel's tcp_filter): the packet starts at
# its TCP header, whose byte 13 holds the flags. SYN without ACK -> drop; anything else (the handshake's last
# ACK, data on a connection accepted later, which inherits the filter) -> keep.
_TCP_FLAGS_BYTE, _SYN, _ACK = 13, 0x02, 0x10
_REFUSE_NEW_HANDSHAKES = (
    (0x30, 0, 0, _TCP_FLAGS_BYTE),  # ldb [13]
    (0x54, 0, 0, _SYN | _ACK),  # and #(SYN|ACK)
    (0x15, 0, 1, _SYN),  # jeq #SYN: next (drop), else skip one (keep)
    (0x06, 0, 0, 0),  # ret #0: drop
    (0x06, 0, 0, 0xFFFFFFFF),  # ret: keep the whole packet
)


@dataclass(frozen=True)
class ListenersClosed:
    """What `stop_accepting` achieved."""

    refusing: bool  # new connections are refused from now on
    queue_accepted: bool  # what waited in the accept queue was accepted first, not reset (the filter was allowed)


NOT_CLOSED = ListenersClosed(False, False)


class _SockFilter(ctypes.Structure):  # struct sock_filter, linux/filter.h
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):  # struct sock_fprog, linux/filter.h
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def client_listeners(pid: int, kept_ports: Iterable[int]) -> dict[int, int]:
    """Process `pid`'s listening TCP sockets that clients send requests to: {file descriptor: port}."""
    kept = set(kept_ports)
    try:
        return {c.fd: c.laddr.port for c in net_connections(psutil.Process(pid), "tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr.port not in kept and c.fd >= 0}
    except psutil.Error:
        return {}


def stop_accepting(pid: int, listeners: dict[int, int], wait_s: float = ACCEPT_QUEUE_WAIT_S) -> ListenersClosed:
    """Close `listeners` of process `pid` (the caller checked that it is ours) as the module docstring says;
    NOT_CLOSED where the kernel would not let us (no pidfd_getfd, a seccomp filter): the frontend goes on accepting."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return NOT_CLOSED
    try:
        copies = [_copy_of(pidfd, fd) for fd in listeners]
    finally:
        os.close(pidfd)
    try:
        if not listeners or None in copies:
            return NOT_CLOSED
        filtered = all([_refuse_new_handshakes(copy) for copy in copies])  # a list: every listener tries
        if filtered:
            _wait_until_accepted(pid, set(listeners.values()), wait_s)
        return ListenersClosed(refusing=all([_shut(copy) for copy in copies]), queue_accepted=filtered)
    finally:
        for copy in copies:
            if copy is not None:
                copy.close()


def _copy_of(pidfd: int, fd: int) -> socket.socket | None:
    copy = ctypes.CDLL(None, use_errno=True).syscall(_PIDFD_GETFD, pidfd, fd, 0)
    return socket.socket(fileno=copy) if copy >= 0 else None


def _refuse_new_handshakes(listener: socket.socket) -> bool:
    program = (_SockFilter * len(_REFUSE_NEW_HANDSHAKES))(*(_SockFilter(*op) for op in _REFUSE_NEW_HANDSHAKES))
    fprog = _SockFprog(len(_REFUSE_NEW_HANDSHAKES), ctypes.cast(program, ctypes.POINTER(_SockFilter)))
    try:
        listener.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, ctypes.string_at(ctypes.addressof(fprog), ctypes.sizeof(fprog)))
    except OSError:
        return False
    return True


def _shut(listener: socket.socket) -> bool:
    """shutdown(2) on a listening socket: refuses new connections from then on; those it accepted stay open."""
    try:
        listener.shutdown(socket.SHUT_RD)
    except OSError:
        return False
    return True


def _wait_until_accepted(pid: int, ports: set[int], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while waiting_to_be_accepted(pid, ports) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def waiting_to_be_accepted(pid: int, ports: set[int]) -> int:
    """Connections on `ports` the kernel holds for the frontend: in an accept queue, or with the handshake half done."""
    return sum(queued if state == LISTEN else 1 for port, state, queued in tcp_sockets(pid)
               if port in ports and state in (LISTEN, SYN_RECV))


def unread_connections(pid: int, ports: set[int]) -> int:
    """Open connections on `ports` holding bytes the frontend has not read: a request not yet counted on arrival."""
    return sum(1 for port, state, unread in tcp_sockets(pid) if port in ports and state == ESTABLISHED and unread > 0)


def tcp_sockets(pid: int) -> list[tuple[int, str, int]]:
    """Every TCP socket in process `pid`'s network namespace as (local port, state, receive queue); for a listener
    the receive queue is its accept queue's length (net/ipv4/tcp_ipv4.c, get_tcp4_sock)."""
    rows = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            rows.append((int(fields[1].rsplit(":", 1)[1], 16), fields[3], int(fields[4].split(":")[1], 16)))
    return rows
