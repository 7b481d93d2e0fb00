# SPDX-License-Identifier: Apache-2.0
"""The ``ucall`` command: call a procedure, or serve a module's server.

    ucall sum a=1 b:int=2                      # by name; types guessed or given
    ucall sum --positional 1 2:int             # by position
    ucall echo data:='{"x": [1, 2]}'           # raw JSON
    ucall upload -f data=big.bin -i picture=cat.png --format json   # attachments where taken
    ucall predict x:numpy=batch.npy --format numpy   # an array, an attachment where taken
    ucall sum a=1 b=2 --tls --cacert ca.pem    # HTTPS, the certificate checked against ca.pem
    ucall sum a=1 b=2 --cacert ca.pem -E me.pem --key me.key   # with a client certificate
    ucall sum a=1 b=2 --uri wss://host:8545/   # WebSocket (ws:// in plaintext)
    ucall -p 8545 --format json sum a=1 b=2    # options go before or after the method
    ucall call serve                           # a method named serve (or call)
    ucall serve app:server --port 8545         # run a Server object, as uvicorn does
    ucall -p 8545 --list                       # the server's methods, from rpc.discover
    ucall sum --help                           # one method's params, from rpc.discover
    ucall serve app:server --workers 4         # four processes on one port, supervised
    ucall serve app:server --uds /run/app.sock # also on a Unix domain socket

Exit status: 0 on success, 1 when the server answered an error, 2 on a usage or
transport error.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import logging
import os
import re
import shlex
import ssl
import sys
from typing import Any, Callable, NoReturn, TypeVar

import click

from ucall import _codec
from ucall._attachments import SCHEMA_MARK
from ucall._server import Server
from ucall._ucall import __version__, check_rate_limit, type_text
from ucall.client import STREAMS_ITS_RESULT, Client, Response
from ucall.exceptions import ConnectError, RPCError, UCallError

_Command = TypeVar("_Command", bound=Callable[..., Any])

UPLOAD_PROGRESS_BYTES = 4 << 20
TYPES = ("int", "float", "str", "bool", "json", "bytes", "binary", "file", "numpy", "image")
NEGATIVE = re.compile(r"-\.?\d")  # a dash then a digit: a negative number, a value and not an option
HIDDEN = "\0"  # argv cannot hold a NUL, so this prefix cannot be typed


def _guess(text: str) -> Any:
    """A value typed on a command line: int, float, bool, or the text itself. Digits with
    a leading zero (``0123``, a code or an id) stay text: as a number they would lose it."""
    if re.fullmatch(r"[-+]?(0|[1-9]\d*)", text):
        return int(text)
    if re.fullmatch(r"[-+]?((0|[1-9]\d*)(\.\d*)?|\.\d+)([eE][-+]?\d+)?", text):
        return float(text)
    if text in ("true", "True"):
        return True
    if text in ("false", "False"):
        return False
    return text


def _cast(text: str, kind: str | None) -> Any:
    if kind is None:
        return _guess(text)
    kind = kind.lower()
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "str":
            return text
        if kind == "bool":
            if text.lower() in ("true", "1", "yes"):
                return True
            if text.lower() in ("false", "0", "no"):
                return False
            raise ValueError(f"{text!r} is not a boolean")
        if kind == "json":
            return json.loads(text)
        if kind in ("bytes", "binary", "file"):
            with open(text, "rb") as f:
                return f.read()
        if kind == "numpy":
            import numpy

            return numpy.load(text, allow_pickle=False)
        if kind == "image":
            from PIL import Image

            image = Image.open(text)
            image.load()
            return image
    except (OSError, ValueError) as error:
        raise click.BadParameter(f"{text!r} as {kind}: {error}") from None
    raise click.BadParameter(f"unknown type {kind!r} (one of {', '.join(TYPES)})")


def _header(argument: str) -> tuple[str, str]:
    """``-H 'Name: value'`` (curl's form) as ``(name, value)``."""
    name, sep, value = argument.partition(":")
    if not sep or not name.strip():
        raise click.BadParameter(f"{argument!r}: expected 'NAME: VALUE'", param_hint="'-H'")
    return name.strip(), value.strip()


def _named(argument: str) -> tuple[str, Any]:
    """``key=value``, ``key:type=value`` or ``key:=json``."""
    key, sep, value = argument.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{argument!r}: expected KEY=VALUE, KEY:TYPE=VALUE or KEY:=JSON")
    if key.endswith(":"):
        return key[:-1], _cast(value, "json")
    name, _, kind = key.partition(":")
    return name, _cast(value, kind or None)


def _positional(argument: str) -> Any:
    """``value`` or ``value:type`` (``:=`` prefix for raw JSON)."""
    if argument.startswith(":="):
        return _cast(argument[2:], "json")
    match = re.fullmatch(r"(.*):(\w+)", argument, flags=re.S)
    if match and match.group(2).lower() in TYPES:
        return _cast(match.group(1), match.group(2))
    return _guess(argument)


def _highlight(text: str) -> str:
    """Colours for JSON on a terminal: keys, strings, numbers, literals."""
    token = re.compile(r'("(?:\\.|[^"\\])*")(\s*:)?|(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|\b(true|false|null)\b')

    def paint(match: re.Match[str]) -> str:
        string, colon, number, literal = match.groups()
        if string is not None:
            return click.style(string, fg="blue", bold=True) + colon if colon else click.style(string, fg="green")
        if number is not None:
            return click.style(number, fg="cyan")
        return click.style(literal, fg="magenta")

    return token.sub(paint, text)


def _valued_options(command: click.Command, ctx: click.Context) -> set[str]:
    """The names of ``command``'s options that take a value (the next argument)."""
    return {name for p in command.get_params(ctx) if isinstance(p, click.Option) and not p.is_flag for name in p.opts}


def _first_positional(args: list[str], command: click.Command, ctx: click.Context) -> int | None:
    """Where the first argument that is neither an option of ``command`` nor its value is."""
    valued = _valued_options(command, ctx)
    at = 0
    while at < len(args):
        arg = args[at]
        if arg == "--":
            return None
        if not arg.startswith("-") or NEGATIVE.match(arg):
            return at
        at += 2 if arg in valued else 1
    return None


class _Commands(click.Group):
    """``ucall [OPTIONS] METHOD ...`` calls a method; ``serve`` and ``call`` are the subcommands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Whatever is not a subcommand or the group's own --help or --version starts a call,
        # so that the call's options may come before the method too.
        own = {name for param in self.get_params(ctx) for name in param.opts}
        if args and args[0] not in self.commands and args[0] not in own:
            # A subcommand named after a call's options (`ucall -p 8545 call serve`) is that
            # subcommand, its options moved after it.
            at = _first_positional(args, self.commands["call"], ctx)
            if at is not None and args[at] in self.commands:
                args = [args[at], *args[:at], *args[at + 1 :]]
            else:
                args = ["call", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(
            "ucall",
            "[OPTIONS] METHOD [KEY=VALUE | KEY:TYPE=VALUE | KEY:=JSON]...\n       ucall serve MODULE:SERVER [OPTIONS]",
        )


class _Call(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # click would take -1 for an unknown option and -2:int for -i with the value "nt", so
        # a negative number is hidden from it, unless it is an option's value or follows "--".
        valued = _valued_options(self, ctx)
        end = args.index("--") if "--" in args else len(args)
        hidden = [
            HIDDEN + a if i < end and NEGATIVE.match(a) and (i == 0 or args[i - 1] not in valued) else a
            for i, a in enumerate(args)
        ]
        # `ucall METHOD --help` describes the method (from the server): the flag is read
        # here rather than by click, which would print the command's own help instead.
        if any(a in ("-h", "--help") for a in hidden[:end]) and _first_positional(hidden, self, ctx) is not None:
            hidden = [a for i, a in enumerate(hidden) if i >= end or a not in ("-h", "--help")]
            ctx.meta["ucall.describe"] = True
        rest = super().parse_args(ctx, hidden)
        if ctx.params.get("method") is not None:  # None when shell completion parses a partial line
            ctx.params["method"] = ctx.params["method"].removeprefix(HIDDEN)
        ctx.params["arguments"] = tuple(a.removeprefix(HIDDEN) for a in ctx.params.get("arguments") or ())
        return rest


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ucall")
def main() -> None:
    """Call UCall (JSON-RPC 2.0) servers, or serve Python functions.

    The options of a call (ucall call --help) go before or after METHOD, and -- ends
    them. A method named serve or call is called as ucall call METHOD.

    Environment: UCALL_URI and UCALL_PORT give a call's --uri and -p, UCALL_HOST and
    UCALL_PORT the --host and --port of serve; an option on the command line wins.
    """


@main.command("call", cls=_Call)
@click.argument("method", required=False)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "-f",
    "--file",
    "files",
    multiple=True,
    metavar="KEY=PATH",
    help="Send a file's bytes: as an attachment where the server takes one (see --binary), else base64.",
)
@click.option(
    "-i", "--image", "images", multiple=True, metavar="KEY=PATH", help="Send an image file (as -f does, read by PIL)."
)
@click.option(
    "--binary/--no-binary",
    default=None,
    help="Send bytes, arrays and images as attachments of a binary message (docs/wire.md) always, or never. "
    "Default: where the server's description (rpc.discover) marks the param.",
)
@click.option("--positional", is_flag=True, help="Pass the values by position: VALUE or VALUE:TYPE.")
@click.option(
    "--stream",
    is_flag=True,
    help="Read a streamed result (a procedure that yields): each item a JSON line as it comes, then the result.",
)
@click.option("--list", "list_methods", is_flag=True, help="List the server's methods (from rpc.discover) and exit.")
@click.option(
    "--uri",
    default="127.0.0.1",
    show_default=True,
    envvar="UCALL_URI",
    show_envvar=True,
    help="Server host, or a URL: http://, https://, ws://, wss://, tcp:// or tls:// (a port or path in it wins over -p).",
)
@click.option(
    "-p", "--port", default=8545, show_default=True, envvar="UCALL_PORT", show_envvar=True, help="Server port."
)
@click.option("--tcp", is_flag=True, help="Raw TCP instead of HTTP.")
@click.option("--tls", is_flag=True, help="Speak TLS (HTTPS; TLS over raw TCP with --tcp).")
@click.option(
    "--cacert",
    type=click.Path(exists=True, dir_okay=False),
    help="Check the server's certificate against the CAs in this PEM file only (implies --tls).",
)
@click.option("-k", "--insecure", is_flag=True, help="Accept any server certificate (implies --tls).")
@click.option(
    "-E",
    "--cert",
    type=click.Path(exists=True, dir_okay=False),
    help="Present this client certificate chain (PEM) to a server that requires one (implies --tls).",
)
@click.option(
    "--key",
    "cert_key",
    type=click.Path(exists=True, dir_okay=False),
    help="The private key (PEM) of --cert, when it is not in the same file.",
)
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="Send this HTTP header (an API key, a token), as curl -H does; with the WebSocket upgrade for ws://.",
)
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for the reply.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["raw", "json", "bytes", "numpy", "image"]),
    default="raw",
    show_default=True,
    help="raw: the whole reply; json: the result; bytes/numpy/image: the result decoded.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write to FILE instead: the JSON, the bytes, a .npy, or an image in the format FILE's extension names "
    "(as received when it names none).",
)
def call(
    method: str | None,
    arguments: tuple[str, ...],
    files: tuple[str, ...],
    images: tuple[str, ...],
    binary: bool | None,
    positional: bool,
    stream: bool,
    list_methods: bool,
    uri: str,
    port: int,
    tcp: bool,
    tls: bool,
    cacert: str | None,
    insecure: bool,
    cert: str | None,
    cert_key: str | None,
    headers: tuple[str, ...],
    timeout: float,
    output_format: str,
    output: str | None,
) -> None:
    """Call METHOD with KEY=VALUE, KEY:TYPE=VALUE or KEY:=JSON params (TYPE: int, float,
    str, bool, json; bytes, binary or file: a file's bytes; numpy: a .npy file's array;
    image: an image file). METHOD --help describes it, --list lists them all."""
    ctx = click.get_current_context()
    describe = bool(ctx.meta.get("ucall.describe"))
    if method is None and not list_methods:
        raise click.UsageError("Missing argument 'METHOD' (or --list).")
    params: Any
    if positional:
        params = [_positional(a) for a in arguments]
        if files or images:
            params += [_cast(p.partition("=")[2], "bytes") for p in files]
            params += [_cast(p.partition("=")[2], "image") for p in images]
    else:
        named = dict(_named(a) for a in arguments)
        for spec in files:
            key, _, path = spec.partition("=")
            named[key] = _cast(path, "bytes")
        for spec in images:
            key, _, path = spec.partition("=")
            named[key] = _cast(path, "image")
        params = named or None
    try:
        client = Client(
            uri=uri,
            port=port,
            use_http=not tcp,
            timeout=timeout,
            tls=True if tls else None,
            cacert=cacert,
            insecure=insecure,
            tls_cert=cert,
            tls_key=cert_key,
            headers=dict(_header(h) for h in headers),
            binary=binary,
        )
    except (ValueError, OSError) as error:
        raise click.UsageError(str(error)) from None
    try:
        if list_methods or describe:
            try:
                document = client.call_with_progress("rpc.discover", None).json
            except (UCallError, OSError) as error:
                if list_methods:
                    raise
                # No server to ask (or one that does not describe itself): the command's help.
                click.echo(ctx.get_help())
                click.secho(f"ucall: {method!r} is not described here: {error}", fg="yellow", err=True)
                return
            click.echo(_describe(document, None if list_methods else method))
            return
        assert method is not None
        if stream:
            if output_format not in ("raw", "json") or output:
                raise click.UsageError("--stream writes JSON lines on standard output: no --format or -o with it")
            _stream(client, method, params)
            return
        response = _send(client, method, params)
        _show(response, output_format, output)
    except RPCError as error:
        detail = f"\n{json.dumps(error.data, indent=2)}" if error.data is not None else ""
        click.secho(f"error {error.code}: {error.message}{detail}", fg="red", err=True)
        sys.exit(1)
    except (UCallError, OSError, ValueError) as error:
        hint = ""
        if isinstance(error, ConnectError) and isinstance(error.__cause__, ssl.SSLCertVerificationError):
            hint = " (--cacert PATH trusts the CA that signed it; --insecure skips the check)"
        elif STREAMS_ITS_RESULT in str(error):
            hint = f"\n(ucall {method} --stream ... prints its items as they come)"
        click.secho(f"ucall: {error}{hint}", fg="red", err=True)
        sys.exit(2)
    finally:
        client.close()


def _type(schema: Any) -> str:
    """A schema of the OpenRPC document in a few words (``integer``, ``array<string>``,
    ``Point``): the core's wording, the one the /docs page shows."""
    return type_text(json.dumps(schema if schema is not None else {}))


def _signature_of(method: dict[str, Any]) -> str:
    if method.get("x-undescribed"):
        return f"{method['name']}(...)"
    params = []
    for param in method.get("params", []):
        text = f"{param['name']}: {_type(param.get('schema'))}"
        if "default" in param.get("schema", {}):
            text += f" = {json.dumps(param['schema']['default'])}"
        elif not param.get("required"):
            text += " = (optional)"
        params.append(text)
    result = f" -> {_type(method['result'].get('schema'))}" if "result" in method else ""
    return f"{method['name']}({', '.join(params)}){result}"


def _attachment_argument(name: str, schema: Any) -> str | None:
    """How this command sends a param the document marks as a binary message's attachment
    (docs/wire.md §5), or None for others."""
    mark = schema.get(SCHEMA_MARK) if isinstance(schema, dict) else None
    if mark == "ndarray":
        return f"{name}:numpy=FILE.npy"
    if mark == "bytes":
        image = str(schema.get("contentMediaType", "")).startswith("image/")
        return f"-i {name}=FILE" if image else f"-f {name}=FILE"
    return None


def _describe(document: Any, name: str | None) -> str:
    """The methods of an OpenRPC document, one a line; or one method (``name``) in full."""
    if not isinstance(document, dict) or not isinstance(document.get("methods"), list):
        raise ValueError("rpc.discover did not answer an OpenRPC document")
    methods = {m["name"]: m for m in document["methods"] if isinstance(m, dict) and "name" in m}
    if name is None:
        lines = []
        for each in methods.values():
            summary = f"  # {each['summary']}" if each.get("summary") else ""
            lines.append(_signature_of(each) + summary)
        return "\n".join(lines) if lines else "(no methods)"
    method = methods.get(name)
    if method is None:
        raise ValueError(f"the server has no method {name!r} (ucall --list shows them)")
    lines = [_signature_of(method)]
    for key in ("summary", "description"):
        if method.get(key):
            lines += ["", method[key]]
    params = method.get("params", [])
    if params:
        lines += ["", f"Params ({method.get('paramStructure', 'either')}):"]
        width = max(len(p["name"]) for p in params)
        for param in params:
            schema = param.get("schema", {})
            notes = ["required" if param.get("required") else "optional"]
            if "default" in schema:
                notes.append(f"default {json.dumps(schema['default'])}")
            about = param.get("description") or param.get("summary")
            if about:
                notes.append(about)
            attached = _attachment_argument(param["name"], schema)
            if attached:
                notes.append(f"sent as an attachment: {attached}")
            lines.append(f"  {param['name']:<{width}}  {_type(schema)}  ({', '.join(notes)})")
    if "result" in method:
        lines += ["", f"Result: {_type(method['result'].get('schema'))}"]
    for error in method.get("errors", []):
        lines.append(f"Error {error.get('code')}: {error.get('message')}")
    for example in method.get("examples", [])[:3]:
        values = example.get("params", [])
        compact = functools.partial(json.dumps, separators=(",", ":"))
        if example.get("x-by-position"):
            args = " ".join(["--positional", *(shlex.quote(f":={compact(p['value'])}") for p in values)])
        else:
            args = " ".join(shlex.quote(f"{p['name']}:={compact(p['value'])}") for p in values)
        answer = f"  # {json.dumps(example['result']['value'])}" if "result" in example else ""
        lines += ["", f"Example: ucall {name} {args}".rstrip() + answer]
    return "\n".join(lines)


def _send(client: Client, method: str, params: Any) -> Response:
    size = sum(len(v) for v in _leaves(params) if isinstance(v, (bytes, bytearray)))
    if size < UPLOAD_PROGRESS_BYTES or not sys.stderr.isatty():
        return client.call_with_progress(method, params)
    with click.progressbar(length=1, label="uploading", file=sys.stderr, show_percent=True) as bar:

        def progress(sent: int, total: int) -> None:
            bar.length = total
            bar.update(sent - bar.pos)

        return client.call_with_progress(method, params, progress)


def _stream(client: Client, method: str, params: Any) -> None:
    """A streamed call's items, each a JSON line on standard output as it comes (arrays and
    bytes as base64), then its result unless it is null."""
    args, kwargs = (params, {}) if isinstance(params, list) else ([], params or {})
    with client.stream(method, *args, **kwargs) as items:
        for item in items:
            click.echo(json.dumps(_codec.pack(item), ensure_ascii=False))
    if items.result is not None:
        click.echo(json.dumps(_codec.pack(items.result), ensure_ascii=False))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _show(response: Response, output_format: str, output: str | None) -> None:
    """The reply in ``output_format``, on standard output or written to the file ``output``."""
    if output_format in ("raw", "json"):
        # A binary reply's arrays and bytes are shown in their plain JSON form (base64).
        shown = _codec.pack(response.data if output_format == "raw" else response.json)
        text = json.dumps(shown, indent=2, ensure_ascii=False)
        if output:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        else:
            click.echo(_highlight(text) if sys.stdout.isatty() else text, color=sys.stdout.isatty())
        response.raise_for_status()  # raw shows an error reply whole, then exits as for an error
        return
    if output_format == "bytes":
        data = response.bytes
        if output:
            with open(output, "wb") as f:
                f.write(data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return
    if output_format == "numpy":
        array = response.numpy
        if output:
            import numpy as np

            with open(output, "wb") as f:  # np.save given a name would add .npy to it
                np.save(f, array, allow_pickle=False)
        else:
            click.echo(repr(array))
        return
    image = response.image
    if output:
        from PIL import Image

        known = os.path.splitext(output)[1].lower() in Image.registered_extensions()
        image.save(output, format=None if known else image.format)
    elif sys.stdout.isatty():
        size = f"{image.size[0]}x{image.size[1]}"
        click.echo(f"{image.format or 'image'} {image.mode} {size} (-o FILE, or a pipe, gets the image itself)")
    else:
        # The image as received, so that `ucall ... --format image > out.png` saves it.
        sys.stdout.buffer.write(response.bytes)
        sys.stdout.flush()


def _cannot_serve(message: str) -> NoReturn:
    """One line on stderr and exit 2: the command was well formed, its MODULE:SERVER is not
    (so no usage block)."""
    click.secho(f"ucall serve: {message}", fg="red", err=True)
    sys.exit(2)


#: The levels ``ucall serve --log-level`` takes (those of the ``logging`` module).
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _octal(text: str) -> int:
    """Permission bits written in octal (``660``, ``0o660``)."""
    try:
        mode = int(text.removeprefix("0o"), 8)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an octal mode such as 660") from None
    if not 0 <= mode <= 0o7777:
        raise click.BadParameter(f"{text!r} is not a mode (at most 7777)")
    return mode


def _buckets(text: str) -> list[float]:
    """Bucket bounds in seconds, comma-separated (the core checks their order)."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected seconds separated by commas, such as 0.005,0.05,0.5") from None


def _rate(text: str) -> str:
    """A rate limit, ``100/s`` or ``6000/min`` (checked by the core's rule)."""
    try:
        check_rate_limit(text)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return text


def _rate_key(text: str) -> str:
    """What tells clients apart: ``peer``, ``bearer``, ``header:<name>`` or ``middleware``."""
    try:
        check_rate_limit(key=text)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return text


def _proxies(text: str) -> list[str]:
    """Addresses or networks, comma-separated."""
    proxies = [part.strip() for part in text.split(",") if part.strip()]
    try:
        check_rate_limit(trusted_proxies=proxies)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return proxies


def _flag(flag: str, kind: Any, text: str, name: str | None = None) -> tuple[str, str, Any, str]:
    """A row of ``SERVER_FLAGS``: the option's name is the flag's, as click names it
    (``--max-threads``: ``max_threads``), unless ``name`` says another."""
    return flag, name if name is not None else flag.removeprefix("--").replace("-", "_"), kind, text


#: ``Server(...)`` options that ``ucall serve`` sets beside --host, --port, --threads,
#: --drain-delay and --metrics-path: (flag, the option's name, click type, help). Those
#: given are passed on to worker processes as they were given.
SERVER_FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    _flag(
        "--engine",
        click.Choice(("auto", "poll", "uring")),
        "Engine: auto (io_uring where it works, else poll), poll or uring; UCALL_ENGINE overrides it.",
    ),
    _flag("--max-threads", click.IntRange(min=1), "Most threads per worker thread while handlers block (default 64)."),
    _flag(
        "--max-connections",
        click.IntRange(min=1),
        "Most connections open at once; more are closed on accept (default 10000).",
    ),
    _flag(
        "--max-pending-calls",
        click.IntRange(min=1),
        "Most calls waiting for (or running in) a handler per thread; past it a call is answered at once "
        "with -32000 (HTTP 503 with Retry-After) and data.executed false, safe to retry (default: no limit).",
    ),
    _flag(
        "--rate-limit",
        _rate,
        "Calls each client may make, as 100/s or 6000/min; past it a call is refused before it runs "
        "(HTTP 429 with Retry-After, or -32029 with data.retry_after_ms and executed false). Per worker process.",
    ),
    _flag(
        "--rate-limit-key",
        _rate_key,
        "What tells clients apart: peer (the address, default), bearer (the Authorization token) or "
        "header:NAME (a header's value, as header:X-API-Key), or middleware (the app's middleware "
        "calls ctx.limit_by(key)).",
    ),
    _flag(
        "--trusted-proxies",
        _proxies,
        "Proxies (addresses or networks, comma-separated) whose X-Forwarded-For names the client.",
    ),
    _flag(
        "--max-connections-per-peer",
        click.IntRange(min=1),
        "Most connections open at once from one IP address; more are closed on accept (default: no cap).",
    ),
    _flag(
        "--max-body-bytes",
        click.IntRange(min=1),
        "Largest request body (HTTP) or JSON text (raw TCP) in bytes (default 64 MiB).",
    ),
    _flag("--max-head-bytes", click.IntRange(min=64), "Largest HTTP request head in bytes (default 16 KiB)."),
    _flag("--max-batch", click.IntRange(min=1), "Most requests in one JSON-RPC batch (default 1024)."),
    _flag(
        "--header-timeout",
        click.FloatRange(min=0, min_open=True),
        "Seconds to receive a request head, from its first byte (default 10).",
    ),
    _flag(
        "--idle-timeout",
        click.FloatRange(min=0, min_open=True),
        "Seconds a connection may sit without progress before it is closed (default 60).",
    ),
    _flag(
        "--shutdown-timeout",
        click.FloatRange(min=0, min_open=True),
        "Seconds calls in flight get to finish at stop, after --drain-delay (default 5).",
    ),
    _flag(
        "--tls-cert",
        click.Path(exists=True, dir_okay=False),
        "PEM certificate chain: the port speaks TLS (needs --tls-key).",
    ),
    _flag("--tls-key", click.Path(exists=True, dir_okay=False), "PEM private key of --tls-cert."),
    _flag(
        "--tls-client-ca",
        click.Path(exists=True, dir_okay=False),
        "Require client certificates signed by the CAs in this PEM file (mutual TLS).",
    ),
    _flag(
        "--tls-port",
        click.IntRange(0, 65535),
        "Serve TLS on this port too, the port staying plaintext (0: any free one).",
    ),
    _flag(
        "--hsts-max-age",
        click.IntRange(0, 2**63),
        "Over TLS, every HTTP reply says Strict-Transport-Security: max-age=SECONDS (needs --tls-cert).",
    ),
    _flag("--healthz-path", str, "Where GET serves the liveness probe ('' turns it off; default /healthz)."),
    _flag("--readyz-path", str, "Where GET serves the readiness probe ('' turns it off; default /readyz)."),
    _flag(
        "--metrics-buckets",
        _buckets,
        "The latency histogram's bucket bounds in seconds, comma-separated and ascending "
        "(default gRPC's, 0.0001 to 10).",
    ),
    _flag(
        "--uds",
        click.Path(dir_okay=False),
        "Also listen on this Unix domain socket: HTTP, raw TCP and WebSocket, in plaintext. A socket file left "
        "by a dead server is replaced; one where a server answers is refused. One process: not with --workers.",
        name="unix_socket",
    ),
    _flag(
        "--uds-mode",
        _octal,
        "Permission bits of the --uds socket file, in octal (660: owner and group may connect).",
        name="unix_socket_mode",
    ),
)

#: Paths among ``SERVER_FLAGS``: ``''`` turns the route off.
ROUTE_OPTIONS = ("healthz_path", "readyz_path")


def _server_flags(command: _Command) -> _Command:
    """Add ``SERVER_FLAGS`` and ``--readyz-not-found`` to the ``serve`` command."""
    command = click.option(
        "--readyz-not-found",
        is_flag=True,
        default=None,
        help="The readiness probe answers 404 rather than 503 when not ready (HAProxy's http-check disable-on-404).",
    )(command)
    for flag, name, kind, text in reversed(SERVER_FLAGS):
        command = click.option(flag, name, type=kind, default=None, help=text)(command)
    return command


def _configure(server: Server, given: dict[str, Any]) -> None:
    """Set the ``Server(...)`` options given as ``SERVER_FLAGS`` (those not ``None``)."""
    for name in ROUTE_OPTIONS:
        path = given.get(name)
        if path is not None and path and not path.startswith("/"):
            _cannot_serve(f"--{name.replace('_', '-')} must start with '/' (or be '' for none), got {path!r}")
    for name, value in given.items():
        if value is None or name in ("unix_socket", "unix_socket_mode"):
            continue
        if name == "engine":
            server.engine_name = value
        elif name == "max_threads":
            server.max_threads = value
        elif name in ROUTE_OPTIONS:
            server._limits[name] = value or None
        elif name in ("tls_cert", "tls_key", "tls_client_ca"):
            server._limits[name] = str(value)
        else:
            server._limits[name] = value
    if (server._limits["tls_cert"] is None) != (server._limits["tls_key"] is None):
        _cannot_serve("TLS needs both --tls-cert and --tls-key")
    if server._limits.get("hsts_max_age") is not None and server._limits["tls_cert"] is None:
        raise click.UsageError("--hsts-max-age is said over TLS only: give --tls-cert and --tls-key")
    if given.get("unix_socket") is not None or given.get("unix_socket_mode") is not None:
        path = given.get("unix_socket") or server.unix_socket
        mode = given.get("unix_socket_mode")
        try:
            server._set_unix_socket(path, mode if mode is not None else server._limits["unix_socket_mode"])
        except ValueError as error:
            _cannot_serve(str(error).replace("unix_socket_mode", "--uds-mode").replace("unix_socket", "--uds"))


def _passed_on(given: dict[str, Any]) -> list[str]:
    """The ``SERVER_FLAGS`` given, as a worker's command line takes them."""
    words: list[str] = []
    for flag, name, _, _ in SERVER_FLAGS:
        value = given.get(name)
        if value is None:
            continue
        if name == "metrics_buckets":
            value = ",".join(repr(bound) for bound in value)
        elif name == "trusted_proxies":
            value = ",".join(value)
        elif name == "unix_socket_mode":
            value = format(value, "o")
        words += [flag, str(value)]
    if given.get("readyz_not_found"):
        words.append("--readyz-not-found")
    return words


@main.command("serve")
@click.argument("target", metavar="MODULE:SERVER")
@click.option(
    "--host", default=None, envvar="UCALL_HOST", show_envvar=True, help="Address to listen on (default: the server's)."
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    envvar="UCALL_PORT",
    show_envvar=True,
    help="Port (default: the server's).",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Worker threads (default: the server's).")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    envvar="UCALL_WORKERS",
    show_envvar=True,
    help="Serve from N processes sharing the port, under a supervisor that restarts them "
    "(SIGHUP: one at a time; SIGTERM: all stop).",
)
@click.option("--reload", is_flag=True, help="Restart the workers when a .py file under the current folder changes.")
@click.option(
    "--drain-delay",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds to go on serving after SIGTERM, rpc.health answering 'draining' (default: the server's).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    envvar="UCALL_LOG_LEVEL",
    show_envvar=True,
    help="Log records from this level up on stderr: 'info' adds the start-up and shutdown lines "
    "and failed TLS sessions; 'warning' has limits hit; 'error' has handlers' exceptions with their tracebacks.",
)
@click.option(
    "--metrics-path",
    default=None,
    metavar="PATH",
    help="Where GET serves Prometheus metrics ('' turns them off; default: the server's, /metrics). "
    "With --workers, each worker counts its own (docs/operations.md).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="With --workers: serve the workers' totals at GET /metrics on this port (0: any free one).",
)
@click.option(
    "--access-log",
    default=None,
    metavar="PATH",
    help="Log one line per call (time, peer, transport, method, id, code, status, duration, bytes) "
    "to PATH, appended to ('-': stdout); with --workers, each worker appends whole lines to it.",
)
@click.option(
    "--access-log-format",
    type=click.Choice(("text", "json")),
    default="text",
    show_default=True,
    help="The access log's lines: logfmt text, or JSON lines.",
)
@click.option(
    "--mcp",
    "mcp",
    is_flag=True,
    default=False,
    help="Also serve the procedures as MCP tools (Model Context Protocol, Streamable HTTP) at /mcp.",
)
@click.option(
    "--mcp-path", default=None, metavar="PATH", help="Where the MCP endpoint is (implies --mcp; default /mcp)."
)
@click.option(
    "--mcp-sessions",
    is_flag=True,
    default=False,
    help="Mint an Mcp-Session-Id at each MCP initialize (implies --mcp; sessions live in one process).",
)
@click.option(
    "--tracing/--no-tracing",
    "tracing",
    default=None,
    help="An OpenTelemetry span per call when the application configured a tracer provider "
    "(on unless the module's Server(tracing=False) says otherwise).",
)
@_server_flags
@click.option("--ready-fd", type=int, default=None, hidden=True)  # set by the supervisor for its workers
def serve(
    target: str,
    host: str | None,
    port: int | None,
    threads: int | None,
    workers: int | None,
    reload: bool,
    drain_delay: float | None,
    log_level: str,
    metrics_path: str | None,
    metrics_port: int | None,
    access_log: str | None,
    access_log_format: str,
    mcp: bool,
    mcp_path: str | None,
    mcp_sessions: bool,
    tracing: bool | None,
    ready_fd: int | None,
    readyz_not_found: bool | None,
    **given: Any,
) -> None:
    """Import MODULE and run its Server object SERVER (default name: server).

    Options not given keep the values the module's Server(...) was made with."""
    # Before the import: the module's own loggers find the configuration in place.
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = _load_server(target)
    if host is not None:
        server.host = host
    if port is not None:
        server._requested_port = port
    if threads is not None:
        server.threads = threads
    if drain_delay is not None:
        server.drain_delay = drain_delay
    if metrics_path is not None:
        if metrics_path and not metrics_path.startswith("/"):
            _cannot_serve(f"--metrics-path must start with '/' (or be '' for none), got {metrics_path!r}")
        server._limits["metrics_path"] = metrics_path or None
    if access_log is not None:
        server._set_request_log(access_log, access_log_format)
    if mcp or mcp_path is not None or mcp_sessions:
        if mcp_path is not None and not mcp_path.startswith("/"):
            _cannot_serve(f"--mcp-path must start with '/', got {mcp_path!r}")
        server._mcp = {**(server._mcp or {}), "path": mcp_path or (server._mcp or {}).get("path", "/mcp")}
        if mcp_sessions:
            server._mcp["sessions"] = True
    if tracing is not None:
        server.tracing = tracing
    _configure(server, given)
    if readyz_not_found:
        server._limits["readyz_not_found"] = True
    given["readyz_not_found"] = readyz_not_found
    if server.unix_socket is not None and (workers is not None or reload):
        _cannot_serve(
            "--uds serves from one process: not with --workers or --reload (a restarted worker "
            "would find the socket's path held by the one it replaces)"
        )
    if ready_fd is not None:
        try:
            server._serve_as_worker(ready_fd)
        except (OSError, ValueError) as error:
            click.secho(f"ucall: {error}", fg="red", err=True)
            sys.exit(2)
        return
    if workers is None and not reload:
        try:
            # run() says the start-up line on stderr (or, at --log-level info, its record).
            server.run()
        except (OSError, ValueError) as error:  # the address in use, an option the core refuses
            click.secho(f"ucall: {error}", fg="red", err=True)
            sys.exit(2)
        return
    access = [] if access_log is None else ["--access-log", access_log, "--access-log-format", access_log_format]
    access += _passed_on(given)
    if server._mcp is not None:
        access += ["--mcp-path", server._mcp["path"]]
        if server._mcp.get("sessions"):
            access += ["--mcp-sessions"]
    if not server.tracing:
        access += ["--no-tracing"]
    sys.exit(_supervise(server, target, workers or 1, reload, threads, log_level, metrics_port, access))


@main.command("mcp")
@click.argument("target", metavar="MODULE:SERVER")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    envvar="UCALL_LOG_LEVEL",
    show_envvar=True,
    help="Log records from this level up on stderr (stdout carries MCP messages only).",
)
def mcp_stdio(target: str, log_level: str) -> None:
    """Serve MODULE's Server object SERVER as MCP tools over stdin and stdout.

    For agents that start their tool servers as subprocesses: one JSON-RPC message per
    line each way (docs/mcp.md, "stdio"). Logs go to stderr only."""
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # A module that prints at import must not corrupt the message stream.
    with contextlib.redirect_stdout(sys.stderr):
        server = _load_server(target)
    from ucall._mcp_stdio import serve_stdio

    try:
        serve_stdio(server)
    except (OSError, ValueError) as error:
        click.secho(f"ucall: {error}", fg="red", err=True)
        sys.exit(2)


def _load_server(target: str) -> Server:
    module_name, _, attribute = target.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        _cannot_serve(f"cannot import {module_name!r}: {error}")
    except Exception as error:  # the module's own code failed: a syntax error, an exception at import
        _cannot_serve(f"cannot import {module_name!r}: {type(error).__name__}: {error}")
    name = attribute or "server"
    if not hasattr(module, name):
        _cannot_serve(f"module {module_name!r} has no {name!r}")
    server = getattr(module, name)
    if not isinstance(server, Server):
        _cannot_serve(f"{module_name}:{name} is a {type(server).__name__}, not a ucall Server")
    return server


def _supervise(
    server: Server,
    target: str,
    workers: int,
    reload: bool,
    threads: int | None,
    log_level: str,
    metrics_port: int | None,
    passed_on: list[str],
) -> int:
    """Run ``workers`` processes of ``ucall serve TARGET`` on one port under a supervisor.
    Each worker imports the module afresh, so a restart (SIGHUP, --reload) serves the
    code as it is now."""
    from ucall import _workers

    try:
        reserved = _workers.reserve_port(server.host, server.port)
    except OSError as error:
        click.secho(f"ucall: {error}", fg="red", err=True)
        return 2
    port = reserved.getsockname()[1]
    server._requested_port = port  # the start-up line's address
    command = [sys.executable, "-m", "ucall", "serve", target, "--host", server.host, "--port", str(port)]
    command += ["--drain-delay", repr(server.drain_delay), "--log-level", log_level]
    command += ["--metrics-path", server._limits["metrics_path"] or ""]
    # The access log and the Server options given; each worker opens the access log
    # itself, O_APPEND: their lines never interleave.
    command += passed_on
    if threads is not None:
        command += ["--threads", str(threads)]

    def start_worker(ready_fd: int) -> int:
        os.set_inheritable(ready_fd, True)
        os.execv(sys.executable, [*command, "--ready-fd", str(ready_fd)])
        return 1  # not reached: execv returns only by raising

    def ready(pids: list[int]) -> None:
        line = server._supervisor_line(pids, supervisor.engine, supervisor.metrics_port)
        click.echo(f"ucall: {line}", err=True)

    supervisor = _workers.Supervisor(
        start_worker,
        workers,
        stop_timeout=server._stop_timeout(),
        reload_roots=[os.getcwd()] if reload else None,
        metrics=None if metrics_port is None else (server.host, metrics_port),
    )
    try:
        return supervisor.run(ready)
    finally:
        reserved.close()


if __name__ == "__main__":
    main()
