"""gRPC through the proxy, with grpcio's generic handlers (no generated code).

`echo.py server [CERT KEY]` serves test.Echo and test.Admin over h2c (over TLS with CERT and
KEY) on a free port and prints the port.
`echo.py client TARGET [CA]` calls them through the proxy (TLS when CA is given) and prints one
JSON object with what each call saw.
"""

import json
import queue
import sys
import threading
import time
from concurrent import futures

import grpc


def serve(tls):
    def unary(request, context):
        context.set_trailing_metadata((("x-trailer", "kept"),))
        user = dict(context.invocation_metadata()).get("x-auth-username", "")
        return b"echo:" + request + b":" + user.encode()

    def server_stream(request, context):
        for i in range(3):
            yield b"tick%d" % i
            time.sleep(0.5)
        context.set_trailing_metadata((("x-trailer", "stream"),))

    def client_stream(requests, context):
        return b"+".join(requests)

    def bidi(requests, context):
        for r in requests:
            yield b"pong:" + r

    def admin(request, context):
        return b"admin"

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "test.Echo",
                {
                    "Unary": grpc.unary_unary_rpc_method_handler(unary),
                    "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
                    "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
                    "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
                },
            ),
            grpc.method_handlers_generic_handler(
                "test.Admin", {"Do": grpc.unary_unary_rpc_method_handler(admin)}
            ),
        )
    )
    if tls:
        cert, key = (open(f, "rb").read() for f in tls)
        creds = grpc.ssl_server_credentials(((key, cert),))
        port = server.add_secure_port("127.0.0.1:0", creds)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def code_of(fn):
    try:
        fn()
        return "OK"
    except grpc.RpcError as e:
        return e.code().name


def client(target, ca):
    if ca:
        creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
        channel = grpc.secure_channel(
            target, creds, options=(("grpc.ssl_target_name_override", "localhost"),)
        )
    else:
        channel = grpc.insecure_channel(target)
    read = (("authorization", "Bearer read"),)
    out = {}

    unary = channel.unary_unary("/test.Echo/Unary")
    resp, call = unary.with_call(b"hi", metadata=read, timeout=5)
    out["unary"] = resp.decode()
    out["unary_trailer"] = dict(call.trailing_metadata()).get("x-trailer")

    # Server streaming: each message arrives as sent (0.5 s apart), not at the end.
    start = time.time()
    arrivals = []
    stream = channel.unary_stream("/test.Echo/ServerStream")(b"", metadata=read, timeout=5)
    for msg in stream:
        arrivals.append((msg.decode(), round(time.time() - start, 2)))
    out["server_stream"] = arrivals
    out["server_stream_trailer"] = dict(stream.trailing_metadata()).get("x-trailer")

    out["client_stream"] = (
        channel.stream_unary("/test.Echo/ClientStream")(
            iter([b"a", b"b", b"c"]), metadata=read, timeout=5
        ).decode()
    )

    # Ping-pong: each request is sent only once the previous answer came back, so a proxy that
    # held either direction's body would stall the call until its deadline.
    answers = queue.Queue()

    def pings():
        for i in range(3):
            yield b"%d" % i
            answers.get(timeout=5)

    pongs = []
    for msg in channel.stream_stream("/test.Echo/Bidi")(pings(), metadata=read, timeout=10):
        pongs.append(msg.decode())
        answers.put(msg)
    out["bidi"] = pongs

    out["no_token"] = code_of(lambda: unary(b"x", timeout=5))
    out["bad_token"] = code_of(
        lambda: unary(b"x", metadata=(("authorization", "Bearer nope"),), timeout=5)
    )
    out["wrong_scope"] = code_of(
        lambda: channel.unary_unary("/test.Admin/Do")(b"x", metadata=read, timeout=5)
    )
    out["unrouted"] = code_of(
        lambda: channel.unary_unary("/test.Other/Do")(b"x", metadata=read, timeout=5)
    )
    try:
        unary(b"x", timeout=5)
    except grpc.RpcError as e:
        out["no_token_message"] = e.details()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2:4])
    else:
        client(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
