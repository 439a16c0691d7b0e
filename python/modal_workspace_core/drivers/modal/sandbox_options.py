"""How a workspace's requested resources become `Sandbox.create` arguments: defaults, bounds,
and the secret, volume and GPU allowlists of the driver's settings, all checked before any call
to Modal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ... import policy
from ...config import ALLOWED_GPUS_ENV, ALLOWED_SECRETS_ENV, ALLOWED_VOLUMES_ENV, ModalSettings
from ...errors import InvalidArgumentError, core_refusal, denied
from ...policy import allowed, env_name
from ..command_user import RUN_AS_ROOT, commands_run_as_root
from ..mounts import volume_mount
from .image_request import image_request

__all__ = ["GPU_FIELD", "SandboxOptions", "allowed_gpu", "check_env", "sandbox_options"]

# The predecessor's defaults: (request, limit).
DEFAULT_CPU = (2.0, 4.0)
DEFAULT_MEMORY_MIB = (4096, 8192)
DEFAULT_TIMEOUT_SECONDS = 3600
MAX_TIMEOUT_SECONDS = 24 * 3600
T = TypeVar("T")
# Named as the request names it: the service leaves the GPU allowlist to this driver, so this
# refusal is the one a client reads.
GPU_FIELD = "resources.gpu"


@dataclass
class SandboxOptions:
    """The checked `Sandbox.create` keyword arguments of one workspace, and what it records."""

    cpu: tuple[float, float] = DEFAULT_CPU
    memory: tuple[int, int] = DEFAULT_MEMORY_MIB
    timeout: int = DEFAULT_TIMEOUT_SECONDS
    idle_timeout: int | None = None
    gpu: str | None = None
    region: list[str] | None = None
    cloud: str | None = None
    outbound_cidr_allowlist: list[str] | None = None
    outbound_domain_allowlist: list[str] | None = None
    inbound_cidr_allowlist: list[str] | None = None
    # Preview ports: each an encrypted tunnel, fixed at the sandbox's create (`tunnels`).
    ports: list[int] = field(default_factory=list)
    secret_names: list[str] = field(default_factory=list)
    volumes: dict[str, str] = field(default_factory=dict)
    image_name: str | None = None
    image_id: str | None = None
    apt_packages: list[str] = field(default_factory=list)
    pip_packages: list[str] = field(default_factory=list)
    # Commands as root (the workspace's choice, which forfeits every token operation), else as
    # an unprivileged user of their own (`drivers.command_user`).
    run_as_root: bool = False

    def recorded(self) -> dict[str, Any]:
        """The resources as the workspace record reports them."""
        out: dict[str, Any] = {
            "cpu": list(self.cpu),
            "memory_mb": list(self.memory),
            "timeout_seconds": self.timeout,
            # Always written: a record without it is older than unprivileged commands, and
            # its sandbox ran them as root (`records.resources`).
            RUN_AS_ROOT: self.run_as_root,
        }
        for key in ("idle_timeout", "gpu", "region", "cloud", "image_name", "image_id"):
            value = getattr(self, key)
            if value is not None:
                out[key if key != "idle_timeout" else "idle_timeout_seconds"] = value
        # Kept so that a resume (and a fork) gets the same network rule as the workspace had.
        for key in ("outbound_cidr_allowlist", "outbound_domain_allowlist"):
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value)
        if self.ports:
            out["ports"] = list(self.ports)
        if self.secret_names:
            out["secret_names"] = list(self.secret_names)
        if self.volumes:
            out["volumes"] = dict(self.volumes)
        for key in ("apt_packages", "pip_packages"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        return out


# --- CPU and memory limits, region, outbound allowlists: the core's rules ---------------------


def _number(value: Any, field_name: str, kind: tuple[type, ...]) -> Any:
    if isinstance(value, bool) or not isinstance(value, kind):
        noun = "a number" if float in kind else "a whole number"
        raise InvalidArgumentError("invalid_argument", f"{field_name} must be {noun}", field_name)
    return value


def _checked(rule: Callable[..., T], field_name: str, *args: Any) -> T:
    with core_refusal(field_name):
        return rule(*args)


def _pair(
    r: Mapping[str, Any],
    names: tuple[str, str],
    kinds: tuple[type, ...],
    rules: tuple[Callable[..., Any], Callable[..., Any]],
    default: tuple[Any, Any],
) -> tuple[Any, Any]:
    """A request and its limit (`names`), as given or in a record's `[request, limit]` form,
    through the core's `rules`; else the predecessor's `default`: a lone request keeps the
    default limit unless it is above it, a lone limit lowers the default request to it."""
    field_name, limit_name = names
    value, limit = r.get(field_name), r.get(limit_name)
    if isinstance(value, list | tuple):
        if len(value) != 2 or limit is not None:
            raise InvalidArgumentError(
                "invalid_argument", f"{field_name} must be a number or [request, limit]", field_name
            )
        (value, limit), limit_name = value, field_name
    if value is not None:
        value = _checked(rules[0], field_name, _number(value, field_name, kinds))
    request = value
    if limit is not None:
        limit = _checked(rules[1], limit_name, request, _number(limit, limit_name, kinds))
    if limit is None:
        limit = max(request or default[0], default[1])
    return (min(default[0], limit) if request is None else request), limit


def _cpu(r: Mapping[str, Any]) -> tuple[float, float]:
    rules = (policy.cpu_cores, policy.cpu_limit)
    return _pair(r, ("cpu", "cpu_limit"), (int, float), rules, DEFAULT_CPU)


def _memory(r: Mapping[str, Any]) -> tuple[int, int]:
    rules = (policy.memory_mib, policy.memory_limit_mib)
    return _pair(r, ("memory_mb", "memory_limit_mb"), (int,), rules, DEFAULT_MEMORY_MIB)


def _entries(value: Any, field_name: str, rule: Callable[[str], str]) -> list[str] | None:
    """Each entry of a list through the core's rule, a refusal naming `field_name[i]`."""
    items = _strings(value, field_name)
    if items is None:
        return None
    return [_checked(rule, f"{field_name}[{i}]", item) for i, item in enumerate(items)]


