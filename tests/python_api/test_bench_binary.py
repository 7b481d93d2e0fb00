# SPDX-License-Identifier: Apache-2.0
"""The binary section of `make bench` (benches/ucallbench/binary.py): the requests it
sends are what docs/wire.md and numpy read, and its goals are judged from the figures.
No server and no load here: `make bench-quick` runs the section itself."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vectors"))
import binary_wire  # noqa: E402

from ucallbench import binary  # noqa: E402  (benches/, pythonpath in pyproject.toml)

np = pytest.importorskip("numpy")


@pytest.fixture(scope="module")
def large() -> list[binary.Request]:
    return binary.requests("1.6 MB")


def test_the_array_is_1_6_mb_of_float32():
    data = binary.float32s((392, 1024))
    assert len(data) == 1_605_632
    values = np.frombuffer(data, dtype="<f4")
    assert values.min() >= -1 and values.max() <= 1 and len(set(values[:100].tolist())) > 90


def test_the_npy_text_is_what_numpy_reads():
    data = binary.float32s((4096,))
    for shape in ((4096,), (64, 64)):
        array = np.load(io.BytesIO(binary.npy(data, shape)))
        assert array.dtype == np.float32 and array.shape == shape
        assert array.tobytes() == data


def test_the_binary_messages_follow_the_wire_format(large):
    by_label = {request.label: request for request in large}
    request = by_label["UCall (Python), numpy, binary message"]
    headers = dict(header.split(": ", 1) for header in request.headers)
    assert headers["Content-Type"] == "application/vnd.ucall.binary"
    assert "application/vnd.ucall.binary" in headers["Accept"]
    text, section = binary_wire.split_body(request.body, int(headers["UCall-JSON-Length"]))
    call = json.loads(text)
    assert call["method"] == "echo_array"
    placeholder = binary_wire.placeholder(call["params"]["x"])
    array = np.frombuffer(section[placeholder.offset : placeholder.offset + placeholder.length], dtype="<f4")
    assert array.reshape(call["params"]["x"]["shape"]).shape == (392, 1024)
    assert array.tobytes() == binary.float32s((392, 1024))
    # The floor echoes a line as long as the binary message (raw TCP frames by newline).
    floor = by_label["floor: epoll_echo.c, raw TCP"]
    assert len(floor.body) == len(request.body) and b"\n" not in floor.body


def test_the_json_requests_carry_the_same_bytes_as_base64(large):
    by_label = {request.label: request for request in large}
    data = binary.float32s((392, 1024))
    plain = json.loads(by_label["UCall (Python), bytes, JSON/base64"].body)
    assert base64.b64decode(plain["params"]["data"]) == data
    npy = json.loads(by_label["UCall (Python), numpy, JSON/base64 .npy"].body)
    assert np.load(io.BytesIO(base64.b64decode(npy["params"]["x"]))).tobytes() == data
    assert base64.b64decode(json.loads(by_label["FastAPI (uvicorn), base64 JSON"].body)["data"]) == data


def _rows(figures: dict[tuple[str, int], tuple[float, float]]) -> dict[binary.Key, binary.Row]:
    rows = {}
    for (label, in_flight), (rps, cpu) in figures.items():
        rows[("1.6 MB", label, in_flight)] = binary.Row("1.6 MB", label, [rps], [100.0], [cpu], in_flight=in_flight)
    return rows


def test_the_saturated_rows_are_the_calls_s_goals_rows(large):
    saturated = {request.label: request for request in large if request.in_flight > 1}
    assert set(saturated) == set(binary.SATURATED)
    assert {request.in_flight for request in saturated.values()} == {binary.IN_FLIGHT}
    one = {request.label: request for request in large if request.in_flight == 1}
    assert all(saturated[label].body == one[label].body for label in saturated)
    # 16 KB and --in-flight 1 have none.
    assert all(request.in_flight == 1 for request in binary.requests("16 KB"))
    assert all(request.in_flight == 1 for request in binary.requests("1.6 MB", in_flight=1))


def test_goals_are_judged_from_the_figures():
    rows = _rows(
        {
            (binary.FLOOR, 1): (1000, 800),
            (binary.NUMPY_BINARY, 1): (900, 1100),
            (binary.BYTES_BINARY, 1): (950, 1300),
            (binary.BYTES_JSON, 1): (300, 3000),
            (binary.NUMPY_JSON, 1): (290, 3300),
            (binary.GRPC, 1): (250, 4000),
            (binary.FASTAPI, 1): (100, 9000),
            (binary.FLOOR, 4): (2000, 500),
            (binary.NUMPY_BINARY, 4): (1500, 660),
            (binary.GRPC, 4): (400, 2500),
            (binary.FASTAPI, 4): (140, 7000),
        }
    )
    rss = {"calls": 10_000, "warm_kib": 100_000, "last_kib": 103_000, "growth": 0.03}
    clients = {"python-async-binary": {"cpu_us_per_call": 700}, "socket-floor-binary": {"cpu_us_per_call": 600}}
    clients["python-async"] = {"cpu_us_per_call": 2300}  # the JSON/base64 path judges no goal
    clients["grpcio-asyncio"] = {"cpu_us_per_call": 4000}
    pairs = [1.02, 0.97, 0.99, 0.98, 1.01]
    level = (7_266_918, 7_262_606)  # numpy, bytes: a run's instructions per call
    met = {goal.text: (round(goal.value, 3), goal.met) for goal in binary.goals(rows, pairs, rss, clients, level)}
    assert met["server CPU per 1.6 MB call, numpy binary / floor"] == (1.375, True)
    assert met["server CPU per 1.6 MB call, bytes binary / floor"] == (1.625, False)
    # JSON/base64: judged on instructions, level within 1 %; the CPU of the pairs of
    # alternated slices and of the rows' medians shown beside.
    instructions = "instructions per 1.6 MB call, JSON/base64: numpy / bytes (callgrind)"
    assert met[instructions] == (1.001, True)
    assert met["server CPU per 1.6 MB call, JSON/base64: numpy / bytes, median of 5 alternated pairs"] == (0.99, None)
    assert met["server CPU per 1.6 MB call, JSON/base64: numpy / bytes, the rows' medians"] == (1.1, None)
    dearer = {goal.text: goal for goal in binary.goals(rows, pairs, rss, clients, (7_400_000, 7_262_606))}
    assert dearer[instructions].met is False
    assert {goal.text: goal for goal in binary.goals(rows, pairs, rss, clients)}[instructions].met is None
    # calls/s: judged saturated; one in flight shown, not judged.
    assert met["1.6 MB calls/s, saturated, 4 in flight: numpy binary / floor"] == (0.75, False)
    assert met["1.6 MB calls/s, saturated, 4 in flight: numpy binary / grpcio"] == (3.75, True)
    assert met["1.6 MB calls/s, saturated, 4 in flight: numpy binary / FastAPI"] == (10.714, True)
    assert met["1.6 MB calls/s, one call in flight (latency bound): numpy binary / floor"] == (0.9, None)
    assert met["1.6 MB calls/s, one call in flight (latency bound): numpy binary / FastAPI"] == (9.0, None)
    assert met["client CPU per 1.6 MB call, AsyncClient binary / raw socket moving its bytes"] == (1.167, True)
    assert met["client CPU per 1.6 MB call, AsyncClient binary / grpcio"] == (0.175, True)
    assert met["RSS growth over 10,000 numpy binary 1.6 MB calls"] == (0.03, True)
    # A row with errors judges nothing.
    rows[("1.6 MB", binary.FLOOR, 1)].errors = 3
    goals = {goal.text: goal for goal in binary.goals(rows, [], None, None)}
    assert goals["server CPU per 1.6 MB call, numpy binary / floor"].met is None
    rows[("1.6 MB", binary.NUMPY_BINARY, 1)].server_core = [97.0]
    rows[("1.6 MB", binary.NUMPY_BINARY, 1)].load_core = [31.0]
    text = binary.report(rows, [1.004, 0.996], rss, None, "1 round", level)
    assert "| 1.6 MB | 1 | UCall (Python), numpy, binary message | 900 | 100 | 1,100 | 97 % | 31 % |  | 0 |" in text
    assert "| server CPU per 1.6 MB call, numpy binary / floor | — | ≤ 1.5 | not measured |" in text
    assert "| 1.6 MB calls/s, one call in flight (latency bound): numpy binary / grpcio | 3.60 | ≥ 3 | (not judged) |" in text
    assert "in pairs of alternated slices: 0.996, 1.004." in text
    assert "| server CPU per 1.6 MB call, JSON/base64: numpy / bytes, median of 2 alternated pairs | 1.000 | ≤ 1 | (not judged) |" in text
    assert f"| {instructions} | 1.0006 | ≤ 1.01 | yes |" in text
    assert "(callgrind, poll engine): numpy 7,266,918, bytes 7,262,606." in text


def test_without_saturated_rows_one_in_flight_is_judged():
    rows = _rows({(binary.FLOOR, 1): (1000, 800), (binary.NUMPY_BINARY, 1): (900, 1100)})
    goals = {goal.text: goal for goal in binary.goals(rows, [], None, None)}
    assert goals["1.6 MB calls/s, one call in flight (latency bound): numpy binary / floor"].met is True
