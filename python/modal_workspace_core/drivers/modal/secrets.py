"""How the Modal driver hands secrets to workspaces: by name, as Modal Secrets on the sandbox,
with the variables whose values the agent redacts; and the GitHub token to one exec.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ...errors import PermissionDeniedError
from ..base import ExecSecret, WorkspaceSecrets

__all__ = ["ModalSecrets", "redacted_env"]


class ModalSecrets:
    """Secrets stay in Modal: a workspace gets its allowlisted secrets as `Secret.from_name` on
    its sandbox, so their values never pass through the gateway.

    Where the allowlist lists a secret's variables (`openai:OPENAI_API_KEY`), the driver asks
    Modal to check the secret holds them and the agent redacts their values from every exec's
    output; the values of a secret listed without variables reach commands unredacted.

    The GitHub secret is never attached to a sandbox (unless the operator lets workspaces name
    it in `secret_names`): it is attached to the gateway (`modal_app.py`), whose `GH_TOKEN`
    the settings hold, and the token crosses the channel only in the network step of the one
    git exec that `use_github_token` runs.
    """

    def __init__(
        self,
        allowed_secrets: tuple[str, ...],
        github_secret: str,
        secret_keys: Mapping[str, tuple[str, ...]] | None = None,
        github_token: str | None = None,
    ) -> None:
        self.allowed_secrets = allowed_secrets
        self.github_secret = github_secret
        self.secret_keys = dict(secret_keys or {})
        self._github_token = github_token

    def for_workspace(self, names: Sequence[str]) -> WorkspaceSecrets:
        keys = {name: list(self.secret_keys[name]) for name in names if name in self.secret_keys}
        return WorkspaceSecrets(secret_names=list(dict.fromkeys(names)), secret_keys=keys)

    def for_exec(self, secret: str, key: str, as_env: str) -> ExecSecret:
        if secret != self.github_secret or key != "GH_TOKEN" or not self._github_token:
            raise PermissionDeniedError(
                f"use_github_token: the gateway holds no {key} of the secret {secret!r}: attach "
                "that Modal Secret to the gateway (modal_app.py does when it is allowlisted)",
                field="use_github_token",
            )
        return ExecSecret(env={as_env: self._github_token}, redact=[self._github_token])


def redacted_env(
    names: Sequence[str],
    secret_keys: Mapping[str, Sequence[str]],
    secret_env_keys: Iterable[str],
) -> list[str]:
    """The variables of a sandbox's environment whose values the agent redacts from every exec:
    those listed for its named secrets, and those of its `secret_env`."""
    out = {key for name in names for key in secret_keys.get(name, ())}
    out.update(secret_env_keys)
    return sorted(out)
