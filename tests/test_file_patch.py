"""file_patch over the real local driver and agent: both formats add, update (several hunks
across files), move and delete; a patch whose third hunk does not apply changes nothing (every
file byte for byte, no file made or removed, no temporary file left); a path out of the
workspace is refused naming the field, whether it climbs out, is absolute, or passes through a
symlink a command made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.local.driver import LocalDriver
from modal_workspace_core.errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)

pytest.importorskip("modal_workspace_core.drivers.local.driver")

APP = "import os\n\n\ndef f():\n    return 1\n\n\ndef g():\n    return 2\n"
LIB = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n"

ENVELOPE = """*** Begin Patch
*** Add File: pkg/new.py
+print("new")
*** Update File: app.py
@@ def f():
-    return 1
+    return 10
@@ def g():
-    return 2
+    return 20
*** Update File: lib.txt
@@
 one
-two
+2
@@
 seven
-eight
+8
*** End of File
*** Update File: old/name.txt
*** Move to: moved/name.txt
@@
-before
+after
*** Delete File: gone.txt
*** End Patch
"""

UNIFIED = """diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1 @@
+print("new")
diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -3,4 +3,4 @@ import os

 def f():
-    return 1
+    return 10

@@ -7,3 +7,3 @@ def f():

 def g():
-    return 2
+    return 20
--- a/lib.txt
+++ b/lib.txt
@@ -1,3 +1,3 @@
 one
-two
+2
 three
@@ -6,3 +6,3 @@
 six
 seven
