"""Warehouse table declarations (names, types, units, meanings).

Column names are part of the product API: snake_case, with the unit in the name
(``_ns``, ``_bytes``, ``_pct``). Every table is Hive-partitioned by
:attr:`Table.partition_by` and keyed by :attr:`Table.key`, so that re-running a stage on
the same input replaces whole partitions and never duplicates rows.

Definitions follow ``../shared/ARCHITECTURE.md`` ("Canonical event") and, for the
analysis tables, Holistic Trace Analysis (HTA) 0.5.0 where HTA defines the metric.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    """One column: ``name``, Arrow ``type``, ``doc`` (meaning, with unit and source)."""

    name: str
    type: pa.DataType
    doc: str
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    """A warehouse table: ordered columns, partition columns, the row key, and the pipeline stage that writes it
    (``normalize``, ``analyze`` or ``fleet``: :data:`STAGES`); the stage's validation, both executors' writes
    and the tests' digests take their lists of tables from here (:func:`stage_tables`)."""

    name: str
    doc: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    stage: str = ""
    #: ``(column, value)``: the rows holding that value are kept in data files of their own, apart from the others
    #: (keyed writes and compaction, :mod:`jobs.commit`), so that the others' min/max statistics of ``column``
    #: stay narrow — the fleet tables' ``date = 'all'`` rows, which would otherwise widen every file's date range
    #: to ``'all'`` (the last string) and make every new date look into every file.
    files_apart: tuple[str, str] | None = None

    @property
    def names(self) -> list[str]:
        """Column names in declared order."""
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        """The table as a ``pyarrow.Schema`` (column docs kept as field metadata)."""
        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable, metadata={"doc": c.doc}) for c in self.columns])

    def spark_schema(self):
        """The table as a ``pyspark.sql.types.StructType`` (derived from the Arrow schema).

        Imports pyspark lazily so that this module stays importable without Spark.
        """
        from pyspark.sql.pandas.types import from_arrow_schema  # heavy: pyspark

        return from_arrow_schema(self.arrow_schema())

    def empty(self) -> pa.Table:
        """A zero-row Arrow table with this schema."""
        return self.arrow_schema().empty_table()

    def markdown(self) -> str:
        """A Markdown reference of the table (for the README)."""
        lines = [f"### `{self.name}`", "", self.doc, "", f"Written by the `{self.stage}` stage.", ""]
        if self.partition_by:
            lines.append(
                f"Partitioned by {', '.join(f'`{p}`' for p in self.partition_by)}; "
                f"key ({', '.join(f'`{k}`' for k in self.key)})."
            )
            lines.append("")
        lines += ["| column | type | meaning |", "|---|---|---|"]
        for c in self.columns:
            lines.append(f"| `{c.name}` | {c.type} | {c.doc.replace('|', '/')} |")
        return "\n".join(lines) + "\n"


_I32, _I64, _STR, _F64, _BOOL = pa.int32(), pa.int64(), pa.string(), pa.float64(), pa.bool_()

_IDENTITY = (
    Column("job_id", _STR, "Training job id (manifest `job_id`, or the folder of a bare trace).", False),
    Column("attempt", _I32, "Job attempt / restart number (manifest; 0 when unknown).", False),
    Column("rank", _I32, "Global rank of the process that wrote the trace.", False),
)

CAPTURES = Table(
    name="captures",
    doc="One row per raw trace file found in the landing zone: ingested, quarantined with a reason, or cataloged. "
    "Nothing is lost: every raw file appears here.",
    columns=(
        Column(
            "date",
            _STR,
            "Partition: capture date YYYY-MM-DD (landing-zone path, else trace start, else `unknown`).",
            False,
        ),
        *_IDENTITY,
        Column(
            "capture_id", _STR, "Capture id (landing-zone folder name, or a stable hash of a bare file's path).", False
        ),
        Column("uri", _STR, "URI of the raw trace file.", False),
        Column("manifest_uri", _STR, "URI of the committing `manifest.json`; null for bare traces."),
        Column("source", _STR, "Trace source: `kineto` (torch.profiler Chrome trace), `neuron`, `xla`.", False),
        Column(
            "status",
            _STR,
            "`ingested`; `quarantined` (bad input, the reason names the problem); or `cataloged` "
            "(a raw blob kept but not parsed: .ntff/.neff/.pb without a converted form, or a duplicate of an ingested form).",
            False,
        ),
        Column(
            "reason",
            _STR,
            "Why the file was quarantined or only cataloged (names the file and the problem); null when ingested.",
        ),
        Column(
            "rank_source",
            _STR,
            "Where `rank` came from: `distributedInfo`, `manifest`, `filename`, `default` (flag: assumed 0).",
        ),
        Column("world_size", _I32, "World size (distributedInfo or manifest)."),
        Column("size_bytes", _I64, "Size of the raw file as stored (compressed if gzip), bytes."),
        Column("uncompressed_bytes", _I64, "Size of the decoded JSON document, bytes."),
        Column("sha256", _STR, "sha256 of the raw file as stored."),
        Column("container", _STR, "`json` or `gzip` (detected from magic bytes, not the extension)."),
        Column(
            "format",
            _STR,
            "Kineto format generation detected from the fields present, e.g. "
            "`list-2020`, `object-legacy-categories`, `object`.",
        ),
        Column(
            "time_base", _STR, "`relative+baseTimeNanoseconds`, `absolute-us-int`, `absolute-us-float` or `relative`."
        ),
        Column("base_time_ns", _I64, "`baseTimeNanoseconds` of the trace (0 when absent)."),
        Column("trace_start_ns", _I64, "Earliest event start on the capture clock, ns."),
        Column("trace_end_ns", _I64, "Latest event end on the capture clock, ns."),
        Column("n_events", _I64, "Rows written to `events` for this capture."),
        Column("n_profiler_steps", _I32, "Number of distinct `ProfilerStep#N` annotations."),
        Column("host_name", _STR, "Host name (trace `host_name` or manifest)."),
        Column(
            "device_name", _STR, "First accelerator name in `deviceProperties` (or manifest); null on CPU-only traces."
        ),
        Column("distributed_backend", _STR, "`distributedInfo.backend` (nccl, gloo, …)."),
        Column(
            "torch_version",
            _STR,
            "torch version: the manifest's, else the trace's `torch_version` (top level, or inside its `metadata`, as a "
            "benchmark harness records it); null when neither says.",
        ),
        Column(
            "runtime_version",
            _STR,
            "CUDA or HIP runtime: the manifest's `cuda_version`, else the trace's `cuda_runtime_version` (`12090` → "
            "`CUDA 12.9`) or `hip_runtime_version` (`60443483` → `HIP 6.4.43483`); null when neither says.",
        ),
        Column(
            "job_name",
            _STR,
            "Name shared by the runs of one recurring job (manifest tag `job_name`, e.g. from "
            "`TRACELAKE_JOB_NAME` or `SLURM_JOB_NAME`; else `job_id`): fleet regressions compare runs with the same name.",
            False,
        ),
        Column("model", _STR, "Manifest tag `model` (e.g. `llama-7b`); null when not tagged."),
        Column(
            "tags_json",
            _STR,
            "All manifest tags as a JSON object (for bare traces: those of `tracelake run --job-name/--tag`, else `{}`).",
        ),
        Column(
            "created_at",
            _STR,
            "Manifest `created_at` (UTC ISO-8601) when the capture was committed; null for bare traces.",
        ),
        Column(
            "flags",
            pa.list_(_STR),
            "Data-quality flags (the trace is still ingested unless quarantined): `rank_assumed_0`; "
            "`duplicate_rank` (two bare files claim the rank); `duplicate_capture_id` (a manifest capture id repeated in another folder: this file got a suffixed id); `nonfinite_number` / `control_characters` (NaN/inf "
            "tokens read as null, raw control characters in strings kept); `invalid_utf8` / `invalid_escape` / "
            "`lone_surrogate` (damage inside strings repaired: U+FFFD, a literal backslash; offsets in "
            "repair_offsets_json); `decimal_comma` / `unescaped_quote` (a locale decimal comma read as the "
            "decimal point, unescaped quotes in a string escaped; offsets in repair_offsets_json); `truncated_tail` "
            "(a file cut short: its complete events kept, the tail dropped, `partial_trace` raised); `duplicate_key` "
            "(a key repeated in an event: the last value kept); `begin_end_pairs` / `unmatched_begin` / `unmatched_end` (ph B/E duration "
            "events paired into complete events); `correlation_zero` / `linked_by_time` / `unlinked_device_rows` "
            "(ROCm correlation id 0 read as absent, linked by External id or time); `stream_overlap_clipped` "
            "(device events clipped to the next start on their stream, raw dur in events.dur_raw_ns); "
            "`invalid_timestamp` (events without a "
            "valid ts dropped); `negative_duration` / `missing_duration`; `improper_nesting` (partially "
            "overlapping slices on a track, kept); `merged_ranks` (a file merged from several ranks, launches linked "
            "by pid + correlation); `negative_launch_delay` (device work starting before its launch call ends; "
            "clamped to 0 in launch statistics); `partial_trace` (truncated: events stop well before the last "
            "ProfilerStep ends, or dropped events reported); `unsupported_format_version` (Neuron profile newer "
            "than the reader; quarantined); `no_profiler_step`; `profiler_warnings` (the profiler warned about its "
            "data: profiler_warnings_json); `rank_mismatch` / `world_size_mismatch` (the trace's distributedInfo "
            "disagrees with its manifest; the trace's value is used); see jobs/normalize/kineto/parse.py `FLAGS`.",
        ),
        Column(
            "flag_counts_json",
            _STR,
            "How many events (or repairs) are behind each countable flag, as a JSON object, "
            "e.g. `{\"negative_duration\": 2, \"improper_nesting\": 14}`; null when the parser reports none "
            "(Neuron files, quarantined files).",
        ),
        Column(
            "repair_offsets_json",
            _STR,
            "Where the trace's text was repaired: flag (inside strings `invalid_utf8`, `invalid_escape`, "
            "`lone_surrogate`, `unescaped_quote`; next to a value `trailing_comma`, `missing_value`, `bare_word`, "
            "`decimal_comma`; `truncated_tail` where a cut file was closed; `duplicate_key`) → decoded-document byte "
            "offsets of the first 10, a JSON object; null when none.",
        ),
        Column(
            "profiler_warnings_json",
            _STR,
            "The profiler's own warnings about this file's data (Kineto WARNING/ERROR lines, non-zero `Record "
            "counts`, dropped-event counters; Neuron profile warnings) as a JSON list of `{kind, level, count, "
            "message, words, metrics, rules}`: `metrics` are the `table.column` values the warning makes uncertain, "
            "`rules` the findings rules that read them (jobs/normalize/profiler_warnings.py); null when none.",
        ),
    ),
    stage="normalize",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id"),
)

