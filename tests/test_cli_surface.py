"""The CLI surface is frozen: the commands, their order, and every argument and option of each (names,
type, range, default, help) as in ``tests/golden/cli_surface.json``; and ``--help`` lists them all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.cli.surface import cli_surface

GOLDEN = Path(__file__).parent / "golden" / "cli_surface.json"


def test_cli_surface_matches_golden():
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = cli_surface(app)
    assert list(got) == list(want), "commands added, removed or reordered"
    for name in want:
        assert got[name] == want[name], (
            f"`moeplan {name}` changed; if intended: python -m moeplan.cli.surface > tests/golden/cli_surface.json"
        )


@pytest.mark.parametrize("command", list(json.loads(GOLDEN.read_text(encoding="utf-8"))))
def test_help_lists_every_option(command):
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert res.exit_code == 0, res.output
    for line in cli_surface(app)[command]["params"]:
        names = line.split(" [")[0].split()
        for name in names:
            if name.startswith("-"):
                assert name in res.output, f"{command} --help lacks {name}"
