"""Which extra of the sglx distribution brings each library the host commands import lazily.

`pip install sglx` carries only what reading a profile needs (images bake it in for the
plugin); scanning, images and weights import the [host] extra's libraries when they run.
Without them a command would end in a ModuleNotFoundError; `cli.main` turns it into an error
that names the extra to install, once, for every command.
"""

from __future__ import annotations

from collections.abc import Sequence

from sglx_core.errors import SglxError

# Import name -> (distribution, extra), one row per distribution of pyproject.toml's [host]
# extra; tests/unit/cli/test_cli_errors.py checks that the two agree.
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "cryptography": ("cryptography", "host"),
    "cvss": ("cvss", "host"),
    "cyclonedx": ("cyclonedx-python-lib", "host"),
    "debian": ("python-debian", "host"),
    "docker": ("docker", "host"),
    "elftools": ("pyelftools", "host"),
    "google": ("protobuf", "host"),
    "in_toto": ("in-toto", "host"),
    "in_toto_attestation": ("in-toto-attestation", "host"),
    "jinja2": ("jinja2", "host"),
    "ml_dtypes": ("ml_dtypes", "host"),
    "model_signing": ("model-signing", "host"),
    "numpy": ("numpy", "host"),
    "OpenSSL": ("pyopenssl", "host"),
    "prometheus_client": ("prometheus_client", "host"),
    "safetensors": ("safetensors", "host"),
    "securesystemslib": ("securesystemslib", "host"),
    "semver": ("semver", "host"),
    "sigstore_models": ("sigstore-models", "host"),
    "spdx_tools": ("spdx-tools", "host"),
}


def missing_dependency_error(exc: ModuleNotFoundError, command: Sequence[str]) -> SglxError | None:
    """The error to show for `exc`, or None when the missing module is sglx's own (a bug)."""
    top = (exc.name or "").partition(".")[0]
    if not top or top.startswith("sglx"):
        return None
    who = " ".join(("sglx", *command))
    if top in OPTIONAL_MODULES:
        distribution, extra = OPTIONAL_MODULES[top]
        return SglxError(
            f"{who} needs {distribution}, which is in the [{extra}] extra: "
            f"pip install 'sglx[{extra}]'",
            hint=f"install it into the Python environment that runs sglx; `make setup` does it "
            f"for a checkout, and `pip install --no-index --find-links DIR 'sglx[{extra}]'` "
            "installs it from a folder of wheels",
            code="missing_dependency",
        )
    return SglxError(
        f"{who} needs the Python module '{top}', which is not installed here",
        hint="install it into the Python environment that runs sglx; the dev venv that "
        "`make setup` creates has everything",
        code="missing_dependency",
    )
