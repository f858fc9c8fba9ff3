"""Render images/<arch>/Dockerfile and images/<arch>/deps.sh (the script that installs the venv
the Dockerfile builds on) from the two templates, images/Dockerfile.j2 and images/deps.sh.j2.

The template receives the Profile and a few paths derived from it; it never works an arch fact
out for itself. Rendered files are committed so users can read them; `sglx image render
--check` fails when one is stale (a unit test runs it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglx_core.output_files import atomic_write_text
from sglx_core.profile import Profile, images_dir, known_arches, load_profile
from sglx_core.profile.loader import display_path
from sglx_core.report import Finding, Result, Table
from sglx_core.triton_cache import IMAGE_ROOT as TRITON_CACHE_ROOT

TEMPLATE = "Dockerfile.j2"
DEPS_TEMPLATE = "deps.sh.j2"
# Rendered file name -> its template.
RENDERED = {"Dockerfile": TEMPLATE, "deps.sh": DEPS_TEMPLATE}
MODEL_DIR = "/models/model"


def context(profile: Profile) -> dict[str, Any]:
    user = profile.container.user
    home = "/root" if user == "root" else f"/home/{user}"
    return {
        "profile": profile,
        "venv": profile.python.venv,
        # A base that provides packages (its torch) must stay visible inside the venv.
        "system_site_packages": bool(profile.base.provides),
        # The build route: the base ships sglang (upstream's SGLang ROCm images), or the lock
        # installs it; selected by the profile's sglang.wheel, never by arch name.
        "base_ships_sglang": profile.sglang.wheel == "base",
        "user": user,
        "home": home,
        "model_dir": MODEL_DIR,
        "triton_cache": TRITON_CACHE_ROOT,
        # The node-local JIT cache folder: the runtime user's, mode 0700 (sglx-serve refuses
        # any other; a host folder mounted over it must be the same).
        "jit_cache": profile.container.jit_cache.target,
        "writable": [profile.container.jit_cache.target, "/models"],
    }


def render_file(profile: Profile, name: str, root: Path | None = None) -> str:
    """The text of the rendered file `name` (a key of RENDERED) for `profile`."""
    import jinja2

    root = images_dir() if root is None else root
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    return environment.get_template(RENDERED[name]).render(**context(profile))


def render_dockerfile(profile: Profile, root: Path | None = None) -> str:
    return render_file(profile, "Dockerfile", root)


def render_deps_script(profile: Profile) -> str:
    return render_file(profile, "deps.sh")


def rendered_path(arch: str, name: str) -> Path:
    return images_dir() / arch / name


def dockerfile_path(arch: str) -> Path:
    return rendered_path(arch, "Dockerfile")


def deps_script_path(arch: str) -> Path:
    return rendered_path(arch, "deps.sh")


def stale_files(arch: str) -> list[Path]:
    """The rendered files of `arch` that are missing or differ from their template's text."""
    profile = load_profile(arch)
    return [
        rendered_path(arch, name)
        for name in RENDERED
        if not rendered_path(arch, name).is_file()
        or rendered_path(arch, name).read_text() != render_file(profile, name)
    ]


def render(arches: list[str], check: bool) -> Result:
    rows = []
    findings = []
    for arch in arches or known_arches():
        profile = load_profile(arch)
        for name in RENDERED:
            path = rendered_path(arch, name)
            text = render_file(profile, name)
            current = path.read_text() if path.is_file() else None
            if current == text:
                rows.append((display_path(path), "up to date"))
            elif check:
                rows.append((display_path(path), "STALE"))
                findings.append(
                    Finding(
                        "dockerfile_stale",
                        f"{display_path(path)} differs from "
                        f"the template rendered with images/{arch}/arch.yaml",
                        hint="run `sglx image render` and commit the result",
                    )
                )
            else:
                atomic_write_text(path, text)
                rows.append((display_path(path), "written"))
    return Result(
        ("image", "render"),
        data={"dockerfiles": dict(rows)},
        tables=(Table(("file", "state"), tuple(rows)),),
        findings=tuple(findings),
    )
