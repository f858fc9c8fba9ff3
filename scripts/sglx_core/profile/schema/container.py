"""The devices the container gets and how it runs: device nodes, probes, mounts, the JIT cache."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
)

from sglx_core.profile.schema.types import AbsPath, Name, Text, _Strict


class DeviceNode(_Strict):
    """A device path the container needs, passed with --device."""

    path: Annotated[str, StringConstraints(strict=True, pattern=r"^/dev/\S+$")] = Field(
        description="Device path; a glob (e.g. /dev/xpu[0-9]*) matches numbered cards."
    )
    kind: Literal["char", "dir"] = Field(description="char device, or a directory of devices.")
    required: StrictBool = Field(default=True, description="Serving fails without it.")
    purpose: Text = Field(description="What needs it; shown when it is missing.")


class NoProbe(_Strict):
    """No device to find (the cpu reference)."""

    kind: Literal["none"]


class KfdProbe(_Strict):
    """AMD: read the KFD topology (sysfs) for GPU nodes of the right gfx target."""

    kind: Literal["kfd"]
    gfx_target_versions: tuple[StrictInt, ...] = Field(
        min_length=1,
        description="`gfx_target_version` values in /sys/class/kfd/kfd/topology/nodes/*/"
        "properties that belong to this arch (gfx942 = 90402).",
    )


class KunlunProbe(_Strict):
    """Kunlun: device nodes plus the PCI ids in sysfs; never imports the vendor stack."""

    kind: Literal["kunlun"]
    pci_vendors: tuple[
        Annotated[str, StringConstraints(strict=True, pattern=r"^0x[0-9a-f]{4}$")], ...
    ] = Field(
        min_length=1,
        description="PCI vendor ids the cards report (sysfs `vendor`), e.g. 0x1d22 and 0x2057: "
        "Kunlunxin's cards carry either.",
    )
    pci_devices: tuple[Annotated[str, StringConstraints(pattern=r"^0x[0-9a-f]{4}$")], ...] = Field(
        min_length=1, description="PCI device ids of supported cards."
    )
    version_file: AbsPath = Field(description="Driver version file (KLRM version).")


class Interconnect(_Strict):
    """How the devices of one host reach each other, in the vendor's words: the probe reads
    whether all of a server's devices share the fast link (its `interconnect` fact), and
    preflight's `interconnect` check says what that means with these."""

    fast: Text = Field(description="The link the devices of one group share (xGMI).")
    slow: Text = Field(description="What devices outside one group talk over (PCIe).")
    cost: Text = Field(description="What tensor parallelism over the slow link costs, sourced.")
    fix: Text = Field(description="What to serve instead, shown with the warning.")


class Devices(_Strict):
    """Device nodes, the groups that may open them, and how to find the hardware."""

    nodes: tuple[DeviceNode, ...] = ()
    groups: tuple[Name, ...] = Field(
        default=(), description="Groups the runtime user joins to open the device nodes."
    )
    numeric_gids: StrictBool = Field(
        default=False,
        description="Pass groups to the container by the host's numeric GID (the image may not "
        "know the host's render GID).",
    )
    probe: NoProbe | KfdProbe | KunlunProbe = Field(discriminator="kind")
    interconnect: Interconnect | None = Field(
        default=None,
        description="How the probe's link reading is worded; none where sglx cannot read it.",
    )


class Mount(_Strict):
    """A host path bind-mounted into the server container."""

    source: AbsPath = Field(description="Path on the host.")
    target: AbsPath = Field(description="Path in the container.")
    read_only: StrictBool = Field(default=True, description="Mount read-only.")
    required: StrictBool = Field(
        default=False, description="Serving fails without it (else skipped when absent)."
    )
    purpose: Text = Field(description="Why the container needs it.")


class LockDir(_Strict):
    """The host folder of the device-init lock, mounted into every server container.

    The plugin serialises device bring-up with an flock on the folder $SGLX_LOCK_DIR names
    (plugin/sglx_platform/device_init.py). Every `docker run` sglx writes (the systemd unit,
    install.sh, `sglx bundle install`) mounts `source` at `target` and sets SGLX_LOCK_DIR to
    `target`, so all server containers of a host take one lock. Neither is baked into the image:
    a container run by hand without the mount keeps a lock of its own."""

    source: AbsPath = Field(
        description="Folder on the host; the role creates it (root, 0755) and `docker run -v` "
        "creates it when absent: the lock needs only read access."
    )
    target: AbsPath = Field(description="Where the container sees it; SGLX_LOCK_DIR is set to it.")


class JitCache(_Strict):
    """The node-local JIT cache: one host folder per image id, mounted where the profile's
    JIT caches live (TRITON_CACHE_DIR, AITER_JIT_DIR and the like point under `target`).

    The host folder of an image is `<host_root>/<image id hex, without "sha256:">`: never shared
    between images, so never reused across arch or image; owned by container.uid, mode 0700.
    Every `docker run` sglx writes (the systemd unit, install.sh, `sglx bundle install`)
    creates it and mounts it at `target`, naming it in SGLX_JIT_CACHE_HOST. The server loads
    code from it, so sglx-serve refuses to start when the folder is not its own, mode 0700
    (runtime/sglx_runtime/jit_cache.py)."""

    target: AbsPath = Field(
        description="The folder in the container (the image makes it, owned by the runtime "
        "user, mode 0700)."
    )
    host_root: AbsPath = Field(
        description="Folder on the host that holds one cache folder per image id; a site may "
        "override it (sglang_service_jit_cache_root, install.sh and `sglx bundle install` "
        "--jit-root).",
    )


class Container(_Strict):
    """How the server container runs (docker run flags, Docker SDK arguments)."""

    user: Name = Field(description="Runtime user; 'root' only where the vendor stack needs it.")
    uid: StrictInt = Field(ge=0, description="UID of the runtime user inside the image.")
    ipc: Literal["host", "private", "shareable"] = Field(
        default="private", description="--ipc mode (host when ranks share memory)."
    )
    shm_size: Annotated[str, StringConstraints(strict=True, pattern=r"^\d+[kmg]$")] = Field(
        description="--shm-size (e.g. 16g)."
    )
    cap_add: tuple[Annotated[str, StringConstraints(pattern=r"^[A-Z_]+$")], ...] = Field(
        default=(), description="--cap-add capabilities (never --privileged)."
    )
    security_opt: tuple[Text, ...] = Field(default=(), description="--security-opt values.")
    ulimits: dict[Name, StrictInt] = Field(default_factory=dict, description="-1 = unlimited.")
    mounts: tuple[Mount, ...] = Field(default=(), description="Host paths bind-mounted in.")
    lock_dir: LockDir = Field(
        description="Host folder of the device-init lock (one per host, shared by its servers)."
    )
    jit_cache: JitCache = Field(
        description="Node-local JIT cache folder, one per image id on each host."
    )
    network: Literal["bridge", "host"] = Field(
        default="bridge", description="Container network (host only for multi-node/RDMA)."
    )
    port: StrictInt = Field(ge=1, le=65535, description="Port the server listens on.")