EVENTS = Table(
    name="events",
    doc="One row per trace event (`X` complete, `i` instant and `C` counter events), canonical model of "
    "ARCHITECTURE.md. `M` metadata names processes/threads; `s`/`f` flows become linkage columns.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        *_IDENTITY,
        Column("capture_id", _STR, "Capture the event came from.", False),
        Column(
            "event_id",
            _I64,
            "0-based position of the event in the trace's `traceEvents` (stable id for evidence).",
            False,
        ),
        Column("source", _STR, "`kineto`, `neuron` or `xla`.", False),
        Column("ph", _STR, "Chrome-trace phase: `X`, `i` or `C`.", False),
        Column(
            "category",
            _STR,
            "Category normalized across generations (`Operator`→`cpu_op`, `Runtime`→`cuda_runtime`, "
            "`Kernel`→`kernel`, `Memcpy`→`gpu_memcpy`, `Memset`→`gpu_memset`, `gpu_user_Annotation`→`gpu_user_annotation`).",
        ),
        Column("raw_category", _STR, "`cat` exactly as written in the trace."),
        Column("name", _STR, "Event name."),
        Column(
            "ts_ns",
            _I64,
            "Start on the capture clock, exact integer ns (`baseTimeNanoseconds` + relative µs·1000, or absolute µs·1000).",
            False,
        ),
        Column(
            "dur_ns",
            _I64,
            "Duration, exact integer ns; null for `i`/`C` events and where the trace's `dur` is "
            "missing, non-finite or negative (flags `missing_duration`, `negative_duration`). A device event "
            "whose `dur` runs past the start of the next one on its stream is clipped to that start (a stream "
            "runs one at a time; flag `stream_overlap_clipped`).",
        ),
        Column(
            "dur_raw_ns",
            _I64,
            "The trace's own `dur` of an event clipped on its stream (`dur_ns` is the clipped "
            "value); null for every other event.",
        ),
        Column(
            "pid", _I64, "Process id (CPU events) or device index (GPU events); null when the trace pid is not numeric."
        ),
        Column(
            "tid",
            _I64,
            "Thread id (CPU) or stream id (GPU); `\"stream 7\"`-style strings parsed; null when not numeric.",
        ),
        Column("process_name", _STR, "From `M process_name`, or the non-numeric pid itself (e.g. `Spans`)."),
        Column("thread_name", _STR, "From `M thread_name`, or the non-numeric tid itself."),
        Column("device", _I32, "Accelerator index for device events (`args.device`, else pid); null for host events."),
        Column("stream", _I64, "CUDA/HIP stream (`args.stream`); null when absent."),
        Column(
            "is_gpu",
            _BOOL,
            "True for device-side activity (kernel, gpu_memcpy, gpu_memset, gpu_user_annotation, mtia_ccp_events, …).",
            False,
        ),
        Column(
            "correlation",
            _I64,
            "Launch correlation id (`args.correlation`; for GPU events with only a launch flow, the flow id).",
        ),
        Column("external_id", _I64, "`args[\"External id\"]` (`external id` in 2021 traces)."),
        Column(
            "flow_id",
            _I64,
            "Id of the CPU→GPU launch flow (`ac2g`, `async_cpu_to_gpu`, 2021 `async/launch`) bound to this event.",
        ),
        Column(
            "fwdbwd_flow_id",
            _I64,
            "Id of the forward→backward flow (`fwdbwd`, `forward_backward`) bound to this event.",
        ),
        Column(
            "parent", _I64, "`event_id` of the innermost enclosing `X` event on the same (pid, tid); null at top level."
        ),
        Column("depth", _I32, "Nesting depth on the track (0 = top level)."),
        Column(
            "step",
            _I64,
            "ProfilerStep number N: CPU events by time containment in `ProfilerStep#N`, GPU events through the CPU launch they correlate with.",
        ),
        Column(
            "collective",
            _STR,
            "Collective name (`args[\"Collective name\"]`, else inferred from an NCCL/RCCL kernel name).",
        ),
        Column("pg_name", _STR, "Process group name (`Process Group Name`)."),
        Column("group_size", _I32, "`Group size` of the collective."),
        Column(
            "msg_bytes", _I64, "Collective message size, bytes (`In msg nelems` × dtype size, or the larger of in/out)."
        ),
        Column("seq", _I64, "Collective sequence number (`Seq`), when the trace has it."),
        Column("args_json", _STR, "The event's `args` object as JSON text (query with `get_json_object`/`from_json`)."),
    ),
    stage="normalize",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id", "event_id"),
)

_BREAKDOWN = (
    Column(
        "kernel_time_ns",
        _I64,
        "HTA temporal breakdown `kernel_time`: last end − first start of the merged GPU intervals, ns.",
    ),
    Column("idle_time_ns", _I64, "HTA `idle_time`: kernel_time − Σ merged GPU intervals, ns."),
    Column("compute_time_ns", _I64, "HTA `compute_time`: Σ merged intervals of COMPUTATION kernels, ns."),
    Column(
        "non_compute_time_ns",
        _I64,
        "HTA `non_compute_time`: kernel_time − compute − idle (communication, memory, other), ns.",
    ),
    Column("idle_pct", _F64, "idle_time_ns / kernel_time_ns × 100 (HTA `idle_time_pctg`)."),
    Column("compute_pct", _F64, "compute_time_ns / kernel_time_ns × 100 (HTA `compute_time_pctg`)."),
    Column("non_compute_pct", _F64, "non_compute_time_ns / kernel_time_ns × 100 (HTA `non_compute_time_pctg`)."),
    Column("comm_time_ns", _I64, "Σ merged intervals of COMMUNICATION kernels, ns."),
    Column(
        "overlap_pct",
        _F64,
        "HTA `comp_comm_overlap_pctg`: time both merged communication and merged computation run, "
        "÷ merged communication time × 100; null when there is no communication kernel.",
    ),
    Column("n_kernels", _I64, "GPU events counted (kernels, memcpy, memset)."),
)

