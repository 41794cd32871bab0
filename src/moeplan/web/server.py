"""Serving the application with uvicorn: in the foreground (``moeplan serve``) or in a background thread
(tests, benchmarks). The listening socket is opened here, so that a busy port is a clear error before
anything starts and port 0 picks a free one whose address is then known."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from moeplan.errors import InputError
from moeplan.web.guard import loopback_hosts
from moeplan.web.routes import DEFAULT_QUEUE, DEFAULT_REQUEST_TIMEOUT, DEFAULT_WORKERS, Jobs, create_app

#: seconds a background server may take to start
START_TIMEOUT = 30.0


def addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses ``host`` names as a bind reads it, resolved numerically without any network
    lookup: ``127.1`` is 127.0.0.1, ``0`` and ``""`` are 0.0.0.0 (every interface), ``[::1]`` is ::1;
    ``localhost`` is the loopback addresses. Empty for any other name (it is not resolved here)."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return [ipaddress.ip_address(h) for h in ("127.0.0.1", "::1")]
    flags = socket.AI_PASSIVE | socket.AI_NUMERICHOST
    try:
        infos = socket.getaddrinfo(name or None, 0, type=socket.SOCK_STREAM, flags=flags)
    except (socket.gaierror, UnicodeError, ValueError):
        return []
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def is_loopback(host: str) -> bool:
    """``host`` names only loopback addresses (:func:`addresses`): ``127.1`` does, ``0`` (every
    interface) and a name that is not ``localhost`` do not."""
    found = addresses(host)
    return bool(found) and all(a.is_loopback for a in found)


def allowed_hosts(host: str) -> list[str]:
    """The Host header names a server bound to ``host`` answers: the loopback names, plus ``host``
    itself; any name when bound to every interface (0.0.0.0, ::, ``0``, empty)."""
    if any(a.is_unspecified for a in addresses(host)):
        return ["*"]
    return [*loopback_hosts(), host.strip("[]")]


def open_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free port).

    Raises:
        InputError: the address cannot be bound (in use, not this machine's, not permitted).
    """
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError("--host", host, f"an address of this machine ({exc.strerror})") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InputError("--port", port, f"a port free on {host} ({exc.strerror})") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT/`` of a listening socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


#: the interpreter's GIL switch interval while serving (s; CPython's default is 0.005): a plan computes in
#: a worker thread, and the event loop needs the GIL back for every step of an answer; at 5 ms a turn a
#: health check waited seconds behind a long plan (the convoy effect), at 1 ms it does not
SERVE_SWITCH_INTERVAL_S = 0.001


#: seconds the server waits, when stopping, for answers still being sent (computations are interrupted first)
SHUTDOWN_GRACE_S = 2


class _Server(uvicorn.Server):
    """uvicorn's server, which interrupts every computation and answers every waiting request (503)
    before it waits for the open connections: stopping takes about a second, not a plan's time."""

    def __init__(self, config: uvicorn.Config, jobs: Jobs):
        super().__init__(config)
        self.jobs = jobs

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.jobs.pool.close()
        await super().shutdown(sockets=sockets)


def _server(host: str, request_timeout: float, workers: int, log_level: str, queue: int = DEFAULT_QUEUE) -> _Server:
    sys.setswitchinterval(min(sys.getswitchinterval(), SERVE_SWITCH_INTERVAL_S))
    app = create_app(allowed_hosts(host), request_timeout=request_timeout, workers=workers, queue=queue)
    config = uvicorn.Config(
        app, log_level=log_level, access_log=False, lifespan="off", timeout_graceful_shutdown=SHUTDOWN_GRACE_S
    )
    return _Server(config, app.app.state.jobs)


def _log_to_stderr() -> None:
    log = logging.getLogger("moeplan.web")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("moeplan serve: %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    workers: int = DEFAULT_WORKERS,
    announce: Any = None,
) -> None:
    """Serve until interrupted (Ctrl-C).

    Args:
        host, port: where to listen (port 0: a free port).
        request_timeout, workers: see :func:`moeplan.web.routes.create_app`.
        announce: called with the page's URL once the socket listens (default: print it to stderr).

    Raises:
        InputError: the address cannot be bound.
    """
    sock = open_socket(host, port)
    _log_to_stderr()
    server = _server(host, request_timeout, workers, "warning")
    url = url_of(sock)
    (announce or (lambda u: sys.stderr.write(f"moeplan serve: open {u} (Ctrl-C to stop)\n")))(url)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


@contextlib.contextmanager
def serve_in_thread(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    workers: int = DEFAULT_WORKERS,
    queue: int = DEFAULT_QUEUE,
) -> Iterator[str]:
    """A server in a background thread for the duration of the block; yields its URL. Leaving the
    block stops it (its computations interrupted, about a second).

    Raises:
        InputError: the address cannot be bound. RuntimeError: the server did not start in time.
    """
    sock = open_socket(host, port)
    server = _server(host, request_timeout, workers, "error", queue)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="moeplan-serve")
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        if not server.started:
            raise RuntimeError("the web server did not start")
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


__all__ = ["addresses", "allowed_hosts", "is_loopback", "open_socket", "serve", "serve_in_thread", "url_of"]
