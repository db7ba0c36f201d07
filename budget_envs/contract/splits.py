"""The checks of held-out splits: ``split=`` taken, refused when unknown, disjoint, playable.

Rules of the section ``rules-splits`` of docs/extending.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from budget_envs.core import TextAgentEnv

from .checker import _Checker, _need


def _split_envs(ck: _Checker, build: Callable) -> dict[str, TextAgentEnv] | None:
    """One env per split, or None (with the advisory warning) when ``split=`` is not taken."""
    envs: dict[str, TextAgentEnv] = {}
    with ck.rule("splits.accepted"):
        try:
            envs["valid"] = build(split="valid")
        except TypeError as exc:
            if "split" not in str(exc):
                raise
            _need(False, f"the constructor takes no split= ({exc}): no held-out tasks")
    if not envs:
        ck.not_run.append("splits.*: the family takes no split=")
        return None
    envs["train"], envs["test"] = build(split="train"), build(split="test")
    return envs


def _check_splits(ck: _Checker, env: TextAgentEnv, build: Callable, own_split: bool) -> None:
    envs = _split_envs(ck, build)
    if envs is None:
        return
    try:
        with ck.rule("splits.unknown"):
            try:
                build(split="holdout").close()
            except ValueError as exc:
                _need("'holdout'" in str(exc), f"the refusal does not quote the split: {exc}")
            else:
                _need(False, "split='holdout' was accepted: refuse it with check_split()")
        with ck.rule("hooks.task_identity"):
            have = type(env).task_identity is not TextAgentEnv.task_identity
            _need(have, "the family takes split= but task_identity(task_id) -> tuple is missing")
        with ck.rule("splits.ids_disjoint"):
            ids = {name: list(e.task_ids) for name, e in envs.items()}
            _need(all(ids.values()), f"a split has no task: {[n for n, v in ids.items() if not v]}")
            if not own_split:
                _need(ids["train"] == list(env.task_ids), "split='train' is not the default list")
            _disjoint(ids, "task ids")
        with ck.rule("splits.content_disjoint"):
            found = {n: [e.task_identity(t) for t in ids[n]] for n, e in envs.items()}
            for name, identities in found.items():
                _need(len(set(identities)) == len(identities), f"split {name} repeats a task")
            _disjoint(found, "task identities (the same task under other ids)")
        with ck.rule("splits.plays"):
            held = envs["test"]
            _, info = held.reset(seed=0, options={"task_id": ids["test"][0]})
            _need(info["task_id"] == ids["test"][0] and info["goal"], "a test task has no goal")
            _need(held.step("")[4]["invalid_action"], "an empty action is valid on a test task")
    finally:
        for e in envs.values():
            e.close()


def _disjoint(per_split: Mapping[str, list], what: str) -> None:
    names = sorted(per_split)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = set(per_split[a]) & set(per_split[b])
            _need(not shared, f"splits {a} and {b} share {what}: {sorted(map(str, shared))[:2]}")
