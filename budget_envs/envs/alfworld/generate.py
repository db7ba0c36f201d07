"""Seeded generator of ALFWorld tasks written in the real dataset layout.

Every task is a pure function of ``(split, index)``: a scene (room type, receptacles, locations) drawn
from the scene number, objects placed by ALFRED's containment table, and a goal of one of the six
task types. :func:`write_task` writes ``json_2.1.1/<split>/<task folder>/<trial>/`` with
``traj_data.json`` and ``game.tw-pddl`` (domain and grammar from the alfworld package, the goal
sentence inserted), i.e. exactly what alfworld's own loader reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from dataclasses import dataclass
from functools import cache, lru_cache

from budget_envs.envs.alfworld import _deps

__all__ = [
    "SPLITS",
    "TASK_TYPES",
    "DEFAULT_TASKS",
    "TaskSpec",
    "task_specs",
    "select_specs",
    "build_spec",
    "write_task",
    "GENERATOR_VERSION",
]

GENERATOR_VERSION = "g1"
SPLITS = ("train", "valid_seen", "valid_unseen")
DEFAULT_TASKS = {"train": 600, "valid_seen": 240, "valid_unseen": 240}
TASK_TYPES = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}
_SPLIT_CODE = {"train": 1, "valid_seen": 2, "valid_unseen": 3}
_SEED_BASE = 20_260_611

# Receptacle palettes per room type: (class, min, max). Scenes fill up to their size from these.
_ROOMS: dict[str, tuple[tuple[str, int, int], ...]] = {
    "Kitchen": (
        ("Cabinet", 2, 18),
        ("Drawer", 1, 12),
        ("CounterTop", 1, 3),
        ("Fridge", 1, 1),
        ("Microwave", 1, 1),
        ("SinkBasin", 1, 1),
        ("StoveBurner", 2, 4),
        ("CoffeeMachine", 1, 1),
        ("Toaster", 0, 1),
        ("GarbageCan", 1, 1),
        ("DiningTable", 0, 2),
        ("Shelf", 0, 4),
        ("SideTable", 0, 1),
    ),
    "LivingRoom": (
        ("Sofa", 1, 1),
        ("ArmChair", 0, 2),
        ("CoffeeTable", 1, 2),
        ("SideTable", 1, 3),
        ("TVStand", 0, 1),
        ("Drawer", 1, 14),
        ("Shelf", 0, 10),
        ("Cabinet", 0, 10),
        ("GarbageCan", 1, 1),
        ("Dresser", 0, 1),
        ("DiningTable", 0, 1),
        ("Ottoman", 0, 1),
        ("Safe", 0, 1),
    ),
    "Bedroom": (
        ("Bed", 1, 1),
        ("Desk", 0, 1),
        ("Drawer", 2, 16),
        ("Shelf", 0, 12),
        ("SideTable", 1, 2),
        ("Dresser", 0, 1),
        ("GarbageCan", 1, 1),
        ("LaundryHamper", 0, 1),
        ("Safe", 0, 1),
        ("ArmChair", 0, 1),
        ("Cabinet", 0, 8),
    ),
    "Bathroom": (
        ("Toilet", 1, 1),
        ("SinkBasin", 1, 2),
        ("BathtubBasin", 0, 1),
        ("CounterTop", 1, 1),
        ("Cabinet", 1, 14),
        ("Drawer", 0, 14),
        ("TowelHolder", 0, 2),
        ("HandTowelHolder", 0, 2),
        ("ToiletPaperHanger", 1, 1),
        ("GarbageCan", 1, 1),
        ("Shelf", 0, 8),
        ("Dresser", 0, 1),
    ),
}
# ALFRED scene numbers per room type; the unseen split uses only the held-out scenes.
_SCENES = {
    "Kitchen": tuple(range(1, 31)),
    "LivingRoom": tuple(range(201, 231)),
    "Bedroom": tuple(range(301, 331)),
    "Bathroom": tuple(range(401, 431)),
}
_UNSEEN = frozenset({10, 19, 27, 219, 224, 308, 315, 424, 429})
_TASK_ROOMS = {
    "pick_and_place_simple": ("Kitchen", "LivingRoom", "Bedroom", "Bathroom"),
    "look_at_obj_in_light": ("LivingRoom", "Bedroom"),
    "pick_clean_then_place_in_recep": ("Kitchen", "Bathroom"),
    "pick_heat_then_place_in_recep": ("Kitchen",),
    "pick_cool_then_place_in_recep": ("Kitchen",),
    "pick_two_obj_and_place": ("Kitchen", "LivingRoom", "Bedroom", "Bathroom"),
}
_LAMP_HOLDERS = ("SideTable", "Desk", "Dresser")
_OPENABLE = ("Fridge", "Cabinet", "Microwave", "Drawer", "Safe", "Box")
_NOT_PICKUPABLE = frozenset({"DeskLamp", "FloorLamp"})


@dataclass(frozen=True)
class TaskSpec:
    """Everything that defines one generated task (the game file is a pure function of it)."""

    split: str
    index: int
    task_type: str
    scene: int
    room: str
    object_target: str
    parent_target: str
    toggle_target: str
    trial: str
    receptacles: tuple = ()  # ((class, mangled id, mangled location), ...)
    objects: tuple = ()  # ((class, mangled id, receptacle id), ...)
    agent_location: str = ""
    goal: str = ""
    seed: int = 0

    @property
    def folder(self) -> str:
        recep = (
            self.toggle_target if self.task_type == "look_at_obj_in_light" else self.parent_target
        )
        return f"{self.task_type}-{self.object_target}-None-{recep}-{self.scene}"

    @property
    def task_id(self) -> str:
        return f"{self.split}/{self.folder}/{self.trial}"

    @property
    def n_receptacles(self) -> int:
        return len(self.receptacles)


def mangle(text: str) -> str:
    """ALFRED id -> PDDL name (the inverse of alfworld's demangler)."""
    for a, b in (
        ("-", "_minus_"),
        ("|", "_bar_"),
        ("+", "_plus_"),
        (".", "_dot_"),
        (",", "_comma_"),
    ):
        text = text.replace(a, b)
    return text


def _rng(*key: int) -> random.Random:
    """A local generator seeded from ``key`` (never the global ``random`` state)."""
    digest = hashlib.sha256(repr((_SEED_BASE,) + key).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _coord(rng: random.Random) -> str:
    return f"{rng.uniform(-4.0, 4.0):+06.2f}"


@lru_cache(maxsize=1)
def _tables() -> dict:
    """ALFRED's containment and affordance tables, as sorted tuples (hash-seed independent)."""
    c = _deps.constants()
    contain = {
        r: frozenset(o for o in objs if "Sliced" not in o)
        for r, objs in c.VAL_RECEPTACLE_OBJECTS.items()
    }
    action = {k: frozenset(v) for k, v in c.VAL_ACTION_OBJECTS.items()}
    all_otypes = tuple(sorted(set(c.OBJECTS) - set(c.RECEPTACLES) | set(c.MOVABLE_RECEPTACLES)))
    all_rtypes = tuple(sorted(set(c.RECEPTACLES) - set(c.MOVABLE_RECEPTACLES)))
    return {
        "contain": contain,
        "action": action,
        "movable": frozenset(c.MOVABLE_RECEPTACLES),
        "otypes": tuple(sorted(set(all_otypes) | {"Knife", "ButterKnife"})),
        "rtypes": tuple(sorted(set(all_rtypes) | {"SinkBasin", "BathtubBasin"})),
    }


@cache
def _scene_layout(scene: int, room: str) -> tuple[tuple[str, str, str], ...]:
    """Receptacles of a scene: ((class, mangled id, mangled location), ...), fixed per scene."""
    rng = _rng(7, scene)
    palette = _ROOMS[room]
    size = int(rng.randrange(10, 46))
    counts = {cls: int(rng.randrange(lo, hi + 1)) if lo < hi else lo for cls, lo, hi in palette}
    for cls, lo, _ in palette:  # respect minima first, then fill/trim towards the size
        counts[cls] = max(counts[cls], lo)
    lows = {cls: lo for cls, lo, _ in palette}
    highs = {cls: hi for cls, _, hi in palette}
    growable = [cls for cls, _, hi in palette if hi > 1]
    while sum(counts.values()) < size and any(counts[c] < highs[c] for c in growable):
        cls = growable[int(rng.randrange(len(growable)))]
        if counts[cls] < highs[cls]:
            counts[cls] += 1
    while sum(counts.values()) > size:
        cls = growable[int(rng.randrange(len(growable)))]
        if counts[cls] > lows[cls]:
            counts[cls] -= 1
    out = []
    used_locs = set()
    for cls, _, _ in palette:
        for _ in range(counts[cls]):
            x, y, z = _coord(rng), _coord(rng), _coord(rng)
            if cls in ("SinkBasin", "BathtubBasin"):
                base = cls[: -len("Basin")]
                rid = f"{base}|{x}|{y}|{z}|{cls}"
            else:
                rid = f"{cls}|{x}|{y}|{z}"
            while True:
                loc = (
                    int(rng.randrange(-12, 13)),
                    int(rng.randrange(-12, 13)),
                    int(rng.randrange(0, 4)),
                    rng.choice((0, 15, 30, 45, 60)),
                )
                if loc not in used_locs:
                    used_locs.add(loc)
                    break
            out.append((cls, mangle(rid), mangle("loc|%d|%d|%d|%d" % loc)))
    return tuple(out)


def _scenes_for(split: str, room: str) -> tuple[int, ...]:
    scenes = _SCENES[room]
    if split == "valid_unseen":
        return tuple(s for s in scenes if s in _UNSEEN)
    return tuple(s for s in scenes if s not in _UNSEEN)


@cache
def _room_objects(rclasses: tuple) -> list:
    contain = _tables()["contain"]
    return sorted({o for r in rclasses for o in contain.get(r, ())} - _NOT_PICKUPABLE)


def build_spec(split: str, index: int) -> TaskSpec | None:
    """The task ``index`` of ``split``, or None when this draw cannot host its task type."""
    if split not in _SPLIT_CODE:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    tables = _tables()
    contain, action = tables["contain"], tables["action"]
    rng = _rng(_SPLIT_CODE[split], index)
    task_type = TASK_TYPES[1 + index % 6]
    rooms = _TASK_ROOMS[task_type]
    room = rooms[int(rng.randrange(len(rooms)))]
    scenes = _scenes_for(split, room)
    scene = scenes[int(rng.randrange(len(scenes)))]
    receps = _scene_layout(scene, room)
    rclasses = sorted({cls for cls, _, _ in receps})
    room_objects = _room_objects(tuple(rclasses))
    goal_targets = _choose_goal(rng, task_type, rclasses, room_objects, contain, action)
    if goal_targets is None:
        return None
    obj, parent, toggle = goal_targets
    objects = _place_objects(rng, task_type, receps, room_objects, contain, obj, parent, toggle)
    loc = _start_location(rng, receps)
    templates = _deps.goal_library().gdict[task_type]["templates"]
    template = templates[int(rng.randrange(len(templates)))]
    goal = template.format(obj=obj.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
    digest = hashlib.sha256(repr((split, index, objects)).encode()).hexdigest()[:6]
    trial = f"trial_T2026{_SPLIT_CODE[split]}{index:05d}_{digest}"
    return TaskSpec(
        split=split,
        index=index,
        task_type=task_type,
        scene=scene,
        room=room,
        object_target=obj,
        parent_target=parent,
        toggle_target=toggle,
        trial=trial,
        receptacles=receps,
        objects=tuple(objects),
        agent_location=loc,
        goal=goal,
        seed=rng.randrange(2**31),
    )


def _choose_goal(
    rng: random.Random,
    task_type: str,
    rclasses: list[str],
    room_objects: list,
    contain: dict,
    action: dict,
) -> tuple[str, str, str] | None:
    """The goal's (object, parent receptacle, lamp to toggle), or None when the room cannot
    host the task type."""
    toggle = ""
    if task_type == "look_at_obj_in_light":
        holders = [r for r in rclasses if r in _LAMP_HOLDERS]
        if not holders:
            return None
        toggle = ("DeskLamp", "FloorLamp")[int(rng.randrange(2))]
        cands = room_objects
    else:
        need = {
            "pick_clean_then_place_in_recep": "Cleanable",
            "pick_heat_then_place_in_recep": "Heatable",
            "pick_cool_then_place_in_recep": "Coolable",
        }.get(task_type)
        cands = [o for o in room_objects if need is None or o in action[need]]
    pairs = []
    for o in cands:
        if task_type == "look_at_obj_in_light":
            pairs.append((o, ""))
            continue
        holders_o = [r for r in rclasses if o in contain.get(r, ())]
        if len(holders_o) >= 2:
            pairs.extend((o, r) for r in holders_o)
    if not pairs:
        return None
    obj, parent = pairs[int(rng.randrange(len(pairs)))]
    return obj, parent, toggle


def _place_objects(
    rng: random.Random,
    task_type: str,
    receps: tuple[tuple[str, str, str], ...],
    room_objects: list,
    contain: dict,
    obj: str,
    parent: str,
    toggle: str,
) -> list[tuple[str, str, str]]:
    """Objects placed as (class, mangled id, receptacle id): a few per receptacle, never the
    target class inside a target-type receptacle; then the targets and the lamp."""
    objects: list[tuple[str, str, str]] = []
    counter: dict[str, int] = {}

    def add(cls: str, recep_id: str) -> None:
        counter[cls] = counter.get(cls, 0) + 1
        oid = f"{cls}|{_coord(rng)}|{_coord(rng)}|{_coord(rng)}"
        objects.append((cls, mangle(oid), recep_id))

    for cls, rid, _ in receps:
        fits = [o for o in room_objects if o != obj and o in contain.get(cls, ())]
        if not fits:
            continue
        for _ in range(rng.choice((0, 0, 0, 1, 1, 1, 2))):
            add(fits[int(rng.randrange(len(fits)))], rid)
    hosts = [rid for cls, rid, _ in receps if obj in contain.get(cls, ()) and cls != parent]
    n_target = (
        int(rng.randrange(2, 4))
        if task_type == "pick_two_obj_and_place"
        else int(rng.randrange(1, 3))
    )
    for _ in range(n_target):
        add(obj, hosts[int(rng.randrange(len(hosts)))])
    if toggle:
        holders = [rid for cls, rid, _ in receps if cls in _LAMP_HOLDERS]
        add(toggle, holders[int(rng.randrange(len(holders)))])
    return objects


def _start_location(rng: random.Random, receps: tuple[tuple[str, str, str], ...]) -> str:
    """Where the agent starts: somewhere without a receptacle (else the intro changes and the
    expert fails)."""
    used = {loc for _, _, loc in receps}
    while True:
        loc = mangle(
            "loc|%d|%d|%d|%d"
            % (
                int(rng.randrange(-12, 13)),
                int(rng.randrange(-12, 13)),
                int(rng.randrange(0, 4)),
                30,
            )
        )
        if loc not in used:
            return loc


@lru_cache(maxsize=8)
def task_specs(split: str, n: int) -> tuple[TaskSpec, ...]:
    """The first ``n`` tasks of ``split``, small scenes first (index order within a size)."""
    specs = []
    index = 0
    while len(specs) < n:
        spec = build_spec(split, index)
        index += 1
        if spec is not None:
            specs.append(spec)
        if index > 20 * n + 100:
            raise RuntimeError(f"the generator could not build {n} tasks for split {split!r}")
    return tuple(sorted(specs, key=lambda s: (s.n_receptacles, s.index)))


@lru_cache(maxsize=64)
def select_specs(
    split: str,
    task_types: tuple[str, ...],
    tasks_per_level: int | None = None,
    max_receptacles: int | None = None,
) -> tuple[TaskSpec, ...]:
    """The generated tasks of ``split`` whose type is in ``task_types``.

    ``tasks_per_level=None``: the split's default set (:data:`DEFAULT_TASKS`) filtered by type.
    Otherwise the first ``tasks_per_level`` tasks of each type in index order (so a larger count
    extends a smaller one). ``max_receptacles`` keeps only scenes with at most that many
    receptacles (the smallest scenes have 10), counted before ``tasks_per_level``. Either way
    ordered small scenes first, as :func:`task_specs`. Made once per process for each set of
    arguments (the envs of a run share it: building it was most of a new env's start).
    """

    def fits(spec: TaskSpec) -> bool:
        return max_receptacles is None or spec.n_receptacles <= max_receptacles

    if tasks_per_level is None:
        return tuple(
            s
            for s in task_specs(split, DEFAULT_TASKS[split])
            if s.task_type in task_types and fits(s)
        )
    counts = dict.fromkeys(task_types, 0)
    picked = []
    index = 0
    limit = 6 * 20 * tasks_per_level + 600
    if max_receptacles is not None:
        limit *= 40  # about one scene in twelve has at most 12 receptacles
    while any(c < tasks_per_level for c in counts.values()):
        if index > limit:
            raise RuntimeError(
                f"the generator could not build {tasks_per_level} tasks of each of {task_types}"
            )
        if TASK_TYPES[1 + index % 6] in counts:  # the type is a function of the index
            spec = build_spec(split, index)
            if spec is not None and counts[spec.task_type] < tasks_per_level and fits(spec):
                counts[spec.task_type] += 1
                picked.append(spec)
        index += 1
    return tuple(sorted(picked, key=lambda s: (s.n_receptacles, s.index)))


def problem_text(spec: TaskSpec) -> str:
    """The PDDL problem of ``spec`` (ALFWorld's object naming; alfred domain)."""
    tables = _tables()
    contain, action, movable = tables["contain"], tables["action"], tables["movable"]
    gdict = _deps.goal_library().gdict
    lines = [
        "(define (problem plan_%s)" % spec.trial,
        "    (:domain alfred)",
        "    (:objects",
        "        agent1 - agent",
    ]
    lines += [f"        {t}Type - otype" for t in tables["otypes"]]
    lines += [f"        {t}Type - rtype" for t in tables["rtypes"]]
    lines += [f"        {oid} - object" for _, oid, _ in spec.objects]
    lines += [f"        {rid} - receptacle" for _, rid, _ in spec.receptacles]
    locs = [loc for _, _, loc in spec.receptacles] + [spec.agent_location]
    lines += [f"        {loc} - location" for loc in locs]
    lines += [
        "        )",
        "    (:init",
        "        (= (total-cost) 0)",
        f"        (atLocation agent1 {spec.agent_location})",
    ]
    rloc = {rid: loc for _, rid, loc in spec.receptacles}
    rcls = sorted({cls for cls, _, _ in spec.receptacles})
    ocls = sorted({cls for cls, _, _ in spec.objects})
    for r in rcls:
        for o in ocls:
            if o in contain.get(r, ()):
                lines.append(f"        (canContain {r}Type {o}Type)")
    for cls, rid, loc in spec.receptacles:
        lines.append(f"        (receptacleType {rid} {cls}Type)")
        if cls in _OPENABLE:
            lines.append(f"        (openable {rid})")
        lines.append(f"        (receptacleAtLocation {rid} {loc})")
    for cls, oid, rid in spec.objects:
        lines.append(f"        (objectType {oid} {cls}Type)")
        if cls not in _NOT_PICKUPABLE:
            lines.append(f"        (pickupable {oid})")
        if cls in movable:
            lines.append(f"        (isReceptacleObject {oid})")
        for key, pred in (
            ("Cleanable", "cleanable"),
            ("Heatable", "heatable"),
            ("Coolable", "coolable"),
            ("Toggleable", "toggleable"),
            ("Sliceable", "sliceable"),
        ):
            if cls in action[key]:
                lines.append(f"        ({pred} {oid})")
        lines.append(f"        (inReceptacle {oid} {rid})")
        lines.append(f"        (objectAtLocation {oid} {rloc[rid]})")
    lines.append("        )")
    goal = gdict[spec.task_type]["pddl"].format(
        obj=spec.object_target, recep=spec.parent_target, toggle=spec.toggle_target, mrecep=""
    )
    return "\n".join(lines) + "\n" + goal.replace("#", "-")


def traj_data(spec: TaskSpec) -> dict:
    return {
        "task_id": spec.trial,
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target,
            "toggle_target": spec.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"scene_num": spec.scene, "random_seed": spec.seed, "room_type": spec.room},
        "turk_annotations": {
            "anns": [{"task_desc": spec.goal.capitalize() + ".", "high_descs": [], "votes": []}]
        },
        "generator": {
            "name": "budget-envs",
            "version": GENERATOR_VERSION,
            "split": spec.split,
            "index": spec.index,
        },
    }


@lru_cache(maxsize=1)
def _logic_texts() -> tuple[str, str]:
    with open(_deps.data_path("alfred.pddl")) as f:
        domain = f.read()
    with open(_deps.data_path("alfred.twl2")) as f:
        grammar = f.read()
    return domain, grammar


def game_data(spec: TaskSpec) -> dict:
    domain, grammar = _logic_texts()
    return {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", spec.goal),
        "pddl_problem": problem_text(spec),
        "solvable": True,
        "walkthrough": None,
    }


def _atomic_write(path: str, payload: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_task(spec: TaskSpec, root: str) -> str:
    """Write ``spec`` under ``root/json_2.1.1/`` (if missing) and return its ``game.tw-pddl`` path."""
    folder = os.path.join(root, "json_2.1.1", spec.split, spec.folder, spec.trial)
    game = os.path.join(folder, "game.tw-pddl")
    if os.path.exists(game) and os.path.exists(os.path.join(folder, "traj_data.json")):
        return game
    os.makedirs(folder, exist_ok=True)
    _atomic_write(os.path.join(folder, "traj_data.json"), traj_data(spec))
    _atomic_write(game, game_data(spec))
    return game