#: HTA-parity statistics (jobs/analyze/hta/stats.py), per step in ``steps`` (device events through
#: ``events.step``) and for the whole trace in ``ranks`` (rows kept by HTA's last-step filter).
_HTA_STATS = (
    Column(
        "memory_time_ns",
        _I64,
        "Σ merged intervals of MEMORY device events (our kernel type: gpu_memcpy / "
        "gpu_memset events, and kernels named Memcpy…/Memset…/dma…), ns. HTA `get_gpu_kernel_breakdown` MEMORY, merged.",
    ),
    Column(
        "exposed_comm_ns",
        _I64,
        "Communication not overlapped by computation: merged COMMUNICATION time − its "
        "intersection with merged COMPUTATION, ns. Our kernel types (collective metadata, then name families); "
        "HTA `get_comm_comp_overlap` sweep.",
    ),
    Column(
        "idle_host_wait_ns",
        _I64,
        "HTA idle time breakdown `host_wait`: Σ over streams of the gaps before device "
        "events whose launching host call started after the previous event on the stream ended, ns. Per-stream "
        "sums (HTA's definition): with several streams the three idle_* columns can add up to more than "
        "`idle_time_ns` (GPU idle on all streams) and even more than the step.",
    ),
    Column(
        "idle_kernel_wait_ns",
        _I64,
        "HTA idle time breakdown `kernel_wait`: Σ gaps < 30 µs "
        "(`consecutive_kernel_delay`) that are not host_wait, ns.",
    ),
    Column(
        "idle_other_ns",
        _I64,
        "HTA idle time breakdown `other`: the remaining gaps, Σ over streams, ns "
        "(gaps are per stream, unmerged; negative gaps clipped at 0).",
    ),
    Column(
        "n_launches",
        _I64,
        "HTA `get_cuda_kernel_launch_stats` rows: host launch calls (cudaLaunchKernel, "
        "cudaMemcpyAsync, … plus hipLaunchKernel, cuLaunchKernel(Ex), cudaGraphLaunch; jobs/analyze/trace/launches.py) "
        "linked to device events.",
    ),
    Column("launch_runtime_ns", _I64, "Σ durations of those launch calls (HTA `cpu_duration`), ns."),
    Column(
        "launch_delay_sum_ns",
        _I64,
        "Σ launch delay, ns; launch delay = max(0, first device event start − launch call end) (HTA `launch_delay`).",
    ),
    Column("launch_delay_p50_ns", _I64, "Median launch delay, ns (rounded); null without launches."),
    Column("launch_delay_max_ns", _I64, "Longest launch delay, ns; null without launches."),
    Column(
        "n_short_kernels",
        _I64,
        "Launches whose device time < launch call time ≤ 50 µs (HTA short GPU kernels, `runtime_cutoff`).",
    ),
    Column("n_runtime_outliers", _I64, "Launch calls longer than 50 µs (HTA runtime outliers)."),
    Column("n_launch_delay_outliers", _I64, "Launches with launch delay > 100 µs (HTA `launch_delay_cutoff`)."),
    Column(
        "queue_length_max",
        _I64,
        "Largest launch-queue length on any stream (HTA `get_queue_length_summary` max; "
        "+1 at each launch call, −1 at the device event start); null without launches.",
    ),
    Column(
        "queue_length_mean",
        _F64,
        "Mean queue length over the change points of all streams (HTA "
        "`get_queue_length_summary` mean, not time-weighted); null without launches.",
    ),
    Column(
        "blocked_on_full_queue_ns",
        _I64,
        "Time some stream's queue length was ≥ 1024 "
        "(HTA `get_time_spent_blocked_on_full_queue`, summed over streams), ns.",
    ),
    Column("memcpy_bytes", _I64, "Σ `args.bytes` of gpu_memcpy events, bytes."),
    Column("memcpy_time_ns", _I64, "Σ durations of gpu_memcpy events (unmerged), ns."),
    Column(
        "memcpy_bw_gbps",
        _F64,
        "Σ bytes ÷ Σ copy time over the copies with a known size, GB/s (1e9 bytes/s), "
        "duration-weighted; copy time from Kineto's per-copy `memory bandwidth (GB/s)` (the arg HTA "
        "`get_memory_bw_summary` reads; exact even where `dur` is truncated to whole µs), else `dur`. "
        "Null without copies.",
    ),
    Column(
        "dataloader_time_ns",
        _I64,
        "Union of host events named like data loading (`enumerate(DataLoader)#…`, "
        "`…DataLoaderIter`, dataloader.py frames; jobs/analyze/hta/host_time.py) inside the window, ns. Ours.",
    ),
    Column(
        "cpu_bound_time_ns",
        _I64,
        "Time inside the window with no device activity on any stream while a host "
        "thread is inside a cpu_op / cuda_runtime / cuda_driver event, minus data-loader time, ns. Ours.",
    ),
)

STEPS = Table(
    name="steps",
    doc="One row per (job, attempt, rank, step): the step time, the GPU temporal breakdown of the GPU events "
    "attributed to the step (HTA temporal breakdown definitions, applied per step) and HTA-parity statistics "
    "(idle time breakdown, launch statistics, queue length, memcpy bandwidth, host time) of the step; "
    "host time is clipped to the ProfilerStep window.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        *_IDENTITY,
        Column("capture_id", _STR, "Capture the step came from.", False),
        Column("step", _I64, "ProfilerStep number N.", False),
        Column("step_start_ns", _I64, "Start of the CPU `ProfilerStep#N` annotation, ns on the capture clock."),
        Column("step_time_ns", _I64, "Duration of the CPU `ProfilerStep#N` annotation, ns."),
        *_BREAKDOWN,
        Column(
            "cpu_op_time_ns",
            _I64,
            "Σ merged intervals of top-level CPU ops inside the step on all threads, ns (host busy time).",
        ),
        *_HTA_STATS,
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id", "step"),
)

RANKS = Table(
    name="ranks",
    doc="One row per (job, attempt, rank): HTA's whole-trace temporal breakdown and comm/compute overlap "
    "(HTA 0.5.0 `get_temporal_breakdown` / `get_comm_comp_overlap`, including its last-step filter), "
    "plus step-time statistics and the HTA-parity statistics of the whole trace (same rows; host-time "
    "window = first start to last end of those rows).",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        *_IDENTITY,
        Column("capture_id", _STR, "Capture of this rank.", False),
        Column("world_size", _I32, "World size."),
        Column("device_name", _STR, "Accelerator name."),
        Column(
            "device_index",
            _I32,
            "Accelerator index the rank's device activity ran on (the most frequent device "
            "pid of its kernels, copies and sets); null without device activity.",
        ),
        Column("n_steps", _I32, "Profiler steps found."),
        Column("step_time_p50_ns", _I64, "Median step time, ns."),
        Column("step_time_max_ns", _I64, "Longest step time, ns."),
        *_BREAKDOWN,
        *_HTA_STATS,
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id"),
)

KERNELS = Table(
    name="kernels",
    doc="One row per (job, attempt, rank, capture, step, kernel name): GPU kernel statistics "
    "(HTA `get_gpu_kernel_breakdown` per-kernel view, per step; plain Σ dur, no merging).",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        *_IDENTITY,
        Column("capture_id", _STR, "Capture of this rank.", False),
        Column("step", _I64, "ProfilerStep number N; -1 for GPU events outside any step.", False),
        Column("name", _STR, "Kernel / memcpy / memset name.", False),
        Column(
            "kernel_type",
            _STR,
            "`COMMUNICATION`, `COMPUTATION`, `MEMORY` or `OTHER` (collective metadata, "
            "then name families; see jobs/analyze/trace/kernel_types.py).",
        ),
        Column("hta_kernel_type", _STR, "The type HTA 0.5.0 assigns from the name alone (for comparison)."),
        Column("n", _I64, "Number of launches."),
        Column("total_ns", _I64, "Σ duration, ns."),
        Column("min_ns", _I64, "Shortest, ns."),
        Column("max_ns", _I64, "Longest, ns."),
        Column("mean_ns", _F64, "Mean, ns."),
        Column("std_ns", _F64, "Population standard deviation, ns."),
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id", "step", "name"),
)

OP_EFFICIENCY = Table(
    name="op_efficiency",
    doc="One row per (job, attempt, rank, capture, op name, shape signature, dtype) of the ops whose work the recorded "
    "shapes determine (GEMM, convolution, attention, elementwise, normalization: jobs/analyze/efficiency/perf_model.py): "
    "the device time of the kernels each call launched (charged to the innermost modelled op above the launch) "
    "against the device's datasheet roofline (jobs/analyze/efficiency/devices.py). AMD TraceLens PerfModel/TreePerf; "
    "Williams et al., Roofline, CACM 2009.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        *_IDENTITY,
        Column("capture_id", _STR, "Capture of this rank.", False),
        Column("device_name", _STR, "Accelerator name (`captures.device_name`): the key of the datasheet peaks."),
        Column("op_name", _STR, "CPU op that launched the kernels (`aten::addmm`, …).", False),
        Column("kind", _STR, "Formula family: `gemm`, `conv`, `attention`, `elementwise` or `normalization`.", False),
        Column(
            "shape_sig",
            _STR,
            "The tensor inputs' sizes as recorded (`[5185,1024]x[1024,1024]`), then what else decides the work (a "
            "convolution's `stride=… padding=… dilation=… groups=…`, an attention's `causal`).",
            False,
        ),
        Column("dtype", _STR, "`Input type` of the first tensor input (`c10::BFloat16`, `float`, …).", False),
        Column("precision", _STR, "Its precision class (`bf16`, `fp16`, `fp32`, `fp8`, `fp64`): the peak used."),
        Column("n_calls", _I64, "Calls of the op that launched kernels."),
        Column("n_kernels", _I64, "Kernels they launched."),
        Column("kernel_time_ns", _I64, "Σ duration of those kernels, ns."),
        Column("kernel_time_per_call_ns", _F64, "kernel_time_ns / n_calls, ns."),
        Column("flops_per_call", _F64, "FLOPs of one call from its shapes (multiply-accumulate = 2), FLOP."),
        Column("bytes_per_call", _F64, "Compulsory memory traffic of one call (operands once, result once), bytes."),
        Column("intensity", _F64, "Arithmetic intensity flops_per_call / bytes_per_call, FLOP/byte."),
        Column("achieved_tflops", _F64, "n_calls × flops_per_call / kernel_time, TFLOP/s."),
        Column("achieved_gbps", _F64, "n_calls × bytes_per_call / kernel_time, GB/s."),
        Column(
            "peak_tflops", _F64, "Datasheet dense peak of the device for the precision, TFLOP/s; null when unknown."
        ),
        Column("peak_gbps", _F64, "Datasheet memory bandwidth of the device, GB/s; null when unknown."),
        Column("peak_flops_pct", _F64, "achieved_tflops / peak_tflops × 100, %."),
        Column(
            "peak_bandwidth_pct",
            _F64,
            "achieved_gbps / peak_gbps × 100, %; above 100 when the operands came from on-chip cache (bound `cache`).",
        ),
        Column("roofline_pct", _F64, "Achieved over attainable FLOP/s (the larger of the two above), %."),
        Column(
            "bound",
            _STR,
            "Roofline side: `compute` (intensity ≥ the device's ridge point), `memory`, or `cache` (faster than device "
            "memory allows); null without a peak.",
        ),
        Column("top_kernel", _STR, "The group's longest kernel."),
        Column(
            "top_kernel_launch",
            _STR,
            "Its launch arguments as JSON (`grid`, `block`, `registers per thread`, `shared memory`, "
            "`est. achieved occupancy %` as Kineto records them).",
        ),
        Column("peak_source", _STR, "The datasheet of the peaks, or why there is none (unknown device, no such peak)."),
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id", "op_name", "shape_sig", "dtype"),
)

