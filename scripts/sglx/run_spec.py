"""How a host runs the serving container: computed once, from the resolved profile, for every
way sglx starts the server.

Three consumers read the one `RunSpec`: the sglang_service role's systemd unit (through
`sglx ansible vars`, which emits the spec as ready lists the unit template only loops over),
install.sh (rendered from it at `sglx bundle create`) and `sglx bundle install` (which reads
the bundle's meta/run.json, written from it at create time). What only the host knows stays a
`Site` input: the image, the container name, the model folder, the published port, the site's
extra environment, and the numeric GIDs of the profile's groups when the profile asks for them
(devices.numeric_gids: the image cannot know the host's render GID), looked up on the host by
each consumer (Ansible's getent, `getent group` in install.sh, Python's grp).

The image id, when the consumer knows it, names the node-local JIT cache folder
(sglx_core.jit_cache): `<host_root>/<id hex>`, mounted at the profile's target and named in
SGLX_JIT_CACHE_HOST. Whoever starts the server creates it first, owned by the container's uid,
mode 0700 (`make_jit_folder`; the role's `file:` task; install.sh's mkdir, chown, chmod).

Weights kept outside the image are mounted read-only at the model target from the node-local
weights store (sglx_core.weights_store): `<models root>/<weights digest hex>`, the root being
the site's or the profile's `weights.store` (`model_folder`). Whoever installs the bundle has
placed and verified that entry first (sglx.weights.store, install.sh, the bundle_install role).
"""

from __future__ import annotations

import contextlib
import grp
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from sglx_core.device_lock import lock_dir_words
from sglx_core.digests import sha256_hex
from sglx_core.env_floors import raised
from sglx_core.errors import SglxError
from sglx_core.jit_cache import HOST_ENV, MODE, host_folder
from sglx_core.observability import DEPLOYMENT_ENV, deployment_env
from sglx_core.profile import Profile
from sglx_core.weights_store import entry_folder

MODEL_TARGET = "/models/model"
# Docker's restart policy for a container started by hand (install.sh, bundle install); the
# systemd unit restarts the container itself, with the same policy (Restart=).
RESTART = "on-failure"
RUN_SPEC_VERSION = 1


@dataclass(frozen=True)
class Device:
    path: str
    required: bool


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool
    required: bool


@dataclass(frozen=True)
class JitCache:
    """The node-local JIT cache (profile container.jit_cache): the folder in the container, the
    host folder that holds one folder per image id, and the uid that owns them."""

    target: str
    host_root: str
    uid: int


@dataclass(frozen=True)
class TunedMount:
    """Where a host's tuned set (profile tuning) is mounted: <host_root>/<set digest hex> on the
    host, read-only at target in the container (sglx-serve reads it there)."""

    target: str
    host_root: str


