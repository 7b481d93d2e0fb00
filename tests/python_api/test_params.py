# SPDX-License-Identifier: Apache-2.0
"""Type hints drive validation and conversion of params; errors name the parameter."""


import base64
import dataclasses
import enum
import functools
import io
import json
import socket
from typing import Any, Dict, List, Literal, Optional, Tuple, TypedDict, Union

import pytest

from ucall import _schema

INVALID_PARAMS = -32602


def test_decorators_return_the_function_unchanged(make_server, wire):
    server = make_server()

    def plain(a: int) -> int:
        return a * 2

    assert server(plain) is plain
    assert server.method("ns.twice")(plain) is plain
    assert plain(4) == 8
    assert set(server.procedures) == {"plain", "ns.twice"}
    w = wire(server)
    assert w.result("plain", [21]) == 42
    assert w.result("ns.twice", {"a": 5}) == 10
    assert w.error("nope")["code"] == -32601


def test_method_without_parentheses_registers_under_the_function_name(make_server, wire):
    server = make_server()

    @server.method
    def forgot_parentheses(a: int) -> int:
        return a + 1

    assert forgot_parentheses(1) == 2  # still the function
    assert server.procedures == {"forgot_parentheses": forgot_parentheses}
    assert wire(server).result("forgot_parentheses", [41]) == 42


def test_callable_objects_and_partials_register(make_server, wire):
    server = make_server()

    class Doubler:
        def __call__(self, x: int) -> int:
            return x * 2

    def add(a: int, b: int) -> int:
        return a + b

    doubler, add_one = Doubler(), functools.partial(add, 1)
    assert server.route(doubler, name="double") is doubler
    assert server.method("add_one")(add_one) is add_one
    w = wire(server)
    assert w.result("double", [21]) == 42
    assert w.result("add_one", {"b": 2}) == 3
    assert "parameter 'x': expected an integer" in w.error("double", ["x"])["message"]  # its hints apply
    assert "parameter 'b': expected an integer" in w.error("add_one", ["x"])["message"]

    class Opaque:
        pass

    def takes_opaque(x: Opaque, y: int) -> None:
        return None

    # A failure names the object even when it has no __qualname__.
    with pytest.raises(TypeError, match=r"^functools\.partial\(<function .*takes_opaque.*\): parameter 'x': no JSON"):
        server.route(functools.partial(takes_opaque, y=1), name="opaque")


def test_default_host_is_loopback(make_server):
    server = make_server()
    assert server.host == "127.0.0.1"
    with server:
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}"


@pytest.mark.parametrize(
    ("hint", "value", "expected"),
    [
        (int, 3, 3),
        (int, 3.0, 3),
        (int, 2**80, 2**80),
        (int, -(2**70), -(2**70)),
        (float, 2, 2.0),
        (float, 2.5, 2.5),
        (bool, True, True),
        (str, "héllo \"q\"", "héllo \"q\""),
        (Optional[int], None, None),
        (Optional[int], 4, 4),
        (Union[int, str], "x", "x"),
        (List[int], [1, 2.0], [1, 2]),
        (Dict[str, float], {"a": 1}, {"a": 1.0}),
        (Tuple[int, str], [1, "a"], [1, "a"]),
        (Tuple[int, ...], [1, 2, 3], [1, 2, 3]),
        (Literal["a", "b"], "b", "b"),
        (Any, {"x": [1, None]}, {"x": [1, None]}),
    ],
)
def test_accepted_values(make_server, wire, hint, value, expected):
    server = make_server()

    def echo(x):  # type: ignore[no-untyped-def]
        return x

    echo.__annotations__ = {"x": hint}
    server(echo)
    assert wire(server).result("echo", [value]) == expected