UTILIZATION_WINDOWS = Table(
    name="utilization_windows",
    doc="One row per window, inside a ProfilerStep (or the whole trace of a rank without one), during which the "
    "rank's GPU runs nothing, or a NeuronCore's tensor engine runs below 20 %, of at least 0.5 ms or 5 % of the step "
    "(whichever is shorter; the 64 longest per step), with its cause (what the host was in, what ran instead) and "
    "whether the window recurs at the same place in other steps. Per step Σ dur_ns ≤ the step's time − the GPU's "
    "busy time in it. Ours: jobs/analyze/efficiency/utilization.py.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        *_IDENTITY,
        Column("capture_id", _STR, "Capture of this rank.", False),
        Column("step", _I64, "ProfilerStep number N; −1 for the whole-trace window of a rank without one.", False),
        Column("window_id", _I32, "0-based order of the window in its step.", False),
        Column(
            "engine",
            _STR,
            "What is under-used: `device` (a GPU running nothing on any stream) or `tensor` (a NeuronCore's tensor "
            "engine below 20 % busy).",
        ),
        Column("engine_util_pct", _F64, "The engine's busy share inside the window, % (0 for an idle GPU)."),
        Column("start_ns", _I64, "Window start, ns on the rank's clock."),
        Column("end_ns", _I64, "Window end, ns on the rank's clock."),
        Column("dur_ns", _I64, "end_ns − start_ns, ns."),
        Column("offset_ns", _I64, "start_ns − the step's start: where in the step the window opens, ns."),
        Column("step_start_ns", _I64, "Start of the step (ProfilerStep ts, or the first event), ns."),
        Column("step_time_ns", _I64, "Duration of the step, ns."),
        Column("step_pct", _F64, "dur_ns / step_time_ns × 100, %."),
        Column(
            "cause",
            _STR,
            "GPU: what the host was in: `sync` (a synchronizing call), `collective` (a host-side collective or wait: "
            "a peer rank), `memcpy` (a runtime copy call), `dataloader`, `host` (other ops and launches: CPU-bound) "
            "or `host_idle` (no captured host event). NeuronCore: what ran instead: `collective`, `dma` (DMA "
            "queues), `engine` (Vector, Scalar or GpSimd), `semaphore` (Sync engine waits) or `device_idle`.",
        ),
        Column("cause_pct", _F64, "Share of the window the cause's host events cover, %."),
        Column(
            "cause_op",
            _STR,
            "The cause's event: the host call the GPU waited on (`cudaStreamSynchronize`, …), the busiest DMA queue, "
            "or the instruction of the busiest other engine.",
        ),
        Column("cause_event_id", _I64, "`events.event_id` of that event."),
        Column(
            "cause_stack",
            _STR,
            "GPU: the host event's enclosing calls, outermost first below the ProfilerStep, at most 8 (`aten::item → "
            "aten::_local_scalar_dense → cudaStreamSynchronize`); NeuronCore: track → instruction.",
        ),
        Column(
            "recurring_steps",
            _I32,
            "Steps (this one included) with a window of the same cause and cause_op overlapping the same offsets.",
        ),
        Column("recurs_pct", _F64, "recurring_steps / the rank's steps × 100, %."),
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id", "step", "window_id"),
)

COLLECTIVES = Table(
    name="collectives",
    doc="One row per collective call per rank, matched across the ranks of a job by process group and call "
    "order (`Seq` when present). Times are on the rank's own clock and on the job clock aligned on "
    "collective completion (see `clock_offset_ns`). Bandwidth formulas: NCCL-tests PERFORMANCE.md.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        *_IDENTITY,
        Column("capture_id", _STR, "Capture of this rank.", False),
        Column("step", _I64, "ProfilerStep number N of the call."),
        Column("event_id", _I64, "`events.event_id` of the communication kernel.", False),
        Column("pg_name", _STR, "Process group name (or inferred group id when the trace has none)."),
        Column("collective", _STR, "Collective name (allreduce, all_to_all, sendrecv, …)."),
        Column(
            "call_index",
            _I64,
            "0-based order of this call among the rank's calls on (pg_name, collective stream group).",
        ),
        Column("match_key", _STR, "Key shared by the same call on every rank of the job.", False),
        Column("seq", _I64, "NCCL sequence number (`Seq`) when present."),
        Column("stream", _I64, "Stream of the kernel."),
        Column("start_ns", _I64, "Kernel start, ns on the rank's clock."),
        Column("end_ns", _I64, "Kernel end, ns on the rank's clock."),
        Column("dur_ns", _I64, "Kernel duration, ns."),
        Column("aligned_start_ns", _I64, "start_ns + clock_offset_ns (job clock)."),
        Column("aligned_end_ns", _I64, "end_ns + clock_offset_ns (job clock)."),
        Column(
            "clock_offset_ns",
            _I64,
            "Offset added to this rank's clock to align collective completions across ranks, ns.",
        ),
        Column(
            "wait_ns",
            _I64,
            "Last arrival − own arrival (aligned starts), ns: time this rank waited for the slowest rank.",
        ),
        Column("skew_ns", _I64, "Last arrival − first arrival for the call, ns (same on every rank of the call)."),
        Column("net_dur_ns", _I64, "dur_ns − wait_ns: the transfer itself, ns."),
        Column("is_last_arrival", _BOOL, "True on the rank that arrived last (the straggler of this call)."),
        Column("n_ranks_matched", _I32, "Ranks on which this call was found."),
        Column("name", _STR, "Kernel name of the call on this rank."),
        Column(
            "pg_inferred", _BOOL, "True when the trace names no process group and `pg_name` is inferred (`stream#k`)."
        ),
        Column(
            "exposed_ns",
            _I64,
            "Kernel time not overlapped by any computation kernel on the rank, ns (exposed communication).",
        ),
        Column("msg_bytes", _I64, "Message size, bytes."),
        Column("group_size", _I32, "Ranks in the process group."),
        Column("algbw_gbps", _F64, "Algorithm bandwidth msg_bytes / net_dur, GB/s (1e9 bytes/s)."),
        Column(
            "busbw_gbps",
            _F64,
            "Bus bandwidth = algbw × NCCL-tests factor (allreduce 2(n−1)/n, allgather/reduce_scatter/"
            "all_to_all (n−1)/n, broadcast/reduce/sendrecv 1), GB/s.",
        ),
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id", "event_id"),
)

COMM_SITES = Table(
    name="comm_sites",
    doc="One row per (job, attempt, step, collective call site): a call as every rank makes it, named by what stays "
    "the same each step (process group, collective, message size, position in the step), with its exposed time "
    "and wait over the ranks, the compute before it on the job's critical path, and what hiding its exposed part "
    "would save (a what-if on the step's cross-rank critical path). Ours: jobs/analyze/critical_path/comm_sites.py.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        Column("job_id", _STR, "Job.", False),
        Column("attempt", _I32, "Attempt of the job.", False),
        Column("step", _I64, "ProfilerStep number N.", False),
        Column("site", _STR, "`<pg_name>|<collective>|<msg_bytes>|#<position>`: the same call in every step.", False),
        Column("pg_name", _STR, "Process group (`collectives.pg_name`)."),
        Column("collective", _STR, "Collective (`allreduce`, `all_to_all`, `send`, …)."),
        Column("msg_bytes", _I64, "Message size, bytes."),
        Column("position", _I32, "0-based order of the call among the rank's calls of its process group in the step."),
        Column("seq", _I64, "NCCL sequence number (`Seq`) of the last-arriving rank's call, when present."),
        Column("n_ranks", _I32, "Ranks on which the call was matched."),
        Column("exposed_mean_ns", _F64, "Mean over the ranks of `collectives.exposed_ns`, ns."),
        Column("exposed_max_ns", _I64, "Largest exposed time of a rank, ns."),
        Column("exposed_max_rank", _I32, "The rank with it."),
        Column("wait_mean_ns", _F64, "Mean over the ranks of `collectives.wait_ns` (waiting for the last rank), ns."),
        Column("wait_max_ns", _I64, "Largest wait of a rank, ns; on a point-to-point call, the pipeline bubble."),
        Column("last_arrival_rank", _I32, "The rank that arrived last."),
        Column("exposed_cut_ns", _I64, "Exposed time of the last-arriving rank's call: what the what-if hides, ns."),
        Column(
            "preceding_compute_ns",
            _I64,
            "Compute time (HTA weights) of the last-arriving rank's critical-path leg that ends at the call: the work "
            "a prefetch could overlap, ns; null without the step's legs.",
        ),
        Column("path_length_ns", _I64, "The step's cross-rank critical path length, ns."),
        Column("what_if_path_ns", _I64, "Its length with exposed_cut_ns taken off the call, ns."),
        Column("saving_ns", _I64, "path_length_ns − what_if_path_ns: what overlapping the call would save, ns."),
        Column("is_p2p", _BOOL, "True for `send`, `recv`, `sendrecv` (pipeline-parallel transfers)."),
        Column("exposed_steps", _I32, "Steps of the job in which the site is exposed (exposed_max_ns > 0)."),
        Column("exposed_steps_pct", _F64, "exposed_steps / the job's steps with collectives × 100, %."),
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "step", "site"),
)

