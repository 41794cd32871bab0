"""The web application behind ``moeplan serve``: the page (static files packaged with moeplan) and a JSON
API whose answers are the documents the CLI prints with ``--json``, from the same :mod:`moeplan.api`
functions.

Endpoints (``POST`` bodies are JSON, :mod:`moeplan.web.requests`):

- ``GET /`` the page; ``GET /static/...`` its script and style sheet;
- ``GET /api/health`` ``{"status": "ok", "version"}``; ``GET /api/options`` what the form offers;
- ``GET /api/models``, ``GET /api/gpus`` = ``moeplan models --json`` / ``moeplan gpus --json``;
- ``POST /api/check`` = ``check --json``; ``POST /api/estimate`` = ``estimate --json``;
- ``POST /api/plan`` = ``plan --json`` plus ``scenarios`` (each candidate's scenario mapping);
- ``POST /api/export`` ``{format, filename, text, notes, warnings, broken_rules, refused}``.

Errors are JSON ``{"error": {...}}``: bad input 422 (``field`` as the CLI names it, ``input`` the
request field it concerns, ``value``, ``allowed``, ``message`` as the CLI prints it after ``error:``),
a body that is not JSON 400, too large 413, not JSON content 415, a foreign Host 421, every worker
busy and the waiting line full 503 (with ``Retry-After``), a request running out of time 504, and
anything else 500 with an ``id`` whose traceback goes to the server's
log (stderr); never a traceback in an answer.

Requests are computed in worker threads, at most ``workers`` alive at once whatever times out (a
computation past ``request_timeout`` is interrupted and keeps its slot until it has ended:
:mod:`moeplan.web.jobs`); the server answers other requests meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import math
import tempfile
import uuid
from collections.abc import Callable, Iterable
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from moeplan.api import check_report, estimate_report, export_report, gpus_report, models_report, plan_report
from moeplan.api.plan import plan_request
from moeplan.errors import InputError, did_you_mean, short_repr
from moeplan.inputs.layout import PARALLEL_DIMS, LayoutSpec
from moeplan.inputs.training import PRECISIONS
from moeplan.io.export import FORMATS
from moeplan.web.guard import DEFAULT_MAX_BODY, Guard, TooLarge, loopback_hosts
from moeplan.web.jobs import RETRY_AFTER_S, Pool
from moeplan.web.requests import (
    FILENAMES,
    SCENARIO_FORMAT,
    ExportRequest,
    PlanRequest,
    ScenarioRequest,
    candidate_scenario,
    materialize,
    request_field,
    scrub,
)

LOG = logging.getLogger("moeplan.web")
#: seconds a request may compute before it is answered 504 (a plan takes a few seconds)
DEFAULT_REQUEST_TIMEOUT = 120.0
#: computations alive at once (a request past its time keeps its slot until its computation has ended)
DEFAULT_WORKERS = 2
#: requests that may wait for a worker at once, within their time (more are answered 503 at once)
DEFAULT_QUEUE = 8
STATIC = resources.files("moeplan.web") / "static"


def _version() -> str:
    """The installed moeplan's version (the package root, which holds ``__version__``, is imported by
    nothing inside the package)."""
    try:
        return metadata.version("moeplan")
    except metadata.PackageNotFoundError:
        return "unknown"


__version__ = _version()


#: the most characters of a value (a field name, what is allowed) echoed in an error answer
ECHO_CHARS = 200
#: the most characters of an error message in an answer (it quotes values cut already; this bounds
#: the rest, e.g. a list of known names)
MESSAGE_CHARS = 2000
#: the most field problems a 422 lists (``errors``; ``errors_total`` counts them all)
MAX_PROBLEMS = 20
#: the largest integer an answer carries as a number (beyond: its short description, as text)
_MAX_INT_BITS = 64


def _utf8(text: str) -> str:
    """``text`` as valid UTF-8: a lone UTF-16 surrogate (which JSON can carry, UTF-8 cannot) becomes
    its escape, ``\\ud800``."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters followed by ``… (N characters)`` (N: its whole length),
    as valid UTF-8 (:func:`_utf8`). For echoing user values in error answers."""
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text):,} characters)"
    return _utf8(text)


def _echo(value: object) -> object:
    """A user value as an error answer shows it: a number or flag as it is, text cut (:func:`clip`),
    anything else (a list, a mapping, a huge integer) as its short description."""
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int) and value.bit_length() <= _MAX_INT_BITS:
        return value
    return clip(value if isinstance(value, str) else short_repr(value, ECHO_CHARS))


def _finite(obj: Any) -> Any:
    """``obj`` as strict JSON: non-finite floats become null (the CLI prints NaN, which browsers
    refuse), texts valid UTF-8 (:func:`_utf8`)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {_utf8(str(k)): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, str):
        return _utf8(obj)
    if obj is None or isinstance(obj, (int, bool)):
        return obj
    return _utf8(str(obj))


