"""`tsvk run-container`: the image's PID 1. Starts TorchServe (and the OIP front when asked), or with `--engine
kserve` tsvk's own engine on the same config and archives, reaps every orphan the container's processes leave, and
on SIGTERM or SIGINT drains and stops (TorchServe: tools/engines/torchserve/drain.py; the engine: its own graceful shutdown,
tools/engines/kserve/child.py) before exiting, so that a pod deletion or rollout answers the requests taken in.

A PID 1 gets no default signal actions from the kernel: `torchserve --foreground` as PID 1 ignored
SIGTERM, and every stop waited out the grace period and ended in SIGKILL. Here SIGTERM and SIGINT start the
drain, a second one (or SIGQUIT) stops at once; SIGHUP, SIGUSR1 and SIGUSR2 are passed on to TorchServe.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

from .shared.drain import add_drain_timeout_argument
from ..config.store_check import missing_archives_message
from .registry import add_engine_argument, engine_named

_DRAIN_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_POLL_S = 0.2
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


class _Stop:
    """What the signals asked for: nothing yet, a drain, or an immediate stop."""

    def __init__(self):
        self.requested, self.at_once = False, False

    def on_signal(self, signum, frame) -> None:
        self.at_once = self.requested or signum == signal.SIGQUIT
        self.requested = True


def register(commands) -> None:
    p = commands.add_parser("run-container", help="a container's PID 1: start TorchServe, reap orphans, and on SIGTERM "
                                                  "drain (answer what was taken in) and stop")
    p.add_argument("--config", type=Path, default=Path("/etc/tsvk/config.properties"))
    p.add_argument("--run-dir", type=Path, default=Path("/home/model-server/run"),
                   help="writable: TorchServe's working dir (key file), logs and temp dir (default /home/model-server/run)")
    p.add_argument("--front", action="store_true", help="also start the OIP front when the config serves the Open Inference "
                                                        "Protocol (the chart runs it as a container of its own instead)")
    add_engine_argument(p, "the server: torchserve (Java), or kserve, tsvk's own engine (no Java; it serves the Open "
                           "Inference Protocol itself, so --front is not needed)")
    add_drain_timeout_argument(p)
    p.set_defaults(func=cmd_run_container)


def cmd_run_container(args: argparse.Namespace) -> int:
    engine = engine_named(args.engine)
    missing = missing_archives_message(args.config, engine.label)
    if missing:
        print(missing, file=sys.stderr, flush=True)
        return 1
    become_subreaper()
    stop = _Stop()
    for sig in (*_DRAIN_SIGNALS, signal.SIGQUIT):
        signal.signal(sig, stop.on_signal)
    run = engine.start_in_container(args.config, args.run_dir, args.drain_timeout, args.front)
    print(f"{engine.running_label} started (pid {run.pid}); SIGTERM drains for at most {args.drain_timeout} s, then stops", flush=True)
    while not stop.requested and run.alive():
        reap_orphans()
        time.sleep(_POLL_S)
    if not stop.requested:
        print(f"{engine.running_label} exited by itself; see {args.run_dir / 'logs'}", file=sys.stderr, flush=True)
    began = time.monotonic()
    result = engine.stop(run, 0 if stop.at_once or not stop.requested else args.drain_timeout)
    reap_orphans()
    print(f"stopped in {time.monotonic() - began:.1f} s: {result.said}", flush=True)
    sys.stderr.flush()
    # Everything we started is stopped and reaped: exit now. The interpreter's own teardown takes seconds here,
    # which a pod's grace period would otherwise pay.
    os._exit(0 if stop.requested else 1)


def become_subreaper() -> None:
    """Outside a PID namespace (tests, a plain `docker run --init`-less host run) orphans re-parent to us too."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def reap_orphans() -> None:
    """Collect every exited child, our own or one re-parented to PID 1, so none stays a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str] | None = None) -> int:
    """`python -m tsvk_tools.engines.container`: the same command without the rest of the CLI, whose build, bench and
    robustness commands import packages (hypothesis among them) that the serving image does not carry."""
    parser = argparse.ArgumentParser(prog="python -m tsvk_tools.engines.container")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["run-container", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