@dataclass(frozen=True)
class RunSpec:
    """Everything about `docker run` that follows from the profile."""

    arch: str
    network: str  # "host" or "bridge"
    port: int  # the server's port inside the container
    options: tuple[str, ...]  # --ipc, --shm-size, --cap-add, --security-opt, --ulimit words
    devices: tuple[Device, ...]
    groups: tuple[str, ...]
    numeric_gids: bool
    mounts: tuple[Mount, ...]  # the profile's mounts (a missing optional one is left out)
    lock: tuple[str, ...]  # the device-init lock folder's -v and -e words (sglx_core.device_lock)
    env: dict[str, str]  # the profile's environment with its floors raised
    raised: dict[str, str]  # which variables the floors raised, to what
    # None in the run.json of a bundle made before it existed: no cache folder is mounted.
    jit_cache: JitCache | None = None
    restart: str = RESTART
    model_target: str = MODEL_TARGET
    # The weights store's root (profile weights.store); None in the run.json of a bundle made
    # before the store existed.
    models_root: str | None = None
    server_args: tuple[str, ...] = ()
    # None for an arch that takes no tuned set, and in the run.json of a bundle made before.
    tuned: TunedMount | None = None
    # Where the server serves its metrics, on its port (profile observability); None where the
    # profile turns them off, and in the run.json of a bundle made before they existed.
    metrics_path: str | None = None
    version: int = field(default=RUN_SPEC_VERSION)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> RunSpec:
        """A spec read back (meta/run.json of a bundle): refused, naming `where`, when its shape
        is not the one this sglx writes."""
        try:
            if data.get("version") != RUN_SPEC_VERSION:
                raise ValueError(f"version {data.get('version')!r}, not {RUN_SPEC_VERSION}")
            spec = cls(
                **{
                    **data,
                    "options": _strs(data["options"]),
                    "devices": tuple(Device(**d) for d in data["devices"]),
                    "groups": _strs(data["groups"]),
                    "mounts": tuple(Mount(**m) for m in data["mounts"]),
                    "lock": _strs(data["lock"]),
                    "server_args": _strs(data["server_args"]),
                    "jit_cache": _jit_cache(data.get("jit_cache")),
                    "tuned": _tuned(data.get("tuned")),
                }
            )
            words = [*spec.options, *spec.lock, *spec.server_args, *spec.groups]
            words += [spec.arch, spec.network, spec.restart, spec.model_target]
            words += [] if spec.models_root is None else [spec.models_root]
            words += [] if spec.metrics_path is None else [spec.metrics_path]
            words += [w for d in spec.devices for w in (d.path,)]
            words += [w for m in spec.mounts for w in (m.source, m.target)]
            words += [w for kv in spec.env.items() for w in kv]
            if spec.tuned is not None:
                words += [spec.tuned.target, spec.tuned.host_root]
            if spec.jit_cache is not None:
                words += [spec.jit_cache.target, spec.jit_cache.host_root]
                if type(spec.jit_cache.uid) is not int or spec.jit_cache.uid < 0:
                    raise ValueError("jit_cache.uid is not a uid")
            if not all(isinstance(w, str) for w in words) or not isinstance(spec.port, int):
                raise ValueError("a value is not a string")
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise SglxError(
                f"{where} is not a run spec this sglx reads ({exc})",
                hint="re-create the bundle with this sglx version (`sglx bundle create`)",
                code="bundle_corrupt",
                path=where,
            ) from None
        return spec


def _strs(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list | tuple):
        raise TypeError("expected a list")
    return tuple(values)


def _jit_cache(value: Any) -> JitCache | None:
    return None if value is None else JitCache(**value)


def _tuned(value: Any) -> TunedMount | None:
    return None if value is None else TunedMount(**value)


def run_spec(profile: Profile) -> RunSpec:
    c = profile.container
    options = ["--ipc", c.ipc, "--shm-size", c.shm_size]
    for cap in c.cap_add:
        options += ["--cap-add", cap]
    for opt in c.security_opt:
        options += ["--security-opt", opt]
    for name, limit in sorted(c.ulimits.items()):
        # soft and hard alike; -1 (unlimited) takes no second value
        options += ["--ulimit", f"{name}={limit}:{limit}" if limit >= 0 else f"{name}=-1"]
    env = dict(profile.env)
    up = raised(profile.env_floors, env)
    return RunSpec(
        arch=profile.arch,
        network=c.network,
        port=c.port,
        options=tuple(options),
        devices=tuple(Device(n.path, n.required) for n in profile.devices.nodes),
        groups=tuple(profile.devices.groups),
        numeric_gids=profile.devices.numeric_gids,
        mounts=tuple(Mount(m.source, m.target, m.read_only, m.required) for m in c.mounts),
        lock=tuple(lock_dir_words(profile)),
        env={**env, **up},
        raised=up,
        jit_cache=JitCache(c.jit_cache.target, c.jit_cache.host_root, c.uid),
        models_root=profile.weights.store,
        tuned=TunedMount(profile.tuning.target, profile.tuning.host_root)
        if profile.tuning.files
        else None,
        metrics_path=profile.observability.metrics_path if profile.observability.metrics else None,
    )


@dataclass(frozen=True)
class Site:
    """What the host adds: `gids` maps each profile group to its numeric GID on the host
    (needed only when the spec's numeric_gids is true: `host_gids`)."""

    image: str
    name: str
    model_dir: str | None = None
    host_port: int | None = None  # default: the spec's port
    publish_address: str = ""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    gids: Mapping[str, int] = field(default_factory=dict)
    detached: bool = True  # install.sh, bundle install: -d and docker's restart policy
    present: Callable[[str], bool] | None = None  # which optional mount sources exist
    # The image's id (sha256:...): it names the JIT cache folder; None = no cache folder.
    image_id: str | None = None
    # The site's root of the JIT cache folders; None = the profile's host_root.
    jit_root: str | None = None
    # The weights digest (sha256:...) of weights kept outside the image: their store entry is
    # mounted at the model target (a model_dir, the older way, wins).
    weights_digest: str | None = None
    # The site's root of the weights store; None = the spec's (the profile's weights.store).
    models_root: str | None = None
    # The digest (sha256:...) of the tuned set placed on the host; None = no set is mounted.
    tuned_digest: str | None = None
    # The digest (sha256:...) of the bundle's bundle.json, which the install record is named by:
    # with the image id, the server's environment names what runs (its sglx_info labels).
    bundle_digest: str | None = None