@pytest.mark.parametrize(
    ("hint", "value", "fragment"),
    [
        (int, True, "expected an integer, got a boolean"),
        (int, 1.5, "expected an integer, got a non-integral number"),
        (int, "1", "expected an integer, got a string"),
        (float, False, "expected a number, got a boolean"),
        (float, None, "expected a number, got null"),
        (bool, 1, "expected a boolean, got an integer"),
        (str, 5, "expected a string, got an integer"),
        (List[int], [1, "x"], "[1]: expected an integer, got a string"),
        (Dict[str, int], {"k": 1.5}, "k: expected an integer"),
        (Tuple[int, int], [1], "expected an array of 2 items, got 1"),
        (Literal["a"], "z", "expected one of ['a']"),
        (bytes, "not base64!", "base64"),
        # Inside a container the Python layer converts, and says what is wrong with the text.
        (List[bytes], ["not base64!"], "[0]: expected a base64 string: ' ' at index 3 is not a base64 character"),
        (List[bytes], ["AAEC-_8="], "'-' at index 4 is not a base64 character (URL-safe base64 is not taken"),
        # Padding is optional (the one rule, as for a plain bytes param); a length of 4n+1
        # never is base64.
        (List[bytes], ["AAECA"], "5 characters before the padding: a length of 4n+1 is never base64"),
        (List[bytes], ["AA==AAAA"], "'=' at index 2 pads the middle"),
        (Optional[int], "x", "expected an integer or null, got a string"),
    ],
)
def test_wrong_types_name_the_parameter(make_server, wire, hint, value, fragment):
    server = make_server()

    def take(x):  # type: ignore[no-untyped-def]
        return None

    take.__annotations__ = {"x": hint}
    server(take)
    error = wire(server).error("take", {"x": value})
    assert error["code"] == INVALID_PARAMS
    assert "'x'" in error["message"]
    assert fragment in error["message"]


def test_bytes_travel_as_base64(make_server, wire):
    server = make_server()

    @server
    def reverse(data: bytes, extra: bytearray = bytearray(b"!")) -> bytes:
        assert isinstance(data, bytes) and isinstance(extra, bytearray)
        return data[::-1] + bytes(extra)

    payload = bytes(range(256))
    text = base64.b64encode(payload).decode()
    result = wire(server).result("reverse", {"data": text})
    assert base64.b64decode(result) == payload[::-1] + b"!"


@pytest.mark.parametrize(
    "text",
    [
        "QU JD",  # whitespace anywhere is refused, not skipped
        "QUJD    QUJD",  # even when the length stays a multiple of four
        " QUJD",
        "QUJD\n",
        "QUJDQ",  # 4n+1 characters are never base64
        "QUJDQQ=",  # padding, when present, completes the last group of four
        "QR==",  # and the bits it drops must be zero
        "QR",  # with or without padding
        "QUJDQ===",
        "QUJD-_",  # the URL-safe alphabet is another format
    ],
)
def test_bytes_params_are_strict_base64(make_server, wire, text):
    server = make_server()

    @server
    def size(data: bytes) -> int:
        return len(data)

    error = wire(server).error("size", {"data": text})
    assert error["code"] == INVALID_PARAMS
    assert "'data'" in error["message"] and "base64" in error["message"]


def test_bytes_params_may_leave_padding_out(make_server, wire):
    """The rule the C and Rust APIs share (docs/design.md, "Bytes params: one base64 rule")."""
    server = make_server()

    @server
    def same(data: bytes) -> bytes:
        return data

    client = wire(server)
    for n in range(8):
        payload = bytes(range(n))
        padded = base64.b64encode(payload).decode()
        assert client.result("same", {"data": padded.rstrip("=")}) == padded, n


def test_bytes_of_every_short_length_round_trip(make_server, wire):
    server = make_server()

    @server
    def same(data: bytes) -> bytes:
        return data

    client = wire(server)
    for n in range(70):
        payload = bytes((7 * i + n) % 256 for i in range(n))
        result = client.result("same", {"data": base64.b64encode(payload).decode()})
        assert result == base64.b64encode(payload).decode(), n


