"""A fork server whose workers only say what they were given: run as `python -m tests.support.fork_echo
--fork-server --fd N`, it is the engine's fork server (tools/engines/kserve/forkserver.py) with a worker that writes
its arguments, folder, environment, parent and imported modules to its socket as one JSON line, then (with --stay)
waits until its socket closes or it is killed."""

from __future__ import annotations

import json
import os
import socket
import sys

from tsvk_tools.engines.kserve.forkserver import serve_forks


def echo_worker(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[argv.index("--fd") + 1]))
    print(f"worker {os.getpid()} writes to its log", flush=True)
    report = {"argv": argv, "cwd": os.getcwd(), "env": os.environ.get("FORK_ECHO"), "ppid": os.getppid(),
              "preloaded": "numpy" in sys.modules, "tsvk": "tsvk" in sys.modules}
    sock.sendall(json.dumps(report).encode() + b"\n")
    if "--stay" in argv:
        sock.recv(1)
    return 0


if __name__ == "__main__":
    sys.exit(serve_forks(socket.socket(fileno=int(sys.argv[sys.argv.index("--fd") + 1])), echo_worker))
