#!/usr/bin/env python3
"""creditloop-demo-backend answers every status a request asks for, framed as HTTP/1.1 says.

Usage: test_demo_backend.py --backend PATH

For every final status, 200 to 599, one connection carries two pipelined requests: `?status=S`,
then a plain one with `Connection: close`. The first answer must be S with the body HTTP allows
it (none for 204 and 304, and no Content-Length on a 204; an empty one for 205; otherwise
exactly Content-Length bytes) and the headers its status requires (WWW-Authenticate on a 401,
Allow on a 405, Proxy-Authenticate on a 407, Upgrade on a 426, Content-Range on a 206), with its
X-Cost; the second answer must begin right where the first ends, which fails whenever a body was
sent that the framing did not announce. HEAD gets the headers without a body. A 1xx (interim,
never a final answer), a status out of range and one that is not a whole number are refused with
a 400 that says so. The backend is still serving at the end and stops cleanly on SIGTERM.
"""
import argparse
import signal
import socket
import subprocess
import sys


def exchange(port, first, method="GET"):
    """Sends `first` then a plain request on one connection; returns every byte answered."""
    payload = (f"{method} {first} HTTP/1.1\r\nHost: t\r\n\r\n"
               "GET /next HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def split_head(data, what):
    """(status, {lower-case name: value}, the bytes after the head)."""
    end = data.find(b"\r\n\r\n")
    assert end >= 0, f"{what}: no complete response head in {data[:200]!r}"
    lines = data[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    assert parts[0] == "HTTP/1.1" and len(parts) >= 2, f"{what}: status line {lines[0]!r}"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        assert name.lower() not in headers, f"{what}: {name} twice"
        headers[name.lower()] = value.strip()
    return int(parts[1]), headers, data[end + 4:]


def check_status(port, status, method="GET"):
    what = f"{method} ?status={status}"
    data = exchange(port, f"/any/path?wait_ms=0&status={status}", method)
    assert data, f"{what}: the connection closed without an answer (did the backend die?)"
    got, headers, rest = split_head(data, what)
    assert got == status, f"{what}: answered {got}"
    assert "transfer-encoding" not in headers, f"{what}: {headers}"
    assert float(headers.get("x-cost", "nan")) >= 0, f"{what}: X-Cost {headers.get('x-cost')!r}"
    if status == 204:
        assert "content-length" not in headers, f"{what}: a 204 has no Content-Length: {headers}"
    if method == "HEAD" or status in (204, 304):
        body_length = 0
    else:
        assert "content-length" in headers, f"{what}: no Content-Length: {headers}"
        body_length = int(headers["content-length"])
        if status == 205:
            assert body_length == 0, f"{what}: a 205 has no content: {headers}"
        else:
            assert body_length > 0, f"{what}: the body went missing: {headers}"
    required = {401: "www-authenticate", 405: "allow", 407: "proxy-authenticate",
                426: "upgrade", 206: "content-range"}
    if status in required:
        assert headers.get(required[status]), f"{what}: {required[status]} missing: {headers}"
    if status == 206 and method == "GET":
        assert headers["content-range"] == f"bytes 0-{body_length - 1}/{body_length}", headers
    body, rest = rest[:body_length], rest[body_length:]
    assert len(body) == body_length, f"{what}: body {body!r}, Content-Length {body_length}"
    assert rest.startswith(b"HTTP/1.1 200 "), (
        f"{what}: after {body_length} body bytes the next answer should begin, got {rest[:80]!r}")
    nxt, next_headers, next_rest = split_head(rest, f"{what}, then /next")
    assert nxt == 200 and len(next_rest) == int(next_headers["content-length"]), (
        f"{what}, then /next: {nxt} {next_headers} {next_rest!r}")


def check_refused(port, value, expected):
    what = f"?status={value}"
    data = exchange(port, f"/x?status={value}")
    assert data, f"{what}: the connection closed without an answer"
    got, headers, rest = split_head(data, what)
    body = rest[:int(headers["content-length"])].decode()
    assert got == 400 and expected in body, f"{what}: {got} {body!r}"
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    args = ap.parse_args()
    proc = subprocess.Popen([args.backend, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on" in line, (line, proc.stderr.read() if proc.poll() else "")
        port = int(line.rsplit(":", 1)[1])
        # The bodiless ones first: a backend that cannot frame them fails here, by name.
        order = [204, 304, 205] + [s for s in range(200, 600) if s not in (204, 304, 205)]
        for status in order:
            check_status(port, status)
        for status in (200, 204, 206, 304, 404, 503):
            check_status(port, status, method="HEAD")
        for value in (100, 101, 103, 199):
            body = check_refused(port, value, "interim")
            if value == 101:
                print(f"?status=101: {body.strip()}")
        for value in (0, 600, 1000, "abc", "", "204.5", "-204", "2e2"):
            body = check_refused(port, value, "status: must be a final status")
            if value == "2e2":
                print(f"?status=2e2: {body.strip()}")
        assert proc.poll() is None, "the backend exited"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read()
        print("demo backend: statuses 200 to 599 framed, HEAD without bodies, 1xx and invalid "
              "statuses refused")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
