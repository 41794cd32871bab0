"""The checks every HTTP request passes before the application sees it (a plain ASGI wrapper):

- the ``Host`` header names this server (by default a loopback name), so that a page elsewhere cannot
  reach it through DNS rebinding: 421 otherwise;
- a ``POST`` carries JSON (``Content-Type: application/json``), which a page elsewhere cannot send
  without the browser asking first (and this server allows no other origin): 415 otherwise;
- its body is at most ``max_body`` bytes: 413 before reading when ``Content-Length`` says so, and
  :class:`TooLarge` while reading a body sent without a length.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

#: the largest request body accepted, bytes (a scenario or a config.json is a few KiB)
DEFAULT_MAX_BODY = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class TooLarge(HTTPException):
    """A request body over the limit (raised while it is read; answered 413)."""

    def __init__(self, limit: int):
        super().__init__(413, f"the request body is larger than {limit:,} bytes")


def loopback_hosts() -> list[str]:
    """Host names of this machine's loopback interface."""
    return ["127.0.0.1", "localhost", "::1"]


def host_name(header: str) -> str:
    """The host of a ``Host`` header, without the port (``[::1]:8000`` → ``::1``), lower case."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1 : h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


async def _answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI wrapper: host, content type and body size checks, then the wrapped application.

    Args:
        app: the application (``.app`` keeps it).
        hosts: accepted ``Host`` names (``*`` accepts any).
        max_body: the largest body, bytes.
    """

    def __init__(self, app: Any, hosts: Iterable[str], max_body: int = DEFAULT_MAX_BODY):
        self.app = app
        self.hosts = {h.lower().strip("[]") for h in hosts}
        self.max_body = max_body

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = host_name(headers.get("host", ""))
        if "*" not in self.hosts and host not in self.hosts:
            return 421, f"this server answers requests for {', '.join(sorted(self.hosts))} only (Host: {host!r})"
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype != "application/json":
                return 415, "the request body must be JSON (Content-Type: application/json)"
            length = headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                return 413, f"the request body is larger than {self.max_body:,} bytes"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self._refusal(scope)
        if refused is not None:
            await _answer(send, *refused)
            return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise TooLarge(self.max_body)
            return message

        await self.app(scope, bounded, send)


__all__ = ["DEFAULT_MAX_BODY", "Guard", "TooLarge", "host_name", "loopback_hosts"]