def test_bytes_sent_with_json_escapes_decode_the_same(make_server, wire):
    server = make_server()

    @server
    def size(data: bytes) -> list:
        return [len(data), base64.b64encode(data).decode()]

    payload = bytes(range(256)) * 1000  # large enough for the kept-buffer path
    text = base64.b64encode(payload).decode()
    # JSON lets a client escape any character: "\/" for "/", "\u0041" for "A".
    escaped = text.replace("/", "\\/").replace("A", "\\u0041")
    assert escaped != text
    request = '{"jsonrpc":"2.0","method":"size","params":{"data":"%s"},"id":1}' % escaped
    status, body = wire(server).post(request)
    assert status == 200
    assert json.loads(body)["result"] == [len(payload), text]
    error = wire(server).error("size", {"data": text[:-2] + "\\!"})
    assert error["code"] == INVALID_PARAMS


def _read_http_replies(sock: socket.socket, count: int) -> list[bytes]:
    """Read `count` HTTP responses off `sock`, each body by its Content-Length."""
    buffered = b""
    bodies = []
    while len(bodies) < count:
        head_end = buffered.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buffered[:head_end].decode()
            length = int(next(line.split(":")[1] for line in head.split("\r\n") if line.startswith("Content-Length")))
            end = head_end + 4 + length
            if len(buffered) >= end:
                bodies.append(buffered[head_end + 4 : end])
                buffered = buffered[end:]
                continue
        chunk = sock.recv(1 << 20)
        assert chunk, "the server closed early"
        buffered += chunk
    assert buffered == b""
    return bodies


def test_large_bytes_results_pipelined_come_back_whole_and_in_order(make_server):
    """Results from 1 KB to 2 MB: large ones leave from their own buffer (and zero-copy on
    uring), small ones are copied; pipelined, their bytes and order must hold."""
    server = make_server()

    @server
    def blob(size: int, seed: int) -> bytes:
        return bytes((seed + i) % 251 for i in range(size))

    server.start()
    sizes = [300_000, 70_000, 1_000, 2_000_000, 100_000, 65_536]
    expected = [base64.b64encode(bytes((seed + i) % 251 for i in range(n))).decode() for seed, n in enumerate(sizes)]
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        requests = b""
        for seed, n in enumerate(sizes):
            body = json.dumps({"jsonrpc": "2.0", "method": "blob", "params": [n, seed], "id": seed}).encode()
            requests += b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        sock.sendall(requests)
        replies = [json.loads(body) for body in _read_http_replies(sock, len(sizes))]
    assert [r["id"] for r in replies] == list(range(len(sizes)))
    assert [r["result"] for r in replies] == expected
    # Raw TCP, pipelined the same way: one line per reply.
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        lines = b"".join(
            json.dumps({"jsonrpc": "2.0", "method": "blob", "params": [n, seed], "id": seed}).encode() + b"\n"
            for seed, n in enumerate(sizes)
        )
        sock.sendall(lines)
        received = b""
        while received.count(b"\n") < len(sizes):
            chunk = sock.recv(1 << 20)
            assert chunk, "the server closed early"
            received += chunk
    replies = [json.loads(line) for line in received.splitlines()]
    assert [r["result"] for r in replies] == expected


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


class Movie(TypedDict):
    title: str
    year: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_dataclasses_typeddicts_and_enums(make_server, wire):
    server = make_server()

    @server
    def shift(p: Point, by: float) -> Point:
        assert isinstance(p, Point)
        return Point(p.x + by, p.y + by)

    @server
    def describe(movie: Movie, color: Color = Color.RED) -> str:
        assert isinstance(color, Color)
        return f"{movie['title']} ({movie['year']}) in {color.value}"

    w = wire(server)
    assert w.result("shift", {"p": {"x": 1}, "by": 1}) == {"x": 2.0, "y": 1.0}
    assert w.result("describe", [{"title": "M", "year": 1931}, "blue"]) == "M (1931) in blue"
    error = w.error("shift", {"p": {"x": 1, "z": 2}, "by": 1})
    assert "'p'" in error["message"] and "unexpected field 'z'" in error["message"]
    error = w.error("shift", {"p": {"y": 1}, "by": 1})
    assert "missing field 'x'" in error["message"]
    error = w.error("describe", [{"title": "M"}])
    assert error["code"] == INVALID_PARAMS and "missing field 'year'" in error["message"]
    error = w.error("describe", [{"title": "M", "year": 1}, "green"])
    assert "'color'" in error["message"] and "green" in error["message"]


