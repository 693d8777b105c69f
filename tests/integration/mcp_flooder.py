"""A hostile Streamable HTTP MCP server for the tests, written by hand (the SDK would not misbehave
like this): its one tool, `flood`, answers with an event stream that never ends, sending progress
notifications as fast as the client takes them; `cut()` counts the streams the client closed.
Initialize, the initialized notification and tools/list are answered as a plain server would."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TOOL = {"name": "flood", "description": "Never answers.", "inputSchema": {"type": "object"}}


class _Counter:
    def __init__(self) -> None:
        self.cut = 0
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    counter: _Counter

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:  # no server-initiated stream
        self.send_response(405)
        self.end_headers()

    def do_DELETE(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if "id" not in body:
            self.send_response(202)
            self.end_headers()
            return
        method = body["method"]
        if method == "initialize":
            result = {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "flooder", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [_TOOL]}
        elif method == "tools/call":
            self._flood()
            return
        else:
            result = {}
        self._json({"jsonrpc": "2.0", "id": body["id"], "result": result})

    def _json(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _flood(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        note = {"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": None, "progress": 1}}  # fmt: skip
        event = f"event: message\ndata: {json.dumps(note)}\n\n".encode()
        try:
            while True:
                self.wfile.write(event)
                self.wfile.flush()
        except OSError:  # the client went away
            with self.counter.lock:
                self.counter.cut += 1


class Flooder:
    """The server on a loopback port, in threads of this process."""

    def __init__(self) -> None:
        counter = _Counter()
        handler = type("Handler", (_Handler,), {"counter": counter})
        self._counter = counter
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def cut(self) -> int:
        """Streams the client closed."""
        with self._counter.lock:
            return self._counter.cut

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