def _regions(value: Any) -> list[str] | None:
    # Modal takes one region as a string or several as a list.
    names = _entries([value] if isinstance(value, str) else value, "region", policy.region)
    return None if names is None else _checked(policy.regions, "region", names)


def _allowlists(
    r: Mapping[str, Any], block_network: bool
) -> tuple[list[str] | None, list[str] | None]:
    cidrs = _entries(
        r.get("outbound_cidr_allowlist"), "outbound_cidr_allowlist", policy.outbound_cidr
    )
    domains = _entries(
        r.get("outbound_domain_allowlist"), "outbound_domain_allowlist", policy.outbound_domain
    )
    field_name = "outbound_cidr_allowlist" if cidrs is not None else "outbound_domain_allowlist"
    return _checked(policy.outbound_allowlists, field_name, block_network, cidrs, domains)


def _ports(value: Any, block_network: bool) -> list[int]:
    """The preview ports under the core's rule. Modal opens no tunnel into a sandbox whose
    network is blocked, so the two together are refused here rather than by the SDK."""
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in value
    ):
        raise InvalidArgumentError("invalid_argument", "ports must be a list of ports", "ports")
    ports = _checked(policy.preview_ports, "ports", list(value))
    if ports and block_network:
        raise InvalidArgumentError(
            "invalid_argument",
            "a workspace with block_network serves no ports on Modal (a tunnel is network "
            "access): leave out block_network or ports",
            "ports",
        )
    return ports


def _seconds(value: Any, field_name: str, default: int | None, maximum: int) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidArgumentError(
            "invalid_argument",
            f"{field_name} must be whole seconds from 1 to {maximum}",
            field_name,
        )
    return value


