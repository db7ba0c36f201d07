"""The interpreter's text both ways: what it prints, cleaned; what it must not read, refused.

The Inform interpreter prints a banner, a status line and its prompt around every answer, and
reads any command, including game-system verbs that write files, open prompts that eat the next
commands or rewind the game behind the tracker's back. These functions keep both sides plain.
"""

from __future__ import annotations

import re

from budget_envs.errors import ActionRejected

__all__ = ["MAX_COMMAND_BYTES", "check_command", "clean_intro", "clean_text", "meta_verb"]

#: Jericho silently cuts commands longer than this (in bytes); longer ones are refused instead.
MAX_COMMAND_BYTES = 190

# Game-system and debugging verbs of the Inform library: they write files (save, script), open
# prompts that eat the next commands (quit, restart), rewind the game behind the tracker's back
# (undo, restore) or reveal/alter the world (debug verbs). All are refused with feedback.
_META_VERBS = frozenset(
    """save restore load script transcript unscript noscript quit q die restart undo verify
    brief verbose superbrief short long notify test actions rules scenes showme purloin abstract
    gonear tree trace random relations responses showheap showverb scope glklist version""".split()
)
# Where the interpreter starts a new command: sentence punctuation, "then" and line breaks (a
# line break ends the command line; core refuses one before it gets here, this is a backstop).
_SEGMENT_SPLIT = re.compile(r"[.;,!?\n\r\v\f]|\bthen\b", re.IGNORECASE)
_STATUS_TAIL = re.compile(r"\n\s*>[^\n]*\s*\Z")
_BLANK_RUNS = re.compile(r"\n{3,}")
_BANNER_LINE = re.compile(r"^[\s$|\\/_]*\$\$[\s$|\\/_]*$")
_EMPTY_FEEDBACK = "(The game prints nothing.)"
_END_PROMPT = re.compile(r"\n*Would you like to RESTART, RESTORE[^\n]*")
_CENTRED = re.compile(r"^ {8,}", re.MULTILINE)


def clean_text(text: str) -> str:
    """The interpreter's text without the prompt, the status line and runs of blank lines.

    >>> clean_text("You see a box.\\r\\n\\n\\n\\nIt is open.\\n\\n> ")
    'You see a box.\\n\\nIt is open.'
    >>> clean_text("\\n> ")
    '(The game prints nothing.)'
    """
    text = text.replace("\r", "")
    text = _STATUS_TAIL.sub("", text)
    text = _END_PROMPT.sub("", text)
    text = _CENTRED.sub("", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = _BLANK_RUNS.sub("\n\n", text).strip()
    return text or _EMPTY_FEEDBACK


def clean_intro(text: str, objective: str) -> str:
    """The first observation: the banner removed, starting at the objective when it is found."""
    text = text.replace("\r", "")
    head = objective.strip()[:60]
    at = text.find(head) if head else -1
    if at >= 0:
        text = text[at:]
    else:
        text = "\n".join(line for line in text.split("\n") if not _BANNER_LINE.match(line))
    return clean_text(text)


def meta_verb(command: str) -> str | None:
    """The first game-system verb in ``command`` (any of its sentences), if there is one.

    >>> meta_verb("take the key, then SAVE")
    'save'
    >>> meta_verb("open the chest") is None
    True
    """
    for segment in _SEGMENT_SPLIT.split(command):
        words = segment.strip().lower().split()
        if not words:
            continue
        verb = words[0].strip("'\"()[]{}<>*")
        if verb in _META_VERBS or verb.startswith("tw-"):
            return verb
    return None


def check_command(action: str) -> None:
    """Raise :class:`~budget_envs.errors.ActionRejected` (the turn's feedback) if ``action`` is
    not plain ASCII, holds a backslash (the interpreter's own command prefix), is over
    :data:`MAX_COMMAND_BYTES` or uses a game-system verb."""
    if not action.isascii():
        raise ActionRejected(
            "Invalid action: the game only reads plain ASCII text. Rephrase without accents "
            "or symbols."
        )
    if "\\" in action:
        # dumb-frotz reads a line that starts with a backslash as one of its own commands
        # (\help prints to the process's stdout, others wait forever for more input).
        raise ActionRejected(
            "Invalid action: the game does not read backslashes (the interpreter takes them as "
            "its own commands). Send an in-game command without one."
        )
    if len(action.strip()) > MAX_COMMAND_BYTES:
        raise ActionRejected(
            f"Invalid action: {len(action.strip())} characters is over the game's limit of "
            f"{MAX_COMMAND_BYTES}. Send one short command."
        )
    verb = meta_verb(action)
    if verb is not None:
        raise ActionRejected(
            f"'{verb}' is a game-system command (save, restore, script, quit, restart, undo "
            "and debugging verbs are not available). Use an in-game action."
        )
