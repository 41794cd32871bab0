"""``moeplan serve``: the web page (:mod:`moeplan.web`, imported only when the command runs: its web
framework is not needed by any other command)."""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated

import typer

from moeplan.cli.options import input_errors

HostOpt = Annotated[
    str, typer.Option("--host", help="Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).")
]
PortOpt = Annotated[int, typer.Option("--port", "-p", min=0, max=65535, help="Port (0: any free port).")]
TimeoutOpt = Annotated[
    float, typer.Option("--request-timeout", min=1.0, help="Seconds a request may compute before it is answered 504.")
]


def serve_cmd(host: HostOpt = "127.0.0.1", port: PortOpt = 8000, request_timeout: TimeoutOpt = 120.0) -> None:
    """Serve a local web page to check, estimate and plan layouts in a browser.

    A form (model or an uploaded config.json, GPU and count, sequence, batch, precision, any layout
    key; or a scenario YAML), the verdict and findings, memory per stage and step-time charts, the
    plan table, and downloads of the Bridge overrides / YAML / Slurm script; its JSON API under /api
    answers the same documents as --json. Nothing leaves the machine; Ctrl-C stops it.

    Exit code 0 when stopped, 2 when the address cannot be bound or the web framework is missing."""
    try:
        from moeplan.web.server import is_loopback, serve
    except ImportError as exc:  # installed without its dependencies (pip install --no-deps)
        sys.stderr.write(f"error: moeplan serve needs FastAPI and uvicorn ({exc}); pip install 'fastapi' 'uvicorn'\n")
        raise typer.Exit(2) from None
    if not is_loopback(host):
        sys.stderr.write(
            f"warning: listening on {host}: anyone who can reach this machine can use the page (no authentication)\n"
        )
    with input_errors(), contextlib.suppress(KeyboardInterrupt):
        serve(host, port, request_timeout=request_timeout)


__all__ = ["serve_cmd"]
