"""What a study trains and evaluates: the arms, the families, :class:`StudySpec` and its presets.

:func:`full_spec` is the study of ``docs/study.md``, :func:`quick_spec` the pipeline check of
``budgetmix study --quick`` and :func:`demo_spec` the trained pair of ``budgetmix demo``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

#: The arms, in report order: name -> how its training budget derives from (tight, generous).
ARMS: dict[str, str] = {
    "fixed_generous": "fixed T = generous",
    "fixed_tight": "fixed T = tight",
    "mix_uniform": "BudgetMix uniform over tight..generous",
    "mix_log": "BudgetMix log-uniform over tight..generous",
}
VISIBILITIES = ("hidden", "remaining")
#: The untrained baseline every arm is evaluated beside (its agent spec is its name).
RANDOM = "random"


def arm_budget(arm: str, tight: int, generous: int) -> int | str:
    """The training budget spec of ``arm`` (a fixed int or a spec string)."""
    if arm == "fixed_generous":
        return generous
    if arm == "fixed_tight":
        return tight
    if arm == "mix_uniform":
        return f"{tight}..{generous}"
    if arm == "mix_log":
        return f"log:{tight}..{generous}"
    raise ValueError(f"unknown arm {arm!r}; expected one of {list(ARMS)}")


def arm_pmf(arm: str, tight: int, generous: int) -> dict[int, float]:
    """P(T) of the arm's training budget (the weights of its learning-status budget)."""
    from budget_envs.wrappers.budget_spec import parse_budget

    spec = parse_budget(arm_budget(arm, tight, generous))
    return {int(t): float(p) for t, p in spec.pmf(0).items()}


@dataclass(frozen=True)
class Family:
    """One family of the study: where it trains, where it is evaluated, and its budgets.

    ``train_kwargs`` and ``eval_kwargs`` are env constructor kwargs; the eval tasks are not
    among the training tasks (another split or world). ``tight`` is about 1.2x and ``generous``
    about 3x the optimal length of the family's tasks (which lie in a narrow band).
    ``eval_budgets`` is the T grid of budget-visible evaluations; budget-hidden ones run once at
    its largest T and give every smaller T.
    """

    name: str
    env_id: str
    train_kwargs: dict[str, Any]
    eval_kwargs: dict[str, Any]
    tight: int
    generous: int
    eval_budgets: list[int]
    max_actions: int
    warm_start_episodes: int
    warm_start_epochs: int = 10
    iterations: int = 20
    batch_size: int = 512
    eval_tasks: int = 20
    eval_samples: int = 4
    fault_turns: list[int] = field(default_factory=lambda: [1, 2, 3])
    probe_states: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.tight < self.generous:
            raise ValueError(
                f"{self.name}: need 1 <= tight < generous, got {self.tight}, {self.generous}"
            )
        grid = sorted(self.eval_budgets)
        if not grid or grid[0] >= self.tight or grid[-1] <= self.generous:
            raise ValueError(
                f"{self.name}: eval_budgets must reach below tight ({self.tight}) and above "
                f"generous ({self.generous}), got {self.eval_budgets!r}"
            )


@dataclass(frozen=True)
class StudySpec:
    """What the study trains and evaluates (see :func:`full_spec` and :func:`quick_spec`)."""

    families: list[Family]
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    visibilities: list[str] = field(default_factory=lambda: list(VISIBILITIES))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    gamma: float = 1.0
    lr: float = 1e-4
    entropy_coeff: float = 0.001
    n_boot: int = 1000
    #: Reference agents (name -> agent spec, e.g. ``{"oracle": "oracle"}``) evaluated beside the
    #: arms and random in the same runs (same tasks, same episode seeds); not trained, not scored
    #: for learning, shown in the Pass@1 and single-step tables and figures.
    references: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.families:
            raise ValueError("a study needs at least one family")
        bad = [a for a in self.arms if a not in ARMS]
        if bad or not self.arms:
            raise ValueError(f"arms must be among {list(ARMS)}, got {self.arms!r}")
        bad = [v for v in self.visibilities if v not in VISIBILITIES]
        if bad or not self.visibilities:
            raise ValueError(
                f"visibilities must be among {VISIBILITIES}, got {self.visibilities!r}"
            )
        if not self.seeds:
            raise ValueError("a study needs at least one seed")
        taken = {*ARMS, RANDOM}
        bad = [n for n in self.references if n in taken or "@s" in n or not n]
        if bad:
            raise ValueError(
                f"reference agent names must be new, non-empty and free of '@s', got {bad!r}"
            )

    @property
    def agents(self) -> list[str]:
        """The agents of every eval run, in report order: the arms, random, the references."""
        return [*self.arms, RANDOM, *self.references]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StudySpec:
        """The spec :meth:`to_json` wrote (``study.json`` of a study folder)."""
        fields = dict(data)
        fields["families"] = [Family(**f) for f in data["families"]]
        return cls(**fields)


