"""The import graph of the apps: imports run one way, and no module imports itself back.

Layers, bottom to top: tenants <- agents <- tasks_app <- a2a_platform. Every
import counts, at module level or inside a function, `import x` and
`from x import y`, relative ones resolved; migrations and tests do not.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["tenants", "agents", "tasks_app", "a2a_platform"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def app_modules() -> dict[str, Path]:
    modules = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            if {"migrations", "tests"} & set(path.relative_to(ROOT).parts):
                continue
            modules[module_name(path)] = path
    return modules


def imported_names(name: str, path: Path) -> set[str]:
    """Every module `name` imports, as dotted names (a `from` import may name a submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the app modules it imports (third-party and stdlib left out)."""
    modules = app_modules()
    return {name: imported_names(name, path) & set(modules) - {name} for name, path in modules.items()}


def layer_of(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{source} imports {target}"
        for source, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(source)
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def a_circle(graph: dict[str, set[str]], component: list[str]) -> str:
    """One closed path through a component, for the failure message: a -> b -> ... -> a."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        step = sorted(graph[path[-1]] & members)
        nxt = next((target for target in step if target == start), None) or next(
            (target for target in step if target not in seen), None
        )
        if nxt is None or nxt == start:
            return " -> ".join([*path, start])
        path.append(nxt)
        seen.add(nxt)


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    # Module level, inside a function, and a relative import resolved.
    assert "tenants.models" in graph["agents.models"]
    assert "tasks_app.tasks" in graph["tasks_app.apps"]
    assert graph["a2a_platform.console.views.tasks"] >= {"tasks_app.selectors", "tasks_app.operator"}
    parsed = imported_names("tasks_app.protocol.legacy", ROOT / "tasks_app/protocol/legacy/__init__.py")
    assert "tasks_app.protocol.legacy.draft" in parsed


def test_the_checks_catch_an_upward_import_and_a_circle():
    graph = {"tenants.models": {"agents.models"}, "agents.models": {"tenants.models"}}
    assert upward_imports(graph) == ["tenants.models imports agents.models"]
    assert cycles(graph) == [["agents.models", "tenants.models"]]
    assert a_circle(graph, ["agents.models", "tenants.models"]) == (
        "agents.models -> tenants.models -> agents.models"
    )


def test_no_app_imports_from_a_higher_layer():
    assert upward_imports(import_graph()) == []


def test_no_import_circle():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "Import circles:\n" + "\n".join(a_circle(graph, c) for c in found)
