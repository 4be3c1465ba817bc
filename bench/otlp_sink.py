"""A local OpenTelemetry sink for `BENCH_TELEMETRY=1`: answers OTLP/HTTP trace exports
(`POST /v1/traces`) as a collector does, decodes each with `opentelemetry-proto`, and keeps the
number of spans received in `--count-file`, so the report can say the traces really went out.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


async def serve(port: int, count_file: Path) -> None:
    spans = 0
    count_file.write_text("0\n")

    async def traces(request: web.Request) -> web.Response:
        nonlocal spans
        export = ExportTraceServiceRequest.FromString(await request.read())
        spans += sum(len(s.spans) for r in export.resource_spans for s in r.scope_spans)
        count_file.write_text(f"{spans}\n")
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count-file", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.count_file))


if __name__ == "__main__":
    main()
