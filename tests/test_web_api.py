"""The JSON API of ``moeplan serve`` in-process (FastAPI's test client): every endpoint answers the
document the CLI prints with ``--json`` (from the same :mod:`moeplan.api` call), bad input is a 422
naming the field as the CLI does and the request field it concerns, and no request gets a traceback
or stops the server. Also the request plumbing (:mod:`moeplan.web.requests`), the guard
(:mod:`moeplan.web.guard`), a real server in a thread and ``moeplan serve`` itself."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from moeplan.api import ScenarioFlags, check_report, estimate_report, export_report, gpus_report, models_report
from moeplan.cli.app import app as cli_app
from moeplan.web import create_app, serve_in_thread
from moeplan.web import routes as web_app
from moeplan.web.guard import host_name
from moeplan.web.requests import (
    ScenarioRequest,
    candidate_scenario,
    materialize,
    normalise_sets,
    request_field,
    scrub,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DSV3 = {
    "model": "deepseek-ai/DeepSeek-V3",
    "gpu": "h100",
    "num_gpus": 256,
    "seq_length": 131072,
    "precision": "fp8-blockwise",
}
DSV3_FLAGS = ScenarioFlags(
    model="deepseek-ai/DeepSeek-V3", gpu="h100", num_gpus=256, seq_length=131072, precision="fp8-blockwise"
)
#: a layout of DSV3 that fits (the plan's #1), with a batch
DSV3_LAYOUT = {
    "tp": 8,
    "pp": 4,
    "vpp": 4,
    "cp": 4,
    "ep": 64,
    "gbs": 32,
    "sets": [
        "layout.pipeline_model_parallel_layout=E,t*3|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*2,m,L",
        "recompute_granularity=selective",
        "recompute_modules=[moe_act,layernorm,mla_up_proj,moe]",
        "optimizer_cpu_offload=true",
        "optimizer_offload_fraction=0.5",
        "use_precision_aware_optimizer=true",
    ],
}
#: a quick plan (under a second of search)
SMALL = {"model": "Qwen/Qwen3-8B", "gpu": "h100", "num_gpus": 8, "seq_length": 4096}


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), base_url="http://127.0.0.1")


@pytest.fixture(scope="module")
def small_plan(client):
    r = client.post("/api/plan", json=SMALL)
    assert r.status_code == 200, r.text
    return r.json()


def _cli_json(args: list[str]) -> object:
    res = CliRunner().invoke(cli_app, args)
    return json.loads(res.stdout)


def _error(r, status: int = 422) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert "Traceback" not in r.text
    return err


# ---------- the page ----------


def test_page_and_static_files_are_served_from_the_package(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="form"' in page.text and "/static/app.js" in page.text
    for name, kind in (("app.js", "javascript"), ("style.css", "text/css")):
        r = client.get(f"/static/{name}")
        assert r.status_code == 200 and kind in r.headers["content-type"]


def test_nothing_is_loaded_from_elsewhere():
    """Offline: the page, its script and its style sheet name no other host (no CDN, no fonts)."""
    static = resources.files("moeplan.web") / "static"
    names = sorted(p.name for p in static.iterdir())
    assert names == ["app.js", "index.html", "style.css"]
    for name in names:
        text = (static / name).read_text(encoding="utf-8")
        urls = [
            u for u in re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", text) if "w3.org/2000/svg" not in u
        ]
        assert not urls, f"{name} loads from elsewhere: {urls}"
        assert "@import" not in text and "fonts.googleapis" not in text


def test_static_files_are_package_data():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"web/static/*"' in text


# ---------- GET endpoints ----------


def test_health_options_models_gpus(client):
    assert client.get("/api/health").json()["status"] == "ok"
    opts = client.get("/api/options").json()
    assert "fp8-blockwise" in opts["precisions"] and opts["export_formats"][0] == "scenario-yaml"
    assert "slurm" in opts["export_formats"] and "recompute_granularity" in opts["layout_keys"]
    assert opts["parallel_sizes"]["tp"] == "tensor_model_parallel_size"
    assert client.get("/api/models").json() == json.loads(json.dumps(models_report()))
    assert client.get("/api/gpus").json() == json.loads(json.dumps(gpus_report()))


def test_openapi_schema_lists_the_endpoints_and_no_cdn_docs(client):
    paths = client.get("/openapi.json").json()["paths"]
    for p in ("/api/check", "/api/estimate", "/api/plan", "/api/export", "/api/models", "/api/gpus", "/api/health"):
        assert p in paths
    assert client.get("/docs").status_code == 404  # the interactive docs would load scripts from a CDN


# ---------- the documents are the CLI's ----------


def test_check_is_the_cli_document(client):
    r = client.post("/api/check", json=DSV3)
    assert r.status_code == 200
    assert r.json() == json.loads(json.dumps(check_report(None, DSV3_FLAGS)))
    cli = _cli_json(
        [
            "check",
            "--model",
            DSV3["model"],
            "--gpu",
            "h100",
            "--num-gpus",
            "256",
            "--seq-length",
            "131072",
            "--precision",
            "fp8-blockwise",
            "--json",
        ]
    )
    assert r.json() == cli


def test_check_of_a_broken_scenario_file(client):
    text = (EXAMPLES / "long_context_broken.yaml").read_text()
    doc = client.post("/api/check", json={"scenario_yaml": text}).json()
    want = check_report(EXAMPLES / "long_context_broken.yaml")
    assert doc["verdict"] == want["verdict"] == "unsupported"
    assert [f["rule_id"] for f in doc["findings"]] == [f["rule_id"] for f in want["findings"]]
    assert all({"rule_id", "message", "fix", "severity"} <= set(f) for f in doc["findings"])


def test_estimate_is_the_cli_document(client):
    req = {**DSV3, **DSV3_LAYOUT}
    r = client.post("/api/estimate", json=req)
    assert r.status_code == 200, r.text
    doc = r.json()
    sets = tuple(normalise_sets(DSV3_LAYOUT["sets"]))
    flags = ScenarioFlags(
        **{**DSV3_FLAGS.__dict__, "tp": 8, "pp": 4, "vpp": 4, "cp": 4, "ep": 64, "gbs": 32, "sets": sets}
    )
    assert doc == json.loads(json.dumps(estimate_report(None, flags).document))
    assert doc["memory"]["verdict"] in ("fits", "tight") and len(doc["memory"]["stages"]) == 4
    assert doc["throughput"]["tokens_per_s_per_gpu"] > 0 and doc["throughput"]["validity"]["error_band_pct"] > 0


def test_estimate_of_an_example_file_matches_the_cli(client):
    text = (EXAMPLES / "deepseek_v3_gb300.yaml").read_text()
    doc = client.post("/api/estimate", json={"scenario_yaml": text}).json()
    assert doc == _cli_json(["estimate", str(EXAMPLES / "deepseek_v3_gb300.yaml"), "--json"])


def test_plan_is_the_cli_document_plus_scenarios(client, small_plan):
    cli = _cli_json(
        ["plan", "--model", SMALL["model"], "--gpu", "h100", "--num-gpus", "8", "--seq-length", "4096", "--json"]
    )
    web = {k: v for k, v in small_plan.items() if k not in ("seconds", "scenarios")}
    assert web == {k: v for k, v in cli.items() if k != "seconds"}
    assert len(small_plan["scenarios"]) == len(small_plan["candidates"]) == 5


def test_each_candidate_scenario_estimates_as_planned(client, small_plan):
    """A click on a candidate checks and exports its scenario: that scenario is the layout planned
    (the estimate of it gives the candidate's own peak memory and tokens/s/GPU)."""
    for cand, scn in zip(small_plan["candidates"], small_plan["scenarios"], strict=True):
        doc = client.post("/api/estimate", json={"scenario": scn}).json()
        assert doc["memory"]["peak_bytes"] == pytest.approx(cand["memory"]["peak_bytes"], rel=1e-9)
        assert doc["throughput"]["tokens_per_s_per_gpu"] == pytest.approx(
            cand["throughput"]["tokens_per_s_per_gpu"], rel=1e-9
        )
        assert client.post("/api/check", json={"scenario": scn}).json()["verdict"] in ("valid", "warn")


def test_plan_holds_a_given_layout_key_and_takes_tokens_per_step(client):
    doc = client.post("/api/plan", json={**SMALL, "tp": 2, "tokens_per_step": 1_000_000, "top": 2}).json()
    assert len(doc["candidates"]) <= 2
    assert all(c["layout"]["tensor_model_parallel_size"] == 2 for c in doc["candidates"])
    assert doc["request"]["global_batch_size"] == 256  # the CLI's rounding of 1,000,000 / 4096
    assert any("--tokens-per-step" in n for n in doc["notes"])


def test_plan_with_nothing_that_fits(client):
    doc = client.post("/api/plan", json={**DSV3, "num_gpus": 8}).json()
    assert doc["candidates"] == [] and doc["scenarios"] == [] and doc["rejected"]


# ---------- export ----------


@pytest.mark.parametrize("fmt", ["mbridge-overrides", "mbridge-yaml", "mbridge-python", "megatron-lm-args", "slurm"])
def test_export_formats_are_the_cli_text(client, fmt):
    path = EXAMPLES / "deepseek_v3_gb300.yaml"
    out = client.post("/api/export", json={"scenario_yaml": path.read_text(), "format": fmt}).json()
    assert out["text"] == export_report(path, None, fmt).text
    assert out["refused"] is False and out["filename"]


def test_export_of_a_candidate_and_its_scenario_yaml(client, small_plan):
    scn = small_plan["scenarios"][0]
    out = client.post("/api/export", json={"scenario": scn, "format": "mbridge-overrides"}).json()
    tp = small_plan["candidates"][0]["layout"]["tensor_model_parallel_size"]
    assert f"model.tensor_model_parallel_size={tp}" in out["text"] and out["filename"] == "mbridge_overrides.txt"
    y = client.post("/api/export", json={"scenario": scn, "format": "scenario-yaml"}).json()
    assert y["filename"] == "scenario.yaml" and yaml.safe_load(y["text"]) == scn


def test_export_refuses_a_broken_layout_unless_forced(client):
    text = (EXAMPLES / "long_context_broken.yaml").read_text()
    out = client.post("/api/export", json={"scenario_yaml": text, "format": "mbridge-overrides"}).json()
    assert out["refused"] is True and out["text"] is None and out["broken_rules"]
    forced = client.post("/api/export", json={"scenario_yaml": text, "format": "slurm", "force": True}).json()
    assert forced["refused"] is False and forced["text"].startswith("#!")


# ---------- an uploaded config.json ----------


def _config_text() -> str:
    return (resources.files("moeplan.catalog") / "data" / "models" / "Qwen__Qwen3-8B.json").read_text()


def test_uploaded_config_is_the_model_and_its_path_never_shows(client):
    req = {**{k: v for k, v in SMALL.items() if k != "model"}, "config_json": _config_text()}
    r = client.post("/api/check", json=req)
    assert r.status_code == 200, r.text
    assert r.json()["scenario"]["model"] in ("config.json", "Qwen/Qwen3-8B")
    plan = client.post("/api/plan", json={**req, "top": 1})
    assert plan.status_code == 200 and "moeplan-web-" not in plan.text
    scn = plan.json()["scenarios"][0]
    assert scn["model"] == "config.json"
    est = client.post("/api/estimate", json={"scenario": scn, "config_json": req["config_json"]})
    assert est.status_code == 200 and est.json()["memory"]["verdict"] == "fits"


def test_bad_config_is_shown_at_the_upload(client):
    err = _error(client.post("/api/check", json={**SMALL, "model": None, "config_json": "{not json"}))
    assert err["field"] == "model" and err["input"] == "config_json" and "moeplan-web-" not in err["message"]


# ---------- bad input: 422 beside its field, as the CLI says it ----------


def _cli_error(args: list[str]) -> str:
    res = CliRunner().invoke(cli_app, args)
    assert res.exit_code == 2
    return res.stderr.strip().removeprefix("error: ")


@pytest.mark.parametrize(
    ("change", "field", "input_", "flag"),
    [
        ({"gpu": "h1000"}, "system.gpu", "gpu", ["--gpu", "h1000"]),
        ({"precision": "fp9"}, "training.precision", "precision", ["--precision", "fp9"]),
        ({"model": "DeepSeek-V9"}, "model", "model", ["--model", "DeepSeek-V9"]),
        (
            {"sets": ["layout.tensor_model_parallel_size=x"]},
            "layout.tensor_model_parallel_size",
            "sets",
            ["--set", "layout.tensor_model_parallel_size=x"],
        ),
        ({"sets": ["no_such_key=1"]}, "layout.no_such_key", "sets", ["--set", "layout.no_such_key=1"]),
        ({"sets": ["oops"]}, "--set", "sets", ["--set", "oops"]),
    ],
)
def test_bad_input_names_its_field_with_the_cli_message(client, change, field, input_, flag):
    base = {k: v for k, v in DSV3.items() if k not in change}
    err = _error(client.post("/api/check", json={**base, **change}))
    assert (err["field"], err["input"]) == (field, input_)
    args = ["check"]
    for key, value in base.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    assert err["message"] == _cli_error([*args, *flag])


@pytest.mark.parametrize(
    ("path", "body", "input_"),
    [
        ("/api/check", {**DSV3, "num_gpus": "many"}, "num_gpus"),
        ("/api/check", {**DSV3, "modle": "x"}, "modle"),
        ("/api/plan", {**DSV3, "top": 0}, "top"),
        ("/api/plan", {**SMALL, "gbs": 8, "tokens_per_step": 65536}, "tokens_per_step"),
        ("/api/plan", {**SMALL, "tokens_per_step": 100}, "tokens_per_step"),
        ("/api/plan", {**SMALL, "objective": "fastest"}, "objective"),
        ("/api/plan", {**SMALL, "objective": "time-to-train"}, "train_tokens"),
        ("/api/export", {**SMALL, "format": "pdf"}, "format"),
        ("/api/check", {"scenario_yaml": "model: [unclosed\n"}, "scenario_yaml"),
        ("/api/check", {"scenario_yaml": "model: a\nmodel: b\n"}, "scenario_yaml"),
        ("/api/check", {"scenario_yaml": "- a list\n"}, "scenario_yaml"),
        ("/api/check", {"scenario_yaml": "x: 1", "scenario": {"model": "Qwen3-8B"}}, "scenario_yaml"),
        ("/api/check", {"scenario": {"system": {"gpu": "h1000"}}}, "scenario"),
        ("/api/check", {**SMALL, "config_json": "{}"}, "config_json"),
    ],
)
def test_bad_input_is_422_with_the_request_field(client, path, body, input_):
    err = _error(client.post(path, json=body))
    assert err["input"] == input_, err
    assert err["message"]


def test_a_model_path_is_refused_never_read(client, tmp_path):
    secret = tmp_path / "config.json"
    secret.write_text(_config_text())
    for body in (
        {**SMALL, "model": str(secret)},
        {"scenario_yaml": f"model: {secret}\n"},
        {"scenario": {"model": str(secret)}},
    ):
        err = _error(client.post("/api/check", json=body))
        assert err["field"] == "model" and "upload a config.json" in err["allowed"]


def test_tmp_paths_never_show_in_errors(client):
    err = _error(client.post("/api/check", json={"scenario_yaml": "model: [\n"}))
    assert "moeplan-web-" not in json.dumps(err) and "scenario.yaml" in err["message"]


def _post_raw(client, path: str, body: dict):
    """``body`` as JSON text, ``\\ud800`` escapes included (``json=`` would refuse a lone surrogate)."""
    return client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    ("change", "input_"),
    [
        ({"gpu": "\ud800"}, "gpu"),
        ({"model": "Qwen\ud800"}, "model"),
        ({"sets": ["cp_comm_type=\udfff"]}, "sets"),
        ({"scenario_yaml": "model: \ud800\n", "model": None}, "scenario_yaml"),
        ({"scenario": {"model": "\ud800"}, "model": None}, "scenario"),
        ({"scenario": {"\ud800": 1}, "model": None}, "scenario"),
        ({"config_json": '{"model_type": "\ud800"}', "model": None}, "config_json"),
        ({"\ud800": 1}, "body"),  # a field name that is no text: the body is refused
    ],
)
def test_a_lone_surrogate_in_any_text_is_422_naming_its_field(client, change, input_):
    """JSON can carry a lone UTF-16 surrogate, UTF-8 cannot: it was a 500 (the answer could not be
    encoded) or a crash writing the scenario file; the CLI refuses the same text with exit 2."""
    body = {k: v for k, v in {**SMALL, **change}.items() if v is not None}
    err = _error(_post_raw(client, "/api/check", body))
    assert err["input"] == input_, err
    assert "\\ud8" in err["message"] or "\\udf" in err["message"] or "U+D" in err["message"]