CRITICAL_PATH = Table(
    name="critical_path",
    doc="Segments of the critical path per (job, attempt, step), in path order, with attribution. Single-rank "
    "segments follow HTA's critical-path graph; cross-rank paths follow collectives to the rank that arrived last.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        Column("job_id", _STR, "Training job id.", False),
        Column("attempt", _I32, "Job attempt.", False),
        Column("step", _I64, "ProfilerStep number N.", False),
        Column(
            "scope",
            _STR,
            "`rank` (one rank's own critical path) or `job` (the cross-rank path that set the step time).",
            False,
        ),
        Column("path_rank", _I32, "For scope `rank`: the rank whose path this is; for `job`: -1.", False),
        Column(
            "path_capture_id",
            _STR,
            "For scope `rank`: the capture whose path this is (a rank with several device captures, such as one "
            "Neuron profile per NeuronCore, has a path for each); for `job`: empty.",
            False,
        ),
        Column("segment", _I64, "0-based position of the segment along the path.", False),
        Column("rank", _I32, "Rank the segment runs on.", False),
        Column("capture_id", _STR, "Capture of that rank."),
        Column("event_id", _I64, "`events.event_id` of the event on the segment; null for gaps and edges."),
        Column("name", _STR, "Event name, or the edge kind for gaps."),
        Column("start_ns", _I64, "Segment start, ns (job clock for scope `job`)."),
        Column("end_ns", _I64, "Segment end, ns."),
        Column(
            "dur_ns",
            _I64,
            "Time this segment puts on the critical path, ns (edge weight: 0 for sync edges; "
            "≤ end − start; Σ over a path = `path_length_ns`).",
        ),
        Column(
            "bound_by",
            _STR,
            "`cpu_bound`, `launch_overhead`, `kernel_kernel_gap`, `compute`, `communication`, "
            "`data_loading`, `sync`, `collective_wait`; scope `job` also `late_start` (from the job's step start to "
            "where the path begins on a rank).",
        ),
        Column("path_length_ns", _I64, "Total length of the path this segment belongs to, ns."),
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "step", "scope", "path_rank", "path_capture_id", "segment"),
)

FINDINGS = Table(
    name="findings",
    doc="Ranked bottleneck findings per job with evidence and a recommendation; also written as "
    "`findings.json` per job (schema `schemas/findings.v1.json`).",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        Column("job_id", _STR, "Training job id.", False),
        Column("attempt", _I32, "Job attempt.", False),
        Column("finding_id", _STR, "Stable id: rule + scope (e.g. `exposed_communication/rank=3`).", False),
        Column(
            "rule",
            _STR,
            "Rule that fired (e.g. `host_bound_launch`, `exposed_communication`, `straggler_rank`, `pageable_memcpy`).",
            False,
        ),
        Column("rank_order", _I32, "1 = most time lost per step.", False),
        Column("title", _STR, "One-line statement of the problem."),
        Column("metric", _STR, "Metric name the rule used."),
        Column("value", _F64, "Metric value (unit in `metric`)."),
        Column("est_time_lost_per_step_ns", _I64, "Estimated time lost per step if fixed, ns."),
        Column(
            "confidence",
            _F64,
            "0–1, from the evidence: the rule's base, effect size (metric vs threshold), agreement across ranks, "
            "corroboration, windows and events behind it (per-rule inputs: jobs/analyze/findings/rules.py, "
            "Confidence).",
        ),
        Column("ranks", pa.list_(_I32), "Ranks concerned."),
        Column(
            "steps",
            pa.list_(_I64),
            "ProfilerSteps concerned (empty when judged on whole traces: evidence `window` is then `trace`).",
        ),
        Column("evidence_json", _STR, "Evidence as JSON: job, rank, step, event ids, numbers."),
        Column("recommendation", _STR, "What to try."),
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "finding_id"),
)

#: ``rule_coverage.status`` values: the rule judged the job on its ProfilerSteps, on each rank's whole trace (no
#: ProfilerStep), could not apply (its subject is absent: one rank, no communication), or lacked the data to judge.
COVERAGE_STATUSES = ("ran", "ran_on_trace", "not_applicable", "not_run")

RULE_COVERAGE = Table(
    name="rule_coverage",
    doc="Which bottleneck rules judged each job, on what window, and why a rule did not "
    "(jobs/analyze/findings/coverage.py). A job's verdict is `ok` only when every rule that could judge it ran "
    "and none fired; a `not_run` rule makes the verdict say what is unknown.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        Column("job_id", _STR, "Training job id.", False),
        Column("attempt", _I32, "Job attempt.", False),
        Column("rule", _STR, "Finding rule (`findings.rule`).", False),
        Column(
            "status",
            _STR,
            "`ran` (on the ProfilerSteps), `ran_on_trace` (no ProfilerStep: each rank's whole trace as one window), "
            "`not_applicable` (what the rule judges is absent, e.g. one rank for the straggler rule) or `not_run` "
            "(the data it needs is missing, e.g. no GPU activity).",
            False,
        ),
        Column("reason", _STR, "Why, in words (null for `ran`)."),
        Column("n_ranks", _I32, "Ranks the rule judged.", False),
        Column("n_windows", _I64, "Windows (rank-steps, or whole traces) the rule judged.", False),
        Column("n_findings", _I32, "Findings the rule produced for the job.", False),
        Column(
            "uncertain",
            _STR,
            "The profiler's own warnings about the data this rule reads, in words with their ranks "
            "(`captures.profiler_warnings_json`, jobs/analyze/findings/uncertainty.py); the rule's findings have their "
            "confidence halved. Null when none.",
        ),
    ),
    stage="analyze",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rule"),
)

_FLEET_GROUP = (
    Column(
        "dimension",
        _STR,
        "Partition: what the rows are grouped by: `fleet` (everything), `job_name` (runs of a "
        "recurring job), `job` (one run; value `job_id#attempt`), `model` (manifest tag), `hardware` (device "
        "name; value `cpu` without an accelerator), `torch_version`.",
        False,
    ),
    Column(
        "value",
        _STR,
        "The group's value of `dimension` (`all` for `fleet`; `(none)` when the capture does not "
        "say, e.g. an untagged model).",
        False,
    ),
    Column("date", _STR, "Capture date YYYY-MM-DD of the steps aggregated, or `all` for every date.", False),
)

FLEET_STATS = Table(
    name="fleet_stats",
    doc="Fleet-wide statistics of the per-step metrics grouped by job, job name, model tag, hardware, torch "
    "version and date (jobs/fleet/stats.py), over the analysis windows (jobs/analyze/windows.py): each rank's "
    "ProfilerSteps, or its whole trace when the rank capture has no ProfilerStep. Step time is the job's: per "
    "(job, attempt, step) the slowest rank's ProfilerStep duration; whole-trace windows are no steps and are left "
    "out of the step-time columns and `n_steps` (a job with only whole-trace windows has null step time). "
    "Percentages are time-weighted over all rank windows of the group, whole traces included. The `job` rows of "
    "date `all` are each run's headline numbers (`jobs.fleet.stats.run_summary`): the job report, MLflow and "
    "the fleet report show these.",
    columns=_FLEET_GROUP
    + (
        Column("n_runs", _I64, "Job runs (job_id, attempt) in the group, with or without ProfilerSteps.", False),
        Column(
            "n_ranks", _I64, "Rank captures (job_id, attempt, rank) in the group, whole-trace ones included.", False
        ),
        Column(
            "n_steps",
            _I64,
            "Job steps (job_id, attempt, ProfilerStep) in the group; whole-trace windows not counted.",
            False,
        ),
        Column(
            "n_rank_steps",
            _I64,
            "Rank windows in the group: `steps` rows (one per rank and ProfilerStep) plus one per rank capture "
            "without ProfilerStep (its whole trace).",
            False,
        ),
        Column(
            "step_time_p50_ns",
            _I64,
            "Median job step time over the group's ProfilerSteps (exact percentile, linear interpolation between "
            "closest ranks as numpy; rounded), ns; null when the group has no ProfilerStep. Exception: a row of "
            "date `all` of the fleet, job_name, model, hardware or torch_version dimension merges one KLL sketch "
            "per run date (jobs/fleet/partials.py: a group's merged sketch is kept, and a daily run adds the new "
            "run date's to it instead of reading the history): exact while the merged sketch keeps every step "
            "time (a few hundred), beyond that within a normalized rank error of 1.65 % (99 % confidence: the "
            "value returned lies between the exact p48.35 and p51.65; the bound holds for any order of merges). "
            "Per-date rows "
            "and `job` rows are always exact.",
        ),
        Column("step_time_p90_ns", _I64, "90th percentile job step time, ns (exact or sketched as the p50)."),
        Column("step_time_p99_ns", _I64, "99th percentile job step time, ns (exact or sketched as the p50)."),
        Column("step_time_mean_ns", _F64, "Mean job step time, ns."),
        Column(
            "idle_pct",
            _F64,
            "Σ idle_time_ns / Σ kernel_time_ns × 100 over rank windows, whole traces included (HTA "
            "`idle_time_pctg`, time-weighted); null without GPU activity.",
        ),
        Column(
            "compute_pct", _F64, "Σ compute_time_ns / Σ kernel_time_ns × 100 (HTA `compute_time_pctg`, time-weighted)."
        ),
        Column(
            "exposed_comm_pct",
            _F64,
            "Σ exposed_comm_ns / Σ step_time_ns × 100 over rank windows (a whole-trace window's time is its trace "
            "span): share of the time spent in communication no computation overlaps.",
        ),
        Column("cpu_bound_pct", _F64, "Σ cpu_bound_time_ns / Σ step_time_ns × 100 (host busy, device idle)."),
        Column("dataloader_pct", _F64, "Σ dataloader_time_ns / Σ step_time_ns × 100."),
    ),
    stage="fleet",
    partition_by=("dimension",),
    files_apart=("date", "all"),
    key=("dimension", "value", "date"),
)

