"""Callbacks for the Hugging Face ``Trainer`` and PyTorch Lightning, built on :class:`TraceCapture`.

Neither framework is a dependency: each is imported only when its callback is created.

Hugging Face (``transformers.TrainerCallback``)::

    from capture_hooks import hf_callback
    trainer = Trainer(..., callbacks=[hf_callback(job_id="bert-ft", active=3)])

Lightning (``lightning.pytorch.Callback``, else ``pytorch_lightning.Callback``)::

    from capture_hooks import lightning_callback
    trainer = L.Trainer(..., callbacks=[lightning_callback()])   # configured from TRACELAKE_* variables

Mapping: train begin -> :meth:`TraceCapture.start`; Hugging Face ``on_step_end`` (one optimizer
step) / Lightning ``on_train_batch_end`` (one batch) -> :meth:`TraceCapture.step`; train end (and
Lightning ``on_exception``) -> :meth:`TraceCapture.stop`. Keyword arguments are those of
:class:`TraceCapture`; the callback's ``capture`` attribute is the TraceCapture. The callbacks run
on every rank, as the hook must.
"""

from __future__ import annotations

import importlib
from typing import Any

from capture_hooks.torch_profiler import TraceCapture

__all__ = ["hf_callback", "lightning_callback"]

_CLASSES: dict[str, type] = {}


def _hf_base() -> type:
    from transformers import TrainerCallback  # optional: transformers (only with the HF callback)

    return TrainerCallback


def _lightning_base() -> type:
    for module in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(module).Callback
        except ImportError:
            continue
    raise ImportError("lightning_callback needs `lightning` or `pytorch_lightning` installed")


def _hf_class() -> type:
    if "hf" not in _CLASSES:
        base = _hf_base()

        class TraceCaptureHFCallback(base):  # type: ignore[misc, valid-type]
            """``transformers.TrainerCallback`` that profiles training with :class:`TraceCapture`."""

            def __init__(self, capture: TraceCapture) -> None:
                super().__init__()
                self.capture = capture

            def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
                self.capture.start()

            def on_step_end(self, args, state, control, **kwargs):  # noqa: D102
                self.capture.step()

            def on_train_end(self, args, state, control, **kwargs):  # noqa: D102
                self.capture.stop()

        _CLASSES["hf"] = TraceCaptureHFCallback
    return _CLASSES["hf"]


def _lightning_class() -> type:
    if "lightning" not in _CLASSES:
        base = _lightning_base()

        class TraceCaptureLightningCallback(base):  # type: ignore[misc, valid-type]
            """Lightning ``Callback`` that profiles training with :class:`TraceCapture`."""

            def __init__(self, capture: TraceCapture) -> None:
                super().__init__()
                self.capture = capture

            def on_train_start(self, trainer, pl_module):  # noqa: D102
                self.capture.start()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # noqa: D102
                self.capture.step()

            def on_train_end(self, trainer, pl_module):  # noqa: D102
                self.capture.stop()

            def on_exception(self, trainer, pl_module, exception):  # noqa: D102
                self.capture.stop()

        _CLASSES["lightning"] = TraceCaptureLightningCallback
    return _CLASSES["lightning"]


def hf_callback(capture: TraceCapture | None = None, **kwargs: Any):
    """A ``transformers.TrainerCallback`` driving ``capture`` (default ``TraceCapture(**kwargs)``).

    Raises:
        ImportError: ``transformers`` is not installed.
        ValueError: bad :class:`TraceCapture` configuration.
    """
    cls = _hf_class()
    return cls(capture if capture is not None else TraceCapture(**kwargs))


def lightning_callback(capture: TraceCapture | None = None, **kwargs: Any):
    """A Lightning ``Callback`` driving ``capture`` (default ``TraceCapture(**kwargs)``).

    Raises:
        ImportError: neither ``lightning`` nor ``pytorch_lightning`` is installed.
        ValueError: bad :class:`TraceCapture` configuration.
    """
    cls = _lightning_class()
    return cls(capture if capture is not None else TraceCapture(**kwargs))