def test_python_binding_rules(make_server, wire):
    server = make_server()

    @server
    def shape(a: int, /, b: int = 2, *rest: int, c: int = 3, **more: Any) -> list:
        return [a, b, list(rest), c, more]

    @server
    def kwonly(*, flag: bool) -> bool:
        return flag

    @server
    def counts(**per_name: int) -> int:
        return sum(per_name.values())

    w = wire(server)
    assert w.result("shape", [1]) == [1, 2, [], 3, {}]
    assert w.result("shape", [1, 5, 6, 7]) == [1, 5, [6, 7], 3, {}]
    error = w.error("shape", [1, 5, "x"])
    assert error["code"] == INVALID_PARAMS and "'rest[2]'" in error["message"]
    assert w.result("kwonly", {"flag": True}) is True
    error = w.error("kwonly", [True])
    assert error["code"] == INVALID_PARAMS
    assert "at most 0 positional" in error["message"]
    # a positional-only parameter cannot be named: with **more it lands there, and `a` is missing
    error = w.error("shape", {"a": 1})
    assert "missing parameter 'a'" in error["message"]
    assert w.result("shape", [1, 2]) == [1, 2, [], 3, {}]

    assert w.result("counts", {"x": 1, "y": 2}) == 3
    error = w.error("counts", {"x": 1, "y": "two"})
    assert error["code"] == INVALID_PARAMS
    assert "parameter 'y': expected an integer, got a string" in error["message"], error


def test_missing_and_extra_params(make_server, wire):
    server = make_server()

    @server
    def pair(a: int, b: int) -> int:
        return a - b

    w = wire(server)
    assert "missing parameter 'b'" in w.error("pair", {"a": 1})["message"]
    assert "missing parameter 'a'" in w.error("pair")["message"]
    assert "unexpected parameter 'c'" in w.error("pair", {"a": 1, "b": 2, "c": 3})["message"]
    assert "at most 2 positional" in w.error("pair", [1, 2, 3])["message"]
    for error in (w.error("pair", {"a": 1}), w.error("pair", [1, 2, 3])):
        assert error["code"] == INVALID_PARAMS


def test_ignoring_extra_params(make_server, wire):
    server = make_server(ignore_extra_params=True)

    @server
    def pair(a: int, b: int) -> int:
        return a - b

    @server.method("strict", ignore_extra_params=False)
    def strict(a: int) -> int:
        return a

    w = wire(server)
    assert w.result("pair", {"a": 5, "b": 2, "c": 3}) == 3
    assert w.result("pair", [5, 2, 9]) == 3
    assert w.error("strict", {"a": 1, "z": 0})["code"] == INVALID_PARAMS


def test_unannotated_parameters_take_any_json(make_server, wire):
    server = make_server()

    @server
    def echo(data, other=None):  # type: ignore[no-untyped-def]
        return [data, other]

    w = wire(server)
    value = {"a": [1, 2.5, "x", None, True, {"b": -(2**65)}], "é": "\u2603"}
    assert w.result("echo", [value]) == [value, None]


def test_numpy_arrays(make_server, wire):
    np = pytest.importorskip("numpy")
    server = make_server()

    @server
    def scale(array: np.ndarray, by: float) -> np.ndarray:
        return array * by

    @server
    def total(array: np.ndarray) -> Any:
        return array.sum()  # a numpy scalar

    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    buffer = io.BytesIO()
    np.save(buffer, array)
    packed = base64.b64encode(buffer.getvalue()).decode()
    w = wire(server)
    result = np.load(io.BytesIO(base64.b64decode(w.result("scale", [packed, 2]))), allow_pickle=False)
    assert result.dtype == np.float32 and result.shape == (3, 4)
    assert (result == array * 2).all()
    assert w.result("total", [[1, 2, 3]]) == 6
    # A pickled object array is refused: .npy is loaded with pickling disabled.
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    error = w.error("scale", [base64.b64encode(buffer.getvalue()).decode(), 1])
    assert error["code"] == INVALID_PARAMS and "'array'" in error["message"]


