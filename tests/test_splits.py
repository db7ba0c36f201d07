"""Held-out splits: ``split="train" | "valid" | "test"`` on every family, disjoint by content."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from budget_envs.registry import registered_ids
from contract_helpers import make

# The BudgetMix families (the test-only toy env registered by conftest has a single task list).
IDS = [i for i in registered_ids() if i.startswith("BudgetMix/")]
SPLITS = ("train", "valid", "test")


def _tasks(env_id, split):
    env = make(env_id, budget=None, split=split, tasks_per_level=2)
    inner = env.unwrapped
    ids = list(inner.task_ids)
    identities = {inner.task_identity(t): t for t in ids}
    env.close()
    return ids, identities


# What a task *is*, read from the task itself with no seed and no id in it. ToolUse's and
# WebShop's task identities lead with the split's world or catalogue seed, which differs by
# construction, so comparing identities alone could never find two splits sharing a task.
_HEX_ID = re.compile(r"\b(?:cus|ord|itm|pay|prd|cur)_[0-9a-f]{8}\b")


def _tooluse_content(inner, task_id):
    """The ticket's requests (ids replaced by what they name) and, per request, the customer
    and the order it is about: name, email, city, day, status and the items' products."""
    from budget_envs.envs.tooluse.tasks import make_task

    world = inner.world
    task = make_task(world, task_id)
    lines = task.ticket.split("\n")
    requests_text = tuple(_HEX_ID.sub("<id>", ln) for ln in lines if re.match(r"\d+\. ", ln))
    orders = []
    customers = set()
    for op in task.ops:
        order = world.orders[op.order_id]
        who = world.customers[order.customer_id]
        customers.add((who.name, who.email, who.city))
        items = tuple(
            (p.name, p.color, p.size, world.items[i].qty)
            for i in order.items
            for p in [world.products[world.items[i].product_id]]
        )
        orders.append((op.kind, order.day, order.status, order.method, items))
    return {
        "task": (requests_text, tuple(orders), tuple(sorted(customers))),
        "customers": customers,
        "products": set(),
    }


def _webshop_content(inner, task_id):
    """The instruction and every goal product: its title, attributes, the options asked for
    and the price bound."""
    inner.task_identity(task_id)  # fetches the task from the server
    task = inner._tasks[task_id]
    goals = tuple(
        (it.name, tuple(sorted(it.attributes)), tuple(sorted(it.goal_options.items())))
        for it in task.items
    )
    return {
        "task": (task.instruction, goals),
        "customers": set(),
        "products": {it.name for it in task.items},
    }


def _contents(env_id, split):
    """Per task of ``split``: its content (above for ToolUse and WebShop; for the text games
    the identity, which is already the game's content: its world, objects and goal)."""
    env = make(env_id, budget=None, split=split, tasks_per_level=2)
    inner = env.unwrapped
    family = {"ToolUseEnv": _tooluse_content, "WebShopEnv": _webshop_content}.get(
        type(inner).__name__
    )
    out = {}
    for t in inner.task_ids:
        if family is None:
            out[t] = {"task": inner.task_identity(t), "customers": set(), "products": set()}
        else:
            out[t] = family(inner, t)
    env.close()
    return out


def _shared_content(a, b):
    """Tasks, customers and goal products that two splits' contents have in common."""
    shared = {}
    for part in ("task", "customers", "products"):
        if part == "task":
            left, right = {c["task"] for c in a.values()}, {c["task"] for c in b.values()}
        else:
            left = set().union(*(c[part] for c in a.values()))
            right = set().union(*(c[part] for c in b.values()))
        if left & right:
            shared[part] = sorted(map(str, left & right))[:3]
    return shared


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_splits_are_non_empty_and_disjoint_by_id_and_by_content(env_id):
    found = {split: _tasks(env_id, split) for split in SPLITS}
    for split, (ids, identities) in found.items():
        assert ids, split
        # Within a split every task is its own task too.
        assert len(identities) == len(ids), split
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            assert not set(found[a][0]) & set(found[b][0]), (a, b)
            shared = set(found[a][1]) & set(found[b][1])
            assert not shared, (a, b, [found[a][1][k] for k in shared])


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_splits_share_no_task_customer_or_goal_product_by_content(env_id):
    contents = {split: _contents(env_id, split) for split in SPLITS}
    for split, found in contents.items():
        assert found, split
        # Within a split the contents tell every task apart, and the comparison finds what a
        # split shares with itself (it has teeth).
        assert len({c["task"] for c in found.values()}) == len(found), split
        assert "task" in _shared_content(found, found), split
    if env_id == "BudgetMix/ToolUse-v0":
        assert all(c["customers"] for found in contents.values() for c in found.values())
    if env_id == "BudgetMix/WebShop-v0":
        assert all(c["products"] for found in contents.values() for c in found.values())
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            assert not _shared_content(contents[a], contents[b]), (a, b)


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_train_split_is_the_default_task_list(env_id):
    default = make(env_id, budget=None, tasks_per_level=2)
    train = make(env_id, budget=None, tasks_per_level=2, split="train")
    assert list(default.unwrapped.task_ids) == list(train.unwrapped.task_ids)
    default.close()
    train.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_a_held_out_task_plays(env_id):
    env = make(env_id, budget=5, split="test", tasks_per_level=1)
    first = env.unwrapped.task_ids[0]
    obs, info = env.reset(seed=0, options={"task_id": first})
    assert info["task_id"] == first
    assert info["goal"]
    obs, reward, terminated, truncated, info = env.step("")
    assert info["invalid_action"]
    env.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_an_unknown_split_is_a_typed_error_quoting_it(env_id):
    with pytest.raises(ValueError, match="'holdout'"):
        make(env_id, budget=None, split="holdout")


