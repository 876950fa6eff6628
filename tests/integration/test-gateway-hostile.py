#!/usr/bin/env python3
"""Hostile HTTP/1.1 clients against a running gateway, over raw sockets.

Each case sends bytes the way a broken or malicious client (or a desynchronised proxy)
would, and states the class of answer it must get: request-smuggling patterns from
RFC 9112 sections 6 and 11 and the published desync research, header, URL and JSON edge
cases, limits, and slow clients. After every case a fresh connection must still get
200 from GET /health, so a case cannot pass because the server fell over; the server's
pid is checked at the end for the same reason.

usage: test-gateway-hostile.py HOST PORT MODEL [PID]
Prints one line per case and ends with "N passed, N failed"; exits 1 on any failure.
"""
import json
import os
import re
import socket
import sys
import threading
import time

HOST, PORT, MODEL = sys.argv[1], int(sys.argv[2]), sys.argv[3]
PID = int(sys.argv[4]) if len(sys.argv) > 4 else 0
TIMEOUT = 10.0


def connect():
    s = socket.create_connection((HOST, PORT), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(s):
    """One response: (status, headers dict lower-cased, body bytes, rest) or None at EOF."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            return None if not buf else (0, {}, buf, b"")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(rest) < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
        return status, headers, rest[:n], rest[n:]
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                chunk = s.recv(65536)
                if not chunk:
                    return status, headers, body, b""
                rest += chunk
            line, rest = rest.split(b"\r\n", 1)
            size = int(line.split(b";")[0], 16)
            while len(rest) < size + 2:
                chunk = s.recv(65536)
                if not chunk:
                    return status, headers, body, b""
                rest += chunk
            body += rest[:size]
            rest = rest[size + 2:]
            if size == 0:
                return status, headers, body, rest
    # neither: the body runs to the connection's end
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        rest += chunk
    return status, headers, rest, b""


def closed_after(s, leftover, wait=3.0):
    """True when the server closes the connection (EOF or reset) within wait seconds
    without answering anything more with a 2xx: bytes after a refused request must never
    be served as a request of their own."""
    extra = leftover
    s.settimeout(wait)
    deadline = time.monotonic() + wait
    try:
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                return not re.search(rb"HTTP/1\.[01] 2[0-9][0-9]", extra)
            extra += chunk
    except ConnectionResetError:
        return not re.search(rb"HTTP/1\.[01] 2[0-9][0-9]", extra)
    except socket.timeout:
        pass
    return False


def exchange(data, chunks=None, delay=0.0, wait=3.0):
    """Sends data (or the list chunks, delay seconds apart); returns (status, headers,
    body, closed), closed when the server closed within wait seconds of its answer.
    status 0: no answer before the server closed."""
    s = connect()
    try:
        try:
            for i, part in enumerate(chunks or [data]):
                if i and delay:
                    time.sleep(delay)
                s.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            r = read_response(s)
        except ConnectionResetError:
            r = None
        except socket.timeout:
            return 0, {}, b"", False
        if r is None:
            return 0, {}, b"", True
        status, headers, body, rest = r
        return status, headers, body, closed_after(s, rest, wait)
    finally:
        s.close()


def alive():
    try:
        s = connect()
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        r = read_response(s)
        s.close()
        return r is not None and r[0] == 200
    except OSError:
        return False


passed = failed = 0


def report(name, ok, detail):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")
    sys.stdout.flush()


def matches(status, want):
    """want: a status (400; 0 is no answer at all), a class ("4xx"), or a list of them."""
    if isinstance(want, list):
        return any(matches(status, w) for w in want)
    if isinstance(want, str):
        return status // 100 == int(want[0])
    return status == want


def case(name, data, want, close=True, chunks=None, delay=0.0, param=None):
    """close: an answer other than 2xx must leave the connection closed. param: the JSON
    error must name this field."""
    status, headers, body, closed = exchange(data, chunks, delay, 3.0 if close else 0.2)
    ok = matches(status, want) and (closed or not close or status // 100 == 2)
    detail = f"got {status or 'no answer'}{' closed' if closed else ' open'}, want {want}{' closed' if close else ''}"
    if ok and param is not None:
        try:
            got = json.loads(body)["error"]["param"]
        except (ValueError, KeyError, TypeError):
            got = None
        ok = got == param
        detail += f"; param {got!r}, want {param!r}"
    if not alive():
        ok = False
        detail += "; GET /health failed afterwards"
    report(name, ok, detail)


def req(method, target, headers, body=b"", version=b"HTTP/1.1"):
    out = method + b" " + target + b" " + version + b"\r\n"
    for h in headers:
        out += h + b"\r\n"
    return out + b"\r\n" + body


H = b"Host: 127.0.0.1"
JSON = b"Content-Type: application/json"


def completion(body, extra=()):
    if isinstance(body, str):
        body = body.encode()
    return req(b"POST", b"/v1/completions", [H, JSON, b"Content-Length: %d" % len(body), *extra], body)


def prompt_body(**more):
    d = {"model": MODEL, "prompt": "In the beginning", "max_tokens": 2, "temperature": 0}
    d.update(more)
    return json.dumps(d)


GOOD = prompt_body().encode()

# ---- baselines: what a well-formed client gets --------------------------------------------
case("baseline GET /health", req(b"GET", b"/health", [H]), 200, close=False)
case("baseline completion", completion(GOOD), 200, close=False)
case("baseline chunked completion",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked"],
         b"%x\r\n%s\r\n0\r\n\r\n" % (len(GOOD), GOOD)), 200, close=False)
case("baseline HTTP/1.0 without Host", req(b"GET", b"/health", [], version=b"HTTP/1.0"), 200, close=True)


def two_requests(first):
    """first, then a GET /health on the same connection: the second must never be
    answered after a refused first (the bytes after a bad frame are not a request)."""
    return first + req(b"GET", b"/health", [H])


# ---- Content-Length (RFC 9112 6.3, CL.CL) -------------------------------------------------
for name, values in [
    ("two different Content-Length", [b"Content-Length: %d" % len(GOOD), b"Content-Length: %d" % (len(GOOD) + 1)]),
    ("two equal Content-Length headers", [b"Content-Length: %d" % len(GOOD)] * 2),
    ("Content-Length list", [b"Content-Length: %d, %d" % (len(GOOD), len(GOOD) + 1)]),
    ("Content-Length with a sign", [b"Content-Length: +%d" % len(GOOD)]),
    ("negative Content-Length", [b"Content-Length: -1"]),
    ("hex Content-Length", [b"Content-Length: 0x%x" % len(GOOD)]),
    ("empty Content-Length", [b"Content-Length: "]),
    ("Content-Length with inner space", [b"Content-Length: 1 0"]),
]:
    case(name, two_requests(req(b"POST", b"/v1/completions", [H, JSON, *values], GOOD)), 400)

# libmicrohttpd itself answers an overflowing Content-Length, as too large
case("Content-Length overflow",
     two_requests(req(b"POST", b"/v1/completions", [H, JSON, b"Content-Length: 18446744073709551617"], GOOD)),
     [400, 413])

# ---- Transfer-Encoding (CL.TE, TE.CL, TE.TE) ---------------------------------------------
SMUGGLED = b"0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
case("Transfer-Encoding with Content-Length (CL.TE)",
     req(b"POST", b"/v1/completions", [H, JSON, b"Content-Length: %d" % len(SMUGGLED), b"Transfer-Encoding: chunked"],
         SMUGGLED), 400)
case("Content-Length with Transfer-Encoding (TE.CL)",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked", b"Content-Length: 4"],
         b"5c\r\nGPOST / HTTP/1.1\r\n\r\n0\r\n\r\n"), 400)
case("unknown transfer coding", req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: gzip"], GOOD), 501)
case("obfuscated coding xchunked",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: xchunked"], SMUGGLED), 501)
case("chunked not the final coding",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked, gzip"], SMUGGLED), [400, 501])
case("unknown coding before chunked",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: gzip, chunked"], SMUGGLED), 501)
case("chunked twice", req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked, chunked"], SMUGGLED),
     400)
case("two Transfer-Encoding headers",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked", b"Transfer-Encoding: identity"],
         SMUGGLED), 400)
case("space before the colon (TE.TE)",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding : chunked"], SMUGGLED), 400)
case("obs-fold of Transfer-Encoding",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding:", b" chunked"], SMUGGLED), 400)
case("Transfer-Encoding in HTTP/1.0",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked"], SMUGGLED, version=b"HTTP/1.0"), 400)
case("chunk size overflow",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked"],
         b"10000000000000000000a\r\n" + GOOD + b"\r\n0\r\n\r\n"), "4xx")
case("chunk size not hex",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked"], b"zz\r\nab\r\n0\r\n\r\n"), "4xx")
case("huge chunk extension",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked"],
         b"%x;ext=%s\r\n%s\r\n0\r\n\r\n" % (len(GOOD), b"a" * 200000, GOOD)), "4xx")

# ---- Host (RFC 9112 3.2) -----------------------------------------------------------------
case("HTTP/1.1 without Host", req(b"GET", b"/health", []), 400)
case("two Host headers", req(b"GET", b"/health", [H, b"Host: other"]), 400)
case("Host with a space", req(b"GET", b"/health", [b"Host: a b"]), 400)

# ---- field lines (RFC 9110 5.1, 5.5; RFC 9112 5) ----------------------------------------
case("empty header name", req(b"GET", b"/health", [H, b": x"]), 400)
case("header name with a parenthesis", req(b"GET", b"/health", [H, b"X(y): z"]), 400)
case("header name with NUL", req(b"GET", b"/health", [H, b"X\0y: z"]), 400)
case("header value with NUL", req(b"GET", b"/health", [H, b"X-Y: a\0b"]), 400)
case("Transfer-Encoding value with NUL",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked\0x"], b"0\r\n\r\n"), "4xx")
case("header value with a bare CR", req(b"GET", b"/health", [H, b"X-Y: a\rb"]), 400)
case("header line without a colon", req(b"GET", b"/health", [H, b"NoColonHere"]), 400)
# RFC 9112 5.2: refuse, or replace the fold with spaces; libmicrohttpd 1.0 refuses
case("obs-fold continuation line", req(b"GET", b"/health", [H, b"X-Y: a", b"\tb"]), 400)

# ---- request line and URL -----------------------------------------------------------------
case("percent-encoded NUL in the path", req(b"GET", b"/health%00", [H]), 400)
case("percent-encoded NUL in the query", req(b"GET", b"/health?a=%00", [H]), 400)
case("space in the target", req(b"GET", b"/hea lth", [H]), ["4xx", 0])
case("control character in the target", req(b"GET", b"/health\x01", [H]), "4xx")
case("unknown HTTP version", req(b"GET", b"/health", [H], version=b"HTTP/9.9"), ["4xx", 505])
case("garbage request line", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 64 + b"\r\n\r\n", ["4xx", 0])

# ---- limits: 4xx, never 5xx, and the connection closed ---------------------------------
case("request line of 100 KiB", req(b"GET", b"/" + b"a" * 102400, [H]), "4xx")
case("one header of 100 KiB", req(b"GET", b"/health", [H, b"X-Big: " + b"a" * 102400]), "4xx")
case("5000 headers", req(b"GET", b"/health", [H] + [b"X-%d: y" % i for i in range(5000)]), "4xx")
case("body over the limit by Content-Length",
     req(b"POST", b"/v1/completions", [H, JSON, b"Content-Length: 1073741824"], b"{"), 413)
case("chunked body over the limit",
     req(b"POST", b"/v1/completions", [H, JSON, b"Transfer-Encoding: chunked"],
         b"".join(b"100000\r\n" + b" " * 0x100000 + b"\r\n" for _ in range(2)) + b"0\r\n\r\n"), 413)

# ---- JSON (RFC 8259): 400 on the connection kept alive, naming the field where there is one
JSON_CASES = [
    ("raw control character in a string", b'{"model":"%s","prompt":"a\x01b","max_tokens":2}' % MODEL.encode(), None),
    ("raw NUL in a string", b'{"model":"%s","prompt":"a\x00b","max_tokens":2}' % MODEL.encode(), None),
    ("raw NUL after the value", GOOD + b"\x00", None),
    ("trailing bytes after the value", GOOD + b" {}", None),
    ("two values", GOOD + GOOD, None),
    ("nesting 100000 deep", b'{"model":"%s","prompt":"a","x":%s%s}' % (MODEL.encode(), b"[" * 100000, b"]" * 100000),
     None),
    ("duplicate key", b'{"model":"%s","prompt":"a","prompt":"b","max_tokens":2}' % MODEL.encode(), "prompt"),
    ("duplicate key by escape", b'{"model":"%s","prompt":"a","\\u0070rompt":"b"}' % MODEL.encode(), "prompt"),
    ("lone surrogate escape", b'{"model":"%s","prompt":"\\ud800"}' % MODEL.encode(), None),
    ("single-quoted string", b"{'model':'%s'}" % MODEL.encode(), None),
    ("leading zero number", b'{"model":"%s","prompt":"a","max_tokens":02}' % MODEL.encode(), None),
    ("NaN", b'{"model":"%s","prompt":"a","temperature":NaN}' % MODEL.encode(), None),
    ("trailing comma", b'{"model":"%s","prompt":"a",}' % MODEL.encode(), None),
    ("'user' over its bound", prompt_body(user="u" * 100000).encode(), "user"),
    ("'stop' string over its bound", prompt_body(stop="s" * 100000).encode(), "stop"),
    ("'model' over its bound", b'{"model":"%s"}' % (b"m" * 100000), "model"),
]
for name, body, param in JSON_CASES:
    case("JSON: " + name, completion(body), 400, close=False, param=param)

# ---- slow clients: a slow sender and a silent one do not hold up anybody else ----------
case("headers sent one byte at a time", None, 200, close=False,
     chunks=[bytes([b]) for b in req(b"GET", b"/health", [H])], delay=0.01)


def silent_clients(n, seconds):
    socks = []
    for _ in range(n):
        try:
            s = connect()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        except OSError:
            break
    t0 = time.monotonic()
    ok = alive() and exchange(completion(GOOD))[0] == 200
    took = time.monotonic() - t0
    time.sleep(max(0.0, seconds - took))
    for s in socks:
        s.close()
    return ok, took


ok, took = silent_clients(32, 1.0)
report("32 silent half-open clients do not block a completion", ok, f"took {took:.1f} s")

# ---- the same server all along ------------------------------------------------------------
if PID:
    try:
        os.kill(PID, 0)
        same = True
    except OSError:
        same = False
    report("the server process is the one that started", same, f"pid {PID} is gone")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