FLEET_KERNELS = Table(
    name="fleet_kernels",
    doc="Top kernels by total time per fleet group (same groups as `fleet_stats`), from `kernels`.",
    columns=_FLEET_GROUP
    + (
        Column("kernel_rank", _I32, "1 = most total time in the group.", False),
        Column("name", _STR, "Kernel / memcpy / memset name.", False),
        Column("kernel_type", _STR, "`COMMUNICATION`, `COMPUTATION`, `MEMORY` or `OTHER` (as in the kernels table)."),
        Column("n", _I64, "Launches in the group."),
        Column("total_ns", _I64, "Σ duration in the group, ns."),
        Column("share_pct", _F64, "total_ns / Σ total_ns of every kernel in the group × 100."),
        Column("n_runs", _I64, "Job runs in which the kernel ran."),
    ),
    stage="fleet",
    partition_by=("dimension",),
    files_apart=("date", "all"),
    key=("dimension", "value", "date", "kernel_rank"),
)

_IMPACT_DIMENSION = (
    "Partition: the group kind: `fleet` (everything), `job_name`, `model` (manifest tag), `hardware` (device name; "
    "value `cpu` without an accelerator)."
)
_IMPACT_VALUE = "The group's value (`all` for `fleet`; `(none)` when the capture does not say)."

FLEET_FINDINGS = Table(
    name="fleet_findings",
    doc="Findings ranked by fleet impact (jobs/fleet/impact.py): per rule and fleet group, over a window of "
    "capture dates, the runs it fired in and the accelerator-hours per day fixing it would recover. Per run: "
    "the rule's largest `est_time_lost_per_step_ns` × the run's job steps in `steps` (the captured steps: a lower "
    "bound) × its world size (at least the ranks traced, at most 256 per rank traced). Estimates of different rules overlap: they rank, "
    "they do not add up.",
    columns=(
        Column("dimension", _STR, _IMPACT_DIMENSION, False),
        Column("value", _STR, _IMPACT_VALUE, False),
        Column("rule", _STR, "The finding rule (`findings.rule`).", False),
        Column("impact_rank", _I32, "1 = most accelerator-hours per day in the group.", False),
        Column("window_start", _STR, "First capture date YYYY-MM-DD of the window.", False),
        Column("window_end", _STR, "Last capture date of the window: the newest capture date in the warehouse.", False),
        Column("window_days", _I32, "Days in the window.", False),
        Column("n_jobs", _I64, "Distinct job_id the rule fired in, in the window.", False),
        Column("n_runs", _I64, "Runs (job_id, attempt) it fired in.", False),
        Column(
            "n_steps",
            _I64,
            "Job steps of those runs (`steps`, ProfilerSteps captured; 1 for a run without ProfilerStep: its "
            "whole-trace window).",
            False,
        ),
        Column("time_lost_ns", _I64, "Σ over runs of time lost per step × steps, ns (wall time of the job)."),
        Column("accelerator_hours", _F64, "Σ over runs of time lost × world size, hours."),
        Column(
            "accelerator_hours_per_day",
            _F64,
            "accelerator_hours / window_days: what fixing the rule in the "
            "group would recover per day at the window's rate.",
        ),
        Column(
            "top_jobs", pa.list_(_STR), "`job_id#attempt` of the runs losing the most accelerator time, most first."
        ),
        Column("example_title", _STR, "`findings.title` of the first of `top_jobs`."),
    ),
    stage="fleet",
    partition_by=("dimension",),
    key=("dimension", "value", "rule"),
)

FLEET_OPS = Table(
    name="fleet_ops",
    doc="Op groups ranked by fleet impact (jobs/fleet/impact.py): per (op, shape signature, dtype) and fleet group, "
    "over the window of `fleet_findings`, the accelerator-hours per day its kernels would save at 70 % of their "
    "roofline (the `kernels_below_peak` estimate). Per run: Σ over the traced ranks' `op_efficiency` rows with a "
    "roofline of kernel_time_ns × max(0, 1 − roofline_pct / 70) × world size / ranks traced. The 100 groups with the "
    "most accelerator-hours per day are kept per fleet group.",
    columns=(
        Column("dimension", _STR, _IMPACT_DIMENSION, False),
        Column("value", _STR, _IMPACT_VALUE, False),
        Column("op_name", _STR, "CPU op that launched the kernels (`op_efficiency.op_name`).", False),
        Column("shape_sig", _STR, "Its shape signature (`op_efficiency.shape_sig`).", False),
        Column("dtype", _STR, "`op_efficiency.dtype` (`(none)` when not recorded).", False),
        Column("impact_rank", _I32, "1 = most accelerator-hours per day in the group.", False),
        Column("kind", _STR, "Formula family (`op_efficiency.kind`)."),
        Column("precision", _STR, "Precision class: the peak used (`op_efficiency.precision`)."),
        Column("bound", _STR, "Roofline side of its row with the most kernel time (`op_efficiency.bound`)."),
        Column("device_names", pa.list_(_STR), "The accelerators it ran on, sorted."),
        Column("window_start", _STR, "First capture date YYYY-MM-DD of the window.", False),
        Column("window_end", _STR, "Last capture date of the window.", False),
        Column("window_days", _I32, "Days in the window.", False),
        Column("n_jobs", _I64, "Distinct job_id it ran in, in the window.", False),
        Column("n_runs", _I64, "Runs (job_id, attempt) it ran in.", False),
        Column("n_calls", _I64, "Σ calls on the traced ranks (over each capture).", False),
        Column("kernel_time_ns", _I64, "Σ kernel time on the traced ranks, ns.", False),
        Column("roofline_pct", _F64, "Kernel-time-weighted mean of `op_efficiency.roofline_pct`, %."),
        Column(
            "recoverable_ns",
            _I64,
            "Σ on the traced ranks of kernel time × max(0, 1 − roofline_pct / 70), ns: device time saved at 70 % of the "
            "roofline.",
            False,
        ),
        Column("accelerator_hours", _F64, "Σ over runs of recoverable time × world size / ranks traced, hours."),
        Column("accelerator_hours_per_day", _F64, "accelerator_hours / window_days."),
        Column("top_jobs", pa.list_(_STR), "`job_id#attempt` of the runs with the most recoverable accelerator time."),
        Column(
            "top_kernel", _STR, "The longest kernel of its row with the most kernel time (`op_efficiency.top_kernel`)."
        ),
    ),
    stage="fleet",
    partition_by=("dimension",),
    key=("dimension", "value", "op_name", "shape_sig", "dtype"),
)

#: ``host_health.kind`` values, in the order the table lists them.
HEALTH_KINDS = ("host", "device", "link")