def _in_two_processes(code):
    """``code``'s output in two fresh processes with different hash seeds."""
    out = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        out.append(run.stdout)
    return out


def test_held_out_ids_are_the_same_in_a_fresh_process():
    code = (
        "import warnings, gymnasium as gym, budget_envs\n"
        "warnings.simplefilter('ignore')\n"
        "e = gym.make('BudgetMix/ToolUse-v0', budget=None, split='test', tasks_per_level=2)\n"
        "t = e.unwrapped.task_ids[0]\n"
        "print(t, e.unwrapped.world_seed, e.unwrapped.task_identity(t)[2:])\n"
    )
    out = _in_two_processes(code)
    assert out[0].startswith("test/L1-") and out[0] == out[1]


def test_alfworld_accepts_the_common_split_names():
    common = make("BudgetMix/ALFWorld-v0", budget=None, split="test", tasks_per_level=1)
    own = make("BudgetMix/ALFWorld-v0", budget=None, split="valid_unseen", tasks_per_level=1)
    assert common.unwrapped.split == "valid_unseen"
    assert list(common.unwrapped.task_ids) == list(own.unwrapped.task_ids)
    valid = make("BudgetMix/ALFWorld-v0", budget=None, split="valid", tasks_per_level=1)
    assert valid.unwrapped.split == "valid_seen"


# ---------------------------------------------------------------------- test_unseen
UNSEEN_IDS = ("BudgetMix/WebShop-v0", "BudgetMix/ToolUse-v0")


@pytest.mark.parametrize("env_id", UNSEEN_IDS, ids=UNSEEN_IDS)
def test_test_unseen_is_non_empty_and_disjoint_from_every_split(env_id):
    found = {split: _tasks(env_id, split) for split in (*SPLITS, "test_unseen")}
    ids, identities = found["test_unseen"]
    assert ids and all(t.startswith("test_unseen/") for t in ids)
    assert len(identities) == len(ids)
    for split in SPLITS:
        assert not set(ids) & set(found[split][0]), split
        assert not set(identities) & set(found[split][1]), split
    contents = {split: _contents(env_id, split) for split in (*SPLITS, "test_unseen")}
    assert len({c["task"] for c in contents["test_unseen"].values()}) == len(ids)
    for split in SPLITS:
        assert not _shared_content(contents["test_unseen"], contents[split]), split


@pytest.mark.parametrize("env_id", [i for i in IDS if i not in UNSEEN_IDS])
def test_families_without_test_unseen_refuse_it_naming_their_splits(env_id):
    from budget_envs.errors import UnknownSplit

    with pytest.raises(UnknownSplit, match="'test_unseen'") as caught:
        make(env_id, budget=None, split="test_unseen")
    assert "'train'" in str(caught.value) and "test_unseen split" in str(caught.value)


def _webshop_goal_types(split, tasks_per_level):
    env = make("BudgetMix/WebShop-v0", budget=None, split=split, tasks_per_level=tasks_per_level)
    inner = env.unwrapped
    goals, categories = set(), set()
    for task_id in inner.task_ids:
        inner.task_identity(task_id)  # fetches the task from the server
        for item in inner._tasks[task_id].items:
            goals.add(item.query)
            categories.add(item.product_category.split(" \u203a ")[0])
    env.close()
    return goals, categories


def test_webshop_test_unseen_goals_are_product_types_train_never_has():
    from budget_envs.envs.webshop.shop import get_shop

    unseen_goals, unseen_categories = _webshop_goal_types("test_unseen", 4)
    train_goals, train_categories = _webshop_goal_types("train", 4)
    assert unseen_goals and train_goals
    assert not unseen_goals & train_goals
    assert not unseen_categories & train_categories
    # Not only the goals: no product of the train catalogue is of a held-out type or category.
    env = make("BudgetMix/WebShop-v0", budget=None)
    train_shop = get_shop(env.unwrapped.catalogue_seed, env.unwrapped.num_products)
    env.close()
    catalogue_types = {p.spec.noun for p in train_shop.products}
    catalogue_categories = {p.spec.path[0] for p in train_shop.products}
    assert not unseen_goals & catalogue_types
    assert not unseen_categories & catalogue_categories
    # The ticket text names the held-out type; no train instruction does.
    env = make("BudgetMix/WebShop-v0", budget=None, split="test_unseen", tasks_per_level=1)
    obs, info = env.reset(seed=0, options={"task_id": 0})
    assert any(noun in info["goal"] for noun in unseen_goals)
    env.close()