def model_folder(spec: RunSpec, site: Site) -> str | None:
    """The host folder mounted read-only at the spec's model target: the site's model_dir, else
    the store entry of the site's weights digest, else None (the weights are in the image)."""
    if site.model_dir:
        return site.model_dir
    root = site.models_root or spec.models_root
    if site.weights_digest is None or root is None:
        return None
    return entry_folder(root, site.weights_digest)


def tuned_folder(spec: RunSpec, site: Site) -> str | None:
    """The host folder of the site's tuned set (<host_root>/<digest hex>), or None."""
    if spec.tuned is None or site.tuned_digest is None:
        return None
    return (
        f"{spec.tuned.host_root.rstrip('/')}/{sha256_hex(site.tuned_digest, 'a tuned set digest')}"
    )


def jit_folder(spec: RunSpec, site: Site) -> str | None:
    """The host folder of the site's image's JIT cache, or None when none is mounted (no image
    id, or a spec from before the cache existed)."""
    if spec.jit_cache is None or site.image_id is None:
        return None
    return host_folder(site.jit_root or spec.jit_cache.host_root, site.image_id)


def jit_words(spec: RunSpec, folder: str) -> list[str]:
    """`docker run` arguments: the host folder mounted read-write at the target, and the
    variable that names the host folder inside (for the refusal's fix)."""
    assert spec.jit_cache is not None
    return ["-v", f"{folder}:{spec.jit_cache.target}", "-e", f"{HOST_ENV}={folder}"]


def lock_folder(spec: RunSpec) -> str | None:
    """The host folder of the device-init lock the spec mounts (its `-v SOURCE:TARGET:ro`):
    every installer creates it, since podman, unlike Docker, does not create a missing
    bind-mount source."""
    for flag, value in pairwise(spec.lock):
        if flag == "-v":
            return value.split(":", 1)[0]
    return None


def make_lock_folder(spec: RunSpec) -> None:
    """Create the lock folder (root-owned 0755, as the sglang_service role does), if any."""
    folder = lock_folder(spec)
    if folder is None:
        return
    try:
        Path(folder).mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise SglxError(
            f"cannot create the device-init lock folder {folder}: {exc.strerror}",
            hint="run this as root: the started server mounts that folder",
            code="environment",
            path=folder,
        ) from None


def make_jit_folder(spec: RunSpec, folder: str) -> bool:
    """Create `folder` (and its root, root-owned 0755) owned by the spec's uid, mode 0700, as
    root does before starting the server; True when it was created or fixed, False when it was
    right already. A link in its place is refused, never followed."""
    assert spec.jit_cache is not None
    path, uid = Path(folder), spec.jit_cache.uid
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(MODE)
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode):
            raise SglxError(
                f"the JIT cache folder {path} is not a folder (a link or a file is there)",
                hint=f"remove {path}, then run this again: sglx creates it, owned by uid {uid}, "
                "mode 0700",
                code="environment",
                path=str(path),
            )
        if info.st_uid == uid and stat.S_IMODE(info.st_mode) == MODE:
            return False
        if info.st_uid != uid:
            os.lchown(path, uid, -1)
        path.chmod(MODE)
    except OSError as exc:
        raise SglxError(
            f"cannot create the JIT cache folder {path} owned by uid {uid}, mode 0700: "
            f"{exc.strerror or exc}",
            hint="run as root, or pass --jit-root DIR (a folder this user may chown in)",
            code="environment",
            path=str(path),
        ) from None
    return True


def host_gids(spec: RunSpec, lookup: Callable[[str], Any] | None = None) -> dict[str, int]:
    """The host's GID of each of the spec's groups, when the profile passes them by number."""
    if not spec.numeric_gids:
        return {}
    lookup = lookup or grp.getgrnam
    gids = {}
    for group in spec.groups:
        try:
            gids[group] = int(lookup(group).gr_gid)
        except KeyError:
            raise SglxError(
                f"the {spec.arch} profile passes group {group} by its numeric GID, and this host "
                "has no such group",
                hint="configure the host first (the accel_host role creates the device groups; "
                f"or `groupadd {group}` and the udev rules of the profile)",
                code="environment",
            ) from None
    return gids


