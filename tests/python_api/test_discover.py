# SPDX-License-Identifier: Apache-2.0
"""Self-description: schemas from type hints (and that they agree with validation), the
OpenRPC and OpenAPI documents of live Python and Rust servers checked against their
specifications, every example accepted by its server, and each part turned off."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import enum
import functools
import http.client
import json
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Literal, Optional, Tuple, TypedDict, Union

import jsonschema
import pydantic
import pytest
from conftest import REPO_ROOT, Wire, described_rust_server, serving
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry
from referencing.jsonschema import DRAFT7

from ucall import RPCError, Server
from ucall import _schema, _signature
from ucall._signature import ConversionError

sys.path.insert(0, str(REPO_ROOT / "examples" / "python"))
import described_server  # noqa: E402


@dataclasses.dataclass
class Point:
    """A point."""

    x: float
    y: float = 0.0


@dataclasses.dataclass
class Tree:
    value: int
    children: List[Tree] = dataclasses.field(default_factory=list)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Span(TypedDict, total=False):
    start: int
    end: int


class Model(pydantic.BaseModel):
    name: str
    size: int = pydantic.Field(ge=0)


# hint, expected schema (definitions inlined where named), accepted values, refused values
TABLE: list[tuple[Any, dict[str, Any], list[Any], list[Any]]] = [
    (int, {"type": "integer"}, [1, -5, 2.0], [1.5, "1", True, None]),
    (float, {"type": "number"}, [1, 1.5], ["1.5", True, None]),
    (bool, {"type": "boolean"}, [True, False], [0, "true", None]),
    (str, {"type": "string"}, ["", "x"], [1, None, []]),
    (bytes, {**_schema._BASE64, _schema.ATTACHMENT: "bytes"}, ["AQID", "", "AQ==", "AQI=", "AQ", "AQI"], [1, None, "AR", "AQJ", "Zh==", "A===", "AQ=I", "not base64"]),
    (type(None), {"type": "null"}, [None], [0, ""]),
    (Any, {}, [1, "x", None, [1], {"a": 1}], []),
    (List[int], {"type": "array", "items": {"type": "integer"}}, [[], [1, 2]], [[1.5], {}, "12"]),
    (list, {"type": "array"}, [[], [1, "x"]], [{}, 1]),
    (
        Dict[str, float],
        {"type": "object", "additionalProperties": {"type": "number"}},
        [{}, {"a": 1.5}],
        [{"a": "x"}, []],
    ),
    (
        Dict[int, str],
        {"type": "object", "additionalProperties": {"type": "string"}, "propertyNames": {"pattern": "^-?[0-9]+$"}},
        [{"1": "a", "-2": "b"}],
        [{"x": "a"}, {"1": 2}],
    ),
    (
        Tuple[int, str],
        {
            "type": "array",
            "items": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
            "additionalItems": False,
        },
        [[1, "a"]],
        [[1], [1, "a", 2], ["a", 1]],
    ),
    (Tuple[int, ...], {"type": "array", "items": {"type": "integer"}}, [[], [1, 2, 3]], [["a"]]),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}, [1, None], ["1", 1.5]),
    (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}, [1, "a"], [None, 1.5, []]),
    (Literal["a", 1], {"enum": ["a", 1]}, ["a", 1], ["b", 2, None]),
    (Color, {"title": "Color", "enum": ["red", "green"]}, ["red"], ["RED", "blue", 1]),
    (
        Point,
        {
            "type": "object",
            "title": "Point",
            "description": "A point.",
            "properties": {"x": {"type": "number"}, "y": {"type": "number", "default": 0.0}},
            "required": ["x"],
            "additionalProperties": False,
        },
        [{"x": 1}, {"x": 1, "y": 2.5}],
        [{"y": 1}, {"x": 1, "z": 2}, {"x": "1"}, [1, 2]],
    ),
    (
        Span,
        {
            "type": "object",
            "title": "Span",
            "properties": {"start": {"type": "integer"}, "end": {"type": "integer"}},
            "additionalProperties": False,
        },
        [{}, {"start": 1}],
        [{"start": "1"}, {"middle": 1}],
    ),
]


def inline(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """`schema` with each `#/definitions/X` replaced by X (not recursive types)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref", "")
        if ref.startswith("#/definitions/"):
            return inline(definitions[ref.split("/")[-1]], definitions)
        return {k: inline(v, definitions) for k, v in schema.items()}
    if isinstance(schema, list):
        return [inline(v, definitions) for v in schema]
    return schema


