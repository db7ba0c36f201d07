"""``budgetmix train --trainer sft``: a language model learns from the suite's own demonstrations.

The data are oracle episodes on the train split, rendered exactly as the ``lm`` agent renders
an episode (:func:`~budget_envs.integrations.lm.agent.episode_dialogue`: the family's system
prompt, the goal and observation, the offered actions with ``show_actions``), one chat row per
episode (:func:`demonstrations`; ``budgetmix export-sft --format lm`` writes the same rows). With
``explore`` some turns play a random offered action instead of the oracle's: those turns stay in
the conversation (the model sees states off the oracle's path) but carry no loss, so the model
learns the oracle's way back, never the random move.

Rows are tokenized here, turn by turn as the agent does (only new text encoded), with labels on
the assistant's tokens (the action and its end-of-turn id) and -100 elsewhere, and handed to
TRL's ``SFTTrainer`` pre-tokenized. Two kinds of model:

* a pretrained one (``model="smollm2-135m"``, a folder), with a LoRA adapter (peft) by default,
  merged into the weights at the end;
* ``model="scratch"``: a small Llama-style decoder built here with the suite's own byte-level BPE
  tokenizer trained on the rows (:mod:`budget_envs.integrations.tiny_model`) and a ChatML template.

The folder written holds the full model (safetensors), its tokenizer, ``budgetmix_policy.json``
(how it was trained) and ``metrics.csv`` (one row per logged step); it plays as
``--agent NAME=lm:model=DIR`` (or ``policy:DIR``).
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from budget_envs.eval.prompts import MAX_SHOWN_ACTIONS
from budget_envs.integrations.common import DEFAULT_BUDGET
from budget_envs.integrations.tracking import MetricsSink

__all__ = [
    "CHATML_TEMPLATE",
    "SFTSettings",
    "demonstrations",
    "encode_row",
    "train_sft",
]

#: The file of a policy folder that says how it was trained (shared with the TRL trainer).
POLICY_FILE = "budgetmix_policy.json"

#: The scratch decoder's chat template: ChatML, no tools (actions are plain text or JSON).
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass
class SFTSettings:
    """Every knob of ``--trainer sft`` (``--sft-kwargs JSON`` sets them by name).

    Attributes:
        model: a prepared name (``smollm2-135m``), a model folder, or ``scratch``.
        data: a file of demonstration rows (``budgetmix export-sft --format lm``) to train on
            instead of playing ``episodes`` here.
        lora: train a LoRA adapter (default: yes for a pretrained model, no for ``scratch``).
        lora_r, lora_alpha: the adapter's rank and scale (every linear layer is adapted).
        episodes: oracle demonstrations on the train split.
        max_env_steps: stop playing demonstrations after the episode at which their turns
            reach this many env steps (``episodes`` stays the most played; None: no limit), so
            more imitation can spend as many env steps as an RL run.
        explore: the share of turns that play a random offered action (no loss on them).
        observation_loss: also label the env's replies (tool results, observations after the
            first), so the model learns the env's language as well as the oracle's actions:
            the same tokens run either way, and the replies hold the ids the actions copy.
        epochs: passes over the rows.
        learning_rate: default 2e-4 with LoRA, 3e-5 for full fine-tuning, 1e-3 for ``scratch``.
        batch_size: rows per optimizer step.
        max_length: tokens kept of a row (its start).
        max_steps: stop after this many optimizer steps (None: the epochs decide).
        show_actions, max_actions: as the ``lm`` agent's (how the rows are rendered).
        scratch_hidden, scratch_layers, scratch_vocab: the scratch decoder's width, depth and
            tokenizer size.
        threads: torch CPU threads (None: torch's default).
    """

    model: str = "smollm2-135m"
    data: str | None = None
    lora: bool | None = None
    lora_r: int = 16
    lora_alpha: int = 32
    episodes: int = 100
    max_env_steps: int | None = None
    explore: float = 0.2
    observation_loss: bool = False
    epochs: float = 2.0
    learning_rate: float | None = None
    batch_size: int = 4
    max_length: int = 2048
    max_steps: int | None = None
    show_actions: bool = True
    max_actions: int = MAX_SHOWN_ACTIONS
    scratch_hidden: int = 256
    scratch_layers: int = 4
    scratch_vocab: int = 4096
    threads: int | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> SFTSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values or {}) - known)
        if unknown:
            raise ValueError(f"unknown SFT setting(s) {unknown}; expected some of {sorted(known)}")
        settings = cls(**dict(values or {}))
        settings.check()
        return settings

    def check(self) -> None:
        for name in ("lora_r", "lora_alpha", "episodes", "batch_size", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        steps = self.max_env_steps
        if steps is not None and (
            isinstance(steps, bool) or not isinstance(steps, int) or steps < 1
        ):
            raise ValueError(f"max_env_steps must be an int >= 1 or None, got {steps!r}")
        if not 0.0 <= float(self.explore) < 1.0:
            raise ValueError(f"explore must be in [0, 1), got {self.explore!r}")
        if float(self.epochs) <= 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs!r}")

    @property
    def scratch(self) -> bool:
        return self.model == "scratch"

    @property
    def use_lora(self) -> bool:
        return (not self.scratch) if self.lora is None else bool(self.lora)

    @property
    def lr(self) -> float:
        if self.learning_rate is not None:
            return float(self.learning_rate)
        if self.scratch:
            return 1e-3
        return 2e-4 if self.use_lora else 3e-5


# ---------------------------------------------------------------------- data
def demonstrations(
    env_id: str,
    *,
    episodes: int,
    budget: Any = DEFAULT_BUDGET,
    visibility: str = "hidden",
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    explore: float = 0.2,
    show_actions: bool = True,
    max_actions: int = MAX_SHOWN_ACTIONS,
    native_tools: bool = False,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    max_env_steps: int | None = None,
) -> list[dict[str, Any]]:
    """Oracle episodes on the train split (unless ``env_kwargs`` names a split), rendered as the
    ``lm`` agent renders them: one row per episode with ``system``, ``first`` (the first user
    message), ``turns`` (``action``, the ``observation`` rendered as the next user message, and
    ``oracle``: whether the action was the oracle's), ``messages`` (the same as chat messages),
    the task and the outcome. With ``max_env_steps`` it stops after the episode at which the
    turns played reach that many."""
    import numpy as np

    from budget_envs.integrations.common import make_env
    from budget_envs.integrations.lm.agent import next_text, render_first, render_system

    kwargs = dict(env_kwargs or {})
    kwargs.setdefault("split", "train")
    env = make_env(env_id, budget=budget, visibility=visibility, **kwargs)
    rng = np.random.default_rng([int(seed), 7919])
    hidden = visibility == "hidden"
    rows = []
    try:
        for episode in range(int(episodes)):
            obs, info = env.reset(seed=int(seed) * 1_000_003 + episode)
            shown = {k: v for k, v in info.items() if not (hidden and k == "budget")}
            row: dict[str, Any] = {
                "env_id": env_id,
                "task_id": str(info.get("task_id")),
                "system": render_system(env_id, shown, native_tools=native_tools),
                "first": render_first(obs, shown, show_actions, max_actions),
                "turns": [],
            }
            done = False
            while not done:
                best = env.unwrapped.oracle_actions()
                offered = list(info.get("candidate_actions") or [])
                if best and (not offered or rng.random() >= explore):
                    action, oracle = best[int(rng.integers(len(best)))], True
                elif offered:
                    action, oracle = offered[int(rng.integers(len(offered)))], False
                else:
                    break
                obs, _, terminated, truncated, info = env.step(action)
                done = terminated or truncated
                row["turns"].append(
                    {
                        "action": action,
                        "oracle": oracle,
                        "observation": None
                        if done
                        else next_text(obs, info, show_actions, max_actions),
                    }
                )
            row["won"] = bool(info.get("won"))
            row["messages"] = _messages(row)
            rows.append(row)
            if on_row is not None:
                on_row(row)
            if max_env_steps is not None and sum(len(r["turns"]) for r in rows) >= max_env_steps:
                break
    finally:
        env.close()
    return rows


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Demonstration rows from a JSONL file (``export-sft --format lm``), checked."""
    if not path.is_file():
        raise FileNotFoundError(f"no demonstration file {path}")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc})") from None
        if not isinstance(row, dict) or not all(k in row for k in ("system", "first", "turns")):
            raise ValueError(
                f"{path}:{n}: not a demonstration row (system, first, turns); write the file "
                "with budgetmix export-sft --format lm"
            )
        rows.append(row)
    if not rows:
        raise ValueError(f"{path} holds no rows")
    return rows