def _strings(value: Any, field_name: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError(
            "invalid_argument", f"{field_name} must be a list of strings", field_name
        )
    return list(value)


def allowed_gpu(value: Any, allowlist: tuple[str, ...]) -> str | None:
    """A GPU request (`H100:2`) in Modal's canonical form, held to the GPU allowlist (deny by
    default): a bad name or count is a 400, one the allowlist does not cover a 403, both before
    any call to Modal. None: no GPU."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(
            "invalid_argument", f"{GPU_FIELD} must be a GPU type such as T4 or H100:2", GPU_FIELD
        )
    # The request's own rules first (400), so that a typo is not reported as a denial.
    canonical = _checked(policy.gpu, GPU_FIELD, value)
    with core_refusal(GPU_FIELD, error=denied):
        return policy.allowed_gpu(canonical, allowlist, ALLOWED_GPUS_ENV)


def _text(value: Any, field_name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 128 or not value.isprintable():
        raise InvalidArgumentError(
            "invalid_argument", f"{field_name} must be a short name", field_name
        )
    return value


def sandbox_options(
    resources: Mapping[str, Any],
    settings: ModalSettings,
    *,
    block_network: bool = False,
    new_workspace: bool = False,
) -> SandboxOptions:
    """Check a workspace's requested resources and turn them into sandbox options.

    Secrets, volumes and a GPU must be on their allowlists (deny by default): one that is not
    is refused here, before the driver makes any call to Modal (a resume and a fork too: what
    the operator no longer allows is not started again). So are limits below their
    requests, regions, CIDRs and domains the core's rules refuse, and an outbound allowlist on a
    workspace whose network is blocked (`block_network`, or the one a record holds).

    A `new_workspace` (a create, a fork) that names no idle timeout gets the settings' default,
    which its record then keeps; a resume asks for what its record holds, so a workspace made
    before the default (or while it was off) keeps running without one.
    """
    r = dict(resources)
    blocked = block_network or r.get("block_network") is True
    cidrs, domains = _allowlists(r, blocked)
    options = SandboxOptions(
        cpu=_cpu(r),
        memory=_memory(r),
        region=_regions(r.get("region")),
        timeout=_seconds(
            r.get("timeout_seconds"),
            "timeout_seconds",
            DEFAULT_TIMEOUT_SECONDS,
            MAX_TIMEOUT_SECONDS,
        )
        or DEFAULT_TIMEOUT_SECONDS,
        idle_timeout=_seconds(
            r.get("idle_timeout_seconds"),
            "idle_timeout_seconds",
            settings.default_idle_timeout_seconds if new_workspace else None,
            MAX_TIMEOUT_SECONDS,
        ),
        gpu=allowed_gpu(r.get("gpu"), settings.allowed_gpus),
        cloud=_text(r.get("cloud"), "cloud"),
        outbound_cidr_allowlist=cidrs,
        outbound_domain_allowlist=domains,
        inbound_cidr_allowlist=_strings(r.get("inbound_cidr_allowlist"), "inbound_cidr_allowlist"),
        run_as_root=commands_run_as_root(r),
        ports=_ports(r.get("ports"), blocked),
    )
    # The image: a name or an id (else the default), and packages layered on it.
    image = image_request(r, settings.default_image_name)
    options.image_name, options.image_id = image.image_name, image.image_id
    options.apt_packages = list(image.apt_packages)
    options.pip_packages = list(image.pip_packages)
    for i, name in enumerate(_strings(r.get("secret_names"), "secret_names") or []):
        options.secret_names.append(
            _allowed(name, settings.allowed_secrets, ALLOWED_SECRETS_ENV, i, "secret")
        )
    volumes = r.get("volumes") or {}
    if not isinstance(volumes, Mapping):
        raise InvalidArgumentError("invalid_argument", "volumes must map paths to names", "volumes")
    for i, (mount, name) in enumerate(volumes.items()):
        checked = _allowed(str(name), settings.allowed_volumes, ALLOWED_VOLUMES_ENV, i, "volume")
        if checked == settings.state_volume:
            # The gateways' own state (OAuth tokens): a workspace that wrote it could grant.
            raise denied("the gateway's state Volume is never mounted", f"volumes[{i}]")
        options.volumes[volume_mount(mount, "volumes")] = checked
    return options


def _allowed(name: str, allowlist: tuple[str, ...], setting: str, index: int, kind: str) -> str:
    field_name = f"{kind}_names[{index}]" if kind == "secret" else f"volumes[{index}]"
    # Off the allowlist or not a name at all, it is refused the same way: not allowed.
    with core_refusal(field_name, error=denied):
        return allowed(name, allowlist, setting)


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment names follow the env policy; values travel in the create request, not argv."""
    checked: dict[str, str] = {}
    for key, value in env.items():
        with core_refusal(f"env.{key[:32]}", about="env"):
            checked[env_name(key)] = str(value)
    return checked
