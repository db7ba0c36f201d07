"""The Python code blocks of README.md and docs/*.md run as written.

Every fenced ``python`` block is collected as a test with the id ``<page>:<line of the fence>``
and runs in a fresh interpreter (``sys.executable``, cwd a temporary folder, the environment of
the test run, so the cache settings are shared), as if pasted into a script; top-level ``await``
is allowed, as in a notebook. A block fails its test when it raises. Tracebacks name the page
and its line, since each block keeps its line numbers.

Markers are HTML comments (invisible on the rendered page) on the lines right above the fence,
one per line:

``<!-- docs-test: skip: REASON -->``
    not collected (needs a GPU, a Hub model, data or a server the test cannot start...); the
    reason is required, and ``test_enough_blocks_run`` keeps a floor of runnable blocks.
``<!-- docs-test: slow -->``
    a block that takes over 30 s: marked ``docs_slow``, left out of ``make test`` and run by
    ``make test-all``.
``<!-- docs-test: continue -->``
    the block runs after the previous block of its page, in the same process (it uses names
    that block defined); the chain is one test, named by the lines of its blocks.
``<!-- docs-test: serve: budgetmix COMMAND --port N -->``
    the test runs ``budgetmix COMMAND`` on a free port while the block runs and points the
    block's ``127.0.0.1:N`` at it.
``<!-- docs-test: no-compare: REASON -->``
    the block's result comments are not compared (see below); the reason is required.

A block's stated results are checked too: a line that is one expression followed by a comment
holding a Python literal (``info["budget"]  # {'limit': 11, ...}``) fails unless the expression's
value has that ``repr`` or equals the literal, and ``print(x)  # LITERAL`` fails unless
``str(x)`` is the comment's text or ``x`` equals the literal. Comments that are prose (not a
Python literal) are left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from service_helpers import free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]

#: At least this many blocks must be collected (run in `make test` or `make test-all`): marking
#: blocks `skip` cannot empty the test.
MIN_RUNNABLE = 18

#: Markers for blocks on pages whose maintainers have not placed them yet, keyed by (page, a
#: fragment of the block's code found in exactly one block of the page): each acts exactly as
#: the marker written above the block would. Once the page carries its own marker (or the block
#: changes), the entry no longer matches and ``test_pending_markers_match_a_block`` says to
#: delete it.
PENDING_MARKERS: dict[tuple[str, str], str] = {}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
_MARKER = re.compile(r"^[ \t]*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->[ \t]*$")
_ANY_MARKER = re.compile(r"docs-test\s*:")
_PYTHON = {"python", "py", "python3"}
_KINDS = ("skip", "slow", "continue", "serve", "no-compare")


@dataclass
class Block:
    """One fenced Python block of a page."""

    page: str
    line: int  # 1-based line of the opening fence
    code: list[str]  # the block's lines, dedented to the fence
    markers: list[str] = field(default_factory=list)  # the marker bodies, top to bottom

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def kinds(self) -> dict[str, str]:
        """Marker kind -> its argument ('' when it takes none)."""
        found = {}
        for body in self.markers:
            kind, _, arg = body.partition(":")
            found[kind.strip()] = arg.strip()
        return found


@dataclass
class Chain:
    """Blocks of one page that run in one process (a block and the ``continue`` ones after it)."""

    blocks: list[Block]

    @property
    def id(self) -> str:
        return self.blocks[0].page + ":" + "+".join(str(b.line) for b in self.blocks)

    @property
    def slow(self) -> bool:
        return any("slow" in b.kinds() for b in self.blocks)

    @property
    def serves(self) -> list[str]:
        return [b.kinds()["serve"] for b in self.blocks if "serve" in b.kinds()]


def _blocks(page: str, text: str) -> tuple[list[Block], list[str]]:
    """The Python blocks of ``page`` (its ``text``) with their markers, and stray markers."""
    lines = text.splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    used_markers: set[int] = set()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, ticks = opening["indent"], opening["ticks"]
        end = i + 1
        while end < len(lines) and not re.match(rf"^[ \t]*{ticks}`*[ \t]*$", lines[end]):
            end += 1
        if opening["info"].lower() in _PYTHON:
            code = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : end]]
            block = Block(page, i + 1, code)
            above = i - 1
            while above >= 0 and (marker := _MARKER.match(lines[above])):
                block.markers.insert(0, marker["body"])
                used_markers.add(above)
                above -= 1
            blocks.append(block)
        i = end + 1
    for number, text in enumerate(lines):
        if _ANY_MARKER.search(text) and number not in used_markers:
            problems.append(
                f"{page}:{number + 1}: a docs-test marker must be an HTML comment on its own "
                f"line right above a ```python fence: {text.strip()!r}"
            )
    return blocks, problems


def _apply_pending(blocks: list[Block]) -> set[tuple[str, str]]:
    """Give the one unmarked block an entry of PENDING_MARKERS names its marker; returns the
    entries that named exactly one block (an entry naming several marks none of them)."""
    matched = set()
    for (page, fragment), marker in PENDING_MARKERS.items():
        named = [b for b in blocks if b.page == page and fragment in "\n".join(b.code)]
        if len(named) == 1 and not named[0].markers:
            named[0].markers = [marker]
            matched.add((page, fragment))
    return matched


def _check_markers(block: Block) -> list[str]:
    problems = []
    for body in block.markers:
        kind, colon, arg = body.partition(":")
        kind, arg = kind.strip(), arg.strip()
        if kind not in _KINDS:
            problems.append(f"{block.id}: unknown docs-test marker {body!r} (one of {_KINDS})")
        elif kind in ("skip", "serve", "no-compare") and not arg:
            problems.append(f"{block.id}: `docs-test: {kind}:` needs its argument: {body!r}")
        elif kind in ("slow", "continue") and colon:
            problems.append(f"{block.id}: `docs-test: {kind}` takes no argument: {body!r}")
        elif kind == "serve":
            problems += _check_serve(block, arg)
    if "continue" in block.kinds() and "skip" in block.kinds():
        problems.append(f"{block.id}: a skipped block cannot continue another")
    return problems


def _check_serve(block: Block, command: str) -> list[str]:
    words = shlex.split(command)
    if words[:1] != ["budgetmix"] or "--port" not in words[:-1]:
        return [f"{block.id}: `serve:` takes a `budgetmix ... --port N` command: {command!r}"]
    port = words[words.index("--port") + 1]
    if f"127.0.0.1:{port}" not in "\n".join(block.code):
        return [f"{block.id}: the block never names 127.0.0.1:{port}, the served port"]
    return []


def _collect() -> tuple[list[Block], list[Chain], list[str], set[tuple[str, str]]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for page in PAGES:
        found, page_problems = _blocks(page, (ROOT / page).read_text(encoding="utf-8"))
        blocks += found
        problems += page_problems
    matched = _apply_pending(blocks)
    chains: list[Chain] = []
    for block in blocks:
        problems += _check_markers(block)
        kinds = block.kinds()
        if "skip" in kinds:
            continue
        if "continue" in kinds:
            if chains and chains[-1].blocks[0].page == block.page:
                chains[-1].blocks.append(block)
            else:
                problems.append(f"{block.id}: `continue` with no runnable block above it")
            continue
        chains.append(Chain([block]))
    return blocks, chains, problems, matched


BLOCKS, CHAINS, PROBLEMS, MATCHED_PENDING = _collect()


def _stated(line: str) -> tuple[str, str, str] | None:
    """``(indent, expression, stated text)`` of a line ``EXPR  # LITERAL`` (or ``print(x)  #
    TEXT``, with the expression ``print(x)``), else None."""
    import ast

    code, sep, comment = line.partition("  # ")
    if not sep or not code.strip() or code.lstrip().startswith("#"):
        return None
    indent = code[: len(code) - len(code.lstrip())]
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    is_print = (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "print"
        and len(call.args) == 1
        and not call.keywords
    )
    try:
        ast.literal_eval(comment.strip())
    except (ValueError, SyntaxError):
        return None  # prose, not a stated result
    if is_print or not isinstance(call, ast.Call) or getattr(call.func, "id", None) != "print":
        return indent, code.strip(), comment.strip()
    return None  # print() of several values: not compared


def _checked(block: Block) -> list[str]:
    """The block's lines, each stated result rewritten to a check of it."""
    if "no-compare" in block.kinds():
        return list(block.code)
    out = []
    for offset, line in enumerate(block.code):
        stated = _stated(line)
        if stated is None:
            out.append(line)
            continue
        indent, expr, text = stated
        where = block.line + 1 + offset
        if expr.startswith("print("):
            inner = expr[len("print(") : -1]
            out.append(f"{indent}print(__docs_said_str(({inner}), {text!r}, {where}))")
        else:
            out.append(f"{indent}__docs_said(({expr}), {text!r}, {where})")
    return out