def schema_with_definitions(hint: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    definitions = _schema._Definitions()
    return _schema.schema(hint, None, definitions), definitions.schemas


def accepted(hint: Any, value: Any) -> bool:
    try:
        _signature.converter(hint)(value)
    except ConversionError:
        return False
    return True


@pytest.mark.parametrize(("hint", "expected", "good", "bad"), TABLE, ids=[repr(row[0]) for row in TABLE])
def test_schema_of_each_hint_and_validation_agree(hint, expected, good, bad):
    schema, definitions = schema_with_definitions(hint)
    assert inline(schema, definitions) == expected
    validator = jsonschema.Draft7Validator({**schema, "definitions": definitions})
    for value in good:
        assert validator.is_valid(value), (value, "the schema refuses it")
        assert accepted(hint, value), (value, "the server refuses it")
    for value in bad:
        assert not validator.is_valid(value), (value, "the schema allows it")
        assert not accepted(hint, value), (value, "the server accepts it")


def test_recursive_and_rich_types():
    schema, definitions = schema_with_definitions(Tree)
    assert schema == {"$ref": "#/definitions/Tree"}
    assert definitions["Tree"]["properties"]["children"] == {"type": "array", "items": {"$ref": "#/definitions/Tree"}}
    validator = jsonschema.Draft7Validator({**schema, "definitions": definitions})
    tree = {"value": 1, "children": [{"value": 2}]}
    # (The server's converter recurses without end on such a type: only the schema is checked.)
    assert validator.is_valid(tree)
    assert not validator.is_valid({"value": 1, "children": [{"value": "x"}]})

    import numpy as np
    from PIL import Image

    assert _schema.schema(np.ndarray)["anyOf"][1]["contentMediaType"] == "application/x-npy"
    assert _schema.schema(Image.Image)["contentEncoding"] == "base64"
    # What a binary message may send as an attachment instead (docs/wire.md).
    assert _schema.schema(np.ndarray)[_schema.ATTACHMENT] == "ndarray"
    assert _schema.schema(Image.Image)[_schema.ATTACHMENT] == "bytes"


def test_pydantic_models_are_described_and_validated_by_pydantic():
    schema, definitions = schema_with_definitions(Model)
    assert schema == {"$ref": "#/definitions/Model"}
    model = definitions["Model"]
    assert model["required"] == ["name", "size"] and model["properties"]["size"]["minimum"] == 0
    assert _signature.converter(Model)({"name": "a", "size": 3}) == Model(name="a", size=3)
    with pytest.raises(ConversionError) as refused:
        _signature.converter(Model)({"name": "a", "size": -1})
    assert refused.value.path == ".size" and "greater than or equal to 0" in refused.value.message


def test_description_of_a_function():
    def area(width: float, height: float = 1.0, *, unit: str = "m") -> float:
        """Area of a rectangle.

        Both sides in the same unit."""
        return width * height

    doc = _schema.describe(
        "geometry.area", area, examples=[{"params": {"width": 2}, "result": 2.0}], errors=[RPCError(7, "too big")]
    )
    assert doc["name"] == "geometry.area"
    assert doc["summary"] == "Area of a rectangle."
    assert doc["description"] == "Both sides in the same unit."
    assert doc["paramStructure"] == "by-name"
    assert doc["params"] == [
        {"name": "width", "schema": {"type": "number"}, "required": True},
        {"name": "height", "schema": {"type": "number"}, "required": False, "default": 1.0},
        {"name": "unit", "schema": {"type": "string"}, "required": False, "default": "m"},
    ]
    assert doc["result"] == {"name": "result", "schema": {"type": "number"}}
    assert doc["errors"] == [{"code": 7, "message": "too big"}]
    assert doc["examples"] == [{"params": {"width": 2}, "result": 2.0}]

    def positional(a: int, b: int, /) -> None:
        pass

    assert _schema.describe("p", positional)["paramStructure"] == "by-position"
    with pytest.raises(TypeError, match="an example is a dict"):
        _schema.describe("p", positional, examples=[(1, 2)])
    with pytest.raises(TypeError, match="no JSON form"):
        _schema.describe("p", positional, examples=[{"params": [float("nan"), 1]}])


# ------------------------------------------------------------------ live servers


def values(schema: Any, components: dict[str, Any], depth: int = 0) -> Any:
    """A Hypothesis strategy for the JSON values `schema` allows, for the keywords the
    documents use (hypothesis-jsonschema would do this, but it no longer works with
    current Hypothesis)."""
    from hypothesis import strategies as st

    if depth > 8:
        return st.nothing()
    schema = dict(schema)
    ref = schema.pop("$ref", None)
    if ref is not None:
        return values(components[ref.rsplit("/", 1)[-1]], components, depth + 1)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([values(s, components, depth + 1) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind is None:
        return st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
            max_leaves=8,
        )
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers()
    if kind == "number":
        return st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    if kind == "string":
        if schema.get("contentEncoding") == "base64":
            return st.binary(max_size=64).map(lambda data: base64.b64encode(data).decode())
        assert "pattern" not in schema, schema
        return st.text(max_size=20)
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, list):
            return st.tuples(*(values(s, components, depth + 1) for s in items)).map(list)
        return st.lists(values(items or {}, components, depth + 1), max_size=4)
    assert kind == "object", schema
    properties = schema.get("properties")
    if properties is None:
        extra = schema.get("additionalProperties", {})
        keys = (
            st.from_regex(schema["propertyNames"]["pattern"], fullmatch=True)
            if "propertyNames" in schema
            else st.text(max_size=5)
        )
        return st.dictionaries(
            keys, values(extra if isinstance(extra, dict) else {}, components, depth + 1), max_size=3
        )
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {k: values(s, components, depth + 1) for k, s in properties.items() if k in required},
        optional={k: values(s, components, depth + 1) for k, s in properties.items() if k not in required},
    )


