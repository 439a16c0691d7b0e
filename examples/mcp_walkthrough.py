"""The whole job through MCP with the official `mcp` client: create a workspace, clone a
repository, run its tests following the cursor loop to `done`, send stdin, cancel, edit a file,
read the diff, terminate.

    MODAL_WORKSPACE_MCP_TOKEN=… python examples/mcp_walkthrough.py http://127.0.0.1:8000/mcp/

The gateway decides where `OWNER/REPO` is cloned from (`MODAL_WORKSPACE_GITHUB_URL`); the
README's offline walkthrough points it at `examples/demo_git_server.py`, which needs
`--use-github-token`: it stands for a private repository.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


class Tools:
    """Calls tools by name and returns their structured output; an error result raises."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def __call__(self, name: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, args)
        if result.is_error:
            raise RuntimeError(f"{name}: {result.content[0].text}")  # type: ignore[union-attr]
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    async def follow(self, ws: str, exec_id: str) -> dict[str, Any]:
        """The cursor loop: start at 0, pass next_cursor back, stop when done is true. Prints
        the output as it arrives and returns the last page."""
        cursor, lines = 0, Lines()
        while True:
            page = await self(
                "workspace_realtime_exec_events",
                workspace_id=ws,
                exec_id=exec_id,
                cursor=cursor,
                wait_seconds=25,
            )
            for event in page["events"]:
                text = event.get("data")
                if text is None and "data_b64" in event:
                    text = base64.b64decode(event["data_b64"]).decode(errors="replace")
                if text and event["type"] in ("stdout", "stderr"):
                    lines.feed(text)
            cursor = page["next_cursor"]
            if page["done"]:
                lines.flush()
                return page


class Lines:
    """Prints output line by line; a progress line that rewrites itself with carriage returns
    (git's) shows only its last state."""

    def __init__(self) -> None:
        self.partial = ""

    def feed(self, text: str) -> None:
        *complete, self.partial = (self.partial + text).split("\n")
        for line in complete:
            self._print(line)

    def flush(self) -> None:
        if self.partial:
            self._print(self.partial)
            self.partial = ""

    @staticmethod
    def _print(line: str) -> None:
        print(f"  | {line.rstrip(chr(13)).rsplit(chr(13), 1)[-1].rstrip()}")


async def walkthrough(url: str, token: str, github_token: bool) -> None:
    # 60 s for every step of a request: a long-poll (wait_seconds=25) is silent until its page
    # is ready, past httpx2's default of 5 s.
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        call = Tools(client)
        names = [tool.name for tool in (await client.list_tools()).tools]
        print(f"{len(names)} tools: {', '.join(names[:4])}, …")

        ws = (await call("workspace_create", idempotency_key="mcp-walkthrough"))["workspace_id"]
        print(f"workspace_create -> {ws}")
        try:
            clone = await call(
                "repo_clone",
                workspace_id=ws,
                repository="octocat/hello",
                use_github_token=github_token,
            )
            print(f"repo_clone -> {clone['exec_id']} into {clone['destination']}")
            page = await call.follow(ws, clone["exec_id"])
            print(f"clone {page['state']}, returncode {page['returncode']}")

            tests = await call(
                "workspace_realtime_exec_start",
                workspace_id=ws,
                command="python3 -m unittest -v 2>&1",
                workdir="hello",
            )
            page = await call.follow(ws, tests["exec_id"])
            print(f"tests {page['state']}, returncode {page['returncode']}")

            greet = await call(
                "workspace_realtime_exec_start",
                workspace_id=ws,
                command='read -r name; echo "hello, $name"',
            )
            sent = await call(
                "workspace_realtime_exec_input",
                workspace_id=ws,
                exec_id=greet["exec_id"],
                data="Ada\n",
                eof=True,
            )
            print(f"sent {sent['accepted']} bytes of stdin")
            await call.follow(ws, greet["exec_id"])

            sleeper = await call(
                "workspace_realtime_exec_start", workspace_id=ws, command="sleep 600"
            )
            await call(
                "workspace_realtime_exec_cancel", workspace_id=ws, exec_id=sleeper["exec_id"]
            )
            page = await call.follow(ws, sleeper["exec_id"])
            print(f"sleep 600 {page['state']}, returncode {page['returncode']}")

            read = await call("file_read", workspace_id=ws, path="hello/hello.py")
            print(f"file_read hello/hello.py: {read['content']!r}")
            await call(
                "file_edit",
                workspace_id=ws,
                path="hello/hello.py",
                old="Hello, {name}!",
                new="Hello, {name}! Welcome.",
            )
            diff = await call("repo_diff", workspace_id=ws, destination="hello")
            print(diff["diff"].rstrip())
        finally:
            # Also when a step failed: a workspace left behind keeps running (and its key would
            # hand the next run this one, in whatever state it was left).
            done = await call("workspace_terminate", workspace_id=ws)
            print(f"workspace_terminate -> {json.dumps(done)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the server's MCP endpoint, ending in /mcp/")
    parser.add_argument(
        "--use-github-token",
        action="store_true",
        help="clone with the server's configured GitHub token (a private repository)",
    )
    args = parser.parse_args()
    token = os.environ.get("MODAL_WORKSPACE_MCP_TOKEN")
    if not token:
        print("set MODAL_WORKSPACE_MCP_TOKEN to the server's token", file=sys.stderr)
        return 2
    asyncio.run(walkthrough(args.url, token, args.use_github_token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
