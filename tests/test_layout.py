"""The package's shape: no import cycles, no hidden imports, small files, layers pointing down.

The imports are read from the source with :mod:`ast` (nothing is imported), over every module of
the ``budget_envs`` import package: ``budget_envs/`` itself plus the folders that
``[tool.setuptools.package-dir]`` in ``pyproject.toml`` maps into it (``wrappers/`` and
``registry/``). Module-level imports and imports inside functions and methods both count (a lazy
import is still a dependency); imports under ``if TYPE_CHECKING:`` do not (they never run).

Edges of the module graph:

* ``import a.b.c`` is an edge to ``a.b.c`` (a package is its ``__init__``);
* ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``;
  relative imports are resolved first;
* a ``"module:attr"`` string naming a package module (the registry table's entry points and
  prepare hooks) is an edge to that module: an import by string, done on demand.

``importlib.import_module`` or ``__import__`` of a package module by a name written in the code
hides an edge from anyone reading the imports, so it is refused: write the import statement.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "budget_envs"
MAX_LINES = 650
#: The most lines a library function may have (its docstring not counted).
MAX_FUNCTION_LINES = 80
#: The functions allowed over MAX_FUNCTION_LINES (at most five): the two trainers' entry points,
#: whose signatures are their documented keyword arguments, and the token loops of decoding,
#: kept whole so each step's work reads in one place.
LONG_FUNCTIONS = {
    "budget_envs/integrations/rllib/training.py:train",
    "budget_envs/integrations/trl/training.py:train",
    "budget_envs/integrations/trl/generation.py:_decode",
    "budget_envs/integrations/lm/engine.py:_decode",
    "budget_envs/integrations/trl/rollout.py:_play_all",
}
MAX_CLI_LINES = 500

#: The layers of CONTRIBUTING.md, bottom first: a module may import its own layer and those
#: below it, never one above. Each rule is a dotted-name prefix (``*``: one name); the longest
#: match wins. Beyond the table of CONTRIBUTING.md: the shared helpers (``errors``, ``_util``)
#: sit with core; ``import budget_envs`` registers the ids, so the package root sits with the
#: registry; the service serves registered ids and eval's Ray back end runs episodes on its env
#: actors, so it sits between the registry and eval; the study trains (integrations) and
#: evaluates, so it sits above both. The family checker (``budget_envs.contract``) builds envs
#: from the registry and judges oracle moves as eval does, so it sits with eval.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "core",
        (
            "budget_envs.core",
            "budget_envs.info",
            "budget_envs.errors",
            "budget_envs._util",
            "budget_envs.spaces",
            "budget_envs.prepare",
            "budget_envs.env_options",
            "budget_envs.fault_turns",
            "budget_envs.hostcheck",
            "budget_envs.snapshot",
            "budget_envs.env_faults",
        ),
    ),
    ("wrappers", ("budget_envs.wrappers",)),
    ("envs", ("budget_envs.envs",)),
    ("registry", ("budget_envs.registry",)),
    ("service", ("budget_envs.service",)),
    ("eval", ("budget_envs.eval", "budget_envs.contract")),
    ("integrations", ("budget_envs.integrations",)),
    ("study", ("budget_envs.study",)),
    (
        "cli",
        ("budget_envs.cli", "budget_envs.commands", "budget_envs.demo", "budget_envs.envs.*.cli"),
    ),
)
LAYER_RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}

#: Modules that belong to one family (envs/<family>/...): a family imports no other family.
FAMILY = re.compile(r"^budget_envs\.envs\.(\w+)(\.|$)")
ENTRY_POINT = re.compile(r"^(budget_envs(?:\.\w+)*):\w+(?:\.\w+)*$")
DYNAMIC_IMPORTS = {"import_module", "__import__"}

#: Tables of entry points whose rows may name a module of a higher layer, by layer: a row is a
#: plugin that implements the table owner's protocol and loads only when its name is asked for
#: (an import statement there would still be refused). Eval's agent kinds name the trained-policy
#: agent, which loads models with the integrations' code.
PLUGIN_TABLES: dict[str, tuple[str, ...]] = {"budget_envs.eval.agents": ("integrations",)}


@dataclass
class Module:
    """One module of the package and what its source says it needs."""

    name: str
    path: Path
    is_package: bool
    edges: dict[str, int] = field(default_factory=dict)  # target module -> first line
    by_string: set[str] = field(default_factory=set)  # targets named only by an entry point
    hidden: list[tuple[int, str]] = field(default_factory=list)  # (line, call source)

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def _roots() -> dict[str, Path]:
    """Import-package name -> folder, from pyproject's package-dir table plus the main one."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapped = config["tool"]["setuptools"]["package-dir"]
    roots = {PACKAGE: ROOT / PACKAGE}
    roots.update({name: ROOT / folder for name, folder in mapped.items()})
    return roots