-eight
+8
diff --git a/old/name.txt b/moved/name.txt
similarity index 50%
rename from old/name.txt
rename to moved/name.txt
--- a/old/name.txt
+++ b/moved/name.txt
@@ -1 +1 @@
-before
+after
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
"""


@pytest.fixture
async def ws(tmp_path: Path) -> AsyncIterator[mwc.Workspace]:
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(settings=settings) as wss, wss.create() as ws:
        yield ws


async def seed(ws: mwc.Workspace) -> None:
    for path, content in {
        "app.py": APP,
        "lib.txt": LIB,
        "old/name.txt": "before\n",
        "gone.txt": "bye\n",
    }.items():
        await ws.file_write(path, content, create_parents=True)


async def tree(ws: mwc.Workspace) -> str:
    """Every entry under the root (hidden ones too) with its type and, for files, a digest."""
    listing = await ws.exec(
        "find . -mindepth 1 -printf '%y %p\\n' | sort; "
        "find . -type f -exec sha256sum {} + | sort -k 2"
    )
    assert listing.returncode == 0, listing.stderr
    return listing.stdout


async def content(ws: mwc.Workspace, path: str) -> str:
    return (await ws.file_read(path)).content


@pytest.mark.parametrize(("patch", "format"), [(ENVELOPE, "apply_patch"), (UNIFIED, "unified")])
async def test_both_formats_add_update_move_and_delete(
    ws: mwc.Workspace, patch: str, format: str
) -> None:
    await seed(ws)
    result = await ws.file_patch(patch)
    assert result.format == format
    assert await content(ws, "pkg/new.py") == 'print("new")\n'
    assert await content(ws, "app.py") == APP.replace("1\n", "10\n").replace("2\n", "20\n")
    assert await content(ws, "lib.txt") == LIB.replace("two", "2").replace("eight", "8")
    assert await content(ws, "moved/name.txt") == "after\n"
    for gone in ("old/name.txt", "gone.txt"):
        with pytest.raises(NotFoundError):
            await ws.file_read(gone)
    answered = [(f.path, f.action, f.to, f.hunks) for f in result.files]
    assert answered == [
        ("/workspace/pkg/new.py", "added", None, 0),
        ("/workspace/app.py", "updated", None, 2),
        ("/workspace/lib.txt", "updated", None, 2),
        ("/workspace/old/name.txt", "moved", "/workspace/moved/name.txt", 1),
        ("/workspace/gone.txt", "deleted", None, 1 if format == "unified" else 0),
    ]
    assert [(f.lines_added, f.lines_removed) for f in result.files[:3]] == [(1, 0), (2, 2), (2, 2)]
    # Nothing else was left behind: no temporary file, the emptied directory kept.
    assert ".mwc-write" not in await tree(ws)


async def test_a_patch_whose_third_hunk_fails_changes_nothing(ws: mwc.Workspace) -> None:
    await seed(ws)
    before = await tree(ws)
    # Hunks 1 and 2 (app.py) apply; hunk 3, the first of lib.txt, does not; the add, the move
    # and the delete around them must not happen either.
    broken = ENVELOPE.replace("-two\n+2", "-TWO\n+2")
    with pytest.raises(ConflictError) as caught:
        await ws.file_patch(broken)
    err = caught.value
    assert (err.status, err.field) == (409, "patch")
    assert err.message.startswith(
        "'lib.txt': hunk 1 of 2 ('@@', patch line 12) did not apply: context not found"
    ), err.message
    assert "'TWO'" in err.message and err.message.endswith("nothing was changed")
    assert await tree(ws) == before
    # The same in a unified diff, whose hunk names the line it expected the context at.
    with pytest.raises(ConflictError) as caught:
        await ws.file_patch(UNIFIED.replace("-two\n+2", "-TWO\n+2"))
    assert "'@@ -1,3 +1,3 @@'" in caught.value.message
    assert "near line 1" in caught.value.message
    assert await tree(ws) == before


async def test_a_patch_made_before_the_file_changed_does_not_apply(ws: mwc.Workspace) -> None:
    await seed(ws)
    # Someone edits lib.txt after the patch was written against it.
    edited = await ws.exec("sed -i 's/eight/EIGHT/' lib.txt")
    assert edited.returncode == 0
    before = await tree(ws)
    with pytest.raises(ConflictError) as caught:
        await ws.file_patch(ENVELOPE)
    assert "'lib.txt': hunk 2 of 2" in caught.value.message
    assert "at the end of the file" in caught.value.message
    assert await tree(ws) == before


@pytest.mark.parametrize(
    "patch",
    [
        "*** Begin Patch\n*** Add File: ../x\n+x\n*** End Patch",
        "*** Begin Patch\n*** Delete File: /etc/passwd\n*** End Patch",
        "*** Begin Patch\n*** Update File: app.py\n*** Move to: ../../x\n*** End Patch",
        "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n",
        "--- /dev/null\n+++ /tmp/x\n@@ -0,0 +1 @@\n+x\n",
    ],
)
async def test_a_path_out_of_the_workspace_is_refused_naming_the_field(
    ws: mwc.Workspace, patch: str
) -> None:
    await seed(ws)
    before = await tree(ws)
    with pytest.raises(InvalidArgumentError) as caught:
        await ws.file_patch(patch)
    assert (caught.value.status, caught.value.field) == (400, "patch")
    assert "line 1" in caught.value.message or "line 2" in caught.value.message
    assert "the path" in caught.value.message
    assert await tree(ws) == before


async def test_a_path_through_a_symlink_out_of_the_workspace_is_refused(
    ws: mwc.Workspace,
) -> None:
    await seed(ws)
    made = await ws.exec("mkdir -p /tmp/elsewhere && ln -s /tmp/elsewhere out && ln -s .. up")
    assert made.returncode == 0, made.stderr
    before = await tree(ws)
    for target in ("out/x.txt", "up/x.txt"):
        # The first part of the patch is fine: it must not happen either.
        patch = (
            "*** Begin Patch\n*** Update File: app.py\n@@ def f():\n-    return 1\n"
            f"+    return 10\n*** Add File: {target}\n+x\n*** End Patch"
        )
        with pytest.raises(PermissionDeniedError) as caught:
            await ws.file_patch(patch)
        assert (caught.value.status, caught.value.field) == (403, "patch"), target
        assert "outside the workspace root" in caught.value.message
    assert await tree(ws) == before
    outside = await ws.exec("ls -A /tmp/elsewhere")
    assert outside.stdout == ""


async def test_a_malformed_patch_is_refused_before_the_workspace_is_asked(
    ws: mwc.Workspace,
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await ws.file_patch("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n")
    assert caught.value.field == "patch"
    assert "line 7: the hunk of line 3" in caught.value.message
    with pytest.raises(InvalidArgumentError) as caught:
        await ws.file_patch("*** Begin Patch\n*** Update File: a\n*** End Patch")
    assert "line 2: the update of 'a' has no hunk" in caught.value.message


async def test_an_unisolated_workspace_takes_its_own_root_in_a_patch(tmp_path: Path) -> None:
    driver = LocalDriver(tmp_path / "data", isolation="none")
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(driver, settings=settings) as wss, wss.create() as ws:
        root = ws.info.root
        await ws.file_write("src/a.txt", "alpha\n", create_parents=True)
        result = await ws.file_patch(
            f"*** Begin Patch\n*** Update File: {root}/src/a.txt\n"
            "*** Move to: /workspace/src/b.txt\n@@\n-alpha\n+beta\n*** End Patch"
        )
        assert [(f.path, f.to) for f in result.files] == [
            (f"{root}/src/a.txt", f"{root}/src/b.txt")
        ]
        assert (Path(root) / "src" / "b.txt").read_text() == "beta\n"
        with pytest.raises(InvalidArgumentError) as caught:
            await ws.file_patch(f"*** Begin Patch\n*** Delete File: {root}/../x\n*** End Patch")
        assert caught.value.field == "patch"
