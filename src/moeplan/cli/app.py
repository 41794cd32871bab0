"""The ``moeplan`` command: the Typer app, its commands (one module per group) and :func:`main`.

Exit codes: 0 ok, 1 the scenario breaks a rule (or does not fit, or B is slower, ...), 2 bad input,
3 a moeplan bug.
"""

from __future__ import annotations

import sys

import typer

from moeplan.cli import (
    check_cmds,
    diagnose_cmds,
    estimate_cmds,
    known_issues_cmds,
    plan_cmds,
    serve_cmds,
    vlm_cmds,
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Check, estimate and plan Megatron-Core / Megatron Bridge layouts for MoE training.",
)

#: (name, function) of every command, in ``--help`` order
COMMANDS = (
    ("check", check_cmds.check),
    ("estimate", estimate_cmds.estimate),
    ("export", estimate_cmds.export_cmd),
    ("log", diagnose_cmds.log_cmd),
    ("compare", diagnose_cmds.compare_cmd),
    ("oom", diagnose_cmds.oom_cmd),
    ("calibrate", diagnose_cmds.calibrate_cmd),
    ("doctor", diagnose_cmds.doctor_cmd),
    ("models", check_cmds.models),
    ("gpus", check_cmds.gpus),
    ("params", check_cmds.params),
    ("rules", check_cmds.rules_cmd),
    ("plan", plan_cmds.plan_cmd),
    ("fit", plan_cmds.fit_cmd),
    ("recipes", plan_cmds.recipes_cmd),
    ("sweep", plan_cmds.sweep_cmd),
    ("vlm-stats", vlm_cmds.vlm_stats_cmd),
    ("serve", serve_cmds.serve_cmd),
    ("known-issues", known_issues_cmds.known_issues_cmd),
)
for _name, _command in COMMANDS:
    app.command(_name)(_command)


def main() -> None:
    """Console-script entry point. Unexpected errors (moeplan bugs) exit with code 3 and one line,
    so that scripts can tell them from a broken rule (1) or bad input (2)."""
    try:
        app(standalone_mode=True)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - last resort: never a traceback for the user
        sys.stderr.write(f"internal error (a moeplan bug, please report): {type(exc).__name__}: {exc}\n")
        raise SystemExit(3) from None


if __name__ == "__main__":
    main()
