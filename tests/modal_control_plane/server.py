"""The test control plane as a server: both gRPC services on one 127.0.0.1 port, run in a thread
with its own event loop so that blocking and async SDK calls from tests both work.

The control plane hands out its own address as the task command router's URL (plain http, which
the SDK accepts only on loopback), so one port serves every gRPC call the SDK makes; volume blocks
move over HTTP through a second loopback port (`blocks`), run in the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from grpclib.server import Server
from modal_proto import api_pb2

from .api import ModalClientServicer
from .blocks import BlockServer
from .deployed import FunctionCallRecord
from .functions import deploy
from .isolation import usable_bwrap
from .router import TaskCommandRouterServicer
from .sandboxes import SandboxRecord
from .state import ImageRecord, SnapshotFaults, State
from .volume_store import VolumeRecord

T = TypeVar("T")


class ControlPlane:
    """A Modal control plane for tests. `start()` it, point the SDK at `sdk_env()`, `stop()` it."""

    def __init__(
        self,
        root: Path,
        *,
        mapped_prefixes: tuple[str, ...] = ("/workspace", "/run/mwc"),
        token_id: str = "ak-test-token-id",
        token_secret: str = "as-test-token-secret",
        isolate: bool = True,
    ) -> None:
        self.root = root
        self.state = State(
            root=root / "sb",
            token_id=token_id,
            token_secret=token_secret,
            mapped_prefixes=mapped_prefixes,
            bwrap=usable_bwrap() if isolate else None,
        )
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Server | None = None
        self._blocks = BlockServer(self.state)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        self.state.root.mkdir(parents=True, exist_ok=True)
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to start() below
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="modal-control-plane", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise RuntimeError("the test control plane did not start") from failure[0]
        return self

    async def _serve(self) -> None:
        self._server = Server(
            [ModalClientServicer(self.state), TaskCommandRouterServicer(self.state)]
        )
        await self._server.start("127.0.0.1", 0)
        sockets = self._server._server.sockets if self._server._server else ()
        self.port = sockets[0].getsockname()[1]
        self.state.router_url = self.url
        self.state.volumes.block_url = await self._blocks.start()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        for record in list(self.state.sandboxes.values()):
            record.finish(
                api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_TERMINATED),
                exit_snapshot=False,
            )
        await asyncio.gather(
            *(p.close() for r in self.state.sandboxes.values() for p in r.all_processes()),
            return_exceptions=True,
        )
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self._blocks.stop()
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the SDK's view ----------------------------------------------------------------------

    @property
    def isolated(self) -> bool:
        """Whether sandbox processes run in bubblewrap and see real container paths."""
        return self.state.bwrap is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def sdk_env(self) -> dict[str, str]:
        """The environment that points the Modal SDK at this control plane."""
        config = self.root / "modal.toml"
        config.touch()
        return {
            "MODAL_SERVER_URL": self.url,
            "MODAL_TOKEN_ID": self.state.token_id,
            "MODAL_TOKEN_SECRET": self.state.token_secret,
            "MODAL_CONFIG_PATH": str(config),
        }

    # -- inspection and setup (run on the control plane's loop) ------------------------------

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the control plane's loop, where its state lives, and return its result."""
        assert self._loop is not None, "the control plane is not running"

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def calls(self) -> Counter[str]:
        """How many times each RPC was called so far, by name (both services)."""
        return self.call(lambda: Counter(self.state.calls))

    @property
    def unimplemented(self) -> list[str]:
        return self.call(lambda: list(self.state.unimplemented))

    def sandbox(self, sandbox_id: str) -> SandboxRecord:
        return self.call(lambda: self.state.sandbox(sandbox_id))

    def sandboxes(self) -> list[SandboxRecord]:
        return self.call(lambda: list(self.state.sandboxes.values()))

    def add_secret(self, name: str, env: dict[str, str]) -> None:
        self.call(lambda: self.state.secrets.__setitem__(name, dict(env)))

    def deploy_function(
        self, app: str, name: str, behaviour: Callable[..., object], **options: object
    ) -> str:
        """Deploy fake function `app/name`: each call runs `behaviour(*args, **kwargs)` on the
        control plane's loop (it may be async; what it raises is the call's failure; a
        `functions.RawOutput` answers with exactly those bytes). Returns the function's id."""
        return self.call(lambda: deploy(self.state, app, name, behaviour, **options).function_id)

    def function_calls(self) -> list[FunctionCallRecord]:
        return self.call(lambda: list(self.state.functions.calls.values()))

    def add_volume(self, name: str) -> None:
        def add() -> None:
            if self.state.volumes.named(name) is None:
                self.state.volumes.create(name, f"vo-{name}")

        self.call(add)

    def volume(self, name: str) -> VolumeRecord | None:
        """The volume as the control plane keeps it (files as block digests, directories, the
        versions its lookups asked for), None when there is none by that name."""
        return self.call(lambda: self.state.volumes.named(name))

    def volume_files(self, name: str) -> dict[str, bytes]:
        """Every file in the volume by path (relative, as listed), with its bytes."""

        def files() -> dict[str, bytes]:
            volumes = self.state.volumes
            record = volumes.named(name)
            if record is None:
                raise KeyError(f"no volume named {name!r}")
            return {path: volumes.contents(record, path) for path in sorted(record.files)}

        return self.call(files)

    def publish_image(self, tag: str, image_id: str = "im-published") -> str:
        """Make `Image.from_name(tag)` (and `Image.from_id(image_id)`) resolve; returns the id."""

        def publish() -> str:
            self.state.images.setdefault(image_id, ImageRecord(image_id))
            self.state.image_tags[tag if ":" in tag else f"{tag}:latest"] = image_id
            return image_id

        return self.call(publish)

    # -- what happens to sandboxes and images at Modal ----------------------------------------

    def expire_snapshots(self) -> list[str]:
        """Every filesystem snapshot image taken so far (exit snapshots too) expires at once, as
        its TTL passing would at Modal: opening one, or creating a sandbox from it, fails
        NOT_FOUND. Returns their ids."""

        def expire() -> list[str]:
            expired = []
            for record in self.state.images.values():
                if record.snapshot is not None:
                    record.expired = True
                    expired.append(record.image_id)
            return expired

        return self.call(expire)

    def start_delay(self, seconds: float) -> None:
        """New sandboxes' containers take this long to start (0: at once)."""
        self.call(lambda: setattr(self.state, "start_delay", seconds))

    def snapshot_faults(self, *, delay: float = 0.0, end_sandbox: bool = False) -> None:
        """How the next filesystem snapshots go wrong (see `SnapshotFaults`); no arguments:
        they go right again."""
        faults = SnapshotFaults(delay=delay, end_sandbox=end_sandbox)
        self.call(lambda: setattr(self.state, "snapshot_faults", faults))

    def forget_ended_sandboxes(self) -> int:
        """Every ended sandbox is no longer listed or found by name, as Modal may do after a
        while it does not document; answers how many."""

        def forget() -> int:
            ended = [r for r in self.state.sandboxes.values() if not r.running]
            for record in ended:
                record.forgotten = True
            return len(ended)

        return self.call(forget)

    def end_sandbox(
        self,
        sandbox_id: str,
        status: api_pb2.GenericResult.GenericStatus.ValueType,
        *,
        exception: str = "",
    ) -> None:
        """The sandbox ends as Modal would end it (`GenericResult.GENERIC_STATUS_…`: an OOM
        kill, a terminate from the dashboard), exit snapshot and all."""
        result = api_pb2.GenericResult(status=status, exception=exception)
        self.call(lambda: self.state.sandbox(sandbox_id).finish(result))

    def image(self, image_id: str) -> ImageRecord | None:
        """The image as the control plane keeps it (expired ones too), None when deleted."""
        return self.call(lambda: self.state.images.get(image_id))
