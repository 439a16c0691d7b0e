"""A workspace's resources as a caller asks for them (`Resources`): what it may use, where it runs,
what it reaches and the image it starts from, every value checked by the core's rules. Shared:
the workspaces domain creates a workspace with them, and the templates domain builds one and
starts workspaces from its build with them."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from .. import policy
from .machinery.fields import Input

__all__ = ["IMAGE_FIELDS", "Resources"]

# Each entry of a region or allowlist through the core's rule (an error names `field.i`).
Region = Annotated[str, AfterValidator(policy.region)]
OutboundCidr = Annotated[str, AfterValidator(policy.outbound_cidr)]
OutboundDomain = Annotated[str, AfterValidator(policy.outbound_domain)]
Gpu = Annotated[str, AfterValidator(policy.gpu)]
ImageName = Annotated[str, AfterValidator(policy.image_name)]
ImageId = Annotated[str, AfterValidator(policy.image_id)]
AptPackages = Annotated[
    list[str],
    Field(max_length=policy.MAX_IMAGE_PACKAGES),
    AfterValidator(lambda items: policy.image_packages("apt", items)),
]
PipPackages = Annotated[
    list[str],
    Field(max_length=policy.MAX_IMAGE_PACKAGES),
    AfterValidator(lambda items: policy.image_packages("pip", items)),
]


class Resources(Input):
    cpu: float | None = Field(
        None,
        ge=policy.MIN_CPU_CORES,
        le=policy.MAX_CPU_CORES,
        description="Cores reserved.",
    )
    memory_mb: int | None = Field(
        None,
        ge=policy.MIN_MEMORY_MIB,
        le=policy.MAX_MEMORY_MIB,
        description="MiB reserved.",
    )
    gpu: Gpu | None = Field(
        None,
        pattern=r"^[A-Za-z0-9:._-]{1,32}$",
        description="Modal GPU, e.g. T4, L40S or H100:2 (two); operator-allowed only.",
    )
    timeout_seconds: int | None = Field(None, ge=5, le=86_400, description="Lifetime limit.")
    idle_timeout_seconds: int | None = Field(None, ge=5, le=86_400, description="Idle limit.")
    # --- limits, placement and the outbound network (Modal); the core's rules decide ---------
    cpu_limit: float | None = Field(
        None,
        ge=policy.MIN_CPU_CORES,
        le=policy.MAX_CPU_CORES,
        description="Hard limit in cores (≥ cpu).",
    )
    memory_limit_mb: int | None = Field(
        None,
        ge=policy.MIN_MEMORY_MIB,
        le=policy.MAX_MEMORY_MIB,
        description="Hard limit in MiB (≥ memory_mb; locally per command).",
    )
    region: list[Region] | None = Field(
        None,
        min_length=1,
        max_length=policy.MAX_REGIONS,
        description="Modal regions: us, us-east, us-east-1, …",
    )
    outbound_cidr_allowlist: list[OutboundCidr] | None = Field(
        None,
        max_length=policy.MAX_ALLOWLIST_ENTRIES,
        description="Only these public CIDRs are reachable (Modal).",
    )
    outbound_domain_allowlist: list[OutboundDomain] | None = Field(
        None,
        max_length=policy.MAX_ALLOWLIST_ENTRIES,
        description="Only these domains are reachable, *.example.com too (Modal).",
    )

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: float | None) -> float | None:
        return None if value is None else policy.cpu_cores(value)

    @field_validator("cpu_limit")
    @classmethod
    def _cpu_limit(cls, value: float | None, info: ValidationInfo) -> float | None:
        return None if value is None else policy.cpu_limit(info.data.get("cpu"), value)

    @field_validator("memory_limit_mb")
    @classmethod
    def _memory_limit(cls, value: int | None, info: ValidationInfo) -> int | None:
        return None if value is None else policy.memory_limit_mib(info.data.get("memory_mb"), value)

    @field_validator("outbound_cidr_allowlist")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        return policy.outbound_allowlists(False, value, None)[0]

    @field_validator("outbound_domain_allowlist")
    @classmethod
    def _domains(cls, value: list[str] | None) -> list[str] | None:
        return policy.outbound_allowlists(False, None, value)[1]

    @field_validator("region", mode="before")
    @classmethod
    def _one_region(cls, value: object) -> object:
        # Modal takes one region as a string, or several as a list.
        return [value] if isinstance(value, str) else value

    @field_validator("region")
    @classmethod
    def _regions(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else policy.regions(value)

    run_as_root: bool | None = Field(
        None,
        description="Commands as root (Modal): then no GitHub token (use_github_token, push). "
        "Default: uid 1000; prefer apt_packages.",
    )
    # -- the image (Modal): which one, and packages layered on top of it ---------------------
    image_name: ImageName | None = Field(None, description="A published Modal image: NAME[:TAG].")
    image_id: ImageId | None = Field(None, description="A Modal image id (im-…).")
    apt_packages: AptPackages | None = Field(
        None,
        description="Debian packages: NAME[=VERSION].",
    )
    pip_packages: PipPackages | None = Field(
        None,
        description="Python packages: NAME[==VERSION].",
    )


# The fields that choose a workspace's image: a workspace started from a template's build has
# that build's image, so these are the template's to give, never its workspaces'.
IMAGE_FIELDS = ("image_name", "image_id", "apt_packages", "pip_packages")