def _script(chain: Chain, root: Path) -> str:
    """The chain's code at its page's line numbers (blank lines elsewhere), each stated result
    a check."""
    page_lines = (root / chain.blocks[0].page).read_text(encoding="utf-8").count("\n") + 1
    out = [""] * page_lines
    for block in chain.blocks:
        out[block.line : block.line + len(block.code)] = _checked(block)
    return "\n".join(out) + "\n"


# Runs the script in this interpreter's __main__ (so pickling by reference works as in a script);
# a top-level await makes the code a coroutine, which asyncio runs.
_RUNNER = """\
def __docs_said(value, text, line):
    import ast
    try:
        same = value == ast.literal_eval(text)
    except Exception:
        same = False
    if repr(value) != text and not same:
        raise AssertionError(f"page line {line}: the page says {text}, the code gives {value!r}")
    return value


def __docs_said_str(value, text, line):
    import ast
    try:
        same = value == ast.literal_eval(text)
    except Exception:
        same = False
    if str(value) != text and not same:
        raise AssertionError(f"page line {line}: the page says {text}, the code prints {value}")
    return value


def _run(path, filename):
    import ast, asyncio, inspect
    with open(path, encoding="utf-8") as fh:
        code = compile(fh.read(), filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, globals()))
    else:
        exec(code, globals())


import sys
_run(*sys.argv[1:3])
"""


