"""Oracles for ALFWorld games: Fast Downward's plan and alfworld's handcoded expert.

* :class:`PlanOracle` asks the planner for a plan from the current state (full knowledge) and keeps
  it while the agent follows it, replanning only after a deviation or a fault.
* :class:`HandcodedOracle` runs alfworld's ``HandCodedTWAgent`` exactly as its ``AlfredExpert``
  wrapper does (``look`` first, then one ``act`` per executed command), with two fixes: commands
  are fed to its state tracking with ``move`` read as ``put`` (the grammar says ``move X to Y``
  since alfworld 0.4, which stalled pick-two tasks), and the global ``random`` module it draws from
  is swapped for a private, seeded state around every call (the caller's state is restored).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from budget_envs.core import UNREACHABLE
from budget_envs.envs.alfworld import _deps
from budget_envs.errors import ExpertError

__all__ = ["ExpertError", "PlanOracle", "HandcodedOracle", "ModelOracle"]


class PlanOracle:
    """Planner-based oracle with the plan kept while it is being followed."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._plan: list[str] | None = None

    def plan(self) -> list[str]:
        if self._plan is None:
            plan = self.engine.plan()
            if plan is None:
                raise ExpertError(
                    f"{self.engine.path}: the planner finds no plan from this state "
                    "(the goal is unreachable: broken or unsolvable game file)"
                )
            self._plan = list(plan)
        return self._plan

    def executed(self, command: str) -> None:
        """Keep the suffix of the plan if ``command`` was its next step, else forget it."""
        if self._plan and self._plan[0] == command:
            self._plan = self._plan[1:]
        else:
            self._plan = None

    def invalidate(self) -> None:
        self._plan = None


class HandcodedOracle:
    """alfworld's handcoded expert, fed every executed command (lazily, on demand)."""

    MAX_STEPS = 200

    def __init__(self, engine: Any, gamefile: str, seed_key: str) -> None:
        expert_mod = _deps.alfworld_module("alfworld.agents.expert")
        self._timeout_exc = expert_mod.HandCodedAgentTimeout
        self._failed_exc = expert_mod.HandCodedAgentFailed
        self.engine = engine
        self.gamefile = gamefile
        digest = hashlib.sha256(seed_key.encode()).digest()
        self._random_state = random.Random(int.from_bytes(digest[:8], "big")).getstate()
        self._agent = expert_mod.HandCodedTWAgent(max_steps=self.MAX_STEPS)
        self._pending: list[tuple[dict, str]] = []
        self._plan: list[str] = ["look"]
        self._started = False
        self._intro = engine.feedback
        self._steps = 0

    def _call(self, fn, *args):
        saved = random.getstate()
        random.setstate(self._random_state)
        try:
            return fn(*args)
        finally:
            self._random_state = random.getstate()
            random.setstate(saved)

    def _start(self) -> None:
        try:
            self._agent.reset(self.gamefile)
        except (OSError, KeyError, ValueError) as exc:
            raise ExpertError(
                f"{self.gamefile}: the handcoded expert needs traj_data.json beside the game "
                f"file with task_type and pddl_params ({type(exc).__name__}: {exc})"
            ) from exc
        policy = self._agent.policy
        track = policy.update_state_tracking

        def tracking(game_state, last_action):  # read the grammar's "move" as the expert's "put"
            if last_action.startswith("move "):
                last_action = "put " + last_action[len("move ") :]
            return track(game_state, last_action)

        policy.update_state_tracking = tracking
        self._call(self._agent.observe, self._intro)
        self._started = True

    def executed(self, command: str) -> None:
        """Record an executed command and the state it led to (processed when asked)."""
        state = {
            "feedback": self.engine.feedback,
            "admissible_commands": list(self.engine.admissible),
            "won": self.engine.won,
            "_facts": self.engine.facts(),
        }
        self._pending.append((state, command))

    def next_action(self) -> str:
        if not self._started:
            self._start()
        while self._pending:
            state, command = self._pending.pop(0)
            game_state = {
                "feedback": state["feedback"],
                "admissible_commands": state["admissible_commands"],
                "won": state["won"],
                "facts": state["_facts"],
            }
            self._steps += 1
            try:
                action = self._call(self._agent.act, game_state, 0, state["won"], command)
            except self._timeout_exc:
                raise ExpertError(
                    f"{self.gamefile}: the handcoded expert timed out after {self.MAX_STEPS} steps"
                ) from None
            except self._failed_exc:
                raise ExpertError(
                    f"{self.gamefile}: the handcoded expert finished its subgoals without reaching "
                    "the goal"
                ) from None
            self._plan = [action] if action in state["admissible_commands"] else ["look"]
        return self._plan[0]