def _messages(row: Mapping[str, Any]) -> list[dict[str, str]]:
    out = [{"role": "system", "content": row["system"]}, {"role": "user", "content": row["first"]}]
    for turn in row["turns"]:
        out.append({"role": "assistant", "content": turn["action"]})
        if turn["observation"] is not None:
            out.append({"role": "user", "content": turn["observation"]})
    return out


def encode_row(
    tok: Any, row: Mapping[str, Any], max_length: int, observation_loss: bool = False
) -> dict[str, list[int]]:
    """``input_ids`` and ``labels`` of a row, rendered turn by turn as the ``lm`` agent renders
    an episode; labels are the oracle's actions with their end-of-turn id (with
    ``observation_loss``, the env's replies too), -100 elsewhere."""
    from budget_envs.integrations.trl.dialogue import _Dialogue

    dialogue = _Dialogue(tok, row["system"], {})
    ids = dialogue.prompt_ids(row["first"])
    labels = [-100] * len(ids)
    end = int(tok.convert_tokens_to_ids("<|im_end|>"))
    for turn in row["turns"]:
        reply = tok.encode(turn["action"], add_special_tokens=False) + [end]
        ids += reply
        labels += reply if turn["oracle"] else [-100] * len(reply)
        if turn["observation"] is not None:
            env_ids = dialogue.env_ids(turn["observation"], reply_ended=True)
            ids += env_ids
            labels += env_ids if observation_loss else [-100] * len(env_ids)
    return {"input_ids": ids[:max_length], "labels": labels[:max_length]}