@contextlib.contextmanager
def _serving(command: str, logs: Path):
    """Run ``budgetmix ... --port N`` on a free port; yields (N, the free port)."""
    words = shlex.split(command)
    at = words.index("--port") + 1
    port = free_port()
    asked, words[at] = words[at], str(port)
    log = (logs / f"serve-{port}.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "budget_envs.cli", *words[1:]],
        cwd=logs,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )

    def answers():
        if proc.poll() is not None:
            raise RuntimeError(f"{command!r} exited:\n{Path(log.name).read_text()[-3000:]}")
        try:
            requests.get(f"http://127.0.0.1:{port}/", timeout=2)
        except requests.RequestException:
            return False
        return True

    try:
        wait_until(answers, f"{command!r} on port {port}", deadline_s=180, every_s=0.2)
        yield asked, port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


PARAMS = [
    pytest.param(chain, id=chain.id, marks=[pytest.mark.docs_slow] if chain.slow else [])
    for chain in CHAINS
]


def _run(chain: Chain, tmp_path: Path, root: Path = ROOT) -> None:
    """Run ``chain`` (servers first, if it names any); fails the test if it raises."""
    script = _script(chain, root)
    with contextlib.ExitStack() as stack:
        for command in chain.serves:
            asked, port = stack.enter_context(_serving(command, tmp_path))
            script = script.replace(f"127.0.0.1:{asked}", f"127.0.0.1:{port}")
        work = tmp_path / "work"
        work.mkdir()
        path = tmp_path / "block.py"
        path.write_text(script, encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-c", _RUNNER, str(path), str(root / chain.blocks[0].page)],
            cwd=work,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        pytest.fail(
            f"{chain.id} failed (exit {proc.returncode}):\n"
            f"--- stdout (end)\n{proc.stdout[-2000:]}\n--- stderr (end)\n{proc.stderr[-6000:]}",
            pytrace=False,
        )


@pytest.mark.parametrize("chain", PARAMS)
def test_block_runs(chain: Chain, tmp_path: Path):
    _run(chain, tmp_path)


def test_a_block_that_raises_fails_its_test(tmp_path: Path):
    page = "\n".join(
        [
            "# A page",
            "```python",
            "x = 1",
            "```",
            "<!-- docs-test: continue -->",
            "```python",
            "y = 1 / (x - 1)  # x comes from the block above",
            "```",
        ]
    )
    (tmp_path / "page.md").write_text(page, encoding="utf-8")
    blocks, problems = _blocks("page.md", page)
    assert not problems and [b.kinds() for b in blocks] == [{}, {"continue": ""}]
    with pytest.raises(pytest.fail.Exception) as failed:
        _run(Chain(blocks), tmp_path, root=tmp_path)
    assert 'page.md", line 7' in str(failed.value), failed.value
    assert "ZeroDivisionError" in str(failed.value), failed.value


@pytest.mark.parametrize(
    "wrong, right, error",
    [
        ("1 + 1  # 3", "1 + 1  # 2", "the page says 3, the code gives 2"),
        ("print([1, 2])  # [1, 3]", "print([1, 2])  # [1, 2]", "the code prints [1, 2]"),
        ("{'a': 0.5}['a']  # 0.25", "{'a': 0.5}['a']  # 0.5", "the code gives 0.5"),
    ],
)
def test_a_stated_result_is_compared_with_what_the_code_gives(tmp_path: Path, wrong, right, error):
    for n, (line, fails) in enumerate([(wrong, True), (right, False)]):
        root = tmp_path / str(n)
        root.mkdir()
        page = "\n".join(["# A page", "```python", "x = 1  # prose is left alone", line, "```"])
        (root / "page.md").write_text(page, encoding="utf-8")
        blocks, problems = _blocks("page.md", page)
        assert not problems
        if fails:
            with pytest.raises(pytest.fail.Exception) as failed:
                _run(Chain(blocks), root, root=root)
            assert error in str(failed.value) and "page line 4" in str(failed.value)
        else:
            _run(Chain(blocks), root, root=root)


def test_no_compare_turns_the_check_off(tmp_path: Path):
    page = "\n".join(
        [
            "# A page",
            "<!-- docs-test: no-compare: illustrative -->",
            "```python",
            "1 + 1  # 3",
            "```",
        ]
    )
    (tmp_path / "page.md").write_text(page, encoding="utf-8")
    blocks, problems = _blocks("page.md", page)
    assert not problems and not _check_markers(blocks[0])
    _run(Chain(blocks), tmp_path, root=tmp_path)


def test_markers_are_well_formed():
    assert not PROBLEMS, "\n".join(PROBLEMS)


def test_marker_mistakes_are_caught():
    page = "\n".join(
        [
            "<!-- docs-test: skip: -->",
            "```python",
            "x = 1",
            "```",
            "<!-- docs-test: slwo -->",
            "```python",
            "```",
            "<!-- docs-test: serve: budgetmix serve-web --port 3000 -->",
            "```python",
            "url = 'http://127.0.0.1:8000'",
            "```",
            "a stray <!-- docs-test: continue --> in the text",
            "",
            "<!-- docs-test: continue -->",
            "```bash",
            "```",
        ]
    )
    blocks, problems = _blocks("page.md", page)
    for block in blocks:
        problems += _check_markers(block)
    assert [b.line for b in blocks] == [2, 6, 9]
    assert len(problems) == 5, problems
    for line, words in [
        (12, "own line right above"),
        (14, "own line right above"),
        (2, "needs its argument"),
        (6, "unknown docs-test marker 'slwo'"),
        (9, "never names 127.0.0.1:3000"),
    ]:
        assert any(f"page.md:{line}" in p and words in p for p in problems), (line, problems)


def test_every_skip_gives_its_reason():
    skipped = [b for b in BLOCKS if "skip" in b.kinds()]
    assert all(b.kinds()["skip"] for b in skipped), [b.id for b in skipped if not b.kinds()["skip"]]


def test_enough_blocks_run():
    skipped = [b for b in BLOCKS if "skip" in b.kinds()]
    runnable = sum(len(chain.blocks) for chain in CHAINS)
    assert runnable + len(skipped) == len(BLOCKS)
    assert runnable >= MIN_RUNNABLE, (
        f"only {runnable} of {len(BLOCKS)} blocks run (floor {MIN_RUNNABLE}); "
        f"skipped: {[b.id for b in skipped]}"
    )


def test_pending_markers_match_a_block():
    stale = sorted(set(PENDING_MARKERS) - MATCHED_PENDING)
    assert not stale, (
        "these PENDING_MARKERS entries do not name exactly one unmarked block (the page has its "
        f"own marker now, or its blocks changed): delete or fix them in "
        f"tests/test_docs_code.py: {stale}"
    )
