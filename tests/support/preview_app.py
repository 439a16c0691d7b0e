"""A small app for a workspace to serve in the preview tests, on the standard library alone
(the workspace's python3 is the host's, which has no WebSocket package): `python3 preview_app.py
PORT` answers GET with what it was sent (JSON: path, host, origin, cookie, authorization), sets a
cookie for `/` on a domain, echoes a POST's body, redirects `/away` to `/landed`, and speaks
WebSocket (RFC 6455) on any path: it greets with `hello <path> <subprotocol>`, echoes text and
binary messages, answers pings and echoes a close."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.headers.get("Upgrade", "").lower() == "websocket":
            self.websocket()
            return
        if self.path == "/away":
            self.send_response(302)
            self.send_header("Location", "/landed")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        seen = {
            name: self.headers.get(name)
            for name in ("Host", "Origin", "Cookie", "Authorization", "Referer")
        }
        self.reply(json.dumps({"path": self.path, **seen}).encode(), "application/json")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.reply(self.rfile.read(length)[::-1], "application/octet-stream")

    def reply(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", "seen=1; Path=/; Domain=example.com; HttpOnly")
        self.send_header("Service-Worker-Allowed", "/")
        self.end_headers()
        self.wfile.write(body)

    def websocket(self) -> None:
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        offered = self.headers.get("Sec-WebSocket-Protocol", "")
        chosen = next((p.strip() for p in offered.split(",") if p.strip()), "")
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        if chosen:
            self.send_header("Sec-WebSocket-Protocol", chosen)
        self.end_headers()
        self.send_frame(1, f"hello {self.path} {chosen or '-'}".encode())
        while True:
            opcode, payload = self.read_frame()
            if opcode in (1, 2):
                self.send_frame(opcode, payload)
            elif opcode == 9:
                self.send_frame(10, payload)
            elif opcode == 8 or opcode is None:
                if opcode == 8:
                    self.send_frame(8, payload)
                self.close_connection = True
                return

    def read_frame(self) -> tuple[int | None, bytes]:
        head = self.rfile.read(2)
        if len(head) < 2:
            return None, b""
        opcode, length = head[0] & 0x0F, head[1] & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", self.rfile.read(2))
        elif length == 127:
            (length,) = struct.unpack(">Q", self.rfile.read(8))
        mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = self.rfile.read(length)
        return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    def send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            head = struct.pack(">BB", 0x80 | opcode, n)
        elif n < 1 << 16:
            head = struct.pack(">BBH", 0x80 | opcode, 126, n)
        else:
            head = struct.pack(">BBQ", 0x80 | opcode, 127, n)
        self.wfile.write(head + payload)
        self.wfile.flush()


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
