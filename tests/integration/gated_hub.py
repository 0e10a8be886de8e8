"""Hugging Face's gating in front of the olah mirror, which has none of its own.

huggingface.co answers a gated repository's file requests (``/<repo>/resolve/...``) without a token of
an account that accepted its terms with HTTP 401 (403 for a token without access) and
``X-Error-Code: GatedRepo``; its model info stays readable. This forwards every request to olah unchanged
and answers those requests of the gated repositories the same way unless ``Authorization: Bearer <token>``
carries the accepted token. It also records every Authorization header it saw, so a test can show the
token travelled only as that header.
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Gate(ThreadingHTTPServer):
    upstream: urllib.parse.SplitResult
    gated: frozenset[str]
    token: str
    seen_auth: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: _Gate

    def log_message(self, *_: object) -> None:  # quiet: the test reads olah's own log
        return

    def _repo_file_request(self) -> str | None:
        parts = urllib.parse.urlsplit(self.path).path.lstrip("/").split("/")
        if len(parts) > 3 and parts[2] == "resolve":
            return "/".join(parts[:2])
        return None

    def _forward(self) -> None:
        auth = self.headers.get("Authorization", "")
        if auth:
            self.server.seen_auth.append(auth)
        repo = self._repo_file_request()
        if repo in self.server.gated and auth != f"Bearer {self.server.token}":
            status = 403 if auth else 401
            body = f'{{"error": "Access to model {repo} is restricted."}}'.encode()
            self.send_response(status)
            self.send_header("X-Error-Code", "GatedRepo")
            self.send_header("X-Error-Message", f"Access to model {repo} is restricted.")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        up = self.server.upstream
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization")}
        conn.request(self.command, self.path, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for key, value in resp.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header(
            "Content-Length",
            str(len(data) if self.command != "HEAD" else resp.getheader("Content-Length") or 0),
        )
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = _forward
    do_HEAD = _forward


@contextmanager
def gated_hub(upstream: str, gated: set[str], token: str) -> Iterator[_Gate]:
    """A gate on a free loopback port in front of ``upstream`` (olah); yields the server (``.endpoint``)."""
    server = _Gate(("127.0.0.1", 0), _Handler)
    server.upstream = urllib.parse.urlsplit(upstream)
    server.gated = frozenset(gated)
    server.token = token
    server.seen_auth = []
    server.endpoint = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