def test_numpy_arrays_in_base64_are_np_save_files_both_ways(make_server, wire):
    """An array param in base64 is a .npy file read in place (every wire dtype, writable,
    held by nothing the handler can resize), and an array result is exactly np.save's
    bytes, written by the extension for C-contiguous arrays and by numpy for others."""
    np = pytest.importorskip("numpy")
    server = make_server()
    seen = []

    @server
    def echo(array: np.ndarray) -> np.ndarray:
        seen.append(array)
        assert array.flags.writeable  # as np.load's arrays are
        return array

    @server
    def made(kind: str) -> np.ndarray:
        base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        return {"strided": base[:, ::2], "fortran": np.asfortranarray(base), "big": base.astype(">f4")}[kind]

    def npy(array) -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        return buffer.getvalue()

    w = wire(server)
    shapes = [(), (0,), (5,), (2, 3, 4), (12345678901, 0), (1, 1, 1, 1, 1, 1, 1, 1)]
    for dtype in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                  "float16", "float32", "float64", "complex64", "complex128"):
        for shape in shapes:
            array = (np.arange(int(np.prod(shape))) % 3).astype(dtype).reshape(shape)
            result = base64.b64decode(w.result("echo", [base64.b64encode(npy(array)).decode()]))
            assert result == npy(array), (dtype, shape)
            assert seen[-1].dtype == array.dtype and seen[-1].shape == shape
            # The array's memory is held by an object that offers no way to resize it.
            assert not isinstance(seen[-1].base, (bytearray, memoryview, bytes))
    for kind in ("strided", "fortran", "big"):
        expected = {"strided": np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, ::2]}.get(kind)
        array = np.load(io.BytesIO(base64.b64decode(w.result("made", [kind]))), allow_pickle=False)
        base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        assert np.array_equal(array, base if expected is None else expected), kind


def test_numpy_arrays_from_json_lists_keep_numpy_asarray_rules(make_server, wire):
    np = pytest.importorskip("numpy")
    server = make_server()

    @server
    def describe(array: np.ndarray) -> list[Any]:
        array += 1  # arrays handed over are writable
        return [str(array.dtype), list(array.shape), array.tolist()]

    w = wire(server)
    # A flat list with a float is parsed by the extension into float64, exactly.
    assert w.result("describe", [[0.1, 2, -3e-5, 1e300]]) == ["float64", [4], [1.1, 3.0, 1 - 3e-5, 1e300]]
    # Integers only, nested lists and mixed values go through numpy.asarray as before.
    assert w.result("describe", [[1, 2]]) == ["int64", [2], [2, 3]]
    assert w.result("describe", [[[0.5], [1.5]]]) == ["float64", [2, 1], [[1.5], [2.5]]]
    assert w.result("describe", [[True, 0.5]]) == ["float64", [2], [2.0, 1.5]]
    assert w.result("describe", [[]]) == ["float64", [0], []]


def test_numpy_arrays_refuse_what_is_not_numbers(make_server, wire):
    """numpy.asarray makes an array of anything: strings a `<U1` array, nulls an object
    array, `[1, "a"]` silently `['1', 'a']`, and `["a", "b"]` then failed in the handler
    (-32603, HTTP 500). What the declared type cannot hold is the caller's -32602, and the
    schema's `items` says what it can."""
    np = pytest.importorskip("numpy")
    server = make_server()

    @server
    def total(array: np.ndarray) -> float:
        return float(array.sum())

    w = wire(server)
    for value, says in [
        (["a", "b"], "a string at [0]"),
        ([1, "a"], "a string at [1]"),
        ([None], "null at [0]"),
        ([[1, 2], [3, {"x": 1}]], "an object at [1][1]"),
        ([[1, 2], [3]], "arrays of different lengths"),
        ([2**70], "integers of at most 64 bits"),
    ]:
        error = w.error("total", [value])
        assert error["code"] == INVALID_PARAMS, (value, error)
        assert "parameter 'array'" in error["message"] and says in error["message"], (value, error)
    assert w.result("total", [[[1, 2], [3, True]]]) == 7
    schema = _schema.schema(np.ndarray)["anyOf"][0]
    assert schema["type"] == "array" and schema["items"] == {"type": ["number", "boolean", "array"]}