def test_webshop_test_unseen_plays_to_a_win_with_the_oracle():
    env = make("BudgetMix/WebShop-v0", budget=40, split="test_unseen", level=2, tasks_per_level=1)
    obs, info = env.reset(seed=0, options={"task_id": 0})
    terminated = truncated = False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
    assert info["won"] and reward == 1.0
    env.close()


def _template_patterns(words):
    import re

    out = {}
    for name, text in words.items():
        if name == "when":
            continue
        parts = re.split(r"\{[a-z_]+\}", text)
        out[name] = re.compile(".+".join(re.escape(p) for p in parts))
    return out


def _ticket_lines(split, tasks_per_level):
    """The worded lines of every ticket: the requests and the lines introducing them (the
    ticket id and the policy, shared by every split, are left out)."""
    env = make("BudgetMix/ToolUse-v0", budget=None, split=split, tasks_per_level=tasks_per_level)
    lines, kinds = [], set()
    for task_id in env.unwrapped.task_ids:
        env.reset(seed=0, options={"task_id": task_id})
        task = env.unwrapped.task
        kinds.update(op.kind for op in task.ops)
        first, *rest = task.ticket.split("\n")[:-1]
        head = first.removeprefix(f"Support ticket {task_id}.").strip()
        lines += [head, *rest] if head else rest
    env.close()
    return lines, kinds


def test_tooluse_test_unseen_uses_only_templates_train_never_uses():
    from budget_envs.envs.tooluse.tasks import TEMPLATES

    seen = _template_patterns(TEMPLATES["seen"])
    unseen = _template_patterns(TEMPLATES["unseen"])
    train_lines, train_kinds = _ticket_lines("train", 30)
    unseen_lines, unseen_kinds = _ticket_lines("test_unseen", 30)
    assert train_lines and unseen_lines

    def used(lines, patterns):
        return {name for ln in lines for name, pat in patterns.items() if pat.search(ln)}

    # Every ticket line is worded by its own split's templates, never by the other split's.
    for ln in train_lines:
        assert any(p.search(ln) for p in seen.values()), ln
        assert not any(p.search(ln) for p in unseen.values()), ln
    for ln in unseen_lines:
        assert any(p.search(ln) for p in unseen.values()), ln
        assert not any(p.search(ln) for p in seen.values()), ln
    # Both sets are exercised, and the swap request type exists only in test_unseen.
    assert {"header", "cancel", "address", "note", "return"} <= used(train_lines, seen)
    assert {"header", "note", "return", "swap"} <= used(unseen_lines, unseen)
    assert "swap" in unseen_kinds and "swap" not in train_kinds


def test_tooluse_test_unseen_swaps_play_to_a_win_with_the_oracle():
    env = make("BudgetMix/ToolUse-v0", budget=80, split="test_unseen", tasks_per_level=20)
    swaps = [
        t
        for t in env.unwrapped.task_ids
        if env.reset(seed=0, options={"task_id": t})
        and any(op.kind == "swap" for op in env.unwrapped.task.ops)
    ]
    assert swaps
    for task_id in swaps[:5]:
        obs, info = env.reset(seed=0, options={"task_id": task_id})
        terminated = truncated = False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
        assert info["won"], task_id
    env.close()


def test_test_unseen_ids_and_tasks_are_the_same_in_a_fresh_process():
    code = (
        "import warnings, gymnasium as gym, budget_envs\n"
        "warnings.simplefilter('ignore')\n"
        "e = gym.make('BudgetMix/ToolUse-v0', budget=None, split='test_unseen', "
        "tasks_per_level=2)\n"
        "t = e.unwrapped.task_ids[3]\n"
        "e.reset(options={'task_id': t})\n"
        "print(t, e.unwrapped.world_seed, e.unwrapped.task.ticket)\n"
    )
    out = _in_two_processes(code)
    assert out[0].startswith("test_unseen/L") and out[0] == out[1]


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
@pytest.mark.parametrize("split", SPLITS)
def test_eval_selects_tasks_of_every_split(env_id, split):
    # `budgetmix eval --tasks N` stratifies by task_level: every id of every split must have one.
    from budget_envs.eval.runner.plan import select_tasks

    ids, _ = _tasks(env_id, split)
    env = make(env_id, budget=None, split=split, tasks_per_level=2)
    levels = [env.unwrapped.task_level(t) for t in ids]
    env.close()
    assert len(levels) == len(ids)
    chosen = [t for _, t in select_tasks(env_id, 2, {"split": split, "tasks_per_level": 2}).tasks]
    assert len(chosen) == 2 and set(chosen) <= set(ids)
