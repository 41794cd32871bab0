"""``.ci/run``, the CI script, run against stand-ins: every command it calls (python3, pip, moeplan, ruff,
mypy, apt-get, shellcheck, chromium, ...) is a small script that records its arguments, so the order
of the steps, where the environments are built and what happens when a tool cannot be installed are
checked in a second, without installing anything. The script is also shellcheck-clean."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REQUIRE_TOOLS, ROOT, missing_tool

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib  # type: ignore[no-redef]

SCRIPT = ROOT / ".ci" / "run"
#: the real commands the script needs besides the stand-ins (bash builtins aside)
SYSTEM = ("mktemp", "rm", "dirname", "tail", "mkdir")
TOOLS = ("shellcheck", "chromium", "chromedriver")

STUB = """#!{bash}
echo "{name} $* [{env}=${{{env}:-}}]" >>{log}
if [ "{name}" = python3 ] && [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin" && echo 'deactivate() {{ unset -f deactivate; }}' >"$3/bin/activate"
fi
if [ "{name}" = moeplan ] && [ "$1" = check ] && [ "$2" = examples/long_context_broken.yaml ]; then exit 1; fi
if [ "{name}" = apt-get ]; then {apt}; fi
exit 0
"""


def _ci_run(tmp_path: Path, tools: bool, apt: str = "exit 0") -> tuple[subprocess.CompletedProcess, list[str], Path]:
    """Run a copy of ``.ci/run`` (with the README beside it, as in a checkout that has its own
    ``.venv``) with only the stand-ins and ``SYSTEM`` on ``PATH``; ``tools``: shellcheck, chromium and
    chromedriver are there; ``apt``: what the apt-get stand-in does. Returns the process, the
    commands it ran (one line each, with ``MOEPLAN_REQUIRE_TOOLS`` as each saw it) and ``TMPDIR``."""
    repo, bin_dir, tmp = tmp_path / "repo", tmp_path / "bin", tmp_path / "tmp"
    for d in (repo / ".ci", repo / ".venv", bin_dir, tmp):
        d.mkdir(parents=True)
    shutil.copy(SCRIPT, repo / ".ci" / "run")
    shutil.copy(ROOT / "README.md", repo / "README.md")
    (repo / ".venv" / "mine").write_text("a developer's own environment\n")
    log = tmp_path / "commands.log"
    log.touch()
    bash = shutil.which("bash")
    assert bash is not None
    names = ["python3", "python", "pip", "moeplan", "ruff", "mypy", "apt-get"] + (list(TOOLS) if tools else [])
    for name in names:
        stub = bin_dir / name
        stub.write_text(STUB.format(bash=bash, name=name, env=REQUIRE_TOOLS, log=log, apt=apt))
        stub.chmod(0o755)
    for name in SYSTEM:
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)
    env = {"PATH": str(bin_dir), "TMPDIR": str(tmp), "HOME": str(tmp_path)}
    res = subprocess.run([bash, str(repo / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    return res, log.read_text().splitlines(), tmp


def _readme_steps(install: str, venv: Path) -> list[str]:
    """The README's command that installs with ``pip install <install>``, as the stand-ins record it:
    one line per command of its ``&&`` chain (activating the environment runs nothing)."""
    start = f"python3 -m venv .venv && . .venv/bin/activate && pip install {install}"
    line = next(x for x in (ROOT / "README.md").read_text().splitlines() if x == start or x.startswith(start + " && "))
    parts = [p for p in line.replace(".venv", str(venv)).split(" && ") if not p.startswith(". ")]
    return [" ".join(shlex.split(p)) for p in parts]


def test_ci_runs_the_readme_commands_in_temporary_environments(tmp_path):
    res, ran, tmp = _ci_run(tmp_path, tools=True)
    assert res.returncode == 0, res.stderr
    commands = [line.rsplit(" [", 1)[0].rstrip() for line in ran]
    venv_root = Path(commands[0].split()[-1]).parent
    assert venv_root.parent == tmp  # mktemp -d under TMPDIR
    main = _readme_steps(".", venv_root / "main-venv")
    tests = _readme_steps("-e '.[test]'", venv_root / "test-venv")
    assert main[:2] == [f"python3 -m venv {venv_root}/main-venv", "pip install ."]
    assert tests == [f"python3 -m venv {venv_root}/test-venv", "pip install -e .[test]", "python -m pytest"]
    assert commands == [
        *main,
        "moeplan check examples/deepseek_v3_gb300.yaml",
        "moeplan check examples/long_context_broken.yaml",
        *tests[:2],
        "ruff check .",
        "ruff format --check .",
        "mypy",
        "python -m pytest",
        "python -c import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)",
        "pip install -e .[oracle,test]",
        "python -m pytest tests/oracle -m oracle -p no:cacheprovider",
        "python benchmarks/bench_check.py --quick",
        "python benchmarks/bench_plan.py --repeat 1",
        "python benchmarks/bench_serve.py --repeat 1",
    ]
    assert all(line.endswith(f"[{REQUIRE_TOOLS}=1]") for line in ran)  # the tests fail on a missing tool
    assert (tmp_path / "repo" / ".venv" / "mine").read_text() == "a developer's own environment\n"
    assert list(tmp.iterdir()) == []  # both environments removed on exit


def test_ci_fails_when_apt_get_cannot_install_the_tools(tmp_path):
    res, ran, tmp = _ci_run(tmp_path, tools=False, apt='echo "E: Unable to locate package $4" >&2; exit 100')
    assert res.returncode == 1
    assert ".ci/run: apt-get could not install shellcheck chromium chromium-driver" in res.stderr
    assert "E: Unable to locate package" in res.stderr  # apt-get's own words shown
    assert [line.split()[:2] for line in ran] == [["apt-get", "update"]]  # nothing else ran
    assert list(tmp.iterdir()) == []
    assert (tmp_path / "repo" / ".venv" / "mine").exists()


def test_ci_fails_when_a_tool_is_still_missing_after_apt_get(tmp_path):
    res, ran, _ = _ci_run(tmp_path, tools=False)  # apt-get succeeds but installs nothing
    assert res.returncode == 1
    assert (
        ".ci/run: shellcheck is still missing after apt-get install shellcheck chromium chromium-driver" in res.stderr
    )
    assert [line.split()[:2] for line in ran] == [["apt-get", "update"], ["apt-get", "install"]]


def test_ci_script_passes_shellcheck():
    shellcheck = shutil.which("shellcheck") or missing_tool(
        "shellcheck is not installed (.ci/run installs it: apt-get install shellcheck)"
    )
    res = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def test_the_linters_are_pinned_exactly_in_the_test_extra():
    """A ruff or mypy release must not turn CI red on unchanged code: one ``name==X.Y.Z`` entry each."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    for tool in ("ruff", "mypy"):
        entries = [e for e in extra if re.match(rf"{tool}(?![\w-])", e)]
        assert len(entries) == 1 and re.fullmatch(rf"{tool}==\d+(\.\d+)*", entries[0]), entries