class ModelOracle:
    """Exact shortest plans from the full state, by enumerating the few plan shapes the domain allows.

    In the alfred domain every action takes one turn and ``go to`` reaches any receptacle in one
    turn, so a shortest plan is: free the hands if needed (put the held object where it fits),
    fetch a target object (go, open if closed, take), visit the appliance the task needs (sink,
    microwave, fridge; they need not be open), then deliver (go, open, move) or, for
    look-at-in-light, stand by a lamp and use it. Enumerating every choice of object, destination,
    appliance, lamp and drop place and keeping the shortest gives the exact cost and every first
    action that starts a shortest plan of these shapes. ``solve`` returns None when the game does
    not fit the model (unknown task type, no route); the env then falls back to the planner.
    """

    _APPLIANCE = {
        "pick_clean_then_place_in_recep": ("sinkbasintype", "clean", "cleanable", "isclean"),
        "pick_heat_then_place_in_recep": ("microwavetype", "heat", "heatable", "ishot"),
        "pick_cool_then_place_in_recep": ("fridgetype", "cool", "coolable", "iscool"),
    }

    def __init__(self, task_type: str, params: dict) -> None:
        self.task_type = task_type
        self.obj_type = (params.get("object_target") or "").lower() + "type"
        self.recep_type = (params.get("parent_target") or "").lower() + "type"
        self.toggle_type = (params.get("toggle_target") or "").lower() + "type"

    def solve(
        self, engine: Any, blocked: frozenset[str] = frozenset()
    ) -> tuple[int, list[str]] | None:
        """``(cost, first actions)`` of the shortest plans; ``blocked`` names entities (display
        names, e.g. ``"mug 1"``) that can no longer be reached. ``(UNREACHABLE, [])`` when no
        route is left only because of ``blocked``; None when the game does not fit the model."""
        if engine.won:
            return 0, []
        w = _World(engine, blocked)
        if w.agent_loc is None:
            return None
        routes = list(self._routes(w))
        if not routes:
            if blocked and self.solve(engine) is not None:
                return UNREACHABLE, []
            return None
        best = min(len(r) for r in routes)
        if best == 0:
            return None
        firsts = sorted({r[0] for r in routes if len(r) == best})
        return best, firsts

    # ------------------------------------------------------------------ enumeration
    def _routes(self, w: _World):
        objs = [
            o
            for o, t in w.otype.items()
            if t == self.obj_type
            and (o == w.held or (o in w.inrec and "pickupable" in w.flags.get(o, ())))
        ]
        fits = {r for r, t in w.rtype.items() if (t, self.obj_type) in w.can}
        targets = [r for r, t in w.rtype.items() if t == self.recep_type and r in fits]
        tt = self.task_type
        if tt == "pick_and_place_simple":
            for o in objs:
                for r in targets:
                    for st in self._deliver(w, _Sim(w), o, r):
                        yield st.acts
        elif tt in self._APPLIANCE:
            app_type, verb, able, flag = self._APPLIANCE[tt]
            apps = [r for r, t in w.rtype.items() if t == app_type]
            for o in objs:
                if able not in w.flags.get(o, ()):
                    continue
                for r in targets:
                    if flag in w.flags.get(o, ()):
                        for st in self._deliver(w, _Sim(w), o, r):
                            yield st.acts
                        continue
                    for a in apps:
                        for st in self._hold(w, _Sim(w), o):
                            st.goto(a)
                            st.acts.append(f"{verb} {w.name[o]} with {w.name[a]}")
                            st.put(r)
                            yield st.acts
        elif tt == "pick_two_obj_and_place":
            for r in targets:
                inside = [o for o in objs if w.inrec.get(o) == r]
                for o1 in objs:
                    for o2 in objs:
                        if o1 == o2:
                            continue
                        for st1 in self._deliver(w, _Sim(w), o1, r, keep=inside):
                            for st2 in self._deliver(w, st1.copy(), o2, r, keep=inside + [o1]):
                                yield st2.acts
        elif tt == "look_at_obj_in_light":
            lamps = [
                o
                for o, t in w.otype.items()
                if t == self.toggle_type and "toggleable" in w.flags.get(o, ()) and o in w.inrec
            ]
            for o in objs:
                for lamp in lamps:
                    lrec = w.inrec[lamp]
                    on = lamp in w.toggled
                    for st in self._hold(w, _Sim(w), o):
                        st.goto(lrec)
                        if not on:
                            st.acts.append(f"use {w.name[lamp]}")
                        yield st.acts
                    if (
                        not on and w.loc_of.get(lrec) == w.agent_loc
                    ):  # use the lamp first, then fetch
                        st = _Sim(w)
                        st.acts.append(f"use {w.name[lamp]}")
                        for st2 in self._hold(w, st, o):
                            st2.goto(lrec)
                            yield st2.acts

    def _deliver(self, w, st, o, r, keep=()):
        if st.inrec.get(o) == r:
            yield st
            return
        for st2 in self._hold(w, st, o, avoid=keep):
            st2.put(r)
            yield st2

    def _hold(self, w, st, o, avoid=()):
        """Every way to end up holding ``o`` (freeing the hands first where needed)."""
        if st.held == o:
            yield st
            return
        if o not in st.inrec or o in avoid or "pickupable" not in w.flags.get(o, ()):
            return
        src = st.inrec[o]
        if st.held is None:
            st.take(o)
            yield st
            return
        h = st.held
        places = []
        for r in w.rtype:
            if (w.rtype[r], w.otype.get(h)) in w.can:
                places.append(r)
        here = [r for r in places if w.loc_of[r] == st.loc]
        others = [r for r in places if w.loc_of[r] != st.loc and r != src]
        cheap = [r for r in others if r not in w.openable or r in st.opened]
        pick = here + ([src] if src in places else []) + (cheap[:1] if cheap else others[:1])
        for d in dict.fromkeys(pick):
            s = st.copy()
            s.put(d)
            s.take(o)
            yield s


