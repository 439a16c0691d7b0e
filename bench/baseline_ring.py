"""A straightforward pure-Python event ring: the baseline `ring_bench.py` measures against.

It does the work the Rust ring does, the obvious way: incremental UTF-8 decoding per stream
(base64 for bytes that are not UTF-8), one `json.dumps` per event at append time, eviction by
encoded bytes from a `collections.deque`, pages built from the kept JSON, and waiters woken by
an `asyncio.Condition` (async) or a `threading.Condition` (blocked threads).
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import itertools
import json
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

MAX_DATA = 16 * 1024
MIN_PAGE = 32 * 1024


def _timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class BaselineRing:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.events: deque[tuple[int, str]] = deque()
        self.bytes = 0
        self.last_seq = 0
        self.closed = False
        self.decoders: dict[str, Any] = {}
        self.cond = asyncio.Condition()
        self.thread_cond = threading.Condition()

    # --- appending -----------------------------------------------------------------------

    def _encode(self, kind: str, data: bytes) -> None:
        decoder = self.decoders.setdefault(kind, codecs.getincrementaldecoder("utf-8")())
        try:
            pieces: list[tuple[str, str]] = [("data", decoder.decode(data))]
        except UnicodeDecodeError:
            decoder.reset()
            pieces = [("data_b64", base64.b64encode(data).decode())]
        stamp = _timestamp()
        for key, value in pieces:
            for start in range(0, max(len(value), 1), MAX_DATA):
                chunk = value[start : start + MAX_DATA]
                if key == "data" and not chunk:
                    continue
                self.last_seq += 1
                event = {"seq": self.last_seq, "timestamp": stamp, "type": kind, key: chunk}
                encoded = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
                self.events.append((self.last_seq, encoded))
                self.bytes += len(encoded)
        while len(self.events) > 1 and self.bytes > self.max_bytes:
            self.bytes -= len(self.events.popleft()[1])

    async def append(self, kind: str, data: bytes) -> int:
        async with self.cond:
            self._encode(kind, data)
            self.cond.notify_all()
        return self.last_seq

    async def append_many(self, kind: str, chunks: list[bytes]) -> int:
        async with self.cond:
            for chunk in chunks:
                self._encode(kind, chunk)
            self.cond.notify_all()
        return self.last_seq

    def append_blocking(self, kind: str, data: bytes) -> int:
        """For readers that are threads: the same append, waking a `threading.Condition`."""
        with self.thread_cond:
            self._encode(kind, data)
            self.thread_cond.notify_all()
        return self.last_seq

    # --- reading and waiting -------------------------------------------------------------

    def read(self, cursor: int, max_events: int = 100, max_bytes: int = 65536) -> dict[str, Any]:
        budget = max(max_bytes, MIN_PAGE) - 256
        first = self.events[0][0] if self.events else self.last_seq + 1
        picked: list[str] = []
        used = 0
        skip = max(cursor + 1 - first, 0)
        for _seq, encoded in itertools.islice(self.events, skip, None):
            if len(picked) == max_events or used + len(encoded) + 1 > budget:
                break
            picked.append(encoded)
            used += len(encoded) + 1
        next_cursor = cursor + len(picked) if cursor >= first - 1 else first - 1 + len(picked)
        return {
            "events": picked,
            "next_cursor": next_cursor,
            "has_more": next_cursor < self.last_seq,
            "first_seq": first,
            "cursor_expired": cursor + 1 < first,
            "closed": self.closed,
        }

    @staticmethod
    def page_json(page: dict[str, Any]) -> str:
        head = '{"events":[' + ",".join(page["events"]) + "]"
        rest = {k: v for k, v in page.items() if k != "events"}
        return head + "," + json.dumps(rest, separators=(",", ":"))[1:]

    async def wait_async(self, cursor: int, timeout: float) -> bool:
        async with self.cond:
            try:
                await asyncio.wait_for(
                    self.cond.wait_for(lambda: self.last_seq > cursor or self.closed), timeout
                )
            except TimeoutError:
                return False
        return True

    def wait(self, cursor: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.thread_cond:
            return self.thread_cond.wait_for(
                lambda: self.last_seq > cursor or self.closed, deadline - time.monotonic()
            )
