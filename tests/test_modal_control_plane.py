"""The local Modal control plane, driven by the real `modal` SDK: what the Modal driver relies on
(create, exec with streams, tags, lookup by name, list, terminate, snapshots) behaves as the SDK
expects, every call is counted, and calls it does not implement fail loudly."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import modal
import modal.exception
import pytest
from modal_control_plane import ControlPlane, modal_control_plane, use_control_plane
from modal_control_plane.isolation import usable_bwrap

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

APP = "control-plane-tests"


def _app() -> modal.App:
    return modal.App.lookup(APP, create_if_missing=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes; it only waits to be reaped by its parent.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2] != "Z"


def _eventually(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_create_goes_through_the_v2_call_with_name_and_tags(
    modal_control_plane: ControlPlane,
) -> None:
    sandbox = modal.Sandbox.create(app=_app(), name="ws-one", tags={"team": "a"})

    assert modal_control_plane.calls()["SandboxCreateV2"] == 1
    record = modal_control_plane.sandbox(sandbox.object_id)
    assert record.name == "ws-one"
    assert record.version == 2
    assert sandbox.get_tags() == {"team": "a"}
    assert sandbox.poll() is None


def test_exec_echo_returns_output_and_exit_code(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(app=_app())

    process = sandbox.exec("echo", "hello from the sandbox")

    assert process.stdout.read() == "hello from the sandbox\n"
    assert process.wait() == 0
    assert modal_control_plane.calls()["TaskExecStart"] == 1


def test_exec_reports_stderr_and_a_failing_exit_code(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(app=_app())

    process = sandbox.exec("sh", "-c", "echo oops >&2; exit 3")

    assert process.stderr.read() == "oops\n"
    assert process.wait() == 3


def test_exec_of_a_missing_program_fails_and_says_why(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(app=_app())

    process = sandbox.exec("no-such-program-anywhere")

    assert process.wait() != 0
    assert "no-such-program-anywhere" in process.stderr.read()


def test_stdin_streams_to_stdout_while_the_exec_runs(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(app=_app())
    process = sandbox.exec("cat", text=False)
    stdout = iter(process.stdout)

    process.stdin.write(b"first\n")
    process.stdin.drain()
    assert next(stdout) == b"first\n"

    process.stdin.write(b"second\x00\xff\n")
    process.stdin.write_eof()
    process.stdin.drain()
    assert b"".join(stdout) == b"second\x00\xff\n"
    assert process.wait() == 0


async def test_async_sdk_calls_work_against_the_same_server(
    modal_control_plane: ControlPlane,
) -> None:
    app = await modal.App.lookup.aio(APP, create_if_missing=True)
    sandbox = await modal.Sandbox.create.aio(app=app, name="async-one")

    process = await sandbox.exec.aio("sh", "-c", "read line; echo got:$line")
    process.stdin.write(b"ping\n")
    process.stdin.write_eof()
    await process.stdin.drain.aio()

    assert await process.stdout.read.aio() == "got:ping\n"
    assert await process.wait.aio() == 0
    found = await modal.Sandbox.from_name.aio(APP, "async-one")
    assert found.object_id == sandbox.object_id


def test_entrypoint_runs_in_the_workspace_directory(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(
        "sh",
        "-c",
        "pwd > /workspace/where; touch started; sleep 600",
        app=_app(),
        workdir="/workspace",
    )
    record = modal_control_plane.sandbox(sandbox.object_id)
    where = record.directory / "workspace" / "where"

    # `started` is written last, relative to the working directory.
    assert _eventually((record.directory / "workspace" / "started").exists)
    # In bubblewrap the path is the container's; without it, the directory standing in for it.
    expected = "/workspace" if modal_control_plane.isolated else str(record.directory / "workspace")
    assert where.read_text().strip() == expected
    # Execs see the same files at the same container path.
    assert sandbox.exec("cat", "/workspace/where").stdout.read() == where.read_text()


def test_without_bubblewrap_container_paths_are_translated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ControlPlane(tmp_path, isolate=False) as plane, use_control_plane(plane, monkeypatch):
        sandbox = modal.Sandbox.create(app=_app(), workdir="/workspace")
        record = plane.sandbox(sandbox.object_id)

        script = sandbox.exec("sh", "-c", "pwd; echo hi > /workspace/made; echo $HOME")

        assert script.stdout.read().split() == [
            str(record.directory / "workspace"),
            str(record.directory / "root"),
        ]
        assert (record.directory / "workspace" / "made").read_text() == "hi\n"


@pytest.mark.skipif(not usable_bwrap(), reason="bubblewrap does not work on this machine")
def test_in_bubblewrap_processes_see_container_paths_and_a_private_tmp(
    modal_control_plane: ControlPlane,
) -> None:
    sandbox = modal.Sandbox.create(app=_app(), workdir="/workspace")
    record = modal_control_plane.sandbox(sandbox.object_id)
    # A file of the host's /tmp must not show in the sandbox's (only the Python environment is
    # shown there, read-only, when the checkout itself lives under /tmp).
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="host-only-") as planted:
        name = Path(planted.name).name
        script = sandbox.exec(
            "sh", "-c", f"pwd; echo $HOME; ls -A /tmp | grep -c {name}; echo x > /run/mwc/f"
        )
        assert script.stdout.read().split() == ["/workspace", "/run/home", "0"]
    assert (record.directory / "run" / "mwc" / "f").read_text() == "x\n"


def test_from_name_finds_the_running_sandbox_and_not_a_terminated_one(
    modal_control_plane: ControlPlane,
) -> None:
    sandbox = modal.Sandbox.create(app=_app(), name="named")

    assert modal.Sandbox.from_name(APP, "named").object_id == sandbox.object_id

    sandbox.terminate()
    sandbox.wait(raise_on_termination=False)
    with pytest.raises(modal.exception.NotFoundError):
        modal.Sandbox.from_name(APP, "named")


def test_a_running_name_cannot_be_taken_twice(modal_control_plane: ControlPlane) -> None:
    modal.Sandbox.create(app=_app(), name="unique")

    with pytest.raises(modal.exception.AlreadyExistsError):
        modal.Sandbox.create(app=_app(), name="unique")


def test_list_returns_running_sandboxes_with_all_the_given_tags(
    modal_control_plane: ControlPlane,
) -> None:
    app = _app()
    both = modal.Sandbox.create(app=app, tags={"managed-by": "mwc", "team": "a"})
    modal.Sandbox.create(app=app, tags={"managed-by": "mwc", "team": "b"})
    modal.Sandbox.create(app=app, tags={"team": "a"})
    gone = modal.Sandbox.create(app=app, tags={"managed-by": "mwc", "team": "a"})
    gone.terminate()
    gone.wait(raise_on_termination=False)

    listed = modal.Sandbox.list(app_id=app.app_id, tags={"managed-by": "mwc", "team": "a"})

    assert [s.object_id for s in listed] == [both.object_id]


def test_set_tags_replaces_the_whole_tag_set(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(app=_app(), tags={"a": "1", "b": "2"})

    sandbox.set_tags({"b": "3", "c": "4"})

    assert modal.Sandbox.from_id(sandbox.object_id).get_tags() == {"b": "3", "c": "4"}


def test_terminate_kills_every_process_of_the_sandbox(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(app=_app())
    # A process that leaves the exec's session and process group, as a supervisor's children do.
    process = sandbox.exec("sh", "-c", "setsid sleep 600 & echo $!; wait")
    pid = int(next(iter(process.stdout)).strip())
    assert _pid_alive(pid)

    sandbox.terminate()

    assert sandbox.wait(raise_on_termination=False) is None
    assert sandbox.returncode == 137
    assert _eventually(lambda: not _pid_alive(pid))
    with pytest.raises(modal.exception.SandboxTerminatedError):
        modal.Sandbox.from_id(sandbox.object_id).wait()


def test_exec_in_a_terminated_sandbox_is_refused(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(app=_app())
    sandbox.terminate()
    sandbox.wait(raise_on_termination=False)

    with pytest.raises(modal.exception.Error):
        modal.Sandbox.from_id(sandbox.object_id).exec("true")


def test_an_entrypoint_that_exits_finishes_the_sandbox(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create("sh", "-c", "exit 4", app=_app())

    sandbox.wait()

    assert sandbox.returncode == 4


def test_idle_timeout_ends_a_sandbox_with_nothing_running(
    modal_control_plane: ControlPlane,
) -> None:
    sandbox = modal.Sandbox.create(app=_app(), idle_timeout=1)
    assert sandbox.exec("sleep", "1.5").wait() == 0

    started = time.monotonic()
    sandbox.wait(raise_on_termination=False)

    # The running exec kept it alive; the idle second counts from when it ended.
    assert sandbox.returncode is not None
    assert time.monotonic() - started >= 0.5


def test_snapshot_filesystem_makes_an_image_new_sandboxes_start_from(
    modal_control_plane: ControlPlane,
) -> None:
    app = _app()
    source = modal.Sandbox.create(app=app, workdir="/workspace")
    source.exec("sh", "-c", "echo kept > /workspace/file").wait()

    image = source.snapshot_filesystem(ttl=3600)
    source.exec("sh", "-c", "echo changed > /workspace/file").wait()
    copy = modal.Sandbox.create(app=app, image=image, workdir="/workspace")

    assert image.object_id.startswith("im-")
    assert copy.exec("cat", "/workspace/file").stdout.read() == "kept\n"
    assert modal_control_plane.calls()["TaskSnapshotFilesystem"] == 1


def test_env_and_named_secrets_reach_the_entrypoint_and_execs(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.add_secret("allowed", {"FROM_SECRET": "s3cret"})
    sandbox = modal.Sandbox.create(
        app=_app(), env={"PLAIN": "value"}, secrets=[modal.Secret.from_name("allowed")]
    )

    output = sandbox.exec("sh", "-c", 'echo "$PLAIN $FROM_SECRET $EXTRA"', env={"EXTRA": "x"})

    assert output.stdout.read() == "value s3cret x\n"


def test_a_named_secret_without_a_required_key_is_refused_as_modal_does(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.add_secret("openai", {"OPENAI_API_KEY": "sk-x", "OTHER": "y"})
    held = modal.Secret.from_name("openai", required_keys=["OPENAI_API_KEY", "OTHER"])
    sandbox = modal.Sandbox.create(app=_app(), secrets=[held])
    assert sandbox.exec("printenv", "OTHER").stdout.read() == "y\n"

    lacking = modal.Secret.from_name("openai", required_keys=["OPENAI_API_KEY", "ORG_ID"])
    with pytest.raises(modal.exception.ConflictError, match=r"missing key\(s\): ORG_ID"):
        modal.Sandbox.create(app=_app(), secrets=[lacking])
    assert len(modal_control_plane.sandboxes()) == 1


def test_named_images_resolve_by_name_and_unknown_ones_are_not_found(
    modal_control_plane: ControlPlane,
) -> None:
    image_id = modal_control_plane.publish_image("workspace-image")
    sandbox = modal.Sandbox.create(app=_app(), image=modal.Image.from_name("workspace-image"))

    assert modal_control_plane.sandbox(sandbox.object_id).definition.image_id == image_id
    with pytest.raises(modal.exception.NotFoundError):
        modal.Sandbox.create(app=_app(), image=modal.Image.from_name("never-published"))


def test_a_gpu_request_falls_back_to_the_v1_calls(modal_control_plane: ControlPlane) -> None:
    app = _app()
    sandbox = modal.Sandbox.create(app=app, gpu="T4", tags={"kind": "gpu"})

    assert sandbox.exec("echo", "v1").stdout.read() == "v1\n"
    calls = modal_control_plane.calls()
    assert calls["SandboxCreate"] == 1
    assert calls["SandboxCreateV2"] == 0
    assert calls["TaskGetCommandRouterAccess"] == 1
    assert modal_control_plane.sandbox(sandbox.object_id).definition.resources.gpu_config.gpu_type
    listed = modal.Sandbox.list(app_id=app.app_id, tags={"kind": "gpu"})
    assert [s.object_id for s in listed] == [sandbox.object_id]


def test_calls_it_does_not_implement_fail_loudly(modal_control_plane: ControlPlane) -> None:
    sandbox = modal.Sandbox.create(app=_app())

    with pytest.raises(modal.exception.UnimplementedError, match="TaskSnapshotMemory"):
        sandbox._experimental_snapshot()

    assert modal_control_plane.unimplemented == ["TaskSnapshotMemory"]


def test_wrong_credentials_are_rejected(
    modal_control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "not-the-secret")
    from modal_control_plane import reset_modal_client

    reset_modal_client()

    with pytest.raises(modal.exception.AuthError):
        modal.App.lookup(APP, create_if_missing=True)


def test_the_sdk_moves_to_a_new_server_after_a_reset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("first", "second"):
        with ControlPlane(tmp_path / name) as plane, use_control_plane(plane, monkeypatch):
            sandbox = modal.Sandbox.create(app=_app(), name=name)
            assert plane.sandbox(sandbox.object_id).name == name
            assert plane.calls()["AppGetOrCreate"] == 1
