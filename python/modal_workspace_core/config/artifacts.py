"""Artifacts (`operations/artifacts.py`): the most one upload or download may hold, and how long
a download link lives.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .reading import ConfigError, Environ, read_seconds

__all__ = [
    "ARTIFACT_LINK_SECONDS_ENV",
    "ARTIFACT_MAX_BYTES_ENV",
    "ArtifactSettings",
    "read_artifacts",
]

ARTIFACT_MAX_BYTES_ENV = "MODAL_WORKSPACE_ARTIFACT_MAX_BYTES"
ARTIFACT_LINK_SECONDS_ENV = "MODAL_WORKSPACE_ARTIFACT_LINK_SECONDS"
DEFAULT_ARTIFACT_MAX_BYTES = 1 << 30
MIN_ARTIFACT_MAX_BYTES = 1 << 20
MAX_ARTIFACT_MAX_BYTES = 16 << 30  # the agent's own bound on a staged archive
DEFAULT_ARTIFACT_LINK_SECONDS = 600
MAX_ARTIFACT_LINK_SECONDS = 3600


class ArtifactSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    artifact_max_bytes: int = DEFAULT_ARTIFACT_MAX_BYTES
    artifact_link_seconds: int = DEFAULT_ARTIFACT_LINK_SECONDS


def read_artifacts(env: Environ) -> ArtifactSettings:
    size = (env.get(ARTIFACT_MAX_BYTES_ENV) or "").strip()
    if size and (
        not size.isdigit() or not MIN_ARTIFACT_MAX_BYTES <= int(size) <= MAX_ARTIFACT_MAX_BYTES
    ):
        raise ConfigError(
            f"{ARTIFACT_MAX_BYTES_ENV} must be bytes from {MIN_ARTIFACT_MAX_BYTES} to "
            f"{MAX_ARTIFACT_MAX_BYTES}, not {size[:24]!r}"
        )
    return ArtifactSettings(
        artifact_max_bytes=int(size) if size else DEFAULT_ARTIFACT_MAX_BYTES,
        artifact_link_seconds=read_seconds(
            env,
            ARTIFACT_LINK_SECONDS_ENV,
            DEFAULT_ARTIFACT_LINK_SECONDS,
            1,
            most=MAX_ARTIFACT_LINK_SECONDS,
        ),
    )
