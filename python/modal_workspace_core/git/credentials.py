"""The GitHub credential of one repo operation, minted for it alone.

Two sources, chosen by the operator:
- a GitHub App (`MODAL_WORKSPACE_GITHUB_APP_ID` and its private key, which only the gateway
  holds): every operation gets a new installation token scoped to the one repository and to the
  permissions it needs (`contents: read` to fetch, `contents: write` to push,
  `pull_requests: write` for a pull request). Installation tokens live an hour and a token is
  minted again for every operation, so a long session never pushes with a stale one.
- the allowlisted GitHub secret's `GH_TOKEN`, as before.

A token goes to git only as an agent step's credential (answered through that exec's askpass)
and to GitHub's REST API from the gateway; never into a URL, an argv, a file or an event.
Redaction is told the exact value: installation tokens have no fixed length or shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, cast

from githubkit import AppAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.exception import GitHubException, RequestFailed

from ..drivers.command_user import commands_run_as_root
from ..errors import PermissionDeniedError, UpstreamError

if TYPE_CHECKING:
    from githubkit_schemas.latest.types import AppPermissionsType

    from ..drivers.base import WorkspaceRecord
    from ..policy import GitHubRepo
    from ..runtime.service import Service


Permission = Literal["read", "write"]
# What each kind of operation asks for, and nothing more.
FETCH: dict[str, Permission] = {"contents": "read"}
PUSH: dict[str, Permission] = {"contents": "write"}
PULL_REQUEST: dict[str, Permission] = {"pull_requests": "write"}

# The environment name the GitHub secret's token is read under (never an exec's variable).
SECRET_AS = "MWC_GIT_TOKEN"


@dataclass(frozen=True)
class Credential:
    """One operation's token, and how it is redacted."""

    token: str = field(repr=False)

    @property
    def redact(self) -> list[str]:
        return [self.token]


def app_configured(svc: Service) -> bool:
    return svc.settings.github_app_id is not None


async def for_operation(
    svc: Service, repo: GitHubRepo, permissions: dict[str, Permission], field_name: str
) -> Credential:
    """A token for `repo` with `permissions`: from the App when one is configured, else the
    allowlisted GitHub secret (`field_name` names the input that asked, for its errors)."""
    if app_configured(svc):
        return await _installation_token(svc, repo, permissions)
    secret = svc.github_token(SECRET_AS, field_name)
    return Credential(token=secret.env[SECRET_AS])


async def for_workspace_git(
    svc: Service,
    record: WorkspaceRecord,
    repo: GitHubRepo,
    permissions: dict[str, Permission],
    field_name: str,
) -> Credential:
    """A token for the agent's git step inside `record`'s workspace: refused, before any is
    minted, to a workspace whose commands run as root, which could read it from that step's
    memory (`drivers.command_user`)."""
    if commands_run_as_root(record.resources):
        raise PermissionDeniedError(
            f"{field_name}: workspace {record.workspace_id} runs its commands as root "
            "(resources.run_as_root), so no GitHub token goes into it: clone public "
            "repositories there, or create a workspace without run_as_root to use the token",
            field=field_name,
        )
    return await for_operation(svc, repo, permissions, field_name)


def _app_client(svc: Service) -> GitHub[AppAuthStrategy]:
    settings = svc.settings
    assert settings.github_app_id is not None and settings.github_app_private_key is not None
    return GitHub(
        AppAuthStrategy(settings.github_app_id, settings.github_app_private_key),
        base_url=settings.github_api_url + "/",
        # A gateway answers within a client's patience: no retry storms on a failing API.
        auto_retry=False,
        # Never an answer from a cache: a pull request opened a moment ago must be found.
        http_cache=False,
        timeout=20.0,
    )


async def _installation_token(
    svc: Service, repo: GitHubRepo, permissions: dict[str, Permission]
) -> Credential:
    """Mints a new installation token for `repo` alone: the installation is the configured one,
    or the App's installation on the repository's owner, looked up each time (an App may be
    installed and removed at any moment)."""
    gh = _app_client(svc)
    try:
        installation_id = svc.settings.github_app_installation_id
        if installation_id is None:
            found = await gh.rest.apps.async_get_repo_installation(repo.owner, repo.name)
            installation_id = found.parsed_data.id
        minted = await gh.rest.apps.async_create_installation_access_token(
            installation_id,
            repositories=[repo.name],
            permissions=cast("AppPermissionsType", dict(permissions)),
        )
    except RequestFailed as exc:
        raise _refused(exc, repo) from None
    except GitHubException as exc:
        raise UpstreamError(f"could not reach the GitHub API: {type(exc).__name__}") from None
    data = minted.parsed_data
    return Credential(token=data.token)


def _refused(exc: RequestFailed, repo: GitHubRepo) -> PermissionDeniedError | UpstreamError:
    status = exc.response.status_code
    if status in (401, 403, 404, 422):
        # The App is not installed on the repository, or may not grant what was asked.
        return PermissionDeniedError(
            f"the GitHub App cannot act on {repo.slug}: GitHub answered {status} "
            "(install the App on the repository and grant it contents and pull requests)"
        )
    return UpstreamError(f"the GitHub API answered {status} for {repo.slug}")


def rest_client(svc: Service, credential: Credential) -> GitHub[TokenAuthStrategy]:
    """A client of the REST API that authenticates with one operation's token."""
    return GitHub(
        TokenAuthStrategy(credential.token),
        base_url=svc.settings.github_api_url + "/",
        auto_retry=False,
        # Never an answer from a cache: a pull request opened a moment ago must be found.
        http_cache=False,
        timeout=20.0,
    )
