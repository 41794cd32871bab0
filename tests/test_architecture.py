"""The package's structure, enforced: imports point down the data flow, no two packages import
each other, every module name is unique across folders, no module imports a private name of
another, the library never imports the CLI (or typer / rich), function-level imports are only for
optional heavy dependencies, and no function in ``src/`` is longer than 80 lines.

Layers (``docs/architecture.md``): ``units``, ``errors`` (0) → ``i18n`` (1) → ``inputs`` (2) →
``structure`` (3) → ``catalog`` (4) → ``resolve`` (5) → ``rules``, ``model``, ``vlm`` (6) → ``io`` (7) →
``plan`` (8) → ``diagnose`` (9) → ``api`` (10) → ``web`` (11) → ``cli`` (12) → ``__main__`` (13).
A module may import its own package and those of lower layers; packages of one layer never import
each other; the package root (``moeplan/__init__.py``, the public API) imports everything and is
imported by nothing inside the package.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "moeplan"
LAYER = {
    "units": 0,
    "errors": 0,
    "i18n": 1,  # the message catalogues and the output language; imports nothing of moeplan but errors
    "inputs": 2,  # what the user writes: schema, readers, input policy, versions
    "structure": 3,  # parameter counts, FLOPs, pipeline stages, placement, numeric policy
    "catalog": 4,  # packaged data: GPUs, models, containers, perf recipes, known issues
    "resolve": 5,  # one pass from user input to a resolved scenario
    "rules": 6,
    "model": 6,
    "vlm": 6,
    "io": 7,
    "plan": 8,
    "diagnose": 9,
    "api": 10,
    "web": 11,
    "cli": 12,
    "__main__": 13,  # ``python -m moeplan``: the command line and nothing else
}
#: optional or heavy third-party packages that may be imported inside a function (only where used)
LAZY_OK = {"matplotlib", "numpy", "scipy", "PIL", "pyarrow", "pynvml", "torch"}
#: our own modules that may be imported inside a function: the web server (FastAPI, uvicorn), which
#: only `moeplan serve` needs, so that every other command starts without loading it
LAZY_OWN = {"moeplan.web.server"}
MAX_FUNCTION_LINES = 80


def _modules() -> list[tuple[pathlib.Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for p in sorted(SRC.rglob("*.py"))]


def _imports(tree: ast.AST) -> list[tuple[ast.stmt, str]]:
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            out.append((n, n.module))
        elif isinstance(n, ast.Import):
            out += [(n, a.name) for a in n.names]
    return out


def _package(path: pathlib.Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def test_imports_point_down_the_layers():
    bad = []
    for path, tree in _modules():
        me = _package(path)
        if me == "__init__":
            continue
        for node, mod in _imports(tree):
            if mod == "moeplan":
                bad.append(f"{path.relative_to(SRC)}:{node.lineno} imports the package root")
                continue
            if not mod.startswith("moeplan."):
                continue
            target = mod.split(".")[1]
            if target != me and LAYER.get(target, -1) >= LAYER[me]:
                bad.append(f"{path.relative_to(SRC)}:{node.lineno} ({me}) -> {mod}")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_library_never_imports_the_cli_typer_or_rich():
    bad = []
    for path, tree in _modules():
        if _package(path) in ("cli", "__main__"):
            continue
        for node, mod in _imports(tree):
            if mod.split(".")[0] in ("typer", "rich") or mod.startswith("moeplan.cli"):
                bad.append(f"{path.relative_to(SRC)}:{node.lineno} -> {mod}")
    assert not bad, "\n".join(bad)


def test_function_level_imports_only_for_optional_heavy_dependencies():
    bad = []
    for path, tree in _modules():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node, mod in _imports(fn):
                if mod.split(".")[0] not in LAZY_OK and mod not in LAZY_OWN:
                    bad.append(f"{path.relative_to(SRC)}:{node.lineno} {fn.name} imports {mod}")
    assert not bad, "function-level imports of our own or light modules:\n" + "\n".join(sorted(set(bad)))


def test_no_function_over_80_lines():
    long = [
        f"{path.relative_to(SRC)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for path, tree in _modules()
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        and fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, "\n".join(long)


@pytest.mark.parametrize("name", sorted(LAYER))
def test_every_layer_exists(name):
    """The layer map names real packages (a renamed package must update it, not silently pass)."""
    assert (SRC / name).is_dir() or (SRC / f"{name}.py").is_file()


def test_the_checks_can_fail():
    """The checks above catch what they are meant to: an upward import and a lazy import of our own."""
    bad = ast.parse("from moeplan.cli.app import app\ndef f():\n    from moeplan.inputs import layout\n")
    ups = [m for _, m in _imports(bad) if m.startswith("moeplan.cli")]
    lazy = [m for fn in ast.walk(bad) if isinstance(fn, ast.FunctionDef) for _, m in _imports(fn)]
    assert ups == ["moeplan.cli.app"] and lazy == ["moeplan.inputs"]


def test_readme_stays_a_users_page():
    """A README of at most 12 KB for users (the manual and the validation figures live under docs/)."""
    size = len((SRC.parents[1] / "README.md").read_bytes())
    assert size <= 12 * 1024, f"README.md is {size} bytes; move detail to docs/"


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path, tree in _modules():
        me = _package(path)
        for _, mod in _imports(tree):
            if mod.startswith("moeplan.") and mod.split(".")[1] != me:
                graph.setdefault(me, set()).add(mod.split(".")[1])
    return graph


def test_no_two_packages_import_each_other():
    graph = _package_graph()
    both = sorted({tuple(sorted((a, b))) for a, tos in graph.items() for b in tos if a in graph.get(b, set())})
    assert not both, f"packages importing each other: {both}"


def _module_stems() -> dict[str, list[str]]:
    stems: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            stems.setdefault(path.stem, []).append(str(path.relative_to(SRC)))
    return stems


def test_module_names_are_unique_across_folders():
    """A module's name says where it is: ``recipe_fills``, ``perf_recipes`` and ``starting_points``
    rather than three ``recipes.py``."""
    repeats = {stem: paths for stem, paths in _module_stems().items() if len(paths) > 1}
    assert not repeats, f"module names in several folders: {repeats}"


def _private_imports(tree: ast.AST) -> list[str]:
    """``from X import _name`` of a private name of another module (``__future__`` aside)."""
    return [
        f"{n.module}.{a.name}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and n.module != "__future__"
        for a in n.names
        if a.name.startswith("_") and not a.name.startswith("__")
    ]


def test_no_module_or_test_imports_a_private_name_of_another():
    """Private names stay in their module: the library and the tests use public names only."""
    roots = [SRC, SRC.parents[1] / "tests", SRC.parents[1] / "benchmarks", SRC.parents[1] / "scripts"]
    bad = [
        f"{path.relative_to(SRC.parents[1])}: {name}"
        for root in roots
        for path in sorted(root.rglob("*.py"))
        for name in _private_imports(ast.parse(path.read_text()))
    ]
    assert not bad, "imports of private names:\n" + "\n".join(bad)


def test_the_structure_checks_can_fail():
    """The private-name check catches a private import and lets dunder and ``__future__`` imports pass."""
    assert _private_imports(ast.parse("from moeplan.inputs.loading import _hidden, public")) == [
        "moeplan.inputs.loading._hidden"
    ]
    assert _private_imports(ast.parse("from __future__ import annotations\nfrom a import __version__")) == []