def accepts_what_its_schemas_allow(wire: Wire, method: dict[str, Any], components: dict[str, Any]) -> None:
    from hypothesis import HealthCheck, given, settings

    schema = {
        "type": "object",
        "properties": {p["name"]: p["schema"] for p in method["params"]},
        "required": [p["name"] for p in method["params"] if p.get("required")],
    }
    validator = jsonschema.Draft7Validator({**schema, "components": {"schemas": components}})

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(values(schema, components))
    def accepted(params: dict[str, Any]) -> None:
        validator.validate(params)  # what the strategy drew fits the schemas
        reply = wire.call(method["name"], params)
        assert reply.get("error", {}).get("code") != -32602, (method["name"], params, reply)

    accepted()


def test_every_value_the_schemas_allow_is_accepted(engine):
    """Property: params drawn from a method's schemas pass the server's validation (any
    answer but -32602), for every method of the example server."""
    server = described_server.make_server(port=0, engine=engine)
    with server:
        openrpc = json.loads(get(server.port, "/openrpc.json")[2])
        components = openrpc.get("components", {}).get("schemas", {})
        wire = Wire(server.port)
        try:
            for method in openrpc["methods"]:
                accepts_what_its_schemas_allow(wire, method, components)
        finally:
            wire.close()


def test_the_property_fails_where_schema_and_server_disagree(make_server, wire):
    server = make_server()

    @server
    def half(n: int) -> int:
        return n // 2

    w = wire(server)
    wrong = {"name": "half", "params": [{"name": "n", "required": True, "schema": {"type": "string"}}]}
    with pytest.raises(AssertionError, match="-32602"):
        accepts_what_its_schemas_allow(w, wrong, {})


@functools.lru_cache(maxsize=None)
def openrpc_validator() -> jsonschema.Draft7Validator:
    """A validator of OpenRPC documents: the meta-schema of the @open-rpc/meta-schema
    package (tests/node), with the JSON Schema meta-schema it refers to (from
    @json-schema-tools/meta-schema) known locally, so nothing is fetched."""
    node = shutil.which("node")
    assert node, "node is missing: scripts/setup.sh installs it"
    script = (
        'const openrpc = require("@open-rpc/meta-schema").openrpcDocument;'
        'const schema = require("@json-schema-tools/meta-schema").default;'
        "process.stdout.write(JSON.stringify({openrpc, schema}));"
    )
    out = subprocess.run(
        [node, "-e", script], cwd=REPO_ROOT / "tests" / "node", capture_output=True, text=True, timeout=30, check=True
    )
    schemas = json.loads(out.stdout)
    json_schema = DRAFT7.create_resource(schemas["schema"])
    registry = Registry().with_resources(
        [("https://meta.json-schema.tools", json_schema), ("https://meta.json-schema.tools/", json_schema)]
    )
    return jsonschema.Draft7Validator(schemas["openrpc"], registry=registry)


