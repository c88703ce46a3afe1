"""``bindscope ndif up|down|status``: a local NDIF server for ``--remote`` runs on this machine."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bindscope import local_ndif
from bindscope.errors import BindscopeError
from bindscope.loading import SERVED, cache_dir, embedded_folder


def add_parser(sub: argparse._SubParsersAction, command: object) -> None:
    """The ``ndif`` subcommand's options."""
    p = sub.add_parser("ndif", help="run the real NDIF server locally (up, down, status)")
    p.add_argument("action", choices=("up", "down", "status"), help="start, stop, or say what runs")
    p.add_argument(
        "--port",
        type=int,
        default=local_ndif.DEFAULT_PORT,
        help="the API's port (default %(default)s; the other pieces take PORT+1000..PORT+1004)",
    )
    p.add_argument(
        "--home",
        type=Path,
        help="the server's folder: venv, logs, pids (default: BINDSCOPE_CACHE/ndif)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--sandboxed",
        action="store_true",
        help="run every request untrusted, in the runner process of ndif's sandboxed actor",
    )
    mode.add_argument(
        "--sandbox-key",
        metavar="KEY",
        help="run untrusted only the requests sent with this NDIF_API_KEY, all others "
        "trusted: both modes from one server (the server keeps only the key's digest)",
    )
    p.add_argument(
        "--allow-exposed-ports",
        action="store_true",
        help="where no network namespace can be made for the server (unshare fails), start "
        "anyway, with Ray's unauthenticated ports on every interface (default: refuse)",
    )
    p.set_defaults(func=command)


def _status(home: Path) -> int:
    state = local_ndif.status(home=home)
    print(json.dumps(state, indent=1))
    for note in state["stale"]:
        print(f"bindscope ndif: {note}", file=sys.stderr)
    for name, why in state["dead"].items():
        print(f"bindscope ndif: {name} is dead ({why}); see {home / 'logs'}", file=sys.stderr)
    if "port" not in state:
        print(f"bindscope ndif: no local NDIF server runs from {home}", file=sys.stderr)
    return 0 if state["api_answers"] and not state["dead"] else 1


def cmd_ndif(args: argparse.Namespace) -> int:
    """``bindscope ndif``: start, stop or describe the local NDIF server."""
    home = args.home or cache_dir() / "ndif"
    if args.action == "down":
        stopped, stale = local_ndif.down(home=home)
        for note in stale:
            print(f"bindscope ndif: {note}", file=sys.stderr)
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    if args.action == "status":
        return _status(home)
    if not 1024 <= args.port <= 64000:
        raise BindscopeError(f"--port {args.port}: pick a port between 1024 and 64000")
    from huggingface_hub import constants  # heavy: for `ndif up` only

    folders = {repo: embedded_folder(name) for name, repo in SERVED.items()}
    where = local_ndif.up(
        home=home,
        models=folders,
        port=args.port,
        hub_cache=Path(constants.HF_HUB_CACHE),  # a client here reads it: both see the models
        sandboxed=args.sandboxed,
        sandbox_key=args.sandbox_key,
        allow_exposed=args.allow_exposed_ports,
    )
    print(f"NDIF runs at {where}, serving {', '.join(folders)}; logs in {home / 'logs'}")
    print(f"export NDIF_HOST={where} NDIF_API_KEY=local HF_HUB_OFFLINE=1   # auth is off")
    print("stop it with: bindscope ndif down")
    return 0


__all__ = ["add_parser", "cmd_ndif"]