HOST_HEALTH = Table(
    name="host_health",
    doc="Host, device and link health across jobs (jobs/fleet/hosts.py): per host, accelerator and link, over a "
    "window of capture dates, how often its ranks arrive last at collectives against their fair share and how "
    "much slower their steps are than the other ranks' of the same runs (hosts, devices), or how its bus "
    "bandwidth compares with the run's other links (links); one slow in several different jobs is "
    "`suspect_hardware`. Every measure compares a target with the others of the same run, so a job slow "
    "everywhere blames none of them.",
    columns=(
        Column(
            "kind",
            _STR,
            "Partition: what the row is about: `host` (captures.host_name, runs on ≥ 2 hosts), "
            "`device` (one accelerator of a host, ranks.device_index, runs on ≥ 2 devices) or `link` (the "
            "hosts a process group spans, runs with ≥ 2 such groups).",
            False,
        ),
        Column(
            "target",
            _STR,
            "The host (`node-3`), device (`node-3/5`: host/device index) or link (`node-1+node-3`: "
            "its hosts joined by `+`).",
            False,
        ),
        Column("host_name", _STR, "The host (host and device rows); null for links."),
        Column("device_index", _I32, "Accelerator index (device rows)."),
        Column("hosts", pa.list_(_STR), "Hosts of the target: the host, or the hosts a link spans."),
        Column("device_names", pa.list_(_STR), "Accelerator names of its captures."),
        Column("window_start", _STR, "First capture date YYYY-MM-DD of the window.", False),
        Column("window_end", _STR, "Last capture date of the window: the newest capture date in the warehouse.", False),
        Column("window_days", _I32, "Days in the window (`window_end` − `window_start` + 1).", False),
        Column("n_jobs", _I64, "Distinct job_id of the runs it was measured in.", False),
        Column("n_runs", _I64, "Runs (job_id, attempt) it was measured in.", False),
        Column("n_ranks", _I64, "Rank captures on it (links: ranks of its process groups), over those runs.", False),
        Column(
            "n_slow_jobs",
            _I64,
            "Distinct jobs in which it was slow (hosts, devices: last-arrival ratio ≥ 1.5 over "
            "≥ 5 matched calls with a one-sided binomial p < 0.05, with fewer matched calls step-time excess ≥ 5 %; links: busbw ratio ≤ 1/1.5 over "
            "≥ 5 calls).",
            False,
        ),
        Column("slow_jobs", pa.list_(_STR), "Those job ids."),
        Column("matched_calls", _I64, "Collectives matched on ≥ 2 ranks in its runs (links: on its process groups)."),
        Column("last_arrivals", _I64, "Of those, the ones whose last-arriving rank ran on it (hosts, devices)."),
        Column(
            "last_arrival_ratio",
            _F64,
            "last_arrivals ÷ its fair share (Σ over runs of its ranks ÷ the run's "
            "ranks × the run's matched calls): 1 = fair, 8 = one of 8 equal hosts always last.",
        ),
        Column(
            "step_excess_p50_pct",
            _F64,
            "Median over its runs of (median step time of its ranks − median of the "
            "run's other ranks) ÷ the latter × 100 (`ranks.step_time_p50_ns`).",
        ),
        Column("step_excess_p50_ns", _I64, "The same difference in ns (median over runs)."),
        Column(
            "busbw_ratio",
            _F64,
            "Links: median over runs of its groups' median bus bandwidth ÷ the median of the "
            "run's other multi-host groups, per collective (`collectives.busbw_gbps`): 1 = as fast as the others.",
        ),
        Column("suspect_hardware", _BOOL, "Slow in ≥ 2 different jobs and in at least half of its jobs.", False),
        Column(
            "evidence_json",
            _STR,
            "Per run: job, ranks, matched calls, slow, and last arrivals, ratio, its binomial "
            "p-value, step excess "
            "(% and ms) for hosts and devices, or process groups and bus bandwidths (GB/s) for links: a JSON array.",
        ),
    ),
    stage="fleet",
    partition_by=("kind",),
    key=("kind", "target"),
)

REGRESSIONS = Table(
    name="regressions",
    doc="Each job run against the previous runs with the same `job_name` (jobs/fleet/regressions.py): per metric "
    "the run's value, the baseline's, the change with its Hodges-Lehmann confidence interval, a Mann-Whitney U "
    "test over the per-step values (raw and Benjamini-Hochberg adjusted over the runs of the same capture date) and a "
    "verdict.",
    columns=(
        Column("job_name", _STR, "Name shared by the runs compared (`captures.job_name`).", False),
        Column("job_id", _STR, "The run compared.", False),
        Column("attempt", _I32, "Its attempt.", False),
        Column("date", _STR, "Partition: the run's first capture date.", False),
        Column(
            "run_index",
            _I32,
            "0-based position of the run among the runs of `job_name` (ordered by manifest "
            "`created_at`, else date, then job id and attempt).",
            False,
        ),
        Column("metric", _STR, "`step_time_p50_ns`, `step_time_p90_ns`, `idle_pct` or `exposed_comm_pct`.", False),
        Column("value", _F64, "The run's value (unit in `metric`)."),
        Column("baseline", _F64, "The same statistic over the pooled steps of the baseline runs."),
        Column("change_pct", _F64, "(value − baseline) / baseline × 100; null when the baseline is 0 or absent."),
        Column("delta", _F64, "value − baseline (unit in `metric`; percentage points for `_pct`)."),
        Column(
            "change_est_pct",
            _F64,
            "Hodges-Lehmann estimate of the shift of the run's steps against the baseline's: for `step_time_*` "
            "the shift of the log step times as % change (exp(shift) − 1) × 100, the same for the p50 and p90 "
            "rows; for `_pct` metrics the shift of the per-step percentage in percentage points; null with "
            "fewer than 3 steps on a side.",
        ),
        Column(
            "change_ci_low_pct",
            _F64,
            "Lower bound of the distribution-free confidence interval of `change_est_pct` (Hollander & Wolfe: "
            "order statistics of the pairwise differences from the Mann-Whitney U distribution) at 1 − 2·alpha "
            "(98 % by default); % for `step_time_*`, percentage points for `_pct`; null when the steps are too "
            "few for an interval at that confidence.",
        ),
        Column("change_ci_high_pct", _F64, "Upper bound of that interval (unit as `change_ci_low_pct`)."),
        Column(
            "p_value",
            _F64,
            "Two-sided Mann-Whitney U test of the run's per-step values against the baseline's "
            "(scipy.stats.mannwhitneyu), raw; null with fewer than 3 steps on a side.",
        ),
        Column(
            "p_adjusted",
            _F64,
            "`p_value` adjusted by Benjamini-Hochberg over the (run, metric) tests of the runs of the same `date` "
            "(one capture day's runs, all job names together: a row changes only when its day's runs or its "
            "baseline do); the verdict compares it with alpha (0.01 by default).",
        ),
        Column(
            "verdict",
            _STR,
            "`regression` (worse by more than the threshold — 5 % for times, 2 percentage points for `_pct` — "
            "and `p_adjusted` < alpha), `improvement` (better by as much), `unchanged` (the confidence interval "
            "lies inside ± the threshold: an equivalence decision), `inconclusive` (neither: see `reason`), or "
            "`no_baseline` (first run, or too few steps).",
            False,
        ),
        Column(
            "reason",
            _STR,
            "Why an `inconclusive` or `no_baseline` verdict, in words (too few steps, too noisy, more steps "
            "would decide, not significant after the correction, first run); null for the other verdicts.",
        ),
        Column(
            "noisy",
            _BOOL,
            "The run's own kept step times are very unequal: p90 / p50 above 1.5 (jobs/fleet/regressions.py "
            "NOISY_P90_P50).",
        ),
        Column(
            "baseline_runs", pa.list_(_STR), "`job_id#attempt` of the baseline runs (the previous ones, at most 5)."
        ),
        Column("n_steps", _I64, "Job steps of the run, after dropping outlier steps (`n_dropped`)."),
        Column(
            "n_baseline_steps", _I64, "Job steps pooled from the baseline runs, after dropping their outlier steps."
        ),
        Column(
            "n_dropped",
            _I64,
            "Outlier steps dropped from the run: with at least 8 steps, those above Q3 + 3 × IQR of its own "
            "step times, at most a quarter of them.",
        ),
        Column(
            "summary",
            _STR,
            "The row in words, as every reader shows it (jobs/fleet/regressions.py `in_words`): metric, baseline → "
            "value, change [interval], verdict with the adjusted p or the reason and what would decide, steps "
            "compared, noisy run or baseline, outlier steps dropped.",
        ),
        Column(
            "changes_json",
            _STR,
            "For `regression` and `improvement` rows, what differs from the baseline runs "
            "(jobs/fleet/changes.py), a JSON object: `context` (torch_version, hardware, world_size and manifest "
            "tags such as `git_sha` whose run value differs: field, run, baseline values), `kernels` (the 5 "
            "kernels with the largest change of time per step), `findings_appeared`, `findings_cleared`; null "
            "for the other verdicts.",
        ),
    ),
    stage="fleet",
    partition_by=("date",),
    key=("job_id", "attempt", "metric"),
)


def _engine_columns() -> tuple[Column, ...]:
    """Per-engine columns of ``neuron_summary`` (engines named as in Neuron's Summary: PE=tensor,
    DVE=vector, ACT=scalar, POOL=gpsimd, SP=sync)."""
    cols = []
    for e, alias in (("tensor", "PE"), ("vector", "DVE"), ("scalar", "ACT"), ("gpsimd", "POOL"), ("sync", "SP")):
        cols += [
            Column(
                f"{e}_active_ns",
                _I64,
                f"{e} ({alias}) engine active time: merged busy intervals, semaphore waits "
                f"excluded (Summary `{e}_engine_active_time`), ns.",
            ),
            Column(
                f"{e}_active_pct",
                _F64,
                f"{e}_active_ns / total_time_ns × 100 (Summary `{e}_engine_active_time_percent`).",
            ),
            Column(f"{e}_instruction_count", _I64, f"Instructions executed on the {e} engine."),
        ]
    return tuple(cols)


