"""What the policy reads and writes, as text and as token ids.

* The words of the prompts: :data:`SYSTEM_PROMPT`, :func:`task_prompt` (a prompt that names a
  task; the rollout reads the task back with ``_TASK_TAG``) and :data:`STOP_REASONS`.
* Text: ``_user_text`` renders an observation as the user turn; :func:`action_from_reply`
  takes the action out of a decoded reply.
* Tokens: ``_Dialogue`` renders a dialogue with any chat template, turn by turn, and
  ``_TokenEpisode`` keeps one episode's ids, loss mask and log-probabilities
  (:class:`RolloutEpisode`). The rollout and the trained policy's eval agent share both, so the
  agent plays exactly as the rollout did.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SYSTEM_PROMPT = (
    "You are an agent in a text environment. Each turn, reply with exactly one action and "
    "nothing else."
)


#: Why an episode ended: the env's words (``won``, ``lost``, ``budget``: the turn budget ran
#: out) and the trainer's (``max_completion_length``: the next turn would not fit in the token
#: limit of the whole episode; ``max_turn_tokens``: a reply did not end within its token cap).
STOP_REASONS = ("won", "lost", "budget", "max_completion_length", "max_turn_tokens")
_TASK_TAG = re.compile(r"\[task_id=([^\]\s]+)\]")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_MARK_A, _MARK_U = "\x1fASSISTANT\x1f", "\x1fUSER\x1f"


def task_prompt(task_id: str) -> str:
    """The dataset prompt that names a task; :class:`BudgetMixRollout` plays that task."""
    return f"Play the BudgetMix task [task_id={task_id}]."


def _user_text(obs: str, info: dict[str, Any], show_actions: bool) -> str:
    text = obs
    if show_actions and info.get("admissible_actions"):
        text += "\nActions: " + ", ".join(info["admissible_actions"][:20])
    return text


def action_from_reply(text: str) -> str:
    """The action in a decoded reply: reasoning (``<think>...</think>``) removed, then the first
    non-empty line, or the whole rest when it is JSON (a tool call may span lines).

    An unclosed ``<think>`` leaves no action (an empty, hence invalid, turn).

    >>> action_from_reply("<think>the key is east</think>\\ngo east\\nthanks")
    'go east'
    >>> action_from_reply('{"tool_calls": [\\n {"name": "submit"}]}')
    '{"tool_calls": [\\n {"name": "submit"}]}'
    >>> action_from_reply("<think>still thinking")
    ''
    """
    text = _THINK.sub("", text)
    if "<think>" in text:
        return ""
    text = text.strip()
    if text[:1] in "{[":
        return text
    return text.splitlines()[0].strip() if text else ""


def _stop_reason(info: Mapping[str, Any], terminated: bool) -> str:
    """Why a step ended the episode: the env's ``info["stop_reason"]``, else ``won`` or ``lost``
    (by ``info["won"]``) when it terminated, ``budget`` when it was truncated."""
    fallback = ("won" if info.get("won") else "lost") if terminated else "budget"
    return str(info.get("stop_reason") or fallback)


@dataclass
class RolloutEpisode:
    """One played episode: token ids, the loss mask, log-probs and the outcome."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    won: bool = False
    turns: int = 0
    budget: int = 0
    task_id: str = ""
    seed: int = 0
    stop_reason: str = ""
    #: Turns the env answered as invalid (``info["invalid_action"]``).
    invalid: int = 0
    actions: list[str] = field(default_factory=list)
    #: The sampled ids of every reply, in order (``completion_ids`` is these plus env turns).
    replies: list[list[int]] = field(default_factory=list)