def test_echoed_values_are_cut_and_answers_stay_small(client):
    """A 500,000-character value was echoed whole (a 422 of megabytes): values are cut to 200
    characters followed by their length; messages, field names and the list of problems are bounded."""
    err = _error(client.post("/api/check", json={**SMALL, "gpu": "x" * 500_000}))
    assert err["value"] == "x" * 200 + "… (500,000 characters)"
    r = client.post("/api/check", json={**SMALL, "num_gpus": "9" * 500_000, "y" * 500_000: 1})
    err = _error(r)
    assert len(r.content) < 5_000 and err["errors_total"] == 2
    assert any(e["field"] == "y" * 200 + "… (500,000 characters)" for e in err["errors"])
    r = client.post("/api/check", json={**SMALL, **{f"k{i}": 1 for i in range(3000)}})
    err = _error(r)
    assert err["errors_total"] == 3000 and len(err["errors"]) == 20 and len(r.content) < 20_000


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/api/check", "num_gpus", True),
        ("/api/check", "num_gpus", "8"),
        ("/api/check", "num_gpus", 8.0),
        ("/api/check", "tp", False),
        ("/api/plan", "top", True),
        ("/api/plan", "min_dp", "1"),
        ("/api/plan", "headroom_gib", "5"),
        ("/api/export", "force", "yes"),
    ],
)
def test_fields_are_typed_as_strictly_as_the_cli_options(client, path, field, value):
    """``true``, ``"8"`` and ``8.0`` were taken as integers (``true`` as 1 GPU); the CLI refuses them."""
    err = _error(client.post(path, json={**SMALL, field: value}))
    assert (err["field"], err["input"]) == (field, field)
    assert err["allowed"] in ("an integer", "a number", "true or false")


