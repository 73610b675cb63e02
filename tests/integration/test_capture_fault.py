"""Fault test: the S3 server (SeaweedFS, real credentials) goes away in the middle of training.

Training must finish with the same step count and no exception in the loop; the captures taken
while the store is down wait in the local spool; once the server is back, every capture is in the
bucket exactly once (none lost, none duplicated), with bytes matching its manifest.

The server is stopped with SIGTERM and started again on the same ports and data folder. The hook's
S3 client is given a short botocore retry budget and a 5 s read timeout (``config_kwargs``; a
request in flight when the server goes away otherwise hangs for the default 60 s) so each failed
upload round takes seconds; the hook's own retries/backoff do the rest.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time

import pytest
import s3fs
import torch
from s3_server import s3  # noqa: F401 - fixture

from capture_hooks import TraceCapture

pytestmark = pytest.mark.integration

CLIENT = {
    "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}, "connect_timeout": 3, "read_timeout": 5}
}
STEPS = 40
SCHEDULE = dict(wait=1, warmup=1, active=2, repeat=0)  # a capture every 4 steps: ProfilerStep#2-3, #6-7, ... #38-39
EXPECTED = [(s, s + 1) for s in range(2, STEPS, 4)]


class Loop:
    """A small SGD loop; ``events`` maps a step index to a callable run before that step."""

    def __init__(self, capture: TraceCapture, events: dict) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.capture, self.events = capture, events

    def run(self, steps: int) -> int:
        done = 0
        for i in range(steps):
            if i in self.events:
                self.events[i]()
            loss = self.model(torch.randn(16, 32)).square().mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.capture.step()
            done += 1
        return done


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _bucket_captures(server, prefix: str) -> list[dict]:
    """Every committed capture under ``prefix``: manifest checked against the stored trace bytes."""
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
    out = []
    for path in sorted(fs.glob(f"tracelake/{prefix}/**/manifest.json")):
        manifest = json.loads(fs.cat(path))
        (entry,) = manifest["files"]
        blob = fs.cat(path.rsplit("/", 1)[0] + "/" + entry["path"])
        assert (len(blob), hashlib.sha256(blob).hexdigest()) == (entry["size_bytes"], entry["sha256"])
        steps = {
            int(e["name"].split("#", 1)[1])
            for e in json.loads(gzip.decompress(blob))["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#")
        }
        assert steps == set(range(manifest["step_range"]["first"], manifest["step_range"]["last"] + 1))
        out.append(manifest)
    return out


@pytest.fixture()
def s3_env(s3, monkeypatch):  # noqa: F811
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    return s3


def test_server_stopped_mid_training_then_back_before_the_end(s3_env, tmp_path):
    server = s3_env
    capture = TraceCapture(
        "s3://tracelake/fault-mid",
        job_id="fault-mid",
        storage_options=CLIENT,
        spool_dir=str(tmp_path / "spool"),
        upload_backoff_s=0.2,
        retry_interval_s=2.0,
        env=None,
        **SCHEDULE,
    )
    seen = {}

    def outage():
        server.stop()  # SIGTERM: the store is gone
        seen["committed_before"] = len(capture.committed)

    def recovery():
        # keep training while the store is down until uploads have failed (the captures are spooled)
        _wait(lambda: capture.failures >= 1, 60, "an upload to fail while the server is down")
        seen["pending_during_outage"] = capture.pending
        server.start()

    with capture:
        steps = Loop(capture, {9: outage, 26: recovery}).run(STEPS)
    assert steps == STEPS  # training finished, no exception reached the loop
    assert seen["pending_during_outage"] >= 1 and capture.failures >= 1  # the outage was real
    assert capture.pending == 0  # stop() waited until everything was uploaded

    manifests = _bucket_captures(server, "fault-mid")
    assert sorted((m["step_range"]["first"], m["step_range"]["last"]) for m in manifests) == EXPECTED  # none lost
    assert len({m["capture_id"] for m in manifests}) == len(manifests) == len(EXPECTED)  # none duplicated
    assert sorted(capture.committed) == sorted(set(capture.committed)) and len(capture.committed) == len(EXPECTED)
    assert [p for p in (tmp_path / "spool").rglob("*") if p.is_file()] == []


def test_server_back_only_after_training_ended(s3_env, tmp_path):
    server = s3_env
    capture = TraceCapture(
        "s3://tracelake/fault-late",
        job_id="fault-late",
        storage_options=CLIENT,
        spool_dir=str(tmp_path / "spool"),
        upload_backoff_s=0.2,
        retry_interval_s=1.0,
        flush_timeout_s=2.0,
        env=None,
        wait=1,
        warmup=1,
        active=2,
        repeat=0,
    )
    with capture:
        steps = Loop(capture, {5: server.stop}).run(20)
    assert steps == 20
    left = capture.pending
    assert left >= 3  # stop() gave up waiting; the captures stay spooled, the worker keeps retrying
    server.start()
    _wait(lambda: capture.pending == 0, 60, "the spooled captures to be uploaded")
    manifests = _bucket_captures(server, "fault-late")
    assert sorted((m["step_range"]["first"], m["step_range"]["last"]) for m in manifests) == [
        (s, s + 1) for s in range(2, 20, 4)
    ]
    assert len({m["capture_id"] for m in manifests}) == len(manifests) == 5
    capture.flush(5)