def test_numpy_params_that_are_not_npy_say_so(make_server, wire):
    np = pytest.importorskip("numpy")
    server = make_server()

    @server
    def shape(array: np.ndarray) -> list[int]:
        return list(array.shape)

    w = wire(server)
    # Any data without the .npy header is what numpy takes for a pickle: the message must
    # not point to allow_pickle=, which the server keeps off.
    message = w.error("shape", [base64.b64encode(b"\x00\x01").decode()])["message"]
    assert message.endswith(
        "parameter 'array': expected base64 of a .npy array: the data is not a .npy array (pickled arrays are refused)"
    )
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    message = w.error("shape", [base64.b64encode(buffer.getvalue()).decode()])["message"]
    assert "Python objects" in message and "allow_pickle" not in message


WIRE_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
WIRE_DTYPES += ["float16", "float32", "float64", "complex64", "complex128"]


def npy_file(array: Any, version: Any = None) -> bytes:
    np = pytest.importorskip("numpy")
    buffer = io.BytesIO()
    if version is None:
        np.save(buffer, array, allow_pickle=False)
    else:
        np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
def test_base64_npy_arrays_of_every_wire_dtype_go_both_ways(make_server, wire, dtype):
    """A base64 .npy param of each dtype of docs/wire.md §2 arrives as that array,
    writable, with its shape (none, empty, one, two and three dimensions), decoded into
    memory the array owns (the extension reads the header); a C-contiguous
    result goes back as exactly the .npy file numpy.save writes, a strided one too."""
    np = pytest.importorskip("numpy")
    server = make_server()

    @server
    def echo(x: np.ndarray) -> dict[str, Any]:
        assert x.flags.writeable
        x += x.dtype.type(0)  # writable in place
        return {"same": x, "dtype": x.dtype.str, "shape": list(x.shape), "held by": type(x.base).__name__}

    @server
    def strided(x: np.ndarray) -> np.ndarray:
        return x[::2]

    w = wire(server)
    for shape in [(), (0,), (5,), (3, 4), (2, 3, 4)]:
        count = int(np.prod(shape))
        array = (np.arange(count) % 2 if dtype == "bool" else np.arange(count) * 3 - 7).astype(dtype).reshape(shape)
        result = w.result("echo", [base64.b64encode(npy_file(array)).decode()])
        assert (result["dtype"], result["shape"]) == (array.dtype.str, list(shape)), shape
        assert result["held by"] == "NoneType", "the header read natively, the data decoded into the array's own memory"
        assert base64.b64decode(result["same"]) == npy_file(array), shape
    array = np.arange(10).astype(dtype)
    result = w.result("strided", [base64.b64encode(npy_file(array)).decode()])
    assert base64.b64decode(result) == npy_file(array[::2])


def test_base64_npy_headers_of_any_length_are_read_before_their_data(make_server, wire):
    """A .npy file's header is decoded and read before its data, which goes straight into
    the array's memory: headers of any length (a few bytes past the 10 that precede
    them, and longer than the first part decoded) and data of any length (none, less
    than a group of three, more than a SIMD block) give the array, and base64 broken in
    the header or the data is an invalid params error."""
    np = pytest.importorskip("numpy")
    server = make_server()

    @server
    def echo(x: np.ndarray) -> list[Any]:
        assert x.flags.writeable and x.flags.c_contiguous
        assert x.base is None, "decoded into the array's own memory, not read by numpy the long way"
        return [x.dtype.str, list(x.shape), x.tobytes().hex()]

    def npy(array: Any, header_len: int) -> bytes:
        fields = f"{{'descr': '{array.dtype.str}', 'fortran_order': False, 'shape': {array.shape}, }}"
        header = fields.ljust(header_len - 11) + "\n"
        return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + array.tobytes()

    w = wire(server)
    rng = np.random.default_rng(7)
    for count in (0, 1, 2, 3, 5, 16, 100, 1000):
        data = rng.integers(0, 255, count, dtype=np.uint8)
        for header_len in (70, 127, 128, 129, 190, 191, 192, 256, 257, 300, 700):
            file = npy(data, header_len)
            assert np.load(io.BytesIO(file)).tobytes() == data.tobytes()  # numpy reads it too
            result = w.result("echo", [base64.b64encode(file).decode()])
            assert result == ["|u1", [count], data.tobytes().hex()], (count, header_len)
    grid = np.arange(12, dtype="<f8").reshape(3, 4)
    text = base64.b64encode(npy(grid, 128)).decode()
    assert w.result("echo", [text]) == ["<f8", [3, 4], grid.tobytes().hex()]
    for broken in (text[:20] + "*" + text[21:], text[:200] + "*" + text[201:], text[:-10] + "*" + text[-9:]):
        error = w.error("echo", [broken])
        assert error["code"] == INVALID_PARAMS, error