NEURON_SUMMARY = Table(
    name="neuron_summary",
    doc="One row per Neuron device profile (one NeuronCore, one NEFF execution profile): hardware metrics "
    "recomputed from the profile's own metadata (Neuron Explorer Summary definitions, "
    "`../shared/reference/neuron_profiles.md` §2.2, §6.2), DMA, throttling, collectives and the device "
    "critical path. Percentages are 0–100 whatever scale the profile used.",
    columns=(
        Column("date", _STR, "Partition: as in `captures`.", False),
        *_IDENTITY,
        Column("capture_id", _STR, "Capture the profile came from.", False),
        Column(
            "profile_id",
            _STR,
            "Device profile within the capture (summary-json key, Parquet folder or JSON file stem).",
            False,
        ),
        Column(
            "source_format",
            _STR,
            "`neuron-json` (legacy `view --output-format json`), `neuron-summary-json` or `neuron-parquet`.",
        ),
        Column(
            "schema_version", _STR, "Parquet `Metadata.profile_schema_version` (e.g. `7.4.0`); null for JSON outputs."
        ),
        Column("profiler_version", _STR, "neuron-profile / neuron-explorer version that wrote the profile."),
        Column("instance_type", _STR, "EC2 instance type (e.g. `trn1.32xlarge`, `inf2.xlarge`)."),
        Column("neuron_device_idx", _I32, "Neuron device index."),
        Column("neuroncore_idx", _I32, "(Logical) NeuronCore index on the device."),
        Column("num_physical_cores", _I32, "Physical NeuronCores in the profiled (logical) core (2 for LNC2)."),
        Column("neff_name", _STR, "NEFF executed."),
        Column(
            "nth_exec", _I32, "Which execution of the NEFF was profiled (`profile_exec_N.ntff`); null when unknown."
        ),
        Column(
            "tensor_engine_num_rows",
            _I64,
            "TensorE PE-array rows (Metadata `tensor_engine_num_rows` / legacy `pe_num_rows`).",
        ),
        Column("tensor_engine_num_cols", _I64, "TensorE PE-array columns."),
        Column("tensor_engine_clock_ghz", _F64, "TensorE clock, GHz."),
        Column("neuroncore_clock_ghz", _F64, "NeuronCore base clock, GHz (cycle counts)."),
        Column("peak_flops_per_s", _F64, "TensorE peak: rows × cols × 2 × clock × 1e9 × physical cores, FLOP/s."),
        Column("hbm_bandwidth_bytes_per_s", _F64, "Metadata `hbm_ddr_bandwidth` (one HBM stack), bytes/s."),
        Column("dma_bandwidth_bytes_per_s", _F64, "Metadata `dma_ddr_bandwidth` (per NeuronCore), bytes/s."),
        Column("total_time_ns", _I64, "Summary `total_time`: on-device wall time incl. idle gaps, ns."),
        Column(
            "total_active_time_ns",
            _I64,
            "Summary `total_active_time`: union of engine, DMA and collective activity, ns.",
        ),
        Column("active_pct", _F64, "total_active_time_ns / total_time_ns × 100."),
        *_engine_columns(),
        Column("model_flops", _I64, "Summary `model_flops`: 2 × MACs of the model's matmuls (HLO), FLOP."),
        Column("hardware_flops", _I64, "Summary `hardware_flops`: all TensorE matmul FLOPs incl. compiler transposes."),
        Column("transpose_flops", _I64, "Summary `transpose_flops`."),
        Column(
            "mfu_pct", _F64, "Model FLOPs utilization, recomputed: model_flops / (peak_flops_per_s × total_time) × 100."
        ),
        Column("hfu_pct", _F64, "Hardware FLOPs utilization, recomputed with hardware_flops."),
        Column(
            "mbu_pct",
            _F64,
            "Memory bandwidth utilization, recomputed: (hbm_read + hbm_write) / total_time / hbm_bandwidth × 100.",
        ),
        Column("mfu_reported_pct", _F64, "`mfu_estimated_percent` as the profiler reported it, scaled to 0–100."),
        Column("hfu_reported_pct", _F64, "`hfu_estimated_percent` as reported, 0–100."),
        Column("mbu_reported_pct", _F64, "`mbu_estimated_percent` as reported, 0–100."),
        Column("hbm_read_bytes", _I64, "Bytes read from HBM."),
        Column("hbm_write_bytes", _I64, "Bytes written to HBM."),
        Column(
            "arithmetic_intensity",
            _F64,
            "Matmul arithmetic intensity (hardware − transpose FLOPs) / HBM bytes, FLOP/byte "
            "(Summary `mm_arithmetic_intensity`).",
        ),
        Column(
            "peak_flops_bandwidth_ratio", _F64, "TensorE peak / HBM bandwidth, FLOP/byte (the roofline ridge point)."
        ),
        Column(
            "bound",
            _STR,
            "`memory` when arithmetic_intensity < peak_flops_bandwidth_ratio, else `compute`; null without data.",
        ),
        Column("dma_active_ns", _I64, "Summary `dma_active_time`: time any DMA queue was moving data, ns."),
        Column("dma_active_pct", _F64, "dma_active_ns / total_time_ns × 100."),
        Column("dma_packet_count", _I64, "DMA packets (`DmaPacket` rows; legacy `dma` rows with aggregated = no)."),
        Column("dma_bytes", _I64, "Σ DMA packet transfer bytes."),
        Column("dma_avg_packet_bytes", _F64, "dma_bytes / dma_packet_count, bytes."),
        Column("dma_small_packet_pct", _F64, "Share of DMA packets smaller than 512 bytes, × 100."),
        Column("dma_throughput_bytes_per_s", _F64, "dma_bytes / dma_active time, bytes/s."),
        Column("dma_efficiency_pct", _F64, "dma_throughput_bytes_per_s / dma_bandwidth_bytes_per_s × 100."),
        Column("dma_transfer_count", _I64, "Summary `dma_transfer_count` (static DMA transfers)."),
        Column("dma_transfer_bytes", _I64, "Summary `dma_transfer_total_bytes`."),
        Column("spill_save_bytes", _I64, "SBUF spill bytes saved to HBM."),
        Column("spill_reload_bytes", _I64, "SBUF spill bytes reloaded from HBM."),
        Column(
            "spill_reload_pct_of_hbm_read",
            _F64,
            "spill_reload_bytes / hbm_read_bytes × 100 (Explorer insight threshold 25%).",
        ),
        Column("throttle_active_ns", _I64, "Union of throttle intervals with k < n (utilization limited), ns."),
        Column("throttle_pct", _F64, "throttle_active_ns / total_time_ns × 100."),
        Column("throttle_min_util_limit", _F64, "Tightest utilization limit k/n seen (1 = never throttled)."),
        Column("cc_op_count", _I64, "Collective operations (`CcOp` rows / Summary `cc_op_count`)."),
        Column("cc_op_time_ns", _I64, "Summary `cc_op_time` (Σ collective op durations), ns."),
        Column("cc_op_active_pct", _F64, "Summary `cc_op_active_time_percent`, 0–100."),
        Column(
            "cc_trigger_delay_ns",
            _I64,
            "Σ `cc_trigger_start_delay`: trigger → start of collectives (communication stall), ns.",
        ),
        Column("cc_trigger_delay_max_ns", _I64, "Longest single `cc_trigger_start_delay`, ns."),
        Column("semaphore_wait_ns", _I64, "Σ instruction `evt_wait_time` (ready → semaphore satisfied), ns."),
        Column(
            "largest_idle_gap_ns",
            _I64,
            "Longest gap with no engine, DMA or collective activity inside [0, total_time], ns.",
        ),
        Column("largest_idle_gap_start_ns", _I64, "Start of that gap, ns from profile start."),
        Column(
            "critical_path_ns",
            _I64,
            "Length of the device critical path over instruction dependencies (Flow / predecessors), ns.",
        ),
        Column("cp_compute_ns", _I64, "Critical-path time in engine compute instructions, ns."),
        Column("cp_dma_ns", _I64, "Critical-path time in DMA (DMA-trigger instructions and DMA blocks), ns."),
        Column("cp_semaphore_wait_ns", _I64, "Critical-path time waiting on semaphores (`evt_wait_time`), ns."),
        Column("cp_collective_ns", _I64, "Critical-path time in collectives, ns."),
        Column("cp_idle_ns", _I64, "Critical-path time not explained by the above (dependency gaps), ns."),
        Column("n_instructions", _I64, "Instruction rows."),
        Column("n_semaphore_updates", _I64, "Semaphore update rows."),
        Column(
            "flags",
            pa.list_(_STR),
            "Data-quality flags, e.g. `percent_scale_100`, `summary_from_events`, "
            "`reported_mfu_mismatch`, `no_metadata`.",
        ),
    ),
    stage="normalize",
    partition_by=("date", "job_id"),
    key=("job_id", "attempt", "rank", "capture_id", "profile_id"),
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        CAPTURES,
        EVENTS,
        STEPS,
        RANKS,
        KERNELS,
        OP_EFFICIENCY,
        UTILIZATION_WINDOWS,
        COLLECTIVES,
        COMM_SITES,
        CRITICAL_PATH,
        FINDINGS,
        RULE_COVERAGE,
        NEURON_SUMMARY,
    )
}

#: Fleet tables (jobs/fleet): derived from the whole warehouse, written whole by each fleet run; not part of a
#: per-job pipeline stage (so not in :data:`TABLES`, which the per-job validation suites iterate).
FLEET_TABLES: dict[str, Table] = {
    t.name: t for t in (FLEET_STATS, FLEET_KERNELS, REGRESSIONS, FLEET_FINDINGS, FLEET_OPS, HOST_HEALTH)
}


#: The pipeline stages that write tables, in data-flow order.
STAGES = ("normalize", "analyze", "fleet")


def stage_tables(stage: str) -> dict[str, Table]:
    """``{name: Table}`` of the tables ``stage`` writes (one of :data:`STAGES`), in declared order.

    Raises:
        ValueError: ``stage`` is not one of :data:`STAGES`.
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: one of {', '.join(STAGES)}")
    return {n: t for n, t in {**TABLES, **FLEET_TABLES}.items() if t.stage == stage}


def declared(name: str) -> Table:
    """The :class:`Table` of a job table (:data:`TABLES`) or a fleet table (:data:`FLEET_TABLES`).

    Raises:
        KeyError: ``name`` is not a warehouse table.
    """
    return TABLES.get(name) or FLEET_TABLES[name]
