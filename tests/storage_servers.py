"""Real servers for the remote-storage tests (and bench/remote.py): an HTTP server with Range support serving a
directory, with counters and fault injection, and moto's S3-compatible server (the one s3fs's own tests use), each on
a free loopback port in a thread of the test process."""

from __future__ import annotations

import email.utils
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # (socketserver's 5 drops the SYNs of a client opening many connections at once: a
    # second's retransmission each, which real servers' backlogs do not cause)


class RangeServer:
    """Serves the files under ``root`` at ``url`` (``http://127.0.0.1:<port>/``): HEAD and GET with one byte range
    (206), an ETag of the file's inode, size and modification time, Last-Modified. ``bytes_sent``, ``gets`` and
    ``heads`` count what it served; :meth:`fail` makes the next requests fail (status 503, or the connection
    closed with ``drop``); :meth:`hold_range` and :meth:`fail_range` act on the GETs of one range start only.
    ``latency`` (seconds before each answer) and ``rate`` (bytes per second of each
    response) make loopback behave like a network link to a store (benchmarks)."""

    def __init__(self, root: str, *, latency: float = 0.0, rate: float | None = None):
        self.root = root
        self.latency = latency
        self.rate = rate
        self.bytes_sent = 0
        self.gets = 0
        self.heads = 0
        self._failures = 0
        self._drop = False
        self._gates: dict[int, threading.Event] = {}  # range start -> what its GETs wait for
        self._range_failures: dict[int, int] = {}  # range start -> GETs of it still to answer 503
        self.ranges: list[int] = []  # the start of every ranged GET, in order
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def fail(self, requests: int, *, drop: bool = False) -> None:
        """The next ``requests`` requests fail: a 503 response, or (``drop``) a connection closed unanswered."""
        with self._lock:
            self._failures, self._drop = requests, drop

    def hold_range(self, start: int, gate: threading.Event) -> None:
        """GETs of a range starting at ``start`` wait for ``gate`` before they are answered."""
        with self._lock:
            self._gates[start] = gate

    def fail_range(self, start: int, requests: int = 1) -> None:
        """The next ``requests`` GETs of a range starting at ``start`` are answered 503 (after any hold)."""
        with self._lock:
            self._range_failures[start] = requests

    def clear_ranges(self) -> None:
        """Ends every :meth:`hold_range` (what waits is let go) and :meth:`fail_range`."""
        with self._lock:
            gates, self._gates, self._range_failures = list(self._gates.values()), {}, {}
        for gate in gates:
            gate.set()

    def reset_counts(self) -> None:
        with self._lock:
            self.bytes_sent = self.gets = self.heads = 0

    def take_failure(self) -> str | None:
        with self._lock:
            if self._failures <= 0:
                return None
            self._failures -= 1
            return "drop" if self._drop else "503"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(owner: RangeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # (as servers do: a response's last small segment is not held for an ACK)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            del format, args

        def _file(self) -> tuple[str, os.stat_result] | None:
            path = os.path.join(owner.root, self.path.split("?")[0].lstrip("/"))
            try:
                info = os.stat(path)
            except OSError:
                return None
            return (path, info) if os.path.isfile(path) else None

        def _headers(self, info: os.stat_result, length: int) -> None:
            self.send_header("Content-Length", str(length))
            self.send_header("ETag", f'"{info.st_ino:x}-{info.st_size:x}-{info.st_mtime_ns:x}"')
            self.send_header("Last-Modified", email.utils.formatdate(info.st_mtime, usegmt=True))
            self.send_header("Accept-Ranges", "bytes")

        def _refuse(self) -> bool:
            match = _RANGE.match(self.headers.get("Range", "")) if self.command == "GET" else None
            if match:
                start = int(match.group(1))
                with owner._lock:
                    owner.ranges.append(start)
                    gate = owner._gates.get(start)
                    fails = owner._range_failures.get(start, 0)
                    owner._range_failures[start] = max(0, fails - 1)
                if gate is not None:
                    gate.wait()
                if fails:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
            failure = owner.take_failure()
            if failure == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return True
            if failure == "503":
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True
            return False

        def _begin(self, counter: str) -> tuple[str, os.stat_result] | None:
            """Counts the request; the file it names, or None when it was answered already (a failure, a 404)."""
            with owner._lock:
                setattr(owner, counter, getattr(owner, counter) + 1)
            if self._refuse():
                return None
            found = self._file()
            if found is None:
                self.send_error(404)
            return found

        def do_HEAD(self) -> None:
            found = self._begin("heads")
            if found is None:
                return
            self.send_response(200)
            self._headers(found[1], found[1].st_size)
            self.end_headers()

        def do_GET(self) -> None:
            found = self._begin("gets")
            if found is None:
                return
            if owner.latency:
                time.sleep(owner.latency)
            path, info = found
            start, end = 0, info.st_size
            match = _RANGE.match(self.headers.get("Range", ""))
            if match:
                start = int(match.group(1))
                end = min(end, int(match.group(2)) + 1) if match.group(2) else end
                if start >= info.st_size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{info.st_size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{info.st_size}")
            else:
                self.send_response(200)
            self._headers(info, end - start)
            self.end_headers()
            began = time.perf_counter()
            with open(path, "rb") as file:
                sent = 0
                while sent < end - start:  # (sendfile may send less)
                    step = end - start - sent if owner.rate is None else min(end - start - sent, 1 << 18)
                    sent += os.sendfile(self.wfile.fileno(), file.fileno(), start + sent, step)
                    if owner.rate is not None:  # (paced: never ahead of the rate)
                        time.sleep(max(0.0, began + sent / owner.rate - time.perf_counter()))
            with owner._lock:
                owner.bytes_sent += end - start

    return Handler


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def moto_s3() -> Iterator[dict[str, Any]]:
    """moto's S3 server on a free port; yields the s3fs storage options that reach it."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }
    finally:
        server.stop()
