"""The rules of the family contract: one table, one :class:`Rule` per line.

The table is the single source of the rule ids, what each asks, when it applies and its section
of ``docs/extending.md``; the checks quote a rule's id and section in every message.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DOCS", "RULES", "Rule"]

DOCS = "docs/extending.md"


@dataclass(frozen=True)
class Rule:
    """One rule of the family contract.

    Attributes:
        id: ``group.name``, quoted at the start of every message about the rule.
        what: what the rule asks, in a sentence (the table of docs/extending.md repeats it).
        when: empty for a rule every family meets; else the condition under which it applies.
        advisory: a broken advisory rule warns instead of failing.
        section: the anchor of its section in docs/extending.md.
    """

    id: str
    what: str
    when: str = ""
    advisory: bool = False
    section: str = "the-family-rules"

    @property
    def required(self) -> str:
        """``yes``, ``yes, when ...`` or ``no (a warning)``: the table's "required" column."""
        if self.advisory:
            return "no (a warning)"
        return f"yes, when {self.when}" if self.when else "yes"


_SPLIT = "the family takes `split=`"

# One rule per line: id | what it asks | when it applies ("" always) | "advisory" or "".
# A line starting with "#" opens the rules of a section of docs/extending.md (its anchor).
_TABLE = f"""
# rules-hooks
hooks.task_ids | the property `task_ids`: every task id, in a fixed order
hooks.load | `_load(task_id) -> str`: set up the task, return the first observation
hooks.execute | `_execute(action) -> (observation, reward)`: apply an action, or raise `ActionRejected` before any change
hooks.goal | `_goal() -> str`: the task's goal in words (`info["goal"]`)
hooks.admissible | `_admissible() -> list[str]`: the actions valid now
hooks.oracle_actions | `_oracle_actions() -> list[str]`: every optimal next action
hooks.cost_to_go | `_cost_to_go() -> int`: the fewest turns to success
hooks.state_digest | `_state_digest()`: the str or bytes that `info["state_hash"]` hashes
hooks.oracle_exact | the attribute `oracle_exact` is a bool
hooks.require_reset | `oracle_actions()` and `cost_to_go()` before `reset()` raise `gymnasium.error.ResetNeeded`
hooks.task_identity | `task_identity(task_id) -> tuple`: a task's world and goal, without its id | {_SPLIT}
# rules-tasks-and-spaces
gymnasium.check_env | Gymnasium's `check_env` passes on the bare env (`render_mode="ansi"`)
spaces.text | both spaces are `Text` and hold `"go north"` and `""`
tasks.ids | `task_ids` are unique strings; `options["task_id"]` picks a task by index or id; a bad index or id is refused
tasks.level | `task_level(task_id)` gives a level for every task, or None for every task | the family has levels
# rules-oracle
oracle.nonempty | after `reset()`, `oracle_actions()` is a non-empty list of str and `cost_to_go()` an int >= 1
oracle.wins | playing `oracle_actions()[0]` wins (reward 1.0, or `info["score"]` 1.0) in `cost_to_go()` turns (exact oracle) or within 50 more (heuristic); then `oracle_actions()` is `[]` and `cost_to_go()` 0
# rules-info-and-candidate-actions
info.core_keys | every `info` holds the keys of `budget_envs.info.CORE_KEYS`
info.documented | every `info` key is in `budget_envs.info.ALL_KEYS`
info.types | every `info` value has the type its row in `budget_envs/info.py` names, and is never None
candidates.list | `info["candidate_actions"]` is a list of str: not empty while the episode runs, `[]` once it is over
candidates.oracle | on every state of an oracle episode, a candidate is an oracle action (case, spacing and JSON key order aside)
candidates.playable | a random candidate, sent as it is, is never an invalid turn
# rules-input-and-determinism
bad_input.turn | empty, 1 MB, NUL, control-character, line-break, broken-JSON, injection and non-text actions are turns with feedback, never exceptions
bad_input.state | an invalid turn earns 0, does not terminate and leaves the state (hash, cost-to-go, admissible actions) untouched
determinism.seed | the same seed (or task id) gives the same transcript in a fresh env
lifecycle.close | after `close()`, `step`, `reset`, the oracle and `snapshot` raise `EnvClosed`
# rules-snapshots-and-state-hashes
snapshots.round_trip | `restore(snapshot())` gives back the observation, cost-to-go and state hash, and the same next turns
digest.stable | `info["state_hash"]` is 32 hex digits on every reset and step; the same task starts from the same hash
# rules-faults
faults.cells | `fault_cells()` maps every kind (the generic ones and `fault_kinds()`) to a cell of `budget_envs.core.CELLS`
faults.hook | `_fault(kind, rng, action)` is implemented | the family lists kinds in `fault_kinds()`
faults.arm | for every kind, `arm_fault(kind, rng)` then `step` is a turn whose `info["fault"]` gives the kind, the effect and the cell
faults.replay | `restore(snapshot())` after a faulty turn gives the same state and the same next turn
# rules-splits
splits.accepted | the constructor takes `split=`: `"train"` (the default), `"valid"`, `"test"` | | advisory
splits.unknown | an unknown split is a `ValueError` that quotes it | {_SPLIT}
splits.ids_disjoint | every split has tasks; no task id is in two splits; `split="train"` is the default list | {_SPLIT}
splits.content_disjoint | no `task_identity()` is in two splits, nor twice in one | {_SPLIT}
splits.plays | the first task of `split="test"` resets and plays | {_SPLIT}
"""


def _parse_rules(table: str) -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    section = ""
    for line in table.strip().splitlines():
        if line.startswith("# "):
            section = line[2:].strip()
            continue
        cells = [c.strip() for c in line.split("|")]
        rule_id, what, when, flag = (cells + ["", ""])[:4]
        rules[rule_id] = Rule(rule_id, what, when, flag == "advisory", section)
    return rules


#: Every rule by id, section by section (docs/extending.md has one table per section).
RULES: dict[str, Rule] = _parse_rules(_TABLE)
