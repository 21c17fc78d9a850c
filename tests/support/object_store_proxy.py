"""An HTTP proxy in front of the tests' S3 server (s3proxy) that makes it misbehave as some servers do: a real server
behind it, a real network hop. `ignore_conditional_puts` drops `If-None-Match` before forwarding, as a server that
does not honour conditional PUTs answers them (the PUT made, replacing what was there); `conflicts` forwards that
many conditional PUTs and then answers each 409 ConditionalRequestConflict instead of the server's answer, as AWS S3
may answer a conditional write that met another (here: after the object was written, the worst case)."""

import http.client
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
_CONFLICT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ConditionalRequestConflict</Code>'
    b"<Message>A conflicting operation occurred. If using PutObject you can retry the request.</Message></Error>"
)


@dataclass
class Misbehaviour:
    ignore_conditional_puts: bool = False
    conflicts: int = 0  # conditional PUTs still to answer 409 once forwarded
    conflicts_answered: int = 0
    conditional_puts: int = 0  # seen


@contextmanager
def misbehaving(upstream: str, misbehaviour: Misbehaviour):
    """A proxy on 127.0.0.1 (a port of its own) to `upstream` (http://host:port) for the block: its URL."""
    target = urlparse(upstream)
    lock = threading.Lock()

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet: the tests' output is theirs
            pass

        def body(self) -> bytes | None:
            """The request's body, whole: forwarded with its length (HTTP's chunked framing taken off)."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline().strip():  # trailers, up to the blank line
                    pass
                return b"".join(chunks)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else None

        def forward(self) -> None:
            body = self.body()
            conditional = self.command == "PUT" and "If-None-Match" in self.headers
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if conditional and misbehaviour.ignore_conditional_puts:
                headers = {k: v for k, v in headers.items() if k.lower() != "if-none-match"}
            upstream_connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            try:
                upstream_connection.request(self.command, self.path, body=body, headers=headers)
                answer = upstream_connection.getresponse()
                status, answer_headers, data = answer.status, answer.getheaders(), answer.read()
            finally:
                upstream_connection.close()
            with lock:
                misbehaviour.conditional_puts += conditional
                conflict = conditional and misbehaviour.conflicts > 0
                if conflict:
                    misbehaviour.conflicts -= 1
                    misbehaviour.conflicts_answered += 1
            if conflict:
                status, answer_headers, data = 409, [("Content-Type", "application/xml")], _CONFLICT
            self.send_response(status)
            head = self.command == "HEAD"  # its length is the object's, with no body
            for name, value in answer_headers:
                if name.lower() not in _HOP_BY_HOP and (head or name.lower() != "content-length"):
                    self.send_header(name, value)
            if not head:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="object-store-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
