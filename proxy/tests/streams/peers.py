"""Peers of the proxy's WebSocket and server-sent-events tests (proxy/tests/streams.rs).

server                     a WebSocket echo server and an SSE server; prints "WS_PORT SSE_PORT"
ws URL CA TOKEN ALPN IDLE  a WebSocket client (the `websockets` library); prints what it saw as JSON
h2settings PORT CA         the proxy's HTTP/2 SETTINGS over TLS (python `h2`), as JSON
"""
import asyncio
import json
import socket
import ssl
import sys


async def serve():
    from websockets.asyncio.server import serve as ws_serve

    async def echo(ws):
        async for msg in ws:
            if msg == "whoami":
                h = ws.request.headers
                await ws.send(json.dumps({"user": h.get("X-Auth-Username"),
                                          "authorization": h.get("Authorization")}))
            else:
                await ws.send(msg)

    async def sse(reader, writer):
        # The request head (no body); then three events: one at once, the next after a second.
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for i in range(3):
                data = f"id: {i}\ndata: tick {i}\n\n".encode()
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
                await asyncio.sleep(1.0 if i == 0 else 0.2)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            pass  # the client stopped reading (a test cuts a stream short)
        writer.close()

    ws_server = await ws_serve(echo, "127.0.0.1", 0)
    sse_server = await asyncio.start_server(sse, "127.0.0.1", 0)
    ws_port = ws_server.sockets[0].getsockname()[1]
    sse_port = sse_server.sockets[0].getsockname()[1]
    print(ws_port, sse_port, flush=True)
    await asyncio.Event().wait()


async def ws_client(url, ca, token, alpn, idle):
    import websockets
    from websockets.asyncio.client import connect

    ctx = None
    if url.startswith("wss:"):
        ctx = ssl.create_default_context(cafile=ca)
        if alpn != "-":
            ctx.set_alpn_protocols(alpn.split(","))
    headers = {"Authorization": f"Bearer {token}"} if token != "-" else {}
    out = {}
    try:
        async with connect(url, ssl=ctx, additional_headers=headers, open_timeout=5) as ws:
            if ctx is not None:
                out["alpn"] = ws.transport.get_extra_info("ssl_object").selected_alpn_protocol()
            await ws.send("hello")
            out["echo"] = await asyncio.wait_for(ws.recv(), 5)
            await asyncio.sleep(idle)
            await ws.send("again")
            out["echo2"] = await asyncio.wait_for(ws.recv(), 5)
            await ws.send("whoami")
            out["who"] = json.loads(await asyncio.wait_for(ws.recv(), 5))
    except websockets.exceptions.InvalidStatus as e:
        out["status"] = e.response.status_code
    except Exception as e:  # what failed, for the test to read
        out["error"] = repr(e)
    print(json.dumps(out), flush=True)


def h2settings(port, ca):
    import h2.connection
    import h2.events
    import h2.settings

    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                           server_hostname="localhost")
    conn = h2.connection.H2Connection()
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    settings = None
    while settings is None:
        data = sock.recv(65535)
        if not data:
            break
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.RemoteSettingsChanged):
                settings = {int(k): v.new_value for k, v in event.changed_settings.items()}
    code = int(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)
    print(json.dumps({"alpn": sock.selected_alpn_protocol(),
                      "enable_connect_protocol": (settings or {}).get(code, 0),
                      "max_concurrent_streams": (settings or {}).get(
                          int(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS))}), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "server":
        asyncio.run(serve())
    elif mode == "ws":
        url, ca, token, alpn, idle = sys.argv[2:7]
        asyncio.run(ws_client(url, ca, token, alpn, float(idle)))
    elif mode == "h2settings":
        h2settings(int(sys.argv[2]), sys.argv[3])