def get(port: int, path: str) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.getheader("Content-Type", ""), reply.read()
    finally:
        connection.close()


def check_documents(port: int) -> dict[str, Any]:
    """The server's documents, checked against the specifications; the OpenRPC one."""
    status, kind, body = get(port, "/openrpc.json")
    assert (status, kind) == (200, "application/json")
    openrpc = json.loads(body)
    openrpc_validator().validate(openrpc)
    status, kind, body = get(port, "/openapi.json")
    assert (status, kind) == (200, "application/json")
    openapi = json.loads(body)
    validate_openapi(openapi)
    assert openapi["openapi"] == "3.1.0"
    # Every schema in the OpenRPC document is a valid draft-07 schema.
    for method in openrpc["methods"]:
        for descriptor in [*method["params"], *([method["result"]] if "result" in method else [])]:
            jsonschema.Draft7Validator.check_schema(descriptor["schema"])
    status, kind, body = get(port, "/docs")
    assert (status, kind) == (200, "text/html; charset=utf-8")
    assert b"data-method" in body
    return openrpc  # type: ignore[no-any-return]


def example_params(method: dict[str, Any], example: dict[str, Any]) -> Any:
    if example.get("x-by-position"):
        return [p["value"] for p in example["params"]]
    return {p["name"]: p["value"] for p in example["params"]}


def check_examples(port: int, openrpc: dict[str, Any]) -> int:
    """Call every example of the document; each is accepted and answers its result."""
    components = openrpc.get("components", {}).get("schemas", {})
    checked = 0
    wire = Wire(port)
    try:
        for method in openrpc["methods"]:
            for example in method.get("examples", []):
                params = example_params(method, example)
                # The example fits the schemas the document gives.
                for descriptor, given in zip(method["params"], example["params"]):
                    schema = {**descriptor["schema"], "components": {"schemas": components}}
                    jsonschema.Draft7Validator(schema).validate(given["value"])
                result = wire.result(method["name"], params)
                if "result" in example:
                    assert result == example["result"]["value"], (method["name"], example)
                    if "result" in method:
                        schema = {**method["result"]["schema"], "components": {"schemas": components}}
                        jsonschema.Draft7Validator(schema).validate(result)
                checked += 1
    finally:
        wire.close()
    return checked


EXAMPLE_METHODS = ["checksum", "clamp", "divide", "greet", "pick", "scale", "sum"]


def test_python_server_documents_and_examples(engine):
    server = described_server.make_server(port=0, engine=engine)
    with server:
        openrpc = check_documents(server.port)
        assert [m["name"] for m in openrpc["methods"]] == EXAMPLE_METHODS
        assert openrpc["info"] == {"title": "Described example", "version": "1.2.0"}
        divide = next(m for m in openrpc["methods"] if m["name"] == "divide")
        assert divide["errors"] == [
            {"code": 1, "message": "division by zero"},
            {"code": 2, "message": "the result is beyond the largest number"},
        ]
        scale = next(m for m in openrpc["methods"] if m["name"] == "scale")
        assert scale["params"][0]["schema"] == {"$ref": "#/components/schemas/Point"}
        assert openrpc["components"]["schemas"]["Point"]["required"] == ["x", "y"]
        assert check_examples(server.port, openrpc) == 8
        wire = Wire(server.port)
        try:
            assert wire.result("rpc.discover") == openrpc
        finally:
            wire.close()


@pytest.fixture
def rust_described_server(engine):
    with described_rust_server(engine) as port:
        yield port


def test_rust_server_documents_and_examples(rust_described_server):
    openrpc = check_documents(rust_described_server)
    assert [m["name"] for m in openrpc["methods"]] == ["divide", "greet", "scale", "sum", "uptime"]
    assert check_examples(rust_described_server, openrpc) == 5