def _error(status: int, message: str, *, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse(_finite({"error": {"message": message, **extra}}), status_code=status, headers=headers)


def input_error_response(exc: InputError, req: ScenarioRequest | None) -> JSONResponse:
    """422 naming the library's field, the request field it concerns, the value and what is allowed;
    each cut to a bounded length (:func:`clip`, :func:`_echo`)."""
    return _error(
        422,
        clip(str(exc), MESSAGE_CHARS),
        field=clip(exc.field),
        input=request_field(exc.field, req),
        value=_echo(exc.value),
        allowed=clip(exc.allowed, MESSAGE_CHARS),
        hint=None if exc.hint is None else clip(exc.hint, MESSAGE_CHARS),
    )


#: what a field of the wrong type allows, by pydantic error type
_ALLOWED = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_parsing": "a number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "string_type": "text",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "list_type": "a list of `section.key=value` texts",
    "dict_type": "a mapping",
}


def _field_problem(e: dict, fields: list[str]) -> dict:
    """One pydantic error as ``{field, message, allowed}`` in the CLI's words."""
    loc = [clip(str(p)) for p in e.get("loc", ()) if p != "body"]
    field = loc[0] if loc else "body"
    value = e.get("input")
    if e.get("type") == "extra_forbidden":
        close = did_you_mean(field, fields)
        allowed = "one of " + ", ".join(fields) + (f" (did you mean {close[0]!r}?)" if close else "")
        return {
            "field": field,
            "message": f"{field}: not a field of this request; allowed: {allowed}",
            "allowed": allowed,
        }
    msg = str(e.get("msg", "")).removeprefix("Input should be ").removeprefix("Value error, ")
    allowed = _ALLOWED.get(e.get("type", ""), msg)
    shown = "missing" if value is None else f"{_utf8(short_repr(value))} is not valid"
    return {"field": field, "message": f"{'.'.join(loc) or 'body'}: {shown}; allowed: {allowed}", "allowed": allowed}


def _validation_response(exc: RequestValidationError, fields: list[str]) -> JSONResponse:
    """A body whose fields have the wrong type or range: 422 on the first field (all are listed);
    a body that is not a JSON object: 400."""
    errs = list(exc.errors())
    if not errs:
        return _error(422, "the request body is not valid")
    if (
        errs[0].get("type") in ("json_invalid", "model_attributes_type", "dict_type", "model_type")
        and len([p for p in errs[0].get("loc", ()) if p != "body"]) == 0
    ):
        return _error(400, "the request body must be a JSON object")
    if errs[0].get("type") == "json_invalid":
        return _error(400, "the request body must be a JSON object (not valid JSON)")
    items = [_field_problem(e, fields) for e in errs[:MAX_PROBLEMS]]
    first = items[0]
    return _error(
        422,
        first["message"],
        field=first["field"],
        input=first["field"],
        allowed=first["allowed"],
        errors=items,
        errors_total=len(errs),
    )


def _work(req: Any, job: Callable[[Any, Path], Any]) -> tuple[str, Any]:
    """``job(req, tmp)`` with a private temporary folder ``tmp``: ``("ok", answer)`` or ``("input",
    InputError)``, scrubbed of that folder's path."""
    with tempfile.TemporaryDirectory(prefix="moeplan-web-") as d:
        tmp = Path(d)
        try:
            return "ok", scrub(job(req, tmp), tmp)
        except InputError as exc:
            sentence = scrub(exc.sentence, tmp) if exc.sentence is not None else None
            clean = InputError(exc.field, scrub(exc.value, tmp), scrub(exc.allowed, tmp), exc.hint, sentence=sentence)
            return "input", clean
        except RecursionError:
            return "input", InputError("body", "too deeply nested", "a scenario of ordinary depth")


