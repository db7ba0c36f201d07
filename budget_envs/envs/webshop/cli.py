"""Command-line entries of the web shop: ``serve-web`` and ``export-webshop``.

The ``budgetmix`` CLI calls :func:`serve_main` and :func:`export_main` with its remaining
arguments; both print, as the CLI owns the terminal.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Sequence

from budget_envs.hostcheck import add_host_policy_args

__all__ = ["export_main", "serve_main"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``serve-web --port P [--host H] [--seed S] [--products N] [--unseen-types]``: serve the
    shop until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="budgetmix serve-web",
        description="Serve the BudgetMix web shop (HTML for people, JSON API for envs).",
    )
    parser.add_argument("--port", type=int, default=3000, help="TCP port (0 = any free port)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default: loopback only)"
    )
    parser.add_argument("--seed", type=int, default=0, help="catalogue seed")
    parser.add_argument("--products", type=int, default=10_000, help="catalogue size")
    parser.add_argument(
        "--unseen-types",
        action="store_true",
        help="add the held-out product types (the catalogue of split='test_unseen'; its seed is "
        "the env's catalogue_seed for that split)",
    )
    add_host_policy_args(parser)
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in 0..65535, got {args.port}")
    if args.products < 1000:
        parser.error(f"--products must be at least 1000, got {args.products}")
    from budget_envs.envs.webshop.app import WebShopApp
    from budget_envs.envs.webshop.server import make_server
    from budget_envs.envs.webshop.shop import get_shop
    from budget_envs.hostcheck import HostPolicy

    if not _is_loopback(args.host):
        print(
            f"warning: listening on {args.host}, reachable from other machines; the shop has "
            "no authentication",
            file=sys.stderr,
        )
    shop = get_shop(args.seed, args.products, args.unseen_types)
    bound = [] if _is_loopback(args.host) or args.host in ("0.0.0.0", "::") else [args.host]
    policy = HostPolicy(bound + args.allow_host, args.allow_origin)
    httpd = make_server(WebShopApp(shop), args.host, args.port, host_policy=policy)
    host, port = httpd.server_address[:2]
    print(
        f"web shop (seed {args.seed}, {len(shop.products)} products) at http://{host}:{port}",
        flush=True,
    )
    print(
        f"  envs: gym.make('BudgetMix/WebShop-v0', base_url='http://{host}:{port}', "
        f"catalogue_seed={args.seed})",
        flush=True,
    )
    if args.unseen_types:
        print(
            "  (the catalogue of split='test_unseen': the env is made with that split and the "
            "train catalogue_seed this seed was derived from)",
            flush=True,
        )
    try:
        httpd.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        httpd.server_close()
        httpd.close_connections()
    return 0


def export_main(argv: Sequence[str] | None = None) -> int:
    """``export-webshop OUT_DIR [--seed S] [--levels 1 2 3] [--tasks-per-level N]``."""
    parser = argparse.ArgumentParser(
        prog="budgetmix export-webshop",
        description="Write a generated catalogue and its goals in WebShop's data-file formats.",
    )
    parser.add_argument("out_dir", help="directory to write the JSON files to")
    parser.add_argument("--seed", type=int, default=0, help="catalogue seed")
    parser.add_argument("--products", type=int, default=10_000, help="catalogue size")
    parser.add_argument(
        "--levels",
        type=int,
        nargs="+",
        default=[1, 2, 3],
        help="one-item levels to export goals from (1-3)",
    )
    parser.add_argument("--tasks-per-level", type=int, default=100)
    args = parser.parse_args(argv)
    if any(lv not in (1, 2, 3) for lv in args.levels):
        parser.error(f"--levels must be among 1 2 3 (one-item tasks), got {args.levels}")
    if args.tasks_per_level < 1:
        parser.error(f"--tasks-per-level must be positive, got {args.tasks_per_level}")
    from budget_envs.envs.webshop.export import export_webshop
    from budget_envs.envs.webshop.shop import get_shop

    shop = get_shop(args.seed, args.products)
    ids = [f"L{lv}-{i:04d}" for lv in args.levels for i in range(args.tasks_per_level)]
    for path in export_webshop(shop, args.out_dir, ids):
        print(f"wrote {path}")
    return 0
