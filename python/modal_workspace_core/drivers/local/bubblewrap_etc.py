"""The `/etc` a sandbox sees: constructed, never the host's with holes in it.

A few files are written for the sandbox (its users, its host name, how names resolve) and a short
allowlist of the host's configuration that programs need to run (the dynamic loader's cache, CA
certificates, time zone, locale and protocol tables, Debian's alternatives) is mounted read-only.
Nothing else of the host's `/etc` (credentials, service configuration, the operator's token or
secrets files) exists inside.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..command_user import COMMAND_USER_NAME

# The host's entries under /etc that programs read and that hold no secrets. Each is mounted
# read-only where it exists; a symlink is followed to the file it names (mounted at the same
# /etc path), so Debian's `alternatives` and a systemd resolver's link both keep working.
HOST_ETC_ALLOWLIST = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "ethertypes",
    "gai.conf",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "networks",
    "os-release",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "ssl/certs",
    "ssl/openssl.cnf",
    "pki/tls/certs",
    "pki/ca-trust/extracted",
    "terminfo",
    "timezone",
)

# The one user commands run as (its uid and gid as seen inside), and root for the files the
# sandbox's own processes own.
SANDBOX_USER = COMMAND_USER_NAME


def generated_files(uid: int, gid: int, home: str) -> dict[str, str]:
    """The files written for the sandbox, by their name under /etc."""
    return {
        "passwd": (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"{SANDBOX_USER}:x:{uid}:{gid}:workspace:{home}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        )
        if uid != 0
        else (
            f"root:x:0:0:workspace:{home}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "group": (
            f"root:x:0:\n{SANDBOX_USER}:x:{gid}:\nnogroup:x:65534:\n"
            if gid != 0
            else "root:x:0:\nnogroup:x:65534:\n"
        ),
        "hostname": "workspace\n",
        "hosts": "127.0.0.1\tlocalhost workspace\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        "nsswitch.conf": (
            "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
            "networks: files\nprotocols: files\nservices: files\nethers: files\n"
        ),
    }


def write_generated(directory: Path, uid: int, gid: int, home: str) -> list[tuple[Path, str]]:
    """Writes the generated files into `directory` (the gateway's own, never mounted writable)
    and returns each with the path it takes inside."""
    directory.mkdir(mode=0o755, exist_ok=True)
    placed = []
    for name, text in generated_files(uid, gid, home).items():
        path = directory / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o644)
        tmp.replace(path)
        placed.append((path, f"/etc/{name}"))
    return placed


def host_entries(etc: Path = Path("/etc")) -> list[tuple[Path, str]]:
    """The allowlisted host entries that exist: (host path to mount, path inside)."""
    found = []
    for name in HOST_ETC_ALLOWLIST:
        path = etc / name
        if not (path.exists() or path.is_symlink()):
            continue
        target = Path(os.path.realpath(path))
        if target.exists():
            found.append((target, f"/etc/{name}"))
    return found