# ---------------------------------------------------------------------- the model
def _scratch(rows: Sequence[Mapping[str, Any]], s: SFTSettings, seed: int) -> tuple[Any, Any]:
    from budget_envs.integrations.tiny_model import build_tiny_model, build_tiny_tokenizer

    corpus = [m["content"] for row in rows for m in row["messages"]]
    tok = build_tiny_tokenizer(corpus, vocab_size=s.scratch_vocab)
    tok.chat_template = CHATML_TEMPLATE
    tok.padding_side = "right"
    model = build_tiny_model(
        tok, hidden_size=s.scratch_hidden, num_layers=s.scratch_layers, seed=seed
    )
    return model, tok


def _pretrained(s: SFTSettings) -> tuple[Any, Any]:
    from budget_envs.integrations.lm.agent import load_lm

    return load_lm(s.model)


class _Metrics:
    """A ``TrainerCallback`` that writes every logged step to ``metrics.csv`` and reports it."""

    COLUMNS = ("step", "epoch", "loss", "learning_rate", "grad_norm", "wall_s")

    def __init__(
        self,
        path: Path,
        progress: Callable[[dict[str, Any]], None] | None,
        sink: Any = None,
    ) -> None:
        self.path = path
        self.progress = progress
        self.sink = sink
        self.start = time.monotonic()
        self.rows: list[dict[str, Any]] = []

    def callback(self) -> Any:
        from transformers import TrainerCallback

        owner = self

        class Callback(TrainerCallback):
            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any):
                owner.log(state.global_step, dict(logs or {}))

        return Callback()

    def log(self, step: int, logs: dict[str, Any]) -> None:
        if "loss" not in logs:
            return
        row = {
            "step": step,
            "epoch": logs.get("epoch"),
            "loss": logs.get("loss"),
            "learning_rate": logs.get("learning_rate"),
            "grad_norm": logs.get("grad_norm"),
            "wall_s": round(time.monotonic() - self.start, 2),
        }
        self.rows.append(row)
        with open(self.path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.COLUMNS)
            writer.writeheader()
            writer.writerows(self.rows)
        if self.sink is not None:
            self.sink.log(row, step)
        if self.progress is not None:
            self.progress(row)


