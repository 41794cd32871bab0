"""The agent skills cannot drift from the tool: frontmatter and size, every command they name exists,
their example outputs are what the tool prints now, and every positive eval task's command runs
offline with the expected exit code and facts."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from moeplan.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
SKILLS = sorted((ROOT / "skills").glob("*/SKILL.md"))
EVALS = sorted((ROOT / "evals").glob("*.yaml"))
COMMANDS = {c.name or c.callback.__name__ for c in app.registered_commands}


def test_skills_exist():
    assert {p.parent.name for p in SKILLS} == {"moeplan-moe-long-context", "moeplan-moe-vlm"}


@pytest.mark.parametrize("path", SKILLS, ids=lambda p: p.parent.name)
def test_skill_format(path):
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 500
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert m, "frontmatter"
    front = yaml.safe_load(m.group(1))
    assert front["name"] == path.parent.name
    assert len(front["description"]) > 100 and front["license"]
    for section in ("## Instructions", "## Examples", "## Limits"):
        assert section in text
    # every `moeplan X` the skill mentions is a real command
    used = set(re.findall(r"`moeplan ([a-z-]+)", text)) | set(re.findall(r"moeplan-output: ([a-z-]+)", text))
    assert used and used <= COMMANDS, used - COMMANDS


def test_examples_are_generated_not_typed():
    res = subprocess.run(
        [sys.executable, str(ROOT / "skills" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _tasks():
    for p in EVALS:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
        for i, t in enumerate(data["positive"]):
            yield pytest.param(data["skill"], t, id=f"{data['skill']}-{i}")


def test_evals_cover_both_skills():
    skills = {yaml.safe_load(p.read_text())["skill"] for p in EVALS}
    assert skills == {p.parent.name for p in SKILLS}
    for p in EVALS:
        data = yaml.safe_load(p.read_text())
        assert len(data["positive"]) >= 3 and len(data["negative"]) >= 2


@pytest.mark.parametrize(("skill", "task"), list(_tasks()))
def test_eval_task(skill, task, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = shlex.split(task["command"])
    assert args[0] in COMMANDS
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code in task["exit_codes"], res.output[-2000:]
    for fact in task["facts"]:
        assert fact in res.output, f"{fact!r} missing from `moeplan {task['command']}`"
    # the skill states the point, so that an agent following it makes it (offline: the text itself)
    text = " ".join((ROOT / "skills" / skill / "SKILL.md").read_text(encoding="utf-8").split())
    for fact in task.get("skill_facts", []):
        assert " ".join(fact.split()) in text, f"{fact!r} missing from skills/{skill}/SKILL.md"


def test_every_point_of_issue_20_has_an_eval():
    """The points the skills missed, one eval each."""
    points = [t.get("point", "") for p in EVALS for t in yaml.safe_load(p.read_text())["positive"]]
    for needle in (
        "moeplan recipes",
        "published, measured layout",
        "not cut",
        "eager",
        "core-attention",
        "differ from the published",
        "benchmark-only",
        "assumptions",
    ):
        assert any(needle in p for p in points), needle
