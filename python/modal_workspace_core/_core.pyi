"""Type stubs for the compiled core, `modal_workspace_core._core`. Kept in step with `src/`."""

from collections.abc import Awaitable
from typing import Any

__version__: str

class PolicyError(ValueError):
    """An input was refused by a policy.

    The message says what was wrong and quotes at most a short prefix of the input; `rule` is a
    stable name of the rule that failed (for example `"ref.double-dot"`).
    """

    rule: str

# --- the event ring -------------------------------------------------------------------------

class Page:
    """A page of events read from an `EventRing` after a cursor."""

    @property
    def events(self) -> list[dict[str, Any]]:
        """Events with `seq > cursor` (or from `first_seq` when the cursor expired), oldest
        first, as JSON-ready dicts: `seq`, `timestamp`, `type`, then `data` (text) or
        `data_b64` (bytes that are not UTF-8) and any fields. A coalesced event also has
        `seq_start`, the first seq it covers."""
    @property
    def next_cursor(self) -> int:
        """The last seq returned, or the cursor when none was: pass it to the next read."""
    @property
    def has_more(self) -> bool:
        """More events existed after this page when it was read."""
    @property
    def first_seq(self) -> int:
        """The oldest seq the ring still keeps (`last seq + 1` while it is empty)."""
    @property
    def cursor_expired(self) -> bool:
        """Events after the cursor were evicted; the page continues from `first_seq`."""
    @property
    def dropped_events(self) -> int:
        """How many events between the cursor and `first_seq` were lost to this reader."""
    @property
    def dropped_bytes(self) -> int:
        """Their encoded bytes: exact unless the reader is more than 65 536 evicted events
        behind, where it is a lower bound."""
    @property
    def closed(self) -> bool:
        """The producer has finished: no event will follow the ring's last one."""
    def to_json(self) -> str:
        """The page as one JSON object, never longer than the read's (raised) `max_bytes`."""
    def __len__(self) -> int: ...

class EventRing:
    """A stream's events numbered `seq = 1, 2, 3, …`, bounded in encoded bytes (and optionally
    in count); the oldest are evicted first, never the newest. Share it between threads and
    tasks freely.

    Raises `PolicyError` (a `ValueError`) when `max_bytes` or `max_events` is not positive.
    """

    def __init__(self, max_bytes: int, max_events: int | None = None) -> None: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def max_events(self) -> int | None: ...
    @property
    def closed(self) -> bool:
        """`close()` was called."""
    @property
    def last_seq(self) -> int:
        """The newest seq appended (0 before the first event)."""
    def append(self, type: str, data: bytes | None = None, **fields: Any) -> int:
        """Appends an event and returns the last seq assigned so far.

        `type` is one of status, stdout, stderr, error, exit, fs, metrics, progress. Output
        (`stdout`, `stderr`) is decoded incrementally per stream: a character cut by the end of
        `data` is held back (at most 3 bytes) until the next append of that stream, so an
        append may add no event. Data larger than 16 KiB becomes consecutive events. Other
        types take `fields` (JSON-like values) merged at the top level of the event; the keys
        seq, seq_start, timestamp, type, data and data_b64 are refused, as are fields on
        output events. An `exit` event first flushes what the output streams held back.
        Raises `PolicyError` for an unknown type, bad fields, or a closed ring.
        """
    def append_many(self, type: str, chunks: list[bytes]) -> int:
        """Appends each chunk as `append(type, chunk)` would, under one lock with one wake-up."""
    def close(self) -> None:
        """Ends the stream: flushes held-back partial characters (as `data_b64`), wakes every
        waiter, and refuses later appends. Closing twice does nothing."""
    def read(
        self, cursor: int, max_events: int = 100, max_bytes: int = 65536, coalesce: bool = False
    ) -> Page:
        """Reads the events after `cursor` (0 = from the start).

        At most `max_events` events (lowered to 10 000) and `max_bytes` of page JSON; budgets
        below 32 KiB are raised to 32 KiB so that any event fits and every read makes progress.
        With `coalesce`, adjacent text events of one output stream merge into one (`seq` = the
        last, `seq_start` = the first) and `max_events` counts merged events. Raises
        `PolicyError` if the cursor is past the last event or `max_events` < 1.
        """
    def wait(self, cursor: int, timeout: float) -> bool:
        """Blocks (without the GIL) until an event after `cursor` exists or the ring is closed
        (True), or `timeout` seconds pass (False). `timeout` must be from 0 to 86 400."""
    def wait_async(self, cursor: int, timeout: float) -> Awaitable[bool]:
        """`wait` as an awaitable, for asyncio code."""

def _drain_async_runtime(timeout: float) -> None:
    """Lets in-flight `wait_async` calls finish before the interpreter exits (atexit hook)."""
