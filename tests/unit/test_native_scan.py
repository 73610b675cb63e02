"""The native (C) Kineto scanner gives the same tables as the pure-Python reference path.

Every corpus trace is parsed with ``engine="native"`` and ``engine="python"`` and the results must
be equal (all columns, all rows, capture metadata). Hand-made documents cover what the corpus
lacks (escapes, string pids/tids, odd number spellings, chunk boundaries) and the inputs where the
scanner must hand over to the Python path (``engine="auto"`` then gives the reference result,
including quarantine reasons and repair flags). Exact ns values are checked against ``decimal``.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

from jobs.normalize.kineto import native
from jobs.normalize.kineto.native import NativeBail
from jobs.normalize.kineto.parse import TraceError, parse_kineto

TORCH = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "torch"
ALL_TRACES = sorted(p.relative_to(TORCH).as_posix() for p in TORCH.rglob("*.json*")) if TORCH.is_dir() else []

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="native scanner not built (no C compiler?)")


def both(data: bytes, **kw):
    return parse_kineto(data, "x.json", engine="native", **kw), parse_kineto(data, "x.json", engine="python", **kw)


def assert_same(a, b):
    assert a.events.schema == b.events.schema
    for name in a.events.column_names:
        assert a.events.column(name).equals(b.events.column(name)), name
    assert a.events.equals(b.events)
    assert a.meta == b.meta


def exact_ns(text: str) -> int:
    return int((Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def doc(events, **top) -> bytes:
    return json.dumps({"traceEvents": events, **top}).encode()


# --------------------------------------------------------------------------- corpus equality


@pytest.mark.parametrize("rel", ALL_TRACES)
def test_native_equals_python_on_every_corpus_trace(CORPUS, rel):
    data = (CORPUS / "torch" / rel).read_bytes()
    nat, ref = both(data)  # engine="native" raises NativeBail if it cannot handle the file
    assert_same(nat, ref)
    assert nat.events.num_rows > 0


@pytest.mark.parametrize(
    "rel",
    [
        "HolisticTraceAnalysis/nccl_parser_config/nccl_data.json.gz",  # collectives, relative ts + base
        "kineto/tb_plugin_2021-01/resnet50_num_workers_0/worker0.pt.trace.json.gz",  # bare list, string tids
    ],
)
def test_verbatim_args_and_small_gunzip_pieces(CORPUS, monkeypatch, rel):
    import jobs.normalize.kineto.parse as kineto

    data = (CORPUS / "torch" / rel).read_bytes()
    monkeypatch.setattr(kineto, "_NATIVE_PIECE_BYTES", 4099)  # events cut across many pieces
    nat, ref = both(data, compact_args=False)
    assert_same(nat, ref)


def test_corpus_has_28_traces_for_the_equality_test():
    if not ALL_TRACES:
        pytest.skip("corpus not available")
    assert len(ALL_TRACES) == 28


# --------------------------------------------------------------------------- hand-made documents


def test_escapes_unicode_and_string_ids():
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": 'a "quoted" \\ name\n\u00e9\U0001f600',
            "pid": "Spans",
            "tid": "7",
            "ts": 1,
            "dur": 2,
            "args": {"External id": "12", "correlation": 5, "s": "\u2028 \t"},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "k",
            "pid": 0,
            "tid": "stream 7",
            "ts": 2,
            "dur": 1,
            "args": {"device": 0, "stream": "7", "external id": 9},
        },
        {"ph": "i", "cat": None, "name": None, "pid": None, "ts": 3, "s": "t"},
        {"ph": "M", "name": "process_name", "pid": "Spans", "tid": 0, "args": {"name": "spans \u00e9"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": "stream 7", "args": {"name": "s7", "name2": 1}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": "stream 7", "args": {"name": "later wins"}},
        {"ph": "B", "name": "begin", "pid": 1, "tid": 1, "ts": 4},
        {"ph": "b", "cat": "async", "name": "nestable", "id": 1, "pid": 1, "tid": 1, "ts": 4},
    ]
    raw = json.dumps({"traceEvents": events}, ensure_ascii=True).encode()  # \uXXXX escapes everywhere
    for data in (raw, json.dumps({"traceEvents": events}, ensure_ascii=False).encode()):
        nat, ref = both(data)
        assert_same(nat, ref)
    c = nat.events.to_pydict()
    assert c["name"][0] == 'a "quoted" \\ name\n\u00e9\U0001f600'
    assert c["external_id"][:2] == [12, 9] and c["stream"][1] == 7 and c["tid"][:2] == [7, 7]
    assert c["process_name"][0] == "spans \u00e9" and c["thread_name"][1] == "later wins"
    assert "unsupported_phase" in nat.meta["flags"]  # the async "b" event
    assert "unmatched_begin" in nat.meta["flags"] and c["name"][-1] == "begin"  # a B never closed: kept


def test_key_escapes_duplicate_keys_and_odd_args():
    raw = (
        b'{"traceEvents": [{"p\\u0068": "X", "ph": "i", "ph": "X", "name": "a", "pid": 1, "tid": 1,'
        b' "ts": 1, "ts": 2, "dur": 1, "args": {"x": 1}, "args": {"correlation": 3, "correlation": 4}},'
        b'{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": null},'
        b'{"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 6, "dur": 1, "args": [1, {"a": [ ]}]},'
        b'{"ph": "X", "name": "d", "pid": 1, "tid": 1, "ts": 7, "dur": 1, "args": {}},'
        b'{"ph": "X", "name": "e", "pid": 1, "tid": 1, "ts": 8, "dur": 1, "args": {"n": {"d": [1, 2.5e3, true]}}}'
        b']}'
    )
    verbatim, _ = both(raw, compact_args=False)
    assert_same(verbatim, _)
    nat, ref = both(raw)
    assert_same(nat, ref)
    c = nat.events.to_pydict()
    assert c["ts_ns"][0] == 2000 and c["correlation"][0] == 4
    assert c["args_json"][1:4] == ["null", '[1,{"a":[]}]', "{}"]
    assert verbatim.events.column("args_json")[2].as_py() == '[1, {"a": [ ]}]'


def test_collective_args_rows():
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllGather_RING_LL",
            "pid": 0,
            "tid": 7,
            "ts": 1,
            "dur": 1,
            "args": {
                "Collective name": "_allgather_base",
                "Process Group Name": "3",
                "Group size": 8,
                "In msg nelems": 25136,
                "Out msg nelems": 201088,
                "dtype": "BFloat16",
                "Seq": "4",
            },
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
            "pid": 0,
            "tid": 7,
            "ts": 3,
            "dur": 1,
            "args": {"Group size": 2},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "op",
            "pid": 1,
            "tid": 1,
            "ts": 3,
            "dur": 1,
            "args": {"note": "\"Collective name\" inside a string"},
        },
    ]
    nat, ref = both(doc(events))
    assert_same(nat, ref)
    c = nat.events.to_pydict()
    assert c["collective"] == ["_allgather_base", "allreduce", None]
    assert c["msg_bytes"][0] == 201088 * 2 and c["seq"][0] == 4 and c["group_size"][:2] == [8, 2]


def test_exact_ns_from_number_text():
    rng = random.Random(7)
    texts = [
        "0.0025",
        "0.0035",
        "-0.0025",
        "4398046511103.999",
        "4398046511104.001",
        "1e-30",
        "0e5",
        "-0",
        "0.0",
        "1E3",
        "12.3456e2",
        "0.000000000000000000001",
        "1713832237123456.789",
        "1.713832237123457E15",
        "17138322371234567e-1",
        "1234567.890123456789",
        "123456789.000000000",
        "9007199254740.9915",
    ]
    while len(texts) < 3000:
        s = str(rng.randint(0, 10 ** rng.randint(0, 15)))
        if rng.random() < 0.7:
            s += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9)))
        if rng.random() < 0.2:
            s += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 6))
        if rng.random() < 0.2:
            s = "-" + s
        if (
            abs(Decimal(s)) < Decimal("9e15")
            and len(s.replace("-", "").replace(".", "").split("e")[0].split("E")[0].lstrip("0")) <= 19
        ):
            texts.append(s)
    body = ",".join(
        '{"ph":"X","name":"a","pid":1,"tid":1,"ts":%s,"dur":%s}' % (t, texts[-1 - i]) for i, t in enumerate(texts)
    )
    raw = ('{"traceEvents":[' + body + "]}").encode()
    nat, ref = both(raw)
    assert_same(nat, ref)
    assert nat.events.column("ts_ns").to_pylist() == [exact_ns(t) for t in texts]
    assert nat.meta["time_base"] == ref.meta["time_base"]


def test_chunk_boundaries_in_every_position(monkeypatch):
    import jobs.normalize.kineto.parse as kineto

    events = []
    for i in range(40):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "op},{" + str(i),
                "pid": 1,
                "tid": 1,
                "ts": 10 * i + 0.125,
                "dur": 5,
                "args": {"shapes": [{"a": i}, {"b": "}, {"}], "External id": i},
            }
        )
        events.append({"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": 10 * i + 1, "cat": "ac2g", "name": "launch"})
    data = gzip.compress(json.dumps({"traceEvents": events, "traceName": "t}]"}, indent=1).encode())
    ref = parse_kineto(data, "x.json", engine="python")
    for piece in (1, 7, 64, 301):
        monkeypatch.setattr(kineto, "_NATIVE_PIECE_BYTES", piece)
        assert_same(parse_kineto(data, "x.json", engine="native"), ref)


def test_empty_and_bare_list_documents():
    for data in (
        doc([]),
        b"[]",
        b'  [ {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1} ]  ',
        b'{"traceEvents": [], "baseTimeNanoseconds": 1700000000000000000}',
    ):
        assert_same(*both(data))


# --------------------------------------------------------------------------- hand-over to the Python path


@pytest.mark.parametrize(
    "data",
    [
        # non-finite tokens and control characters are repaired by the scanner itself: tests/unit/test_bug_cases.py
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1.5, "tid": 1, "ts": 1, "dur": 2}]}',
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "1", "dur": 2}]}',
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1e300, "dur": 2}]}',
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"correlation": 1.5}}]}',
        b'{"traceEvents": [{"ph": "X", "name": "a\\ud800", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}',
        b'{"traceEvents": [{"ph": "X", "name": "\xff", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}',
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 01, "dur": 2}]}',
        b'{"traceEvents": [1, 2]}',
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},]}',
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}',
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1}]}',
    ],
)
def test_inputs_the_scanner_hands_over(data):
    with pytest.raises(NativeBail):
        parse_kineto(data, "x.json", engine="native")
    try:
        ref = parse_kineto(data, "x.json", engine="python")
    except TraceError as exc:
        with pytest.raises(TraceError, match=re.escape(exc.reason)):
            parse_kineto(data, "x.json")
        return
    assert_same(parse_kineto(data, "x.json"), ref)  # auto: the reference result


def test_gzip_problems_are_reported_by_the_python_path():
    good = gzip.compress(
        doc([{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(3000)])
    )
    for data, reason in ((good[: len(good) // 2], "truncated gzip stream"), (good + b"junk", "trailing data")):
        with pytest.raises(TraceError, match=reason):
            parse_kineto(data, "x.json.gz")
    with pytest.raises(TraceError, match="decompressed size exceeds limit"):
        parse_kineto(good, "x.json.gz", max_uncompressed_bytes=1000)


def test_engine_argument_is_checked():
    with pytest.raises(ValueError, match="engine"):
        parse_kineto(doc([]), "x.json", engine="fast")
