"""The package's structure, enforced: imports point down the data flow, the library never imports
the CLI (or typer / rich), function-level imports are only for optional heavy dependencies, and no
function in ``src/`` is longer than 80 lines.

Layers (``docs/architecture.md``): ``units``, ``errors``, ``catalog``, ``i18n``, ``spec`` (0) → ``rules``,
``model``, ``vlm`` (1) → ``plan``, ``io``, ``diagnose`` (2) → ``api`` (3) → ``cli``, ``web`` (4). A module may
import its own layer and those below; the package root (``moeplan/__init__.py``, the public API)
imports everything and is imported by nothing inside the package.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "moeplan"
LAYER = {
    "units": 0,
    "errors": 0,
    "catalog": 0,
    "i18n": 0,
    "spec": 0,
    "rules": 1,
    "model": 1,
    "vlm": 1,
    "plan": 2,
    "io": 2,
    "diagnose": 2,
    "api": 3,
    "cli": 4,
    "web": 4,
    "__main__": 5,  # ``python -m moeplan``: the command line and nothing else
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
            if LAYER.get(target, -1) > LAYER[me]:
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
    bad = ast.parse("from moeplan.cli.app import app\ndef f():\n    from moeplan.spec import model\n")
    ups = [m for _, m in _imports(bad) if m.startswith("moeplan.cli")]
    lazy = [m for fn in ast.walk(bad) if isinstance(fn, ast.FunctionDef) for _, m in _imports(fn)]
    assert ups == ["moeplan.cli.app"] and lazy == ["moeplan.spec"]


def test_readme_stays_a_users_page():
    """Issue #17: a README of at most 12 KB for users (the manual and the validation figures live under docs/)."""
    size = len((SRC.parents[1] / "README.md").read_bytes())
    assert size <= 12 * 1024, f"README.md is {size} bytes; move detail to docs/"
