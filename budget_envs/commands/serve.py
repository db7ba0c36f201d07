"""``budgetmix serve`` (an env over OpenEnv's protocol) and the dispatchers to a family's own
command line (``serve-web``, ``export-webshop``)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from budget_envs.commands.args import json_dict
from budget_envs.commands.common import missing_modules, parse_faults, pip_extra
from budget_envs.hostcheck import add_host_policy_args

__all__ = [
    "add_dispatch_parsers",
    "add_serve_parser",
    "cmd_export_webshop",
    "cmd_serve",
    "cmd_serve_web",
    "dispatch",
]


_WEBSHOP_CLI = "budget_envs.envs.webshop.cli"
_NO_WEBSHOP = "The web shop family is not installed."


def add_dispatch_parsers(sub: Any) -> None:
    """The ``serve-web`` and ``export-webshop`` subcommands: the rest is the family's to parse."""
    sw = sub.add_parser("serve-web", help="serve the web shop over HTTP")
    sw.add_argument("rest", nargs=argparse.REMAINDER)
    ew = sub.add_parser("export-webshop", help="export the web shop's data")
    ew.add_argument("rest", nargs=argparse.REMAINDER)


def add_serve_parser(sub: Any) -> None:
    """The ``serve`` subcommand's arguments."""
    sv = sub.add_parser("serve", help="serve an env over OpenEnv's protocol (openenv extra)")
    sv.add_argument("env_id", metavar="ENV_ID")
    sv.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--budget", default=None, help="budget spec (default: the env's; none: bare)")
    sv.add_argument("--visibility", default="hidden", help="hidden, remaining, final_warning")
    sv.add_argument("--faults", default=None, help="kinds a,b or JSON of ErrorInjection args")
    sv.add_argument("--env-kwargs", type=json_dict, default=None)
    sv.add_argument("--max-sessions", type=int, default=64, help="concurrent sessions (64)")
    sv.add_argument("--idle-timeout", type=float, default=300.0, help="seconds; 0: never")
    sv.add_argument("--max-message-bytes", type=int, default=1 << 20)
    add_host_policy_args(sv)
    sv.add_argument("--full-info", action="store_true", help="every info value in every answer")


def dispatch(
    module: str, func_names: Sequence[str], argv: Sequence[str], what: str, hint: str
) -> int:
    """Hand ``argv`` to the first of ``func_names`` that ``module`` (a family's ``cli``) has.

    The module is named at run time (the family may not be installed), hence the lookup by name.
    """
    if (
        importlib.util.find_spec(module.rsplit(".", 1)[0]) is None
        or importlib.util.find_spec(module) is None
    ):
        print(
            f"budgetmix: {what} is not available in this install ({module} is missing). {hint}",
            file=sys.stderr,
        )
        return 2
    mod = importlib.import_module(module)
    for name in func_names:
        fn = getattr(mod, name, None)
        if callable(fn):
            return int(fn(list(argv)) or 0)
    print(f"budgetmix: {module} has none of {list(func_names)}", file=sys.stderr)
    return 2


def cmd_serve_web(args: argparse.Namespace, out: TextIO) -> int:
    return dispatch(_WEBSHOP_CLI, ("serve_main",), args.rest, "serve-web", _NO_WEBSHOP)


def cmd_export_webshop(args: argparse.Namespace, out: TextIO) -> int:
    return dispatch(_WEBSHOP_CLI, ("export_main",), args.rest, "export-webshop", _NO_WEBSHOP)


def _bound_name(host: str) -> list[str]:
    """A specific address the server binds beyond loopback is a Host name it answers."""
    from budget_envs.hostcheck import is_loopback_name

    name = host.strip().strip("[]")
    return [] if is_loopback_name(name) or name in ("", "0.0.0.0", "::") else [name]


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix serve ID``: the env over OpenEnv's HTTP/WebSocket protocol (openenv extra)."""
    if missing_modules("openenv"):
        print(f"budgetmix serve: needs the openenv extra: {pip_extra('openenv')}", file=sys.stderr)
        return 2
    from budget_envs.service.server import serve

    kwargs: dict[str, Any] = {
        "visibility": args.visibility,
        "env_kwargs": args.env_kwargs,
        "max_sessions": args.max_sessions,
        "idle_timeout": args.idle_timeout if args.idle_timeout > 0 else None,
        "max_message_bytes": args.max_message_bytes,
        "info_delta": not args.full_info,
        "allow_hosts": _bound_name(args.host) + args.allow_host,
        "allow_origins": args.allow_origin,
    }
    if args.budget is not None:
        budget = args.budget.strip()
        kwargs["budget"] = None if budget == "none" else int(budget) if budget.isdigit() else budget
    if args.faults:
        kwargs["faults"] = parse_faults(args.faults)
    print(
        f"serving {args.env_id} on http://{args.host}:{args.port} (WebSocket /ws, "
        f"{args.max_sessions} sessions); Ctrl-C stops",
        file=out,
        flush=True,
    )
    serve(args.env_id, host=args.host, port=args.port, **kwargs)
    return 0
