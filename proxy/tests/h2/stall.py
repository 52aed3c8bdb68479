"""Stalled HTTP/2 clients for proxy/tests/h2_stalls.rs: CONNS connections to the proxy over TLS
(ALPN h2), each opening STREAMS streams `POST PATH` whose request body never comes (no
END_STREAM, no DATA). Prints "ready N" once N connections are open, then waits for the server to
close each, and after at most HOLD seconds prints one JSON line: connections opened, closed, and
the longest time from a connection's streams being sent to its close."""

import asyncio
import json
import ssl
import sys
import time

import h2.config
import h2.connection


async def stall(host, port, ctx, streams, path, result):
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost"), 20
        )
    except Exception:
        result["failed"] += 1
        return
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    try:
        conn.initiate_connection()
        for _ in range(streams):
            conn.send_headers(
                conn.get_next_available_stream_id(),
                [(":method", "POST"), (":path", path), (":scheme", "https"),
                 (":authority", "localhost"), ("content-length", "100")],
                end_stream=False,
            )
        writer.write(conn.data_to_send())
        await asyncio.wait_for(writer.drain(), 20)
    except Exception:
        # Reset or closed before its streams were sent (a busy proxy at its cap): counted,
        # never left uncounted (the wait for "ready" below would never end).
        result["failed"] += 1
        writer.close()
        return
    sent = time.monotonic()
    result["open"] += 1
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            conn.receive_data(data)
            out = conn.data_to_send()
            if out:
                writer.write(out)
    except Exception:
        pass
    result["closed"] += 1
    result["longest"] = max(result["longest"], time.monotonic() - sent)
    writer.close()


async def main():
    host, port, ca, conns, streams, path, hold = sys.argv[1:8]
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    result = {"open": 0, "closed": 0, "failed": 0, "longest": 0.0}
    tasks = []
    for _ in range(int(conns)):
        tasks.append(asyncio.create_task(stall(host, int(port), ctx, int(streams), path, result)))
        await asyncio.sleep(0)
    # Every connection opened or failed, or at most HOLD seconds.
    deadline = time.monotonic() + float(hold)
    while result["open"] + result["failed"] < int(conns) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    print("ready", result["open"], flush=True)
    await asyncio.wait(tasks, timeout=float(hold))
    print(json.dumps(result), flush=True)


asyncio.run(main())
