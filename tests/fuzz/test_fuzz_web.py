"""Fuzz the web API of ``moeplan serve``: hostile request bodies must be answered 200, 400, 413 or 422
(never 500) with a bounded answer, and a concurrent load of slow plans with a tiny time limit must be
answered 200, 503 or 504, never compute more than ``workers`` plans at once, keep its memory bounded
and let the server stop within seconds. Every server listens on 127.0.0.1 only."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from fastapi.testclient import TestClient
from harness import TALLY, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from strategies import hostile_value

from moeplan.web import create_app, serve_in_thread
from moeplan.web import routes as web_app

#: a plan that searches for several seconds (DeepSeek-V3 at 128K tokens on 256 H100)
SLOW_PLAN = {
    "model": "deepseek-ai/DeepSeek-V3",
    "gpu": "h100",
    "num_gpus": 256,
    "seq_length": 131072,
    "precision": "fp8-blockwise",
}
SMALL = {"model": "Qwen/Qwen3-8B", "gpu": "h100", "num_gpus": 8, "seq_length": 4096}
FIELDS = [
    "model",
    "gpu",
    "num_gpus",
    "seq_length",
    "mbs",
    "gbs",
    "precision",
    "tp",
    "pp",
    "cp",
    "ep",
    "sets",
    "scenario_yaml",
    "scenario",
    "config_json",
    "no_such_field",
]
#: texts JSON carries and UTF-8 does not (lone surrogates), and one far over every limit
WEB_TEXTS = ["\ud800", "a\udfffb", "x" * 500_000, "tp=\ud800"]
#: the largest error answer accepted, bytes
MAX_ERROR_BYTES = 64 * 1024
#: the most the server's process may grow (bytes) while serving the load: two interrupted plans
MAX_GROWTH = 400 * 2**20


def _rss() -> int | None:
    """This process's resident memory, bytes (Linux), or None."""
    statm = Path("/proc/self/statm")
    return int(statm.read_text().split()[1]) * 4096 if statm.exists() else None


@st.composite
def hostile_body(draw) -> dict:
    body = dict(SMALL)
    for name in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True)):
        body[name] = draw(st.sampled_from(WEB_TEXTS) | hostile_value | st.lists(st.sampled_from(WEB_TEXTS), max_size=2))
    return body


def _dumps(body: dict) -> bytes | None:
    """``body`` as JSON (NaN and infinities too, as a careless client sends them); None when Python
    cannot write it (an integer of more than 4,300 digits)."""
    try:
        return json.dumps(body).encode("utf-8", "surrogatepass")
    except ValueError:
        return None


CLIENT = TestClient(create_app(request_timeout=20), base_url="http://127.0.0.1", raise_server_exceptions=False)


@fuzz_settings(30)
@given(body=hostile_body(), path=st.sampled_from(["/api/check", "/api/estimate", "/api/export"]))
def test_hostile_bodies_are_answered_never_500(body, path):
    content = _dumps(body)
    if content is None:
        return
    r = CLIENT.post(path, content=content, headers={"content-type": "application/json"})
    TALLY["web: hostile bodies"]["runs"] += 1
    TALLY["web: hostile bodies"][f"http {r.status_code}"] += 1
    assert r.status_code in (200, 400, 413, 422), r.text[:2000]
    assert "Traceback" not in r.text
    if r.status_code != 200:
        assert len(r.content) <= MAX_ERROR_BYTES and r.json()["error"]["message"]


class _Counted:
    """The library's plan, counting the plans computing at once."""

    def __init__(self, real):
        self.real, self.running, self.peak, self.calls = real, 0, 0, 0
        self.lock = threading.Lock()

    def __call__(self, *a, **k):
        with self.lock:
            self.running, self.calls = self.running + 1, self.calls + 1
            self.peak = max(self.peak, self.running)
        try:
            return self.real(*a, **k)
        finally:
            with self.lock:
                self.running -= 1


def _post(url: str, body: dict, out: list[int]) -> None:
    req = urllib.request.Request(url + "api/plan", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            out.append(r.status)
    except urllib.error.HTTPError as exc:
        out.append(exc.code)


def test_concurrent_slow_plans_stay_within_workers_memory_and_time(monkeypatch):
    counted = _Counted(web_app.plan_report)
    monkeypatch.setattr(web_app, "plan_report", counted)
    before = _rss()
    codes: list[int] = []
    with serve_in_thread(request_timeout=0.5, workers=2, queue=4) as url:
        threads = [threading.Thread(target=_post, args=(url, SLOW_PLAN, codes)) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        deadline = time.monotonic() + 10
        while counted.running and time.monotonic() < deadline:
            time.sleep(0.05)
        after = _rss()
        stop = time.monotonic()
    stopped_in = time.monotonic() - stop
    for code in codes:
        TALLY["web: concurrent slow plans"][f"http {code}"] += 1
    assert len(codes) == 12 and set(codes) <= {200, 503, 504}, codes
    assert 503 in codes and counted.calls >= 2
    assert counted.peak <= 2 and counted.running == 0, (counted.peak, counted.running)
    assert before is None or after is None or after - before < MAX_GROWTH, (before, after)
    assert stopped_in < 3.0, stopped_in