def _tooluse(**sizes: Any) -> Family:
    """ToolUse level 1, trained in world 0 and evaluated in world 1 (unseen tasks): the family
    every preset has; ``sizes`` gives its budgets and run sizes."""
    return Family(
        name="tooluse",
        env_id="BudgetMix/ToolUse-v0",
        train_kwargs={"level": 1, "world_seed": 0},
        eval_kwargs={"level": 1, "world_seed": 1},
        max_actions=256,
        **sizes,
    )


def full_spec() -> StudySpec:
    """The full study: three families, four arms, hidden and visible, three seeds."""
    # A short PPO on top of each warm start, the same in every family.
    ppo = {"iterations": 2, "batch_size": 256}
    return StudySpec(
        families=[
            _tooluse(
                tight=5,
                generous=12,
                eval_budgets=[4, 5, 6, 8, 10, 12, 16],
                warm_start_episodes=500,
                **ppo,
            ),
            Family(
                name="alfworld",
                env_id="BudgetMix/ALFWorld-v0",
                train_kwargs={"level": 1, "tasks_per_level": 100, "max_receptacles": 12},
                eval_kwargs={
                    "level": 1,
                    "tasks_per_level": 20,
                    "split": "valid_seen",
                    "max_receptacles": 12,
                },
                tight=6,
                generous=15,
                eval_budgets=[5, 6, 8, 11, 15, 20],
                max_actions=128,
                warm_start_episodes=200,
                eval_tasks=12,
                eval_samples=3,
                **ppo,
            ),
            Family(
                name="webshop",
                env_id="BudgetMix/WebShop-v0",
                train_kwargs={"level": 2, "tasks_per_level": 200},
                eval_kwargs={"level": 2, "tasks_per_level": 200, "split": "test"},
                tight=6,
                generous=15,
                eval_budgets=[4, 6, 8, 11, 15, 20],
                max_actions=256,
                warm_start_episodes=200,
                **ppo,
            ),
        ]
    )


def quick_spec() -> StudySpec:
    """The pipeline check: ToolUse level 1, two arms, budget hidden, one seed, tiny training."""
    return StudySpec(
        families=[
            _tooluse(
                tight=5,
                generous=12,
                eval_budgets=[4, 5, 8, 12, 14],
                warm_start_episodes=50,
                warm_start_epochs=2,
                iterations=1,
                batch_size=64,
                eval_tasks=3,
                eval_samples=2,
                fault_turns=[1, 2],
                probe_states=2,
            )
        ],
        arms=["fixed_generous", "mix_uniform"],
        visibilities=["hidden"],
        seeds=[0],
        n_boot=200,
    )


def demo_spec(**sizes: Any) -> StudySpec:
    """The demo's trained pair: ``fixed_generous`` against ``mix_uniform`` on ToolUse level 1.

    Budget hidden, one seed, trained in world 0 and evaluated on 20 tasks x 4 samples of world 1
    (unseen), beside the random, oracle and oracle-eps0.3 agents on the same tasks and episode
    seeds. A shared warm start (300 oracle episodes, 10 epochs) makes the pair beat random on
    unseen tasks; then 2 PPO iterations of 256 steps per arm.

    Two settings differ from the study's ToolUse family, both because a brief PPO would
    otherwise leave the arms identical (measured): ``tight`` is 3, the shortest optimal length
    of the level-1 tasks, not 5 (the warm-started policy ends its episodes in about 3 turns, so
    with BudgetMix over 5..12 no training episode met its budget and both arms saw the same
    episodes), and the PPO learning rate is 1e-3, not 1e-4 (at 1e-4, after 4 iterations, the
    arms played alike in 75 of 80 paired eval episodes, with the same Pass@(K,T) at every K and
    T). ``sizes`` overrides :class:`Family` fields (smaller runs in tests), e.g.
    ``demo_spec(warm_start_episodes=40, iterations=1)``.
    """
    fam = _tooluse(
        tight=3,
        generous=12,
        eval_budgets=[2, 3, 4, 5, 6, 8, 10, 12, 14],
        warm_start_episodes=300,
        warm_start_epochs=10,
        iterations=2,
        batch_size=256,
        eval_tasks=20,
        eval_samples=4,
        fault_turns=[2],
        probe_states=2,
    )
    try:
        fam = replace(fam, **sizes)
    except TypeError as exc:
        raise ValueError(f"demo_spec: bad size override {sizes!r}: {exc}") from None
    return StudySpec(
        families=[fam],
        arms=["fixed_generous", "mix_uniform"],
        visibilities=["hidden"],
        seeds=[0],
        lr=1e-3,
        n_boot=1000,
        references={"oracle": "oracle", "oracle-eps0.3": "oracle:epsilon=0.3"},
    )
