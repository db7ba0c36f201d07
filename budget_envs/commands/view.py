"""``budgetmix view``: a run's episodes as a self-contained web page, optionally served."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from budget_envs.errors import OutDirError, UsageError

__all__ = ["add_view_parser", "cmd_view"]


def add_view_parser(sub: Any) -> None:
    """The ``view`` subcommand's arguments."""
    v = sub.add_parser("view", help="a web page to browse a run's episodes (self-contained)")
    v.add_argument("run", metavar="RUN")
    v.add_argument("--out", default=None, help="default RUN/view")
    v.add_argument("--serve", action="store_true", help="then serve it on loopback until Ctrl-C")
    v.add_argument("--port", type=int, default=8765, help="with --serve (default 8765)")


def cmd_view(args: argparse.Namespace, out: TextIO) -> int:
    import json

    from budget_envs.eval.runner import load_records
    from budget_envs.eval.view import serve_view, write_view

    records = load_records(args.run)
    if not records:
        print(f"budgetmix view: no records in {args.run}", file=sys.stderr)
        return 2
    transcripts = []
    path = Path(args.run) / "transcripts.jsonl"
    if path.is_file():
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    transcripts.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by a killed run: its episode shows no observations
    folder = Path(args.out) if args.out else Path(args.run) / "view"
    try:
        result = write_view(records, folder, transcripts=transcripts, title=f"{args.run}")
    except OutDirError as exc:
        raise UsageError(str(exc)) from None
    print(
        f"Wrote {result.index} ({result.episodes} episodes, {len(result.files)} files, "
        f"{result.size / 1e6:.1f} MB); open it in a browser"
        + ("" if transcripts else " (observations: eval with --save-transcripts)"),
        file=out,
    )
    if not args.serve:
        return 0
    try:
        server = serve_view(folder, port=args.port)
    except OSError as exc:
        raise UsageError(f"cannot serve on 127.0.0.1:{args.port}: {exc}") from None
    print(f"Serving http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", file=out)
    out.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0
