"""Free localhost ports, so benchmarks and tests never collide with a TorchServe on its default ports.

Ports that must differ are taken in one call: each call binds all of its ports at once. A port is free
when chosen, not reserved: another process may take it before TorchServe binds it. TorchServe then exits,
and `TorchServeRun.wait_ready` says so with `PortTaken`, naming the address (tools/engines/torchserve/server.py).
"""

from __future__ import annotations

import socket

from .serving_config import ServingRequest


def free_ports(count: int) -> list[int]:
    """`count` distinct ports nobody listens on now (all bound at once, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    """One port nobody listens on now."""
    return free_ports(1)[0]


def serving_on_free_ports(**fields) -> ServingRequest:
    """A ServingRequest whose five TorchServe ports (HTTP x3, gRPC x2) are free localhost ports."""
    inference, management, metrics, grpc_inference, grpc_management = free_ports(5)
    return ServingRequest(
        inference_address=f"http://127.0.0.1:{inference}",
        management_address=f"http://127.0.0.1:{management}",
        metrics_address=f"http://127.0.0.1:{metrics}",
        grpc_inference_port=grpc_inference,
        grpc_management_port=grpc_management,
        **fields,
    )