def group_words(spec: RunSpec, gids: Mapping[str, int]) -> list[str]:
    words: list[str] = []
    for group in spec.groups:
        words += ["--group-add", str(gids[group]) if spec.numeric_gids else group]
    return words


def head_words(spec: RunSpec, site: Site) -> list[str]:
    """`docker run` up to the groups: mode, name, network or port, options, devices."""
    words = ["docker", "run"]
    if site.detached:
        words += ["-d", "--restart", spec.restart]
    words += ["--name", site.name]
    if spec.network == "host":
        words += ["--network", "host"]
    else:
        host_port = spec.port if site.host_port is None else site.host_port
        address = f"{site.publish_address}:" if site.publish_address else ""
        words += ["-p", f"{address}{host_port}:{spec.port}"]
    words += spec.options
    for device in spec.devices:
        words += ["--device", device.path]
    return words


def tail_words(spec: RunSpec, site: Site) -> list[str]:
    """`docker run` after the groups: mounts, lock, JIT cache, model, environment, image."""
    words: list[str] = []
    for mount in spec.mounts:
        if not mount.required and site.present is not None and not site.present(mount.source):
            continue
        words += ["-v", f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")]
    words += spec.lock
    folder = jit_folder(spec, site)
    if folder is not None:
        words += jit_words(spec, folder)
    model = model_folder(spec, site)
    if model is not None:
        words += ["-v", f"{model}:{spec.model_target}:ro"]
    tuned = tuned_folder(spec, site)
    if tuned is not None and spec.tuned is not None:
        words += ["-v", f"{tuned}:{spec.tuned.target}:ro"]
    deployment = deployment_env(site.image_id, site.bundle_digest)
    for key, value in sorted({**spec.env, **site.extra_env, **deployment}.items()):
        words += ["-e", f"{key}={value}"]
    words.append(site.image)
    words += spec.server_args
    return words


def docker_run_words(spec: RunSpec, site: Site) -> list[str]:
    """The whole `docker run` command line for this spec on this site."""
    return [*head_words(spec, site), *group_words(spec, site.gids), *tail_words(spec, site)]


def ansible_vars(spec: RunSpec) -> dict[str, Any]:
    """The spec as the sglang_service role's variables: ready lists its unit loops over."""
    return {
        "sglang_service_port": spec.port,
        "sglang_service_network": spec.network,
        "sglang_service_run_options": list(spec.options),
        "sglang_service_mounts": [asdict(m) for m in spec.mounts],
        "sglang_service_devices": [asdict(d) for d in spec.devices],
        "sglang_service_groups": list(spec.groups),
        "sglang_service_numeric_gids": spec.numeric_gids,
        "sglang_service_env": dict(spec.env),
        # The unit mounts <host_root or the site's>/<image id hex> at target, naming it in env.
        "sglang_service_jit_cache": {}
        if spec.jit_cache is None
        else {**asdict(spec.jit_cache), "mode": f"{MODE:04o}", "env": HOST_ENV},
        # The unit mounts <models root>/<weights digest hex> at target, read-only, for weights
        # kept outside the image (sglang_service_weights_digest).
        "sglang_service_weights_store": {}
        if spec.models_root is None
        else {"root": spec.models_root, "target": spec.model_target},
        # The unit mounts <root>/<tuned set digest hex> at target, read-only, when the rollout
        # placed a tuned set (sglang_service_tuned_digest). {} = the arch takes none.
        "sglang_service_tuning": {}
        if spec.tuned is None
        else {"root": spec.tuned.host_root, "target": spec.tuned.target},
        # Where the server serves its metrics on sglang_service_port ("" = the profile turns
        # them off); sglang_service_metrics turns them off on a host.
        "sglang_service_metrics_path": spec.metrics_path or "",
        # The variables the unit's environment names the image id and the bundle's digest in
        # (sglang_service_image, sglang_service_bundle_digest): the server's sglx_info labels.
        "sglang_service_deployment_env": {
            "image": DEPLOYMENT_ENV["image_id"],
            "bundle": DEPLOYMENT_ENV["bundle_digest"],
        },
    }