def _busy(pool: Pool) -> JSONResponse:
    """503 with ``Retry-After``: every worker busy and the waiting line full (or the server stops)."""
    if pool.closing:
        message = "the server is stopping"
    else:
        message = (
            f"the server is busy ({pool.workers} computations running, {pool.waiting} requests waiting);"
            f" try again in {RETRY_AFTER_S} s"
        )
    return _error(503, message, headers={"Retry-After": str(RETRY_AFTER_S)})


class Jobs:
    """Runs library calls in worker threads, at most ``workers`` alive at once (a computation past its
    time keeps its slot until it has really ended; it is interrupted: :mod:`moeplan.web.jobs`), at
    most ``queue`` requests waiting for a slot (more are answered 503), each request bounded by
    ``timeout`` seconds (then 504), and turns what they raise into JSON answers.

    Raises:
        ValueError: ``workers`` below 1 or ``queue`` below 0.
    """

    def __init__(self, workers: int, timeout: float, queue: int = DEFAULT_QUEUE):
        if workers < 1 or queue < 0:
            raise ValueError(f"workers must be at least 1 and queue at least 0 (not {workers}, {queue})")
        self.pool = Pool(workers, queue)
        self.timeout = timeout

    async def run(self, req: Any, job: Callable[[Any, Path], Any]) -> Response:
        """``job(req, tmp)`` in a worker with a private temporary folder ``tmp``; its answer scrubbed
        of that folder's path. 503 when no slot frees in time, 504 past the timeout (the
        computation interrupted)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        if not await self.pool.acquire(deadline):
            return _busy(self.pool)
        task = self.pool.start(lambda: _work(req, job))  # no await between acquire and start
        try:
            kind, value = await asyncio.wait_for(asyncio.shield(task.future), max(deadline - loop.time(), 0.0))
        except asyncio.TimeoutError:
            self.pool.cancel(task)
            return _error(504, f"the request took longer than {self.timeout:g} s (the server's --request-timeout)")
        except asyncio.CancelledError:  # the client left or the server stops
            self.pool.cancel(task)
            raise
        if kind == "closing":
            return _busy(self.pool)
        if kind == "bug":
            raise value
        if kind == "input":
            return input_error_response(value, req)
        return JSONResponse(_finite(value))


def _check_job(req: ScenarioRequest, tmp: Path) -> dict:
    return check_report(*materialize(req, tmp))


def _estimate_job(req: ScenarioRequest, tmp: Path) -> dict:
    return estimate_report(*materialize(req, tmp)).document


def _plan_job(req: PlanRequest, tmp: Path) -> dict:
    scenario, flags = materialize(req, tmp)
    out = plan_report(
        scenario,
        flags,
        tokens_per_step=req.tokens_per_step,
        top=req.top,
        min_dp=req.min_dp,
        headroom_gib=req.headroom_gib,
        objective=req.objective,
        train_tokens=req.train_tokens,
    )
    request, _ = plan_request(scenario, flags, None, req.tokens_per_step)
    out["scenarios"] = [candidate_scenario(request, c) for c in out["candidates"]]
    return out


def _export_job(req: ExportRequest, tmp: Path) -> dict:
    scenario, flags = materialize(req, tmp)
    out = {"format": req.format, "filename": FILENAMES[req.format]}
    if req.format == SCENARIO_FORMAT:
        data, _ = plan_request(scenario, flags)
        return {**out, "text": yaml.safe_dump(data, sort_keys=False), "notes": [], "warnings": [], "broken_rules": []}
    res = export_report(scenario, flags, req.format, req.megatron_core_version, None, req.force)
    return {
        **out,
        "text": None if res.refused else res.text,
        "notes": res.notes,
        "warnings": res.warnings,
        "broken_rules": res.broken_rules,
        "refused": res.refused,
    }


def options() -> dict:
    """What the form offers: precisions, export formats, parallel sizes and every layout key."""
    return {
        "precisions": list(PRECISIONS),
        "export_formats": [SCENARIO_FORMAT, *FORMATS],
        "parallel_sizes": {dim.lower(): key for dim, key in PARALLEL_DIMS.items()},
        "layout_keys": sorted(LayoutSpec.model_fields),
        "objectives": ["throughput", "time-to-train"],
        "version": __version__,
    }


def _add_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        models: dict[str, type[ScenarioRequest]] = {"/api/plan": PlanRequest, "/api/export": ExportRequest}
        model = models.get(request.url.path, ScenarioRequest)
        return _validation_response(exc, list(model.model_fields))

    @app.exception_handler(TooLarge)
    async def _too_large(request: Request, exc: TooLarge) -> JSONResponse:
        return _error(413, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail).lower())

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        eid = uuid.uuid4().hex[:12]
        LOG.error("error %s on %s %s", eid, request.method, request.url.path, exc_info=exc)
        return _error(500, f"internal error {eid} (a moeplan bug, please report it with the server's log)", id=eid)


def _add_routes(app: FastAPI, jobs: Jobs) -> None:
    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"), media_type="text/html")

    @app.get("/api/health")
    async def health() -> dict:
        return {"status": "ok", "version": __version__}

    @app.get("/api/options")
    async def form_options() -> dict:
        return options()

    @app.get("/api/models")
    async def models() -> JSONResponse:
        return JSONResponse(_finite(models_report()))

    @app.get("/api/gpus")
    async def gpus() -> JSONResponse:
        return JSONResponse(_finite(gpus_report()))

    @app.post("/api/check")
    async def check(req: ScenarioRequest) -> Response:
        """Every Megatron-Core rule on the scenario: the `moeplan check --json` document."""
        return await jobs.run(req, _check_job)

    @app.post("/api/estimate")
    async def estimate(req: ScenarioRequest) -> Response:
        """Memory per pipeline stage and step time: the `moeplan estimate --json` document."""
        return await jobs.run(req, _estimate_job)

    @app.post("/api/plan")
    async def plan(req: PlanRequest) -> Response:
        """The layout search: the `moeplan plan --json` document plus `scenarios` (one per candidate)."""
        return await jobs.run(req, _plan_job)

    @app.post("/api/export")
    async def export(req: ExportRequest) -> Response:
        """What Megatron Bridge / Megatron-LM runs (`moeplan export`), or the scenario YAML itself."""
        return await jobs.run(req, _export_job)


def create_app(
    allowed_hosts: Iterable[str] | None = None,
    *,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    workers: int = DEFAULT_WORKERS,
    queue: int = DEFAULT_QUEUE,
    max_body: int = DEFAULT_MAX_BODY,
) -> Guard:
    """The ASGI application of ``moeplan serve``.

    Args:
        allowed_hosts: Host header names accepted (a guard against DNS rebinding); default the
            loopback names; ``None`` with an explicit ``["*"]`` accepts any.
        request_timeout: seconds a request may wait and compute (then 504; 503 when it got no worker).
        workers: computations alive at once (at least 1).
        queue: requests that may wait for a worker at once (more: 503 at once).
        max_body: largest request body, bytes (then 413).

    Returns:
        The FastAPI app wrapped in :class:`moeplan.web.guard.Guard` (``.app`` is the FastAPI app;
        ``.app.state.jobs`` its :class:`Jobs`, whose ``pool.close()`` interrupts every computation).

    Raises:
        ValueError: ``workers`` below 1 or ``queue`` below 0.
    """
    app = FastAPI(
        title="moeplan",
        version=__version__,
        description="The JSON API of `moeplan serve`: the documents `moeplan check|estimate|plan --json` print.",
        docs_url=None,  # the interactive docs load their scripts from a CDN: nothing leaves the machine
        redoc_url=None,
    )
    _add_handlers(app)
    jobs = Jobs(workers, request_timeout, queue)
    app.state.jobs = jobs
    _add_routes(app, jobs)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    hosts = loopback_hosts() if allowed_hosts is None else list(allowed_hosts)
    return Guard(app, hosts, max_body)


__all__ = ["DEFAULT_QUEUE", "DEFAULT_REQUEST_TIMEOUT", "DEFAULT_WORKERS", "Jobs", "create_app", "options"]
