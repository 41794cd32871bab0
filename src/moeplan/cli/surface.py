"""The CLI surface as data: every command and each of its arguments and options, frozen by
``tests/golden/cli_surface.json`` (``tests/test_cli_surface.py``).

Regenerate the golden (only when a change to the surface is intended):
``python -m moeplan.cli.surface > tests/golden/cli_surface.json``
"""

from __future__ import annotations

import json

import typer.main

from moeplan.cli.app import app as moeplan_app


def _describe(p) -> str:
    """One parameter as one line: ``OPTS [type, range, multiple, required] = default: help``."""
    names = " ".join(p.opts + p.secondary_opts) if p.param_type_name == "option" else p.name.upper()
    ann = p.type_descriptor.annotation
    kind = [getattr(ann, "__name__", None) or str(ann)]
    if p.min is not None or p.max is not None:
        kind.append(f"{'' if p.min is None else p.min}..{'' if p.max is None else p.max}")
    kind += [w for w, on in (("multiple", p.multiple), ("required", p.required)) if on]
    return f"{names} [{', '.join(kind)}] = {p.default!r}: {p.help or ''}"


def cli_surface(app: typer.Typer | None = None) -> dict[str, dict]:
    """The commands of ``app`` (default: ``moeplan``) in ``--help`` order, each as
    ``{"help": first line of its help, "params": [one line per argument / option, in order]}``.

    Raises:
        nothing (a broken command definition raises typer's own error while building the app).
    """
    group = typer.main.get_command(app or moeplan_app)
    return {
        name: {"help": (cmd.help or "").strip().splitlines()[0], "params": [_describe(p) for p in cmd.params]}
        # get_command() is typed as a click.Command; an app of several commands gives a click.Group
        for name, cmd in group.commands.items()  # type: ignore[attr-defined]
    }


if __name__ == "__main__":
    print(json.dumps(cli_surface(), indent=1, ensure_ascii=False))
