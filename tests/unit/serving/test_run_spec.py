"""Issue 23: one run spec, three ways to run the server, one `docker run`.

For every arch, the run spec (sglx.run_spec) is rendered three ways and read back as the
command each would execute: the sglang_service role's systemd unit (its templates rendered with
the role's own filters and the spec's `sglx ansible vars`; the ExecStart words read back the way
systemd unquotes them, the environment file the way `docker run --env-file` reads it),
install.sh (the generated script run on a hand-made bundle, its printed line run by `sh` with
a fake `docker` first on PATH that records its argv) and `sglx bundle install` (its start line
from the bundle's meta/run.json). Devices, groups (by numeric GID where the profile says so:
gfx1151), environment after the floors, mounts (the node-local JIT cache folder of the image
among them), options, port and image arguments must agree.
The host's GIDs come from one table: Ansible's getent facts, a fake `getent` for install.sh
and Python's grp for bundle install all answer from it.
"""

from __future__ import annotations

import ast
import grp
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from helpers.bundles import hand_bundle

from sglx.ansible_vars import render_vars
from sglx.bundle import install_sh, run_line
from sglx.bundle.carried_spec import read_carried_spec
from sglx.bundle.manifest import parse
from sglx.run_spec import RunSpec, Site, docker_run_words, make_jit_folder, run_spec
from sglx.run_spec import ansible_vars as spec_vars
from sglx_core.jit_cache import HOST_ENV
from sglx_core.observability import DEPLOYMENT_ENV
from sglx_core.profile import known_arches, load_profile

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "ansible" / "roles" / "sglang_service"
IMAGE_REF = "fixture-scan:test"  # what hand_bundle's manifest names
IMAGE_ID = "sha256:" + "0" * 64
# Weights kept outside the image: the bundle carries them, each consumer mounts their weights
# store entry (<models root>/<digest hex>) read-only at the model target.
WEIGHTS_DIGEST = "sha256:" + "cd" * 32
WEIGHTS = {"model.safetensors": b"weights", "sglx-weights.json": b"{}\n"}
# Fake host GIDs, far from any real group's.
GIDS = {"video": 4401, "render": 4402}


def _role_filters() -> dict[str, Any]:
    import importlib.util

    path = ROLE.parent / "sglx_escape" / "filter_plugins" / "sglx_escape.py"
    spec = importlib.util.spec_from_file_location("sglx_escape", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    filters: dict[str, Any] = module.FilterModule().filters()
    return filters


def render(template: str, variables: dict[str, Any]) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,  # Ansible's template module defaults
        keep_trailing_newline=True,
    )
    env.filters.update(CoreFilters().filters())
    env.filters.update(_role_filters())
    return env.get_template(template).render(**variables)


_WORD = re.compile(r'"((?:[^"\\]|\\.)*)"|(\S+)')


def unit_words(unit: str) -> list[str]:
    """ExecStart's argv: continuation lines joined, each word unquoted as systemd does for
    sglx_systemd_word's two spellings (plain, or "..." with \\ escapes, %% and $$)."""
    start = unit.index("\nExecStart=") + len("\nExecStart=")
    lines = []
    for line in unit[start:].split("\n"):
        lines.append(line.removesuffix("\\"))
        if not line.endswith("\\"):
            break
    words = []
    for quoted, bare in _WORD.findall(" ".join(lines)):
        word = re.sub(r"\\(.)", r"\1", quoted) if quoted else bare
        words.append(word.replace("%%", "%").replace("$$", "$"))
    return words