def test_an_integer_is_still_a_number_for_number_fields(client):
    r = client.post("/api/plan", json={**SMALL, "headroom_gib": 5, "top": 1})
    assert r.status_code == 200 and r.json()["request"]["headroom_gib"] == 5.0


# ---------- the protocol: not JSON, too large, foreign hosts, unknown paths ----------


def test_bodies_that_are_not_a_json_object(client):
    for body in (b"{", b"[]", b"3", b"null", b"\xff\xfe"):
        r = client.post("/api/check", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]


def test_a_body_that_is_not_json_content(client):
    r = client.post("/api/check", content=b"model=x", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415


def test_a_body_over_the_limit(client):
    big = json.dumps({"scenario_yaml": "#" * (1024 * 1024)})
    assert client.post("/api/check", content=big, headers={"content-type": "application/json"}).status_code == 413

    def chunks():  # no Content-Length: counted while read
        yield b'{"scenario_yaml": "'
        for _ in range(300):
            yield b"#" * 4096
        yield b'"}'

    r = client.post("/api/check", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than" in r.json()["error"]["message"]


def test_a_foreign_host_is_refused():
    """A page elsewhere reaching the local server by DNS rebinding names its own host: 421."""
    c = TestClient(create_app(), base_url="http://attacker.example")
    assert c.get("/api/health").status_code == 421
    assert TestClient(create_app(["*"]), base_url="http://any.example").get("/api/health").status_code == 200
    assert TestClient(create_app(), base_url="http://localhost:8000").get("/api/health").status_code == 200


def test_unknown_paths_and_methods_are_json(client):
    assert client.get("/api/nope").json()["error"]["message"] == "not found"
    assert client.get("/api/plan").status_code == 405 and "error" in client.get("/api/plan").json()
    assert client.get("/static/nope.js").status_code == 404


def test_host_header_parsing():
    assert host_name("127.0.0.1:8000") == "127.0.0.1"
    assert host_name("[::1]:8000") == "::1"
    assert host_name("LOCALHOST") == "localhost"
    assert host_name("::1") == "::1"


# ---------- never a traceback, never down ----------


def test_a_bug_is_500_with_an_id_and_the_traceback_only_in_the_log(monkeypatch, caplog):
    def broken(*a, **k):
        raise RuntimeError("secret detail")

    monkeypatch.setattr(web_app, "check_report", broken)
    c = TestClient(create_app(), base_url="http://127.0.0.1", raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="moeplan.web"):
        r = c.post("/api/check", json=SMALL)
    assert r.status_code == 500
    err = r.json()["error"]
    assert err["id"] and "secret detail" not in r.text and "Traceback" not in r.text
    assert any(err["id"] in rec.getMessage() and rec.exc_info for rec in caplog.records)
    monkeypatch.undo()
    assert c.post("/api/check", json=SMALL).status_code == 200  # and the server goes on


def test_a_request_over_its_time_is_504_and_the_server_goes_on(monkeypatch):
    def slow(*a, **k):
        time.sleep(1.5)
        return {}

    monkeypatch.setattr(web_app, "check_report", slow)
    c = TestClient(create_app(request_timeout=0.3), base_url="http://127.0.0.1")
    t = time.perf_counter()
    r = c.post("/api/check", json=SMALL)
    assert r.status_code == 504 and time.perf_counter() - t < 1.4
    assert c.get("/api/health").status_code == 200


def test_the_server_answers_while_a_plan_runs():
    """A plan computes in a worker thread: a real server (in a thread, on a free localhost port)
    answers other requests meanwhile."""
    with serve_in_thread() as url:
        body = json.dumps(DSV3).encode()
        req = urllib.request.Request(url + "api/plan", body, {"Content-Type": "application/json"})
        result = {}
        worker = threading.Thread(target=lambda: result.update(r=json.load(urllib.request.urlopen(req, timeout=120))))
        worker.start()
        time.sleep(0.3)
        waits = []
        while worker.is_alive() and len(waits) < 20:
            t = time.perf_counter()
            with urllib.request.urlopen(url + "api/health", timeout=10) as h:
                assert json.load(h)["status"] == "ok"
            waits.append(time.perf_counter() - t)
            time.sleep(0.1)
        worker.join(120)
        assert result["r"]["candidates"]
        assert waits and max(waits) < 2.0, waits


class _Slow:
    """A stand-in for a library call that computes for ``seconds`` in Python (so that it can be
    interrupted between instructions), counting the computations running at once."""

    def __init__(self, seconds: float = 5.0):
        self.seconds, self.running, self.peak, self.ended = seconds, 0, 0, 0
        self.lock = threading.Lock()

    def __call__(self, *a, **k) -> dict:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            end = time.perf_counter() + self.seconds
            while time.perf_counter() < end:
                sum(range(1000))
            return {}
        finally:
            with self.lock:
                self.running -= 1
                self.ended += 1


def _post_all(url: str, path: str, body: dict, n: int) -> list[tuple[int, str | None]]:
    """``n`` requests at once; each (status, Retry-After header)."""
    out: list[tuple[int, str | None]] = []

    def one() -> None:
        req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                out.append((r.status, None))
        except urllib.error.HTTPError as exc:
            out.append((exc.code, exc.headers.get("Retry-After")))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return out


def test_computations_at_once_never_exceed_workers_whatever_times_out(monkeypatch):
    """A request past its time was answered 504 but its computation went on and freed its slot: 16
    slow requests left up to 7 computing at once. A timed-out computation now keeps its slot until
    it has ended, and is interrupted; requests beyond the waiting line are answered 503 at once."""
    slow = _Slow(5.0)
    monkeypatch.setattr(web_app, "check_report", slow)
    with serve_in_thread(request_timeout=0.3, workers=2) as url:
        t = time.perf_counter()
        answers = _post_all(url, "api/check", SMALL, 16)
        took = time.perf_counter() - t
        deadline = time.perf_counter() + 5
        while slow.running and time.perf_counter() < deadline:
            time.sleep(0.05)
    assert slow.peak <= 2, slow.peak
    assert slow.running == 0 and slow.ended >= 1  # interrupted: none ran its 5 s
    assert {code for code, _ in answers} <= {503, 504} and len(answers) == 16
    assert all(retry == "2" for code, retry in answers if code == 503) and (503, "2") in answers
    assert took < 4.0


def test_requests_beyond_the_waiting_line_get_503_at_once(monkeypatch):
    """Requests queued without limit for a worker: one computing, one waiting, the rest 503 at once."""
    monkeypatch.setattr(web_app, "check_report", _Slow(1.0))
    with serve_in_thread(request_timeout=20, workers=1, queue=1) as url:
        t = time.perf_counter()
        answers = _post_all(url, "api/check", SMALL, 4)
    assert sorted(code for code, _ in answers) == [200, 200, 503, 503]
    assert time.perf_counter() - t < 15


def test_a_timed_out_computation_is_interrupted_and_frees_its_slot(monkeypatch):
    slow = _Slow(30.0)
    monkeypatch.setattr(web_app, "check_report", slow)
    app = create_app(request_timeout=0.3, workers=1)
    c = TestClient(app, base_url="http://127.0.0.1")
    assert c.post("/api/check", json=SMALL).status_code == 504
    deadline = time.perf_counter() + 5
    while slow.running and time.perf_counter() < deadline:
        time.sleep(0.02)
    assert slow.ended == 1 and slow.running == 0
    monkeypatch.setattr(web_app, "check_report", lambda *a, **k: {"ok": 1})
    assert c.post("/api/check", json=SMALL).json() == {"ok": 1}  # its slot is free again
    assert app.app.state.jobs.pool.peak == 1


def test_stopping_the_server_interrupts_its_computations(monkeypatch):
    slow = _Slow(60.0)
    monkeypatch.setattr(web_app, "check_report", slow)
    with serve_in_thread(request_timeout=60, workers=2) as url:
        worker = threading.Thread(target=_post_all, args=(url, "api/check", SMALL, 2))
        worker.start()
        started = time.perf_counter() + 20
        while slow.running < 2 and time.perf_counter() < started:
            time.sleep(0.02)
        assert slow.running == 2
        t = time.perf_counter()
    took = time.perf_counter() - t
    worker.join(10)
    assert took < 4.0 and slow.running == 0


# ---------- the plumbing ----------


def test_normalise_sets():
    assert normalise_sets(
        ["", " recompute_granularity=selective ", "framework=megatron-core", "training.task=finetune"]
    ) == (
        "layout.recompute_granularity=selective",
        "framework=megatron-core",
        "training.task=finetune",
    )


def test_request_field_prefers_what_the_request_gave():
    form = ScenarioRequest(gpu="h1000")
    assert request_field("system.gpu", form) == "gpu"
    assert request_field("system.gpu", ScenarioRequest(scenario_yaml="x")) == "scenario_yaml"
    assert request_field("layout.tensor_model_parallel_size", ScenarioRequest(tp=3)) == "tp"
    assert (
        request_field("layout.tensor_model_parallel_size", ScenarioRequest(sets=["tensor_model_parallel_size=3"]))
        == "sets"
    )
    assert request_field("model", ScenarioRequest(config_json="{}")) == "config_json"
    assert request_field("--tokens-per-step", None) == "tokens_per_step"
    assert request_field("weird", ScenarioRequest()) is None


def test_materialize_writes_texts_and_builds_the_flags(tmp_path):
    scenario, flags = materialize(
        ScenarioRequest(scenario_yaml="model: Qwen3-8B\n", gpu="h100", tp=2, sets=["cp_comm_type=a2a"]), tmp_path
    )
    assert scenario == tmp_path / "scenario.yaml" and scenario.read_text() == "model: Qwen3-8B\n"
    assert flags == ScenarioFlags(gpu="h100", tp=2, sets=("layout.cp_comm_type=a2a",))
    _, flags = materialize(ScenarioRequest(config_json="{}"), tmp_path)
    assert flags.model == str(tmp_path / "config.json")


def test_scrub_and_candidate_scenario(tmp_path):
    assert scrub({"a": [f"{tmp_path}/config.json", 1]}, tmp_path) == {"a": ["config.json", 1]}
    req = {
        "model": "m",
        "system": {"gpu": "h100"},
        "training": {"seq_length": 4096},
        "layout": {"tensor_model_parallel_size": 2},
    }
    cand = {
        "training": {"global_batch_size": 8, "micro_batch_size": 1},
        "layout": {"tensor_model_parallel_size": 2, "context_parallel_size": 2},
    }
    out = candidate_scenario(req, cand)
    assert out["training"] == {"seq_length": 4096, "global_batch_size": 8, "micro_batch_size": 1}
    assert out["layout"] == cand["layout"] and req["layout"] == {"tensor_model_parallel_size": 2}


def test_candidate_scenario_keeps_the_megatron_keys_moeplan_does_not_model():
    req = {"model": "m", "layout": {"tensor_model_parallel_size": 2, "train_samples": 585937500, "lr": 0.00012}}
    cand = {"training": {"global_batch_size": 8}, "layout": {"tensor_model_parallel_size": 1}}
    out = candidate_scenario(req, cand)
    assert out["layout"] == {"tensor_model_parallel_size": 1, "train_samples": 585937500, "lr": 0.00012}


def test_exported_plan_candidate_carries_the_unmodelled_keys(client):
    sets = ["layout.train_samples=585937500", "layout.log_throughput=true"]
    doc = client.post("/api/plan", json={**SMALL, "top": 1, "sets": sets}).json()
    scn = doc["scenarios"][0]
    assert (scn["layout"]["train_samples"], scn["layout"]["log_throughput"]) == (585937500, True)
    out = client.post("/api/export", json={"scenario": scn, "format": "megatron-lm-args"}).json()
    lines = out["text"].splitlines()
    assert "--train-samples 585937500" in lines and "--log-throughput" in lines


# ---------- the command ----------


def test_other_commands_do_not_load_the_web_framework():
    code = "import sys, moeplan.cli.app; assert 'fastapi' not in sys.modules and 'uvicorn' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_serve_refuses_a_busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = CliRunner().invoke(cli_app, ["serve", "--port", str(port)])
    assert res.exit_code == 2 and "--port" in res.stderr


def test_moeplan_serve_starts_answers_and_stops():
    """The command as a user runs it: it prints the URL, serves the page and the API, and stops on Ctrl-C."""
    exe = Path(sys.executable).parent / "moeplan"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moeplan.cli.app"]
    proc = subprocess.Popen([*cmd, "serve", "--port", "0"], stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        line = proc.stderr.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        with urllib.request.urlopen(url, timeout=30) as r:
            assert b'id="form"' in r.read()
        with urllib.request.urlopen(url + "api/health", timeout=30) as r:
            assert json.load(r)["status"] == "ok"
        try:
            urllib.request.urlopen(urllib.request.Request(url + "api/check", b"{}", {"Content-Type": "text/plain"}))
        except urllib.error.HTTPError as exc:
            assert exc.code == 415
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    assert rc == 0


@pytest.mark.parametrize(
    ("host", "warned"),
    [
        ("0", True),
        ("0.0.0.0", True),
        ("::", True),
        ("10.1.2.3", True),
        ("127.1", False),
        ("127.0.0.1", False),
        ("[::1]", False),
        ("localhost", False),
    ],
)
def test_serve_warns_for_every_non_loopback_bind(monkeypatch, host, warned):
    """``--host 0`` binds every interface (0.0.0.0) and was not warned about, while ``--host 127.1``
    (127.0.0.1, loopback) was: the address is resolved as the bind resolves it."""
    monkeypatch.setattr("moeplan.web.server.serve", lambda *a, **k: None)
    res = CliRunner().invoke(cli_app, ["serve", "--host", host])
    assert res.exit_code == 0 and ("warning: listening on" in res.stderr) == warned


def test_a_server_bound_to_every_interface_answers_any_host_name():
    from moeplan.web.server import allowed_hosts, is_loopback

    assert allowed_hosts("0") == ["*"] and allowed_hosts("") == ["*"] and "*" not in allowed_hosts("127.1")
    assert is_loopback("127.1") and not is_loopback("0") and not is_loopback("example.invalid")


def test_ctrl_c_stops_the_server_within_seconds_while_a_plan_computes():
    """Ctrl-C waited ~47 s for computations still running; they are now interrupted."""
    exe = Path(sys.executable).parent / "moeplan"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moeplan.cli.app"]
    proc = subprocess.Popen([*cmd, "serve", "--port", "0"], stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stderr.readline()).group(0)
        worker = threading.Thread(target=_post_all, args=(url, "api/plan", DSV3, 2), daemon=True)
        worker.start()
        time.sleep(1.5)
    finally:
        t = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    assert rc == 0 and time.perf_counter() - t < 5.0


@pytest.mark.parametrize(
    "change",
    [
        {"scenario_yaml": "{[a]: 1}\n"},  # a list as a mapping key: was a 500 (TypeError, unhashable)
        {"sets": ["zzz=null"]},  # a misspelt key given as null: was 200 'valid'
        {"sets": ["system.zzz=null"]},
        {"sets": ["="]},
    ],
)
def test_keys_that_are_no_names_are_422(client, change):
    r = client.post("/api/check", json={**SMALL, **change})
    assert r.status_code == 422, r.text
