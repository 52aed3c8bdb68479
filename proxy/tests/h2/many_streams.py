"""One HTTP/2 connection in cleartext (h2c, prior knowledge) for proxy/tests/h2_upstream_bound.rs:
sends STREAMS requests `POST PATH` at once, before the server's SETTINGS arrive (as an attacker
would: the client library's own stream limit is not yet known), each declaring a 100-byte body
of which only the first FIRST bytes come (on the first 100 streams, those the server may accept),
the rest never. Reads for at most HOLD seconds, then prints one JSON line: the responses
received (and how many of each status), the streams refused (RST_STREAM REFUSED_STREAM), and
after how many seconds from the first response the server closed the connection (null: not
within HOLD)."""

import json
import socket
import sys
import time

import h2.config
import h2.connection
import h2.errors
import h2.events


def main():
    host, port, streams, path, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    first = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    sock = socket.create_connection((host, port), timeout=20)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    for i in range(streams):
        stream_id = conn.get_next_available_stream_id()
        conn.send_headers(
            stream_id,
            [(":method", "POST"), (":path", path), (":scheme", "http"),
             (":authority", "localhost"), ("content-length", "100")],
            end_stream=False,
        )
        if first and i < 100:
            conn.send_data(stream_id, b"x" * first, end_stream=False)
    sock.sendall(conn.data_to_send())
    result = {"responses": 0, "statuses": {}, "refused": 0, "other_resets": 0, "closed_after": None}
    first_response = None
    started = time.monotonic()
    while time.monotonic() - started < hold:
        sock.settimeout(max(0.05, hold - (time.monotonic() - started)))
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        except OSError:
            data = b""
        if not data:
            if first_response is not None:
                result["closed_after"] = time.monotonic() - first_response
            break
        try:
            events = conn.receive_data(data)
        except Exception:
            events = []
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                result["responses"] += 1
                status = dict(event.headers).get(b":status", b"?").decode()
                result["statuses"][status] = result["statuses"].get(status, 0) + 1
                if first_response is None:
                    first_response = time.monotonic()
            elif isinstance(event, h2.events.StreamReset):
                if event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
                    result["refused"] += 1
                else:
                    result["other_resets"] += 1
        out = conn.data_to_send()
        if out:
            try:
                sock.sendall(out)
            except OSError:
                pass
    print(json.dumps(result), flush=True)


main()