def _sft_config(out: Path, s: SFTSettings, seed: int) -> Any:
    """TRL's SFTConfig for these settings (cosine schedule, a log every step, no saves of its
    own, CPU unless CUDA is there)."""
    import torch
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out / "checkpoints"),
        num_train_epochs=float(s.epochs),
        max_steps=-1 if s.max_steps is None else int(s.max_steps),
        per_device_train_batch_size=s.batch_size,
        learning_rate=s.lr,
        lr_scheduler_type="cosine",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        fp16=False,
        seed=seed,
        data_seed=seed,
        max_length=s.max_length,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def _rows(
    env_id: str,
    s: SFTSettings,
    rows: Sequence[Mapping[str, Any]] | None,
    out: Path,
    *,
    budget: Any,
    visibility: str,
    env_kwargs: Mapping[str, Any] | None,
    seed: int,
    on_row: Callable[[dict[str, Any]], None] | None,
) -> Sequence[Mapping[str, Any]]:
    """The demonstration rows (given, read from ``s.data`` or played here), also written to
    ``out/sft_rows.jsonl``."""
    if rows is None and s.data is not None:
        rows = _read_rows(Path(s.data))
    if rows is None:
        rows = demonstrations(
            env_id,
            episodes=s.episodes,
            budget=budget,
            visibility=visibility,
            env_kwargs=env_kwargs,
            seed=seed,
            explore=s.explore,
            show_actions=s.show_actions,
            max_actions=s.max_actions,
            on_row=on_row,
            max_env_steps=s.max_env_steps,
        )
    with open(out / "sft_rows.jsonl", "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    return rows


def _policy_record(
    env_id: str,
    s: SFTSettings,
    trained: Any,
    rows: Sequence[Mapping[str, Any]],
    encoded: Sequence[Mapping[str, Any]],
    *,
    env_kwargs: Mapping[str, Any] | None,
    visibility: str,
    budget: Any,
    seed: int,
    steps: int,
    loss: float,
    wall_s: float,
) -> dict[str, Any]:
    """What ``budgetmix_policy.json`` records of an SFT run."""
    n_params = int(sum(p.numel() for p in trained.parameters()))
    meta = {
        "trainer": "sft",
        "env_id": env_id,
        "env_kwargs": dict(env_kwargs or {}),
        "visibility": visibility,
        "budget": budget if isinstance(budget, (int, str, type(None))) else repr(budget),
        "seed": seed,
        "settings": asdict(s),
        "parameters": n_params,
        "rows": len(rows),
        "env_steps": int(sum(len(r.get("turns") or []) for r in rows)),
        "tokens": int(sum(len(e["input_ids"]) for e in encoded)),
        "trained_tokens": int(sum(sum(1 for t in e["labels"] if t != -100) for e in encoded)),
        "steps": steps,
        "train_loss": loss,
        "wall_s": wall_s,
    }
    return meta


def _fresh_folder(out: Path) -> Path:
    """``out``, created; a folder that already holds a policy is refused."""
    if (out / POLICY_FILE).exists():
        raise FileExistsError(f"{out} already holds a policy ({POLICY_FILE}); choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _lora_config(s: SFTSettings) -> Any:
    """peft's LoraConfig when the settings train an adapter, else None."""
    if not s.use_lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=s.lora_r, lora_alpha=s.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def _save(model: Any, tok: Any, out: Path, s: SFTSettings) -> Any:
    """The trained model (a LoRA adapter merged into its weights) and its tokenizer, saved in
    ``out``; returns the model saved."""
    if s.use_lora:
        model = model.merge_and_unload()
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    return model


def train_sft(
    env_id: str,
    *,
    out_dir: str | os.PathLike[str],
    budget: Any = DEFAULT_BUDGET,
    visibility: str = "hidden",
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    settings: SFTSettings | Mapping[str, Any] | None = None,
    rows: Sequence[Mapping[str, Any]] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    report_to: str | Sequence[str] | None = None,
) -> dict[str, Any]:
    """Fine-tune a language model on oracle demonstrations of ``env_id`` into ``out_dir``.

    ``report_to``: also log every metrics row to TensorBoard and/or W&B
    (:mod:`~budget_envs.integrations.tracking`).

    ``rows`` are demonstration rows (:func:`demonstrations`, or ``export-sft --format lm``'s
    file); without them ``settings.episodes`` are played here. Returns the folder, the row and
    token counts, the steps, the last loss and the wall time.
    """
    from budget_envs._util import require

    require("torch", "transformers", "trl", "datasets", extra="lm", what="--trainer sft")
    s = settings if isinstance(settings, SFTSettings) else SFTSettings.from_mapping(settings)
    s.check()
    if s.use_lora:
        require("peft", extra="lm", what="LoRA fine-tuning")
    import torch
    from datasets import Dataset
    from trl import SFTTrainer

    out = _fresh_folder(Path(out_dir))
    if s.threads:
        torch.set_num_threads(s.threads)
    started = time.monotonic()
    rows = _rows(
        env_id,
        s,
        rows,
        out,
        budget=budget,
        visibility=visibility,
        env_kwargs=env_kwargs,
        seed=seed,
        on_row=on_row,
    )
    torch.manual_seed(seed)
    model, tok = _scratch(rows, s, seed) if s.scratch else _pretrained(s)
    encoded = [encode_row(tok, row, s.max_length, bool(s.observation_loss)) for row in rows]
    data = Dataset.from_list(encoded)
    config = _sft_config(out, s, seed)
    sink = MetricsSink(out, report_to, config={"trainer": "sft", "env_id": env_id, **asdict(s)})
    metrics = _Metrics(out / "metrics.csv", progress, sink)
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=data,
        processing_class=tok,
        peft_config=_lora_config(s),
        callbacks=[metrics.callback()],
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # library code prints nothing: metrics go to the CSV
    try:
        result = trainer.train()
    finally:
        sink.close()
    trained = _save(trainer.model, tok, out, s)
    meta = _policy_record(
        env_id,
        s,
        trained,
        rows,
        encoded,
        env_kwargs=env_kwargs,
        visibility=visibility,
        budget=budget,
        seed=seed,
        steps=int(trainer.state.global_step),
        loss=float(result.training_loss),
        wall_s=round(time.monotonic() - started, 1),
    )
    (out / POLICY_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return {**meta, "out_dir": str(out), "metrics": metrics.rows}