def _discover() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    roots = _roots()
    for prefix, folder in roots.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
                continue
            # A folder mapped elsewhere is not also part of the main package's tree.
            name = ".".join([prefix, *parts])
            if prefix == PACKAGE and any(
                name == other or name.startswith(other + ".") for other in roots if other != prefix
            ):
                continue
            modules[name] = Module(name, path, path.name == "__init__.py")
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """Collects a module's edges and hidden imports (see the module docstring)."""

    def __init__(self, module: Module, modules: dict[str, Module], source: str) -> None:
        self.module = module
        self.modules = modules
        self.source = source

    def _edge(self, target: str, line: int, *, by_string: bool = False) -> None:
        # The longest prefix that is a module of the package (``a.b.c`` where ``c`` is a class).
        while target and target not in self.modules:
            target = target.rpartition(".")[0]
        if not target or target == self.module.name:
            return
        if by_string and target not in self.module.edges:
            self.module.by_string.add(target)
        elif not by_string:
            self.module.by_string.discard(target)
        self.module.edges.setdefault(target, line)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == PACKAGE:
                self._edge(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.package.split(".")
            if node.level > 1:
                base = base[: -(node.level - 1)]
            name = ".".join(base + ([node.module] if node.module else []))
        else:
            name = node.module or ""
        if name.split(".")[0] != PACKAGE:
            return
        for alias in node.names:
            sub = f"{name}.{alias.name}"
            self._edge(sub if sub in self.modules else name, node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called in DYNAMIC_IMPORTS and node.args and _names_package(node.args[0]):
            self.module.hidden.append((node.lineno, ast.get_source_segment(self.source, node)))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            match = ENTRY_POINT.match(node.value)
            if match:
                self._edge(match.group(1), node.lineno, by_string=True)


def _names_package(arg: ast.expr) -> bool:
    """An argument that spells a module of the package: a literal or an f-string built on one
    (or on ``__name__``)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value.split(".")[0] == PACKAGE
    if isinstance(arg, ast.JoinedStr) and arg.values:
        head = arg.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value.split(".")[0] == PACKAGE
        if isinstance(head, ast.FormattedValue):
            return isinstance(head.value, ast.Name) and head.value.id == "__name__"
    return False


def build_graph() -> dict[str, Module]:
    """Every module of the package with its edges (see the module docstring)."""
    modules = _discover()
    for module in modules.values():
        source = module.path.read_text(encoding="utf-8")
        _Imports(module, modules, source).visit(ast.parse(source, filename=str(module.path)))
    return modules


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return sorted(components)


def _cycle_in(component: list[str], modules: dict[str, Module]) -> list[str]:
    """One concrete cycle through a component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(modules[node].edges):
            if nxt == start:
                return paths[node] + [start]
            if nxt in members and nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start} in {component}")  # Tarjan says there is


def layer_of(name: str) -> str:
    best, best_len = None, -1
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            pattern = re.escape(prefix).replace(r"\*", r"\w+")
            if re.match(rf"^{pattern}(\.|$)", name) and len(prefix) > best_len:
                best, best_len = layer, len(prefix)
    if name == PACKAGE:
        return "registry"  # ``import budget_envs`` registers the ids: it sits with the registry
    if best is None:
        raise AssertionError(f"{name} has no layer: add its path to LAYERS in {__file__}")
    return best


@pytest.fixture(scope="module")
def graph() -> dict[str, Module]:
    modules = build_graph()
    assert {"budget_envs.core", "budget_envs.wrappers", "budget_envs.registry"} <= set(modules)
    assert sum(len(m.edges) for m in modules.values()) > 100, "the walker found almost no imports"
    return modules


def test_the_walker_reads_every_kind_of_import(graph):
    source = (
        "from typing import TYPE_CHECKING\n"
        "import budget_envs.wrappers.budget\n"
        "from . import tasks\n"
        "from .. import registry\n"
        "from budget_envs.eval.runner import run_plan\n"
        "if TYPE_CHECKING:\n"
        "    from budget_envs.eval import report\n"
        "else:\n"
        "    from budget_envs import info\n"
        "def lazy():\n"
        "    from budget_envs.core import TextAgentEnv\n"
        "ROW = 'budget_envs.envs.textworld:TextWorldEnv'\n"
        "def hidden():\n"
        "    importlib.import_module('budget_envs.study')\n"
    )
    name = "budget_envs.envs.webshop.example"
    module = Module(name, ROOT / "budget_envs/envs/webshop/example.py", is_package=False)
    _Imports(module, {**graph, name: module}, source).visit(ast.parse(source))
    assert set(module.edges) == {
        "budget_envs.wrappers.budget",
        "budget_envs.envs.webshop.tasks",  # relative, to a module
        "budget_envs.envs",  # ``from .. import registry``: not a module of envs
        "budget_envs.eval.runner",  # run_plan is a name of the package, not a module
        "budget_envs.info",  # the else branch of TYPE_CHECKING runs
        "budget_envs.core",  # inside a function
        "budget_envs.envs.textworld",  # an entry point string
    }
    assert module.by_string == {"budget_envs.envs.textworld"}
    assert [line for line, _ in module.hidden] == [14]
    # On the real tree: the registry table's entry points and prepare hooks are its edges.
    table = graph["budget_envs.registry.table"]
    assert {"budget_envs.envs.webshop", "budget_envs.envs.textworld.prepare"} <= table.by_string


def test_no_import_cycles(graph):
    edges = {name: set(module.edges) for name, module in graph.items()}
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    described = [
        " -> ".join(_cycle_in(c, graph))
        + (f"  (one of the cycles among {', '.join(c)})" if len(c) > 2 else "")
        for c in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def test_no_import_by_a_name_written_in_the_code(graph):
    hidden = [
        f"{m.path.relative_to(ROOT)}:{line}: {call}"
        for m in graph.values()
        for line, call in m.hidden
    ]
    assert not hidden, (
        "imports of package modules by string hide an edge of the module graph; write an "
        "import statement (inside the function, to stay lazy):\n" + "\n".join(hidden)
    )


def test_no_file_over_the_line_limit(graph):
    long = {
        str(m.path.relative_to(ROOT)): n
        for m in graph.values()
        if (n := len(m.path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines (split them by concern): {long}"


def _function_lengths(path: Path) -> dict[str, int]:
    """Each function's lines, its docstring not counted (by name; the longest of a name)."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(
                getattr(first, "value", None), ast.Constant
            ):
                if isinstance(first.value.value, str):
                    n -= first.end_lineno - first.lineno + 1
            out[node.name] = max(n, out.get(node.name, 0))
    return out


def test_no_function_over_the_line_limit_but_the_allowed_few(graph):
    assert len(LONG_FUNCTIONS) <= 5
    long = {}
    for m in graph.values():
        rel = str(m.path.relative_to(ROOT))
        for name, n in _function_lengths(m.path).items():
            if n > MAX_FUNCTION_LINES:
                long[f"{rel}:{name}"] = n
    over = {k: v for k, v in long.items() if k not in LONG_FUNCTIONS}
    assert not over, (
        f"functions over {MAX_FUNCTION_LINES} lines, docstring aside (split them where an idea "
        f"ends): {over}"
    )
    stale = LONG_FUNCTIONS - set(long)
    assert not stale, f"allowed long functions that are no longer long (drop them): {stale}"


def test_the_function_rule_counts_lines_without_the_docstring(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    path = tmp_path / "m.py"
    path.write_text(f'def f():\n    """Doc\n\n    more."""\n{body}\n\ndef g():\n    return 1\n')
    assert _function_lengths(path) == {"f": 82, "g": 2}


def test_the_cli_module_is_thin(graph):
    lines = len(graph["budget_envs.cli"].path.read_text(encoding="utf-8").splitlines())
    assert lines < MAX_CLI_LINES, (
        f"budget_envs/cli.py has {lines} lines: the CLI only parses, calls and prints "
        f"(under {MAX_CLI_LINES}); move logic into the library"
    )


def test_every_module_has_a_layer(graph):
    layers = {name: layer_of(name) for name in graph}
    assert set(layers.values()) == set(LAYER_RANK), "a layer of LAYERS matches no module"


def test_imports_point_down_the_layers(graph):
    # The one allowance of PLUGIN_TABLES is in use (drop it when it is not).
    assert "budget_envs.integrations.policy_agent" in graph["budget_envs.eval.agents"].by_string
    upward = []
    for name, module in sorted(graph.items()):
        rank = LAYER_RANK[layer_of(name)]
        for target, line in sorted(module.edges.items()):
            plugin = target in module.by_string and layer_of(target) in PLUGIN_TABLES.get(name, ())
            if LAYER_RANK[layer_of(target)] > rank and not plugin:
                upward.append(
                    f"{module.path.relative_to(ROOT)}:{line}: {layer_of(name)} module {name} "
                    f"imports {layer_of(target)} module {target}"
                )
    assert not upward, "imports pointing up the layers (CONTRIBUTING.md):\n" + "\n".join(upward)


def test_a_family_imports_no_other_family(graph):
    families = {m.group(1) for name in graph if (m := FAMILY.match(name))}
    assert {"alfworld", "textworld", "tooluse", "webshop"} <= families
    crossing = []
    for name, module in sorted(graph.items()):
        own = FAMILY.match(name)
        for target, line in sorted(module.edges.items()):
            other = FAMILY.match(target)
            if own and other and own.group(1) != other.group(1) and layer_of(name) != "cli":
                crossing.append(f"{module.path.relative_to(ROOT)}:{line}: {name} -> {target}")
    assert not crossing, "a family imports another family:\n" + "\n".join(crossing)