def test_openapi_describes_binary_messages_at_the_jsonrpc_path(rust_described_server):
    """POST / lists the binary message (docs/wire.md §3.1) beside JSON, request and reply,
    with its UCall-JSON-Length header; a request built from those names is answered."""
    status, _, body = get(rust_described_server, "/openapi.json")
    assert status == 200
    openapi = json.loads(body)
    validate_openapi(openapi)
    post = openapi["paths"]["/"]["post"]
    binary = "application/vnd.ucall.binary"
    assert set(post["requestBody"]["content"]) == {"application/json", binary}
    assert set(post["responses"]["200"]["content"]) == {"application/json", binary}
    (header,) = [p for p in post["parameters"] if p["in"] == "header"]
    assert header["name"] == "UCall-JSON-Length" and header["schema"]["type"] == "integer"
    assert list(post["responses"]["200"]["headers"]) == ["UCall-JSON-Length"]
    assert "400" in post["responses"]
    # A binary message without attachments, as the document names it: sum answers in JSON.
    text = json.dumps({"jsonrpc": "2.0", "method": "sum", "params": [40, 2], "id": 1}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", rust_described_server, timeout=10)
    try:
        connection.request("POST", "/", body=text, headers={"Content-Type": binary, header["name"]: str(len(text))})
        reply = connection.getresponse()
        assert (reply.status, json.loads(reply.read())["result"]) == (200, 42)
        # A broken framing (J beyond the body) is the 400 the document lists.
        connection.request("POST", "/", body=text, headers={"Content-Type": binary, header["name"]: str(len(text) + 1)})
        reply = connection.getresponse()
        assert (reply.status, json.loads(reply.read())["error"]["code"]) == (400, -32700)
    finally:
        connection.close()


def test_pydantic_model_param_on_a_live_server(make_server, wire):
    server = make_server()

    @server
    def register(item: Model) -> Model:
        """Store an item."""
        return Model(name=item.name.upper(), size=item.size + 1)

    w = wire(server)
    assert w.result("register", {"item": {"name": "a", "size": 1}}) == {"name": "A", "size": 2}
    error = w.error("register", {"item": {"name": "a", "size": -1}})
    assert error["code"] == -32602 and "size" in error["message"], error
    openrpc = check_documents(server.port)
    assert openrpc["methods"][0]["params"][0]["schema"] == {"$ref": "#/components/schemas/Model"}


def test_turned_off(make_server, wire):
    server = make_server(docs=False)

    @server
    def ping() -> str:
        return "pong"

    w = wire(server)
    assert w.error("rpc.discover")["code"] == -32601
    for path in ("/openrpc.json", "/openapi.json", "/docs"):
        assert get(server.port, path)[0] == 404, path

    moved = make_server(docs_path="/help", openapi_path=None, title="Mine")
    moved(ping)
    moved.start()
    assert get(moved.port, "/docs")[0] == 404
    assert get(moved.port, "/openapi.json")[0] == 404
    assert get(moved.port, "/help")[0] == 200
    assert json.loads(get(moved.port, "/openrpc.json")[2])["info"]["title"] == "Mine"
    with pytest.raises(ValueError, match="docs_path must be a path"):
        Server(docs_path="help")


def test_undescribed_names_still_listed(make_server):
    server = make_server()

    @server
    def echo(data):  # type: ignore[no-untyped-def]
        return data

    with contextlib.ExitStack():
        server.start()
        openrpc = check_documents(server.port)
    assert openrpc["methods"][0]["params"] == [{"name": "data", "required": True, "schema": {}}]
    assert "result" not in openrpc["methods"][0]


def test_example_server_runs_as_a_script(engine):
    script = str(REPO_ROOT / "examples" / "python" / "described_server.py")
    with serving([script, "--port", "0"], engine) as (proc, port):
        openrpc = check_documents(port)
        assert len(openrpc["methods"]) == len(EXAMPLE_METHODS)


DOC = REPO_ROOT / "docs" / "discovery.md"


def doc_blocks() -> list[str]:
    import re

    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_docs_have_python_examples():
    assert len(doc_blocks()) == 3


@pytest.mark.parametrize("index", range(3))
def test_docs_example_runs(index):
    source = doc_blocks()[index]
    exec(compile(source, f"{DOC}:block{index}", "exec"), {"__name__": f"docs_discovery_{index}"})


def test_the_validators_refuse_broken_documents():
    """The checks above can fail: documents that break the specifications are refused."""
    good = {"openrpc": "1.3.2", "info": {"title": "t", "version": "1"}, "methods": []}
    openrpc_validator().validate(good)
    for broken in (
        {**good, "methods": [{"name": "no params"}]},
        {**good, "methods": [{"name": "m", "params": [{"name": "p", "schema": {"type": 5}}]}]},
        {**good, "methods": [{"name": "m", "params": [], "paramStructure": "sideways"}]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            openrpc_validator().validate(broken)
    with pytest.raises(Exception, match="paths|required"):
        validate_openapi({"openapi": "3.1.0", "info": {"title": "t"}, "paths": {}})


def run_cli(*args: Any) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from ucall.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_cli_lists_and_describes_methods(engine):
    server = described_server.make_server(port=0, engine=engine)
    with server:
        port = server.port
        code, out, _ = run_cli("--list", "-p", port)
        assert code == 0, out
        lines = out.splitlines()
        assert [line.split("(")[0] for line in lines] == EXAMPLE_METHODS
        assert "sum(a: integer, b: integer = 0) -> integer  # Add two integers." in lines
        assert "scale(point: Point, factor: number = 2.0) -> Point  # Scale a point about the origin." in lines
        assert (
            'pick(options: array<string>, end: "first" | "last" = "first", fallback: string | null = null) -> string | null'
            in out
        )
        code, out, _ = run_cli("-p", port, "divide", "--help")
        assert code == 0, out
        assert out.splitlines()[0] == "divide(a: number, b: number) -> number"
        assert "Divide a by b." in out and "Error 1: division by zero" in out
        assert "  a  number  (required)" in out
        assert "Example: ucall divide a:=1 b:=4  # 0.25" in out
        # The example it prints is a command that works.
        code, out, _ = run_cli("divide", "a:=1", "b:=4", "-p", port, "--format", "json")
        assert (code, out.strip()) == (0, "0.25")
        code, out, _ = run_cli("sum", "--help", "-p", port)
        assert "Example: ucall sum --positional :=40 :=2  # 42" in out
        code, _, err = run_cli("nope", "--help", "-p", port)
        assert code == 2 and "no method 'nope'" in err
        # Without a method, or a server to describe it, --help is the command's own.
        code, out, err = run_cli("sum", "--help", "-p", 1, "--timeout", 2)
        assert code == 0 and "--positional" in out and "not described here" in err
        code, out, _ = run_cli("call", "--help")
        assert code == 0 and "--list" in out
        code, _, err = run_cli("call", "-p", port)
        assert code == 2 and "Missing argument 'METHOD'" in err


def docs_types(port: int) -> dict[str, Any]:
    """The types the /docs page shows, from the data it carries."""
    status, _, body = get(port, "/docs")
    assert status == 200
    start = body.index(b'id="ucall-data">') + len(b'id="ucall-data">')
    return json.loads(body[start : body.index(b"</script>", start)])["types"]  # type: ignore[no-any-return]


def test_the_command_line_and_docs_word_each_type_alike(make_server):
    """One wording of a schema wherever one is shown: `ucall NAME --help` and /docs both
    take the core's (a numpy param is no longer `list | bytes (base64)` in one and
    `application/x-npy` in the other)."""
    import numpy
    server = make_server()

    @server
    def scale(x: numpy.ndarray, factors: List[float], names: Dict[str, int], blob: bytes) -> List[str]:
        return []

    with server:
        types = docs_types(server.port)["scale"]
        assert types == {
            "params": {
                "x": "array<number | boolean | array> | base64 application/x-npy (plain JSON) or an ndarray attachment (binary message)",
                "factors": "array<number>",
                "names": "object<string, integer>",
                "blob": "base64 bytes (plain JSON) or a bytes attachment (binary message)",
            },
            "result": "array<string>",
        }
        code, out, _ = run_cli("-p", server.port, "scale", "--help")
        assert code == 0, out
        for name, words in types["params"].items():
            assert f"  {name:<7}  {words}  (required" in out, out
        assert f"Result: {types['result']}" in out, out
    with described_rust_server("poll") as port:
        sum_types = docs_types(port)["sum"]
        code, out, _ = run_cli("-p", port, "sum", "--help")
        params = sum_types["params"]
        assert out.splitlines()[0] == f"sum(a: {params['a']}, b: {params['b']}) -> {sum_types['result']}"