def test_base64_npy_arrays_numpy_reads_the_long_way(make_server, wire):
    """What the extension does not view as it is (big-endian, Fortran order, version 2, a
    text dtype, a header whose shape does not match the data) is numpy's to read or refuse."""
    np = pytest.importorskip("numpy")
    server = make_server()

    @server
    def describe(x: np.ndarray) -> list[Any]:
        return [x.dtype.str, list(x.shape), bool(x.flags.f_contiguous and x.ndim > 1), x.ravel(order="K").tolist()]

    w = wire(server)
    grid = np.arange(6, dtype="<i4").reshape(2, 3)
    for array, expected in [
        (grid.astype(">f8"), [">f8", [2, 3], False, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]),
        (np.asfortranarray(grid), ["<i4", [2, 3], True, [0, 3, 1, 4, 2, 5]]),
        (np.array(["ab", "c"]), ["<U2", [2], False, ["ab", "c"]]),
    ]:
        assert w.result("describe", [base64.b64encode(npy_file(array)).decode()]) == expected
    version_2 = npy_file(grid, version=(2, 0))
    assert version_2[6:8] == b"\x02\x00"
    assert w.result("describe", [base64.b64encode(version_2).decode()]) == ["<i4", [2, 3], False, list(range(6))]
    cut = npy_file(grid)[:-4]
    error = w.error("describe", [base64.b64encode(cut).decode()])
    assert error["code"] == INVALID_PARAMS and "expected base64 of a .npy array" in error["message"], error


def test_pil_images(make_server, wire):
    image_module = pytest.importorskip("PIL.Image")
    server = make_server()

    @server
    def flip(image: image_module.Image) -> image_module.Image:
        return image.transpose(image_module.FLIP_LEFT_RIGHT)

    picture = image_module.new("RGB", (4, 2), (10, 20, 30))
    picture.putpixel((0, 0), (255, 0, 0))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    result = wire(server).result("flip", [base64.b64encode(buffer.getvalue()).decode()])
    flipped = image_module.open(io.BytesIO(base64.b64decode(result)))
    assert flipped.size == (4, 2)
    assert flipped.getpixel((3, 0)) == (255, 0, 0)
    error = wire(server).error("flip", [base64.b64encode(b"not an image").decode()])
    assert error["code"] == -32602
    assert error["message"].endswith("parameter 'image': expected base64 of an image file: not an image format Pillow reads")


def test_unsupported_hints_fail_at_registration(make_server):
    server = make_server()

    def bad(x: "NoSuchType") -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(TypeError, match=r"parameter 'x' of .*bad names 'NoSuchType', which does not resolve"):
        server(bad)

    class Opaque:
        pass

    def opaque(x: Opaque) -> None:
        return None

    with pytest.raises(TypeError, match=r"<locals>\.opaque: parameter 'x': no JSON value is a .*Opaque;"):
        server(opaque)

    def nested(xs: list[Opaque]) -> None:
        return None

    with pytest.raises(TypeError, match="parameter 'xs': no JSON value"):
        server(nested)
