"""The inputs only the operator's configuration can allow: secrets and volumes by name, a GPU,
and the GitHub token for one exec. Deny by default: a name outside its allowlist is refused (403)
before the driver is called.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import policy
from ..config import ALLOWED_GPUS_ENV, Settings
from ..drivers.base import Driver, ExecSecret, WorkspaceSecrets, secret_source
from ..drivers.mounts import volume_mount
from ..errors import PermissionDeniedError, core_refusal, denied

__all__ = ["Allowlists"]


class Allowlists:
    """The settings' allowlists, checked; the values handed over as the driver hands them."""

    def __init__(self, driver: Driver, settings: Settings) -> None:
        self.settings = settings
        # Each driver resolves secrets its own way; only the allowlist is checked here.
        self.secrets = secret_source(driver, settings)
        # Where the driver cannot attach a GPU at all it refuses `resources.gpu` itself, saying
        # why, rather than this pointing the operator at an allowlist that could not help.
        self.checks_gpus = bool(getattr(driver, "attaches_gpus", False))

    def workspace_secrets(self, names: list[str]) -> WorkspaceSecrets:
        """Allowlisted secrets for a new workspace, as its driver hands them over; a name
        outside the allowlist is refused (403) before the driver is called."""
        for i, name in enumerate(names):
            field = f"secret_names[{i}]"
            self._check_secret(name, field)
            if name == self.settings.github_secret and not (
                self.settings.allow_github_secret_in_workspaces
            ):
                # Every command (and every repository's code) would hold the token.
                raise PermissionDeniedError(
                    f"{field}: {name!r} is the GitHub secret, which reaches git only through "
                    "use_github_token; a workspace may hold it only if the operator sets "
                    "MODAL_WORKSPACE_ALLOW_GITHUB_SECRET_IN_WORKSPACES=1",
                    field=field,
                )
        return self.secrets.for_workspace(names)

    def github_token(self, as_env: str, field: str = "use_github_token") -> ExecSecret:
        """The GitHub secret's `GH_TOKEN` as variable `as_env` of one exec; `field` names the
        input that asked for it in a refusal."""
        name = self.settings.github_secret
        self._check_secret(name, field)
        return self.secrets.for_exec(name, "GH_TOKEN", as_env)

    def _check_secret(self, name: str, field: str) -> None:
        with core_refusal(field):
            policy.allowed(name, self.settings.allowed_secrets, "MODAL_WORKSPACE_ALLOWED_SECRETS")

    def gpu(self, request: str | None) -> None:
        """Refuses (403) a GPU the allowlist does not cover, before anything is looked up (an
        idempotency key's workspace, a template's store); the driver checks it again."""
        if request is None or not self.checks_gpus:
            return
        with core_refusal("resources.gpu", error=denied):
            policy.allowed_gpu(request, self.settings.allowed_gpus, ALLOWED_GPUS_ENV)

    def volumes(self, volumes: Mapping[str, str]) -> dict[str, str]:
        """The allowlisted volumes by their checked mount path; refuses any other."""
        checked: dict[str, str] = {}
        for mount, name in volumes.items():
            field = f"volumes[{mount[:32]}]"
            path = volume_mount(mount, field)
            with core_refusal(field):
                policy.allowed(
                    name, self.settings.allowed_volumes, "MODAL_WORKSPACE_ALLOWED_VOLUMES"
                )
            checked[path] = name
        return checked