class _Dialogue:
    """Renders a dialogue with any chat template, turn by turn, as token ids.

    The text between an assistant reply and the next generation (end of turn, user header,
    observation, assistant header, and whatever the template adds there, such as Qwen3's empty
    think block with ``enable_thinking=False``) is read off the template once, by rendering a
    probe dialogue. Only new text is ever encoded: the first user turn for the prompt, then each
    new observation with its markup; earlier turns are never re-encoded.
    """

    def __init__(
        self,
        tokenizer: Any,
        system_prompt: str | None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tok = tokenizer
        self.system_prompt = system_prompt
        self.kwargs = dict(chat_template_kwargs or {})
        probe = self._messages("U0") + [
            {"role": "assistant", "content": _MARK_A},
            {"role": "user", "content": _MARK_U},
        ]
        text = self._render(probe)
        after = text[text.index(_MARK_A) + len(_MARK_A) :]
        self.before_obs, _, self.after_obs = after.partition(_MARK_U)
        eos = tokenizer.eos_token or ""
        ends_with_eos = bool(eos) and self.before_obs.startswith(eos)
        self.before_obs_no_eos = self.before_obs[len(eos) :] if ends_with_eos else self.before_obs

    def _render(self, messages: list[dict[str, str]]) -> str:
        return self.tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **self.kwargs
        )

    def _messages(self, first: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return msgs + [{"role": "user", "content": first}]

    def prompt_ids(self, first: str) -> list[int]:
        return self.tok.encode(self._render(self._messages(first)), add_special_tokens=False)

    def env_ids(self, obs: str, reply_ended: bool) -> list[int]:
        head = self.before_obs_no_eos if reply_ended else self.before_obs
        return self.tok.encode(head + obs + self.after_obs, add_special_tokens=False)


class _TokenEpisode:
    """The token state of one episode, shared by the batched rollout and the eval agent.

    ``take_reply`` appends the sampled ids (mask 1) and returns the action, or None when the
    episode ends there (the reply did not end within its cap, or filled the token limit);
    ``take_observation`` appends the env's tokens (mask 0), or ends the episode when the next
    turn would not fit.
    """

    def __init__(
        self,
        dialogue: _Dialogue,
        first_user_text: str,
        limit: int,
        max_turn_tokens: int,
        eos_ids: Sequence[int],
    ) -> None:
        self.dialogue = dialogue
        self.limit = int(limit)
        self.max_turn_tokens = int(max_turn_tokens)
        self.eos_ids = set(int(e) for e in eos_ids)
        self.ep = RolloutEpisode(prompt_ids=dialogue.prompt_ids(first_user_text))
        self.over = False
        #: How a decoded reply becomes the action (the lm agent's rule under ``render="lm"``).
        self.parse = action_from_reply
        #: The actions the env offers this turn (``info["candidate_actions"]``).
        self.offered: list[str] = []

    def context(self) -> list[int]:
        return self.ep.prompt_ids + self.ep.completion_ids

    def room(self) -> int:
        return self.limit - len(self.ep.completion_ids)

    def take_reply(self, ids: Sequence[int], logps: Sequence[float]) -> str | None:
        ep, room = self.ep, self.room()
        ids, logps = list(ids)[:room], [float(x) for x in list(logps)[:room]]
        ep.completion_ids += ids
        ep.env_mask += [1] * len(ids)
        ep.logprobs += logps
        ep.replies.append(ids)
        if not ids or ids[-1] not in self.eos_ids:
            self.over = True
            # No ids at all: no offered action fits in what is left (acting by scoring).
            full = not ids or len(ids) >= room
            ep.stop_reason = "max_completion_length" if full else "max_turn_tokens"
            return None
        text = self.dialogue.tok.decode(ids, skip_special_tokens=True)
        return self.parse(text)

    def take_observation(self, user_text: str) -> bool:
        ep = self.ep
        env_ids = self.dialogue.env_ids(user_text, reply_ended=True)
        if len(ep.completion_ids) + len(env_ids) + 1 > self.limit:
            self.over = True
            ep.stop_reason = "max_completion_length"
            return False
        ep.completion_ids += env_ids
        ep.env_mask += [0] * len(env_ids)
        ep.logprobs += [0.0] * len(env_ids)
        return True
