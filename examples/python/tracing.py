# SPDX-License-Identifier: Apache-2.0
"""One trace across two UCall services (docs/operations.md, "Tracing").

    pip install 'ucall[otel]' opentelemetry-sdk
    python examples/python/tracing.py

The OpenTelemetry SDK is configured as its documentation says (a tracer provider with a
span processor and an exporter; here an in-memory one, so the example can print the
trace; an OTLP exporter sends it to Jaeger, Tempo or any collector instead). Then
``orders`` calls ``inventory`` from inside its handler: UCall makes a SERVER span for each
call, the client carries the trace context to the second service, and the spans form one
trace, printed as a tree.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ucall import Server
from ucall.client import Client

# 1. Configure the SDK before the servers start (UCall traces when a provider is set).
exporter = InMemorySpanExporter()
provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("shop")

# 2. Two services.
inventory = Server(port=0)


@inventory
def reserve(item: str, count: int) -> bool:
    with tracer.start_as_current_span("check stock"):
        return count <= 3


orders = Server(port=0)


@orders
def checkout(item: str, count: int) -> str:
    with Client(port=inventory.port) as client:  # carries the current trace context
        reserved = client.reserve(item=item, count=count).json
    return "ordered" if reserved else "out of stock"


inventory.start()
orders.start()
try:
    # 3. A caller with a span of its own: its context goes with the call.
    with tracer.start_as_current_span("customer clicks buy"):
        with Client(port=orders.port) as client:
            print("checkout:", client.checkout(item="tea", count=2).json)
finally:
    orders.stop()
    inventory.stop()
provider.force_flush()

# 4. The trace: every span, under its parent.
spans = exporter.get_finished_spans()
trace_ids = {span.context.trace_id for span in spans}
print("one trace across both services:", len(trace_ids) == 1)
children: dict[int | None, list] = {}
for span in spans:
    children.setdefault(span.parent.span_id if span.parent else None, []).append(span)


def show(parent: int | None, depth: int) -> None:
    for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
        port = span.attributes.get("server.port") if span.attributes else None
        where = f" (UCall server on port {port})" if port else ""
        print(f"{'  ' * depth}{span.name} [{span.kind.name}]{where}")
        show(span.context.span_id, depth + 1)


print(f"trace {next(iter(trace_ids)):032x}:")
show(None, 1)
