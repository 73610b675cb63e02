"""Training step time with the capture hook uploading in the background vs the same profiler without upload.

Modes, run interleaved in every repeat on a fresh copy of the same model (CPU):

- ``none``       no profiler (reference only);
- ``profiler``   ``torch.profiler.profile`` with the hook's settings (same schedule, CPU activity,
                 ``record_shapes``), ``on_trace_ready`` = ``export_chrome_trace`` to a local JSON file,
                 as ``tensorboard_trace_handler`` does — "the same profiler without upload" (baseline);
- ``hook``       ``TraceCapture`` to the sink, background upload (the default);
- ``hook-sync``  ``TraceCapture`` to the sink with ``background=False`` (gzip, hashing and upload on the
                 training thread), to show what the background thread saves.

Step time = wall time of one iteration including ``step()`` (where the profiler exports at the end of
an active window), in ms. The time ``stop()`` then waits for the last uploads is reported apart
(``drain_ms``): training is over by then. Target: ``hook`` mean step time within 5% of ``profiler``.

The sink is a SeaweedFS S3 server started on loopback for the run (``infra/local/seaweed.py``, run
at nice 19 by default so that, like a remote store, it does not take CPU from the training), or
``--sink DIR|URI`` (credentials from the environment).

Columns: step wall time (mean, median, p95, max; ms), ``vs profiler`` (mean step time relative to the
baseline), ``CPU ms/step`` (user+system CPU of the whole process, every thread, per step),
``train-thr CPU`` (CPU time of the training thread alone per step: what the loop itself executes).

    .venv/bin/python benchmarks/capture_overhead.py                          # transformer, 100 steps x 6 repeats
    .venv/bin/python benchmarks/capture_overhead.py --batch 64 --modes profiler,hook --steps 50 --repeats 4
    .venv/bin/python benchmarks/capture_overhead.py --json /tmp/overhead.json  # raw per-step times too
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capture_hooks import TraceCapture  # noqa: E402
from capture_hooks.config import parse_schedule  # noqa: E402

MODES = ("none", "profiler", "hook", "hook-sync")


def _seaweed():
    spec = importlib.util.spec_from_file_location("tracelake_local_seaweed", ROOT / "infra" / "local" / "seaweed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tracelake_local_seaweed", module)
    spec.loader.exec_module(module)
    return module


def make_model(kind: str, batch: int = 8) -> tuple[torch.nn.Module, callable]:
    """A model and a batch maker. ``transformer``: 2-layer encoder, d=128, ``batch`` x 32 tokens.

    The trace size depends on the number of ops per step (the same for any batch), the step time on
    the batch: a larger ``--batch`` gives the longer steps of real jobs for the same capture cost.
    """
    torch.manual_seed(0)
    if kind == "transformer":
        layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, batch_first=True)
        model = torch.nn.Sequential(
            torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False), torch.nn.Linear(128, 16)
        )
        return model, lambda: (torch.randn(batch, 32, 128), torch.randint(0, 16, (batch, 32)))
    model = torch.nn.Sequential(
        *[m for _ in range(6) for m in (torch.nn.Linear(512, 512), torch.nn.ReLU())], torch.nn.Linear(512, 16)
    )
    return model, lambda: (torch.randn(8 * batch, 512), torch.randint(0, 16, (8 * batch,)))


def _cpu_s() -> float:
    """User + system CPU seconds of this process (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _LocalProfiler:
    """Baseline: the hook's torch.profiler settings, trace exported to a local file, no upload."""

    def __init__(self, schedule: dict, out_dir: str) -> None:
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler import schedule as make_schedule

        self.out_dir, self.n = out_dir, 0
        self.prof = profile(
            activities=[ProfilerActivity.CPU],
            schedule=make_schedule(**schedule),
            on_trace_ready=self._ready,
            record_shapes=True,
        )

    def _ready(self, prof) -> None:
        path = os.path.join(self.out_dir, f"trace_{self.n}.json")
        prof.export_chrome_trace(path)
        self.n += 1
        os.remove(path)

    def __enter__(self):
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.prof.__exit__(*exc)

    def step(self) -> None:
        self.prof.step()


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def step(self) -> None:
        pass


def run_mode(mode: str, args, schedule: dict, sink: str, storage_options: dict, tmp: str, rep: int) -> dict:
    """Train ``args.steps`` steps under ``mode``; per-step times in ms and upload figures."""
    model, batch = make_model(args.model, args.batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    def one_step():
        x, y = batch()
        out = model(x)
        loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup_steps):  # allocator / kernel warm-up outside the measurement
        one_step()
    if mode == "none":
        ctx = _Nothing()
    elif mode == "profiler":
        ctx = _LocalProfiler(schedule, tmp)
    else:
        ctx = TraceCapture(
            sink,
            job_id=f"bench-{mode}-{rep}",
            storage_options=storage_options,
            env={},
            spool_dir=os.path.join(tmp, "spool"),
            background=(mode == "hook"),
            **schedule,
        )
    times, thread_cpu = [], []
    cpu0 = _cpu_s()
    with ctx:
        for _ in range(args.steps):
            t0, c0 = time.perf_counter(), time.thread_time()
            one_step()
            ctx.step()
            times.append((time.perf_counter() - t0) * 1e3)
            thread_cpu.append((time.thread_time() - c0) * 1e3)
        t_exit = time.perf_counter()
    drain_ms = (time.perf_counter() - t_exit) * 1e3
    cpu_ms_per_step = (_cpu_s() - cpu0) * 1e3 / args.steps  # all threads of this process, drain included
    out = {
        "mode": mode,
        "repeat": rep,
        "step_ms": times,
        "drain_ms": drain_ms,
        "cpu_ms_per_step": cpu_ms_per_step,
        "thread_cpu_ms": thread_cpu,
    }
    if isinstance(ctx, TraceCapture):
        out.update(captures=len(ctx.committed), failures=ctx.failures, pending=ctx.pending)
    return out


def summarize(runs: list[dict]) -> dict:
    """Per mode: mean / median / p95 step time (ms, all repeats pooled), per-repeat means, captures."""
    out = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        if not mine:
            continue
        pooled = sorted(t for r in mine for t in r["step_ms"])
        out[mode] = {
            "mean_ms": statistics.fmean(pooled),
            "median_ms": statistics.median(pooled),
            "p95_ms": pooled[int(0.95 * (len(pooled) - 1))],
            "max_ms": pooled[-1],
            "repeat_means_ms": [statistics.fmean(r["step_ms"]) for r in mine],
            "drain_ms": statistics.fmean(r["drain_ms"] for r in mine),
            "cpu_ms_per_step": statistics.fmean(r["cpu_ms_per_step"] for r in mine),
            "train_thread_cpu_ms": statistics.fmean(t for r in mine for t in r["thread_cpu_ms"]),
            "captures": sum(r.get("captures", 0) for r in mine),
            "failures": sum(r.get("failures", 0) for r in mine),
        }
    if "profiler" in out:
        base = out["profiler"]
        for s in out.values():
            s["overhead_vs_profiler_mean_pct"] = 100 * (s["mean_ms"] / base["mean_ms"] - 1)
            s["cpu_vs_profiler_pct"] = 100 * (s["cpu_ms_per_step"] / base["cpu_ms_per_step"] - 1)
            s["overhead_vs_profiler_median_of_repeats_pct"] = 100 * statistics.median(
                m / b - 1 for m, b in zip(s["repeat_means_ms"], base["repeat_means_ms"])
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table (and JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["transformer", "mlp"], default="transformer")
    parser.add_argument("--batch", type=int, default=8, help="batch size (transformer: sequences of 32 tokens)")
    parser.add_argument("--steps", type=int, default=100, help="measured steps per run")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument(
        "--schedule",
        default="wait=4,warmup=1,active=5,repeat=0",
        help="torch.profiler schedule (a capture every wait+warmup+active steps)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--sink", default=None, help="landing zone (default: a SeaweedFS S3 server started here)")
    parser.add_argument(
        "--server-nice",
        type=int,
        default=19,
        help="nice value of the local S3 server (default 19: stands in for a remote store; 0 = off)",
    )
    parser.add_argument("--json", default=None, help="write raw per-step times and the summary here")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    schedule = parse_schedule(args.schedule)
    modes = [m for m in args.modes.split(",") if m]
    tmp = tempfile.mkdtemp(prefix="tracelake-bench-")
    server = None
    storage_options: dict = {}
    sink = args.sink
    if sink is None:
        server = _seaweed().SeaweedS3(dir=os.path.join(tmp, "seaweed"), bucket="tracelake").start()
        sink, storage_options = "s3://tracelake/bench", server.storage_options
        if args.server_nice:  # the store is remote in real life: keep its CPU out of the training's way
            os.setpriority(os.PRIO_PGRP, server.pid, args.server_nice)
    try:
        runs = []
        for rep in range(args.repeats):
            order = modes if rep % 2 == 0 else modes[::-1]  # alternate the order against drift
            for mode in order:
                r = run_mode(mode, args, schedule, sink, storage_options, tmp, rep)
                runs.append(r)
                print(
                    f"repeat {rep} {mode:10s} mean {statistics.fmean(r['step_ms']):7.2f} ms"
                    f"  drain {r['drain_ms']:7.1f} ms  captures {r.get('captures', '-')}",
                    file=sys.stderr,
                )
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summarize(runs)
    cycle = sum(schedule.get(k, 0) for k in ("wait", "warmup", "active"))
    print(
        f"\ncapture overhead: model={args.model} batch={args.batch} steps={args.steps}x{args.repeats} threads={args.threads} "
        f"schedule={args.schedule} (a capture every {cycle} steps) sink={sink} cpus={os.cpu_count()} "
        f"torch={torch.__version__} python={platform.python_version()}"
    )
    print(
        f"{'mode':10s} {'mean ms':>9s} {'median ms':>10s} {'p95 ms':>9s} {'max ms':>9s} {'vs profiler':>12s} "
        f"{'CPU ms/step':>12s} {'CPU vs prof':>12s} {'train-thr CPU':>14s} {'drain ms':>9s} {'captures':>9s}"
    )
    for mode, s in summary.items():
        vs, cpu_vs = s.get("overhead_vs_profiler_mean_pct"), s.get("cpu_vs_profiler_pct")
        print(
            f"{mode:10s} {s['mean_ms']:9.2f} {s['median_ms']:10.2f} {s['p95_ms']:9.2f} {s['max_ms']:9.2f} "
            f"{'' if vs is None else f'{vs:+.1f}%':>12s} {s['cpu_ms_per_step']:12.2f} "
            f"{'' if cpu_vs is None else f'{cpu_vs:+.1f}%':>12s} {s['train_thread_cpu_ms']:14.2f} "
            f"{s['drain_ms']:9.1f} {s['captures']:9d}"
        )
    if "hook" in summary and "profiler" in summary:
        pct = summary["hook"]["overhead_vs_profiler_mean_pct"]
        print(
            f"\nhook (background upload) vs profiler without upload: {pct:+.1f}% mean step time "
            f"(median of per-repeat ratios {summary['hook']['overhead_vs_profiler_median_of_repeats_pct']:+.1f}%); "
            f"target within 5%: {'met' if pct <= 5 else 'NOT met'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