def env_file(text: str) -> dict[str, str]:
    """`docker run --env-file`: NAME=value lines, `#` lines skipped, values verbatim."""
    lines = [line for line in text.split("\n") if line.strip() and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


# Options whose value may repeat; everything sglx writes before the image takes one value.
def normalized(
    words: list[str], env_files: dict[str, dict[str, str]] | None = None
) -> dict[str, Any]:
    """A `docker run` as what it asks for: each option's values in order, -e and --env-file
    merged into one environment, the image and the server arguments; the way the container is
    kept (-d, --restart, --name) is left to the caller."""
    assert words[1] == "run", words
    options: dict[str, list[str]] = {}
    env: dict[str, str] = {}
    rest = words[2:]
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag == "-d":
            continue
        value = rest.pop(0)
        if flag == "-e":
            key, _, val = value.partition("=")
            env[key] = val
        elif flag == "--env-file":
            env.update((env_files or {})[value])
        else:
            options.setdefault(flag, []).append(value)
    for flag in ("--restart", "--name"):
        options.pop(flag, None)
    # Device nodes are a set to docker; the role passes them sorted, the run spec in its order.
    if "--device" in options:
        options["--device"].sort()
    return {"options": options, "env": env, "image": rest[0], "args": rest[1:]}


def jit_root() -> str:
    """The JIT cache root of this test session (conftest.py sets SGLX_JIT_ROOT): the site's
    root for every consumer, as `sglang_service_jit_cache_root`, --jit-root, $SGLX_JIT_ROOT."""
    return os.environ["SGLX_JIT_ROOT"]


def models_root() -> str:
    """The weights store of this test session (conftest.py sets SGLX_MODELS_ROOT)."""
    return os.environ["SGLX_MODELS_ROOT"]


def expected(spec: RunSpec, bundle_digest: str | None = None) -> dict[str, Any]:
    site = Site(
        image=IMAGE_REF,
        name="x",
        gids=GIDS,
        image_id=IMAGE_ID,
        jit_root=jit_root(),
        weights_digest=WEIGHTS_DIGEST,
        models_root=models_root(),
        bundle_digest=bundle_digest,
    )
    return normalized(docker_run_words(spec, site))


def digest_of(bundle: Path) -> str:
    """The bundle's digest: the sha256 of its bundle.json (the install record's key)."""
    return "sha256:" + hashlib.sha256((bundle / "bundle.json").read_bytes()).hexdigest()


def render_role_vars(variables: dict[str, Any]) -> None:
    """The role's own variables (vars/main.yml), rendered as Ansible would, in order."""
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    for name, expression in role_vars.items():
        try:
            value = render_text(expression, variables).strip()
        except jinja2.UndefinedError:  # Ansible templates a variable when it is used
            continue
        # Ansible reads a rendered list or mapping back as one (its templar's literal_eval).
        variables[name] = ast.literal_eval(value) if value[:1] in ("[", "{") else value


def render_text(text: str, variables: dict[str, Any]) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(CoreFilters().filters())
    return env.from_string(text).render(**variables)


# --------------------------------------------------------------------------------------------


def unit_variables(arch: str, bundle_digest: str = "") -> dict[str, Any]:
    """The role's variables for `arch`'s unit, rendered as Ansible would."""
    profile = load_profile(arch)
    variables: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables.update(render_vars(profile))
    spec = run_spec(profile)
    variables.update(
        ansible_managed="managed",
        sglang_service_image=IMAGE_ID,
        sglang_service_bundle_digest=bundle_digest,
        sglang_service_host_port=spec.port,
        sglang_service_weights_digest=WEIGHTS_DIGEST,
        sglang_service_models_root=models_root(),
        sglang_service_env_files=[],
        __sglang_service_network_mode=spec.network,
        __sglang_service_server_args=[],
        # preflight's `find` of the device globs (vars/main.yml makes the --device paths of it)
        __sglang_service_nodes={"results": [{"files": [{"path": d.path}]} for d in spec.devices]},
        # every mount source present on this host (the role stats them)
        __sglang_service_mount_sources={
            "results": [
                {"item": m, "stat": {"exists": True}} for m in variables["sglang_service_mounts"]
            ]
        },
        # ansible.builtin.getent's facts: name -> [password, gid, members]
        getent_group={name: ["x", str(gid), ""] for name, gid in GIDS.items()},
        sglang_service_jit_cache_root=jit_root(),
    )
    render_role_vars(variables)
    return variables


def via_unit(arch: str, bundle_digest: str = "") -> dict[str, Any]:
    variables = unit_variables(arch, bundle_digest)
    spec = run_spec(load_profile(arch))
    unit = render("server.service.j2", variables)
    files = {"/etc/sglx/sglx-server.env": env_file(render("server.env.j2", variables))}
    words = unit_words(unit)
    assert words[0] == variables["sglang_service_docker"]
    got = normalized(["docker", *words[1:]], files)
    got["image"] = IMAGE_REF if got["image"] == IMAGE_ID else got["image"]
    assert f"\nRestart={spec.restart}\n" in unit
    return got


def fake_bin(folder: Path, record: Path) -> Path:
    """`docker` that has every image (`image inspect` prints the id asked for) and records a
    run's argv; `getent` that answers GIDS."""
    folder.mkdir()
    (folder / "docker").write_text(
        '#!/bin/sh\nif [ "$1" = image ]; then for a; do id=$a; done; echo "$id"; exit 0; fi\n'
        f"printf '%s\\0' \"$@\" > {record}\n"
    )
    table = "".join(f'  {name}) echo "{name}:x:{gid}:" ;;\n' for name, gid in GIDS.items())
    (folder / "getent").write_text(
        '#!/bin/sh\n[ "$1" = group ] || exit 2\ncase $2 in\n' + table + "  *) exit 2 ;;\nesac\n"
    )
    for tool in ("docker", "getent"):
        (folder / tool).chmod(0o755)
    return folder


def make_bundle(arch: str, where: Path) -> Path:

    from sglx.bundle.manifest import WeightsFile, WeightsRecord

    profile = load_profile(arch)
    stored = tuple(
        WeightsFile(name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        for name, data in WEIGHTS.items()
    )
    weights = WeightsRecord(
        name="demo", path="weights/demo", digest=WEIGHTS_DIGEST, size=sum(f.size for f in stored)
    )
    script = install_sh.render(
        profile, version="test", image_ref=IMAGE_REF, image_id=IMAGE_ID,
        chunks=("image/image.tar.000",), weights=weights, weights_files=stored,
    )  # fmt: skip
    archive = where / "image.tar"
    archive.write_bytes(os.urandom(2048))
    files = {
        "install.sh": script.encode(),
        "meta/run.json": (json.dumps(run_spec(profile).to_json(), indent=2) + "\n").encode(),
        **{f"weights/demo/{name}": data for name, data in WEIGHTS.items()},
    }
    bundle: Path = hand_bundle(where / "bundle", archive, files, chunk_size=4096, weights=weights)
    return bundle


def via_install_sh(bundle: Path, tmp_path: Path, shell: Sequence[str] = ("sh",)) -> dict[str, Any]:
    record = tmp_path / "argv"
    path = f"{fake_bin(tmp_path / 'bin', record)}:{os.environ['PATH']}"
    done = subprocess.run(
        [*shell, "install.sh"], cwd=bundle, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    ran = subprocess.run(
        ["sh", "-c", line], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    argv = record.read_bytes().decode().split("\0")[:-1]
    assert argv[:4] == ["run", "-d", "--restart", "on-failure"]
    return normalized(["docker", *argv])


def via_bundle_install(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    def getgrnam(name: str) -> Any:
        if name not in GIDS:
            raise KeyError(name)
        return SimpleNamespace(gr_gid=GIDS[name])

    monkeypatch.setattr(grp, "getgrnam", getgrnam)
    manifest = parse((bundle / "bundle.json").read_bytes(), "bundle.json")
    entry = Path(models_root()) / WEIGHTS_DIGEST.removeprefix("sha256:")
    words, why_not, folder = run_line.docker_run_line(
        read_carried_spec(bundle), manifest, entry, Path(jit_root()), Path(models_root()),
        bundle_digest=digest_of(bundle),
    )  # fmt: skip
    assert words, why_not
    assert folder == f"{jit_root()}/{'0' * 64}"
    return normalized(words)


@pytest.mark.parametrize("arch", known_arches())
def test_unit_install_sh_and_bundle_install_run_the_same_container(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("coreutils' sha256sum is needed to run install.sh")
    spec = run_spec(load_profile(arch))
    bundle = make_bundle(arch, tmp_path)
    digest = digest_of(bundle)
    want = expected(spec, digest)
    # what runs, named in the server's environment: its sglx_info labels
    assert {k: want["env"].get(k) for k in DEPLOYMENT_ENV.values()} == {
        "SGLX_IMAGE_ID": IMAGE_ID,
        "SGLX_BUNDLE_DIGEST": digest,
    }
    assert via_unit(arch, digest) == want
    assert via_install_sh(bundle, tmp_path) == want
    assert via_bundle_install(bundle, monkeypatch) == want


@pytest.mark.parametrize(
    "shell", [["dash"], ["bash", "--posix"], ["busybox", "sh"]], ids=["dash", "bash", "busybox"]
)
def test_install_sh_installs_alike_under_each_shell_a_host_may_have(
    shell: list[str], tmp_path: Path
) -> None:
    """dash (Debian's and Ubuntu's sh), bash (RHEL's) and BusyBox's ash (a minimal host; Debian's
    `busybox`, installed by scripts/bootstrap.sh): the whole install, weights placed in the
    store and the record written, ends in the same docker run line."""
    if shutil.which(shell[0]) is None:
        pytest.fail(f"{shell[0]} is needed: scripts/bootstrap.sh installs it")
    bundle = make_bundle("cpu", tmp_path)
    want = expected(run_spec(load_profile("cpu")), digest_of(bundle))
    assert via_install_sh(bundle, tmp_path, shell) == want


def test_gfx1151_passes_its_groups_by_the_hosts_numeric_gid() -> None:
    spec = run_spec(load_profile("gfx1151"))
    assert spec.numeric_gids
    assert expected(spec)["options"]["--group-add"] == [str(GIDS[g]) for g in spec.groups]
    named = normalized(docker_run_words(run_spec(load_profile("gfx942")), Site("i", "x")))
    assert named["options"]["--group-add"] == ["video", "render"]


@pytest.mark.parametrize("switch", ["1", "true", "YES", "y"])
def test_the_env_floor_is_raised_in_the_spec_once(switch: str) -> None:
    """However sglang would read the switch as on (issue 40 item 3: EnvBool's words)."""
    profile = load_profile("gfx942")
    on = profile.model_copy(update={"env": {**profile.env, "SGLANG_ROCM_USE_MULTI_STREAM": switch}})
    assert run_spec(on).env["GPU_MAX_HW_QUEUES"] == "5"
    assert run_spec(on).raised == {"GPU_MAX_HW_QUEUES": "5"}
    assert "GPU_MAX_HW_QUEUES" not in run_spec(profile).env
    off = profile.model_copy(
        update={"env": {**profile.env, "SGLANG_ROCM_USE_MULTI_STREAM": "False"}}
    )
    assert "GPU_MAX_HW_QUEUES" not in run_spec(off).env
    template = (ROLE / "templates" / "server.env.j2").read_text()
    assert "sglang_service_env_floors" not in template  # the rule is sglx_core.env_floors


def test_a_host_without_a_numeric_group_gets_no_line_and_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = make_bundle("gfx1151", tmp_path)

    def getgrnam(name: str) -> Any:
        raise KeyError(name)

    monkeypatch.setattr(grp, "getgrnam", getgrnam)
    manifest = parse((bundle / "bundle.json").read_bytes(), "bundle.json")
    words, why_not, folder = run_line.docker_run_line(read_carried_spec(bundle), manifest, None)
    assert words == [] and folder is None
    assert "has no such group" in why_not and "accel_host" in why_not


# --- the node-local JIT cache folder (issue 27) ------------------------------------------------

HEX = "ab" * 32


def test_the_jit_cache_folder_of_the_image_is_mounted_and_named() -> None:
    """<host_root>/<id hex> at the profile's target, named in SGLX_JIT_CACHE_HOST; the site's
    root wins over the profile's; no image id, no folder."""
    profile = load_profile("gfx942")
    spec = run_spec(profile)
    target = profile.container.jit_cache.target
    folder = f"{profile.container.jit_cache.host_root}/{HEX}"
    got = normalized(docker_run_words(spec, Site("i", "x", image_id=f"sha256:{HEX}")))
    assert f"{folder}:{target}" in got["options"]["-v"]
    assert got["env"][HOST_ENV] == folder
    # What the folder is for: every JIT compiler's cache (issue 40 item 8: AITER's cpp_itfs
    # builds under AITER_ROOT_DIR, which was unset, so they rebuilt at every start).
    for cache in ("TRITON_CACHE_DIR", "AITER_JIT_DIR", "AITER_ROOT_DIR"):
        assert spec.env[cache].startswith(target + "/"), cache
    moved = normalized(
        docker_run_words(spec, Site("i", "x", image_id=f"sha256:{HEX}", jit_root="/srv/jit/"))
    )
    assert f"/srv/jit/{HEX}:{target}" in moved["options"]["-v"]
    assert moved["env"][HOST_ENV] == f"/srv/jit/{HEX}"
    bare = normalized(docker_run_words(spec, Site("i", "x")))
    assert HOST_ENV not in bare["env"] and not any(target in v for v in bare["options"]["-v"])
    assert HOST_ENV in profile.ranks.per_node_env  # a host folder: never compared across ranks


def test_a_run_spec_from_before_the_jit_cache_mounts_none() -> None:
    """meta/run.json of a bundle made before the cache existed still reads, without a folder."""
    data = run_spec(load_profile("cpu")).to_json()
    del data["jit_cache"]
    old = RunSpec.from_json(data, "meta/run.json")
    assert old.jit_cache is None
    got = normalized(docker_run_words(old, Site("i", "x", image_id=f"sha256:{HEX}")))
    assert HOST_ENV not in got["env"]
    assert spec_vars(old)["sglang_service_jit_cache"] == {}


def test_the_role_gets_the_cache_as_data_and_mounts_the_images_folder() -> None:
    profile = load_profile("cpu")
    cache = render_vars(profile)["sglang_service_jit_cache"]
    assert cache == {
        "target": "/var/cache/sglx",
        "host_root": "/var/cache/sglx/jit",
        "uid": profile.container.uid,
        "mode": "0700",
        "env": HOST_ENV,
    }
    variables = {
        "sglang_service_jit_cache": cache,
        "sglang_service_jit_cache_root": "",
        "sglang_service_image": f"sha256:{HEX}",
    }
    render_role_vars(variables)
    assert variables["__sglang_service_jit_folder"] == f"/var/cache/sglx/jit/{HEX}"
    variables.update(sglang_service_jit_cache={}, sglang_service_jit_cache_root="")
    render_role_vars(variables)
    assert variables["__sglang_service_jit_folder"] == ""


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="creating a folder for uid 1000")


@needs_root
def test_make_jit_folder_creates_it_private_fixes_it_and_refuses_a_link(tmp_path: Path) -> None:
    from sglx_core.errors import SglxError

    spec = run_spec(load_profile("cpu"))
    folder = tmp_path / "root" / HEX
    assert make_jit_folder(spec, str(folder)) is True
    info = folder.stat()
    assert (info.st_uid, info.st_mode & 0o7777) == (1000, 0o700)  # container.uid, 0700
    assert (folder.parent.stat().st_mode & 0o777) == 0o755
    assert make_jit_folder(spec, str(folder)) is False  # already right: nothing done
    folder.chmod(0o777)
    assert make_jit_folder(spec, str(folder)) is True
    assert folder.stat().st_mode & 0o7777 == 0o700
    link = tmp_path / "root" / ("cd" * 32)
    link.symlink_to(tmp_path)
    with pytest.raises(SglxError, match="is not a folder"):
        make_jit_folder(spec, str(link))
    assert tmp_path.stat().st_uid == 0  # what the link points at was not handed over


def run_install_sh(
    bundle: Path, tmp_path: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    record = tmp_path / "argv"
    bin_dir = tmp_path / "bin"
    path = f"{bin_dir if bin_dir.is_dir() else fake_bin(bin_dir, record)}:{os.environ['PATH']}"
    return subprocess.run(
        ["sh", "install.sh", "--state", str(tmp_path / "state"), *args], cwd=bundle,
        capture_output=True, text=True, timeout=60, env={**os.environ, "PATH": path, **env},
    )  # fmt: skip


@needs_root
def test_install_sh_creates_the_folder_its_line_mounts(tmp_path: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("coreutils' sha256sum is needed to run install.sh")
    bundle = make_bundle("cpu", tmp_path)
    root = tmp_path / "site-jit"
    done = run_install_sh(bundle, tmp_path, "--jit-root", str(root))
    assert done.returncode == 0, done.stderr
    folder = root / ("0" * 64)
    info = folder.stat()
    assert (info.st_uid, info.st_mode & 0o7777) == (1000, 0o700)
    line = done.stdout.strip().splitlines()[-1]
    assert f"-v {folder}:/var/cache/sglx " in line and f"-e {HOST_ENV}={folder} " in line
    assert f"the JIT cache folder of this image: {folder} (uid 1000, mode 0700)" in done.stderr
    folder.chmod(0o755)  # a second run puts the mode right again
    assert run_install_sh(bundle, tmp_path, "--jit-root", str(root)).returncode == 0
    assert folder.stat().st_mode & 0o7777 == 0o700
    # The bundle_install role's run starts no server from the line: no folder.
    other = tmp_path / "role-root"
    done = run_install_sh(bundle, tmp_path, SGLX_JIT_ROOT=str(other),
                          SGLX_INSTALL_DOOR="bundle_install")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not other.exists()


@pytest.mark.parametrize(
    ("root", "said"),
    [
        ("relative/jit", "is not a plain absolute path"),
        ("/srv/jit dir", "is not a plain absolute path"),
        ("/srv/jit/", "is not a plain absolute path"),
    ],
)
def test_install_sh_refuses_a_jit_root_it_cannot_print(
    tmp_path: Path, root: str, said: str
) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("coreutils' sha256sum is needed to run install.sh")
    bundle = make_bundle("cpu", tmp_path)
    done = run_install_sh(bundle, tmp_path, "--check", SGLX_JIT_ROOT=root)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "hint: pass --jit-root DIR" in done.stderr


@needs_root
def test_install_sh_refuses_a_link_in_place_of_the_folder(tmp_path: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("coreutils' sha256sum is needed to run install.sh")
    bundle = make_bundle("cpu", tmp_path)
    root = tmp_path / "jit"
    root.mkdir()
    (root / ("0" * 64)).symlink_to(tmp_path)
    done = run_install_sh(bundle, tmp_path, "--jit-root", str(root))
    assert done.returncode == 2
    assert "is a symbolic link" in done.stderr
    assert tmp_path.stat().st_uid == 0  # what the link points at was not handed over


@pytest.mark.parametrize("arch", known_arches())
def test_the_server_runs_with_no_added_privilege(arch: str) -> None:
    """Issue 40 item 11: no profile adds a capability, unconfines seccomp or runs privileged.
    AMD's CI runs RCCL and JAX on MI355X under the defaults (jax-ml/jax PR #40370, ROCm/TheRock
    PR #7260), and a P800 serves without them (research/kunlun.md); a site that debugs with
    ptrace adds them for that host."""
    options = expected(run_spec(load_profile(arch)))["options"]
    assert not {"--cap-add", "--security-opt", "--privileged"} & set(options), options


def test_the_planned_restart_is_off_unless_the_site_sets_it() -> None:
    """Seed 000's fragmentation policy (S0-51): off by default; set, systemd stops the server
    after that many seconds (RuntimeMaxSec=, a failure that Restart=on-failure restarts) plus a
    random spread per host."""
    variables = unit_variables("cpu")
    unit = render("server.service.j2", variables)
    assert "RuntimeMaxSec" not in unit and "RuntimeRandomizedExtraSec" not in unit
    variables.update(sglang_service_max_runtime=86400, sglang_service_max_runtime_spread=1800)
    unit = render("server.service.j2", variables)
    assert "\nRestart=on-failure\n" in unit
    assert "\nRuntimeMaxSec=86400\nRuntimeRandomizedExtraSec=1800\n" in unit


@pytest.mark.parametrize("arch", ["gfx942", "cpu"])
def test_the_unit_mounts_the_tuned_set_where_the_run_spec_does(arch: str) -> None:
    """The rollout's tuned set, <tuning.host_root>/<digest hex>, read-only at tuning.target:
    the unit and `docker run` words of the run spec mount the same folder; an arch that takes
    no set (cpu) mounts none whatever digest a site passes, and a run spec from before the set
    existed reads without one."""
    digest = f"sha256:{HEX}"
    profile = load_profile(arch)
    spec = run_spec(profile)
    variables = unit_variables(arch)
    variables.update(sglang_service_tuned_digest=digest)
    render_role_vars(variables)
    files = {"/etc/sglx/sglx-server.env": env_file(render("server.env.j2", variables))}
    unit = normalized(["docker", *unit_words(render("server.service.j2", variables))[1:]], files)
    words = normalized(docker_run_words(spec, Site("i", "x", tuned_digest=digest)))
    folder = f"{profile.tuning.host_root}/{HEX}:{profile.tuning.target}:ro"
    if arch == "cpu":
        assert spec.tuned is None and variables["__sglang_service_tuned_folder"] == ""
        assert not any(folder in v for v in unit["options"]["-v"] + words["options"]["-v"])
        return
    assert folder in unit["options"]["-v"] and folder in words["options"]["-v"]
    data = spec.to_json()
    del data["tuned"]
    assert RunSpec.from_json(data, "meta/run.json").tuned is None
