"""Unit tests of the Hugging Face Trainer and Lightning callbacks.

Neither ``transformers`` nor ``lightning`` is a dependency (nor installed here): the tests check
that ``capture_hooks`` never imports them on its own, that asking for a callback without them is
a clear ImportError, and drive the callbacks with minimal stand-in base classes, calling the hooks
in the order those trainers call them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import capture_hooks.integrations as integrations
from capture_hooks import TraceCapture, hf_callback, lightning_callback


@pytest.fixture(autouse=True)
def _fresh_classes():
    integrations._CLASSES.clear()
    yield
    integrations._CLASSES.clear()


def _real_step() -> None:
    model = torch.nn.Linear(4, 4)
    model(torch.randn(2, 4)).sum().backward()


def _committed_steps(landing: Path) -> list[dict]:
    return [json.loads(p.read_text())["step_range"] for p in sorted(landing.rglob("manifest.json"))]


def test_importing_capture_hooks_does_not_import_the_frameworks():
    code = (
        "import sys, capture_hooks; "
        "print(sorted(m for m in ('transformers', 'lightning', 'pytorch_lightning', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # not even torch until a capture starts


def test_missing_frameworks_give_a_clear_import_error(tmp_path, monkeypatch):
    for name in ("transformers", "lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # import of these fails
    with pytest.raises(ImportError):
        hf_callback(sink=str(tmp_path), job_id="j", env={})
    with pytest.raises(ImportError, match="lightning"):
        lightning_callback(sink=str(tmp_path), job_id="j", env={})


def test_hf_trainer_callback_profiles_optimizer_steps(tmp_path, monkeypatch):
    transformers = types.ModuleType("transformers")

    class TrainerCallback:  # the real base class has no-op hooks and a no-argument __init__
        pass

    transformers.TrainerCallback = TrainerCallback
    monkeypatch.setitem(sys.modules, "transformers", transformers)

    callback = hf_callback(
        sink=str(tmp_path / "landing"),
        job_id="hf-job",
        wait=1,
        warmup=1,
        active=2,
        spool_dir=str(tmp_path / "spool"),
        env={},
    )
    assert isinstance(callback, TrainerCallback) and isinstance(callback.capture, TraceCapture)
    args = state = control = object()
    callback.on_train_begin(args, state, control, model=None)
    for _ in range(6):
        _real_step()
        callback.on_step_end(args, state, control)
    callback.on_train_end(args, state, control)
    assert callback.capture.failures == 0
    assert _committed_steps(tmp_path / "landing") == [{"first": 2, "last": 3}]


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_lightning_callback_profiles_batches(tmp_path, monkeypatch, package):
    class Callback:
        pass

    module = types.ModuleType(package)
    module.Callback = Callback
    if package == "lightning.pytorch":
        monkeypatch.setitem(sys.modules, "lightning", types.ModuleType("lightning"))
    else:
        monkeypatch.setitem(sys.modules, "lightning", None)
        monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.setitem(sys.modules, package, module)

    capture = TraceCapture(
        str(tmp_path / "landing"),
        job_id="pl-job",
        wait=0,
        warmup=1,
        active=3,
        spool_dir=str(tmp_path / "spool"),
        env={},
    )
    callback = lightning_callback(capture)
    assert isinstance(callback, Callback) and callback.capture is capture
    trainer = module_ = object()
    callback.on_train_start(trainer, module_)
    for batch_idx in range(5):
        _real_step()
        callback.on_train_batch_end(trainer, module_, None, None, batch_idx)
    callback.on_exception(trainer, module_, RuntimeError("boom"))  # stops the capture; the trainer re-raises
    callback.on_train_end(trainer, module_)  # a second stop is a no-op
    assert _committed_steps(tmp_path / "landing") == [{"first": 1, "last": 3}]