class _World:
    """The facts the model reads, from the engine's raw (mangled) fact set."""

    def __init__(self, engine: Any, blocked: frozenset[str] = frozenset()) -> None:
        infos = engine._game.entity_infos
        self.name = {k: info.name for k, info in infos.items()}
        self.loc_of: dict = {}
        self.inrec: dict = {}
        self.otype: dict = {}
        self.rtype: dict = {}
        self.can: set = set()
        self.flags: dict = {}
        self.opened: set = set()
        self.openable: set = set()
        self.toggled: set = set()
        self.held = None
        self.agent_loc = None
        for f in engine._state.facts:
            n, args = f.name, [v.name for v in f.arguments]
            if n == "atlocation":
                self.agent_loc = args[1]
            elif n == "receptacleatlocation":
                self.loc_of[args[0]] = args[1]
            elif n == "inreceptacle":
                self.inrec[args[0]] = args[1]
            elif n == "objecttype":
                self.otype[args[0]] = args[1]
            elif n == "receptacletype":
                self.rtype[args[0]] = args[1]
            elif n == "cancontain":
                self.can.add((args[0], args[1]))
            elif n == "holds":
                self.held = args[1]
            elif n == "opened":
                self.opened.add(args[0])
            elif n == "openable":
                self.openable.add(args[0])
            elif n == "istoggled":
                self.toggled.add(args[0])
            elif n in (
                "cleanable",
                "heatable",
                "coolable",
                "toggleable",
                "isclean",
                "ishot",
                "iscool",
                "pickupable",
            ):
                self.flags.setdefault(args[0], set()).add(n)
        self.rtype = {r: t for r, t in self.rtype.items() if r in self.loc_of}
        if blocked:  # unreachable receptacles, and objects in them or themselves unreachable
            gone = {k for k, n in self.name.items() if n in blocked}
            self.rtype = {r: t for r, t in self.rtype.items() if r not in gone}
            self.inrec = {o: r for o, r in self.inrec.items() if o not in gone and r not in gone}


class _Sim:
    """A hypothetical continuation: where the agent is, what it holds, what is open."""

    def __init__(self, w: _World | None) -> None:
        if w is None:
            return
        self.w = w
        self.loc = w.agent_loc
        self.held = w.held
        self.opened = set(w.opened)
        self.inrec = dict(w.inrec)
        self.acts: list[str] = []

    def copy(self) -> _Sim:
        s = _Sim(None)
        s.w, s.loc, s.held = self.w, self.loc, self.held
        s.opened, s.inrec, s.acts = set(self.opened), dict(self.inrec), list(self.acts)
        return s

    def goto(self, r: str) -> None:
        if self.loc != self.w.loc_of[r]:
            self.acts.append(f"go to {self.w.name[r]}")
            self.loc = self.w.loc_of[r]

    def open(self, r: str) -> None:
        if r in self.w.openable and r not in self.opened:
            self.acts.append(f"open {self.w.name[r]}")
            self.opened.add(r)

    def take(self, o: str) -> None:
        r = self.inrec.pop(o)
        self.goto(r)
        self.open(r)
        self.acts.append(f"take {self.w.name[o]} from {self.w.name[r]}")
        self.held = o

    def put(self, r: str) -> None:
        self.goto(r)
        self.open(r)
        self.acts.append(f"move {self.w.name[self.held]} to {self.w.name[r]}")
        self.inrec[self.held] = r
        self.held = None
