"""A bundle does not choose where `sglx bundle install` writes as root (issue 37 item 1): a
re-hashed bundle's meta/run.json made install create and chown `<any absolute path>/<64 hex>`.
The weights store's root and the JIT cache root a run spec names are taken only when they are
this sglx's own profile's for the arch, or when the site names a root; --jit-root inside the
bundle is refused like --state (item 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglx.bundle import layout
from sglx.bundle.carried_spec import CarriedSpec, read_carried_spec
from sglx.bundle.install import InstallOptions, _jit_root_trusted, _outputs_outside
from sglx.bundle.weights_store import models_root
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile


def _bundle(tmp_path: Path, **spec: object) -> CarriedSpec:
    """The run spec a bundle carries, as install reads it once."""
    bundle = tmp_path / "bundle"
    (bundle / layout.RUN_SPEC).parent.mkdir(parents=True)
    (bundle / layout.RUN_SPEC).write_text(json.dumps({"arch": "cpu", **spec}))
    return read_carried_spec(bundle)


def test_the_profiles_own_store_root_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLX_MODELS_ROOT", raising=False)
    own = str(load_profile("cpu").weights.store)
    assert models_root(_bundle(tmp_path, models_root=own), None) == Path(own)


def test_a_store_root_the_bundle_chose_is_refused_unless_the_site_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLX_MODELS_ROOT", raising=False)
    bundle = _bundle(tmp_path, models_root="/etc/cron.d")
    with pytest.raises(SglxError, match=r"names the weights store '/etc/cron\.d'") as caught:
        models_root(bundle, None)
    assert "--models-root /etc/cron.d" in (caught.value.hint or "")
    assert models_root(bundle, tmp_path / "models") == tmp_path / "models"
    monkeypatch.setenv("SGLX_MODELS_ROOT", str(tmp_path / "env"))
    assert models_root(bundle, None) == tmp_path / "env"


def test_a_jit_root_the_bundle_chose_is_refused_unless_the_site_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLX_JIT_ROOT", raising=False)
    own = load_profile("cpu").container.jit_cache.host_root
    _jit_root_trusted(
        _bundle(tmp_path / "a", jit_cache={"host_root": own}), InstallOptions(state=tmp_path)
    )
    bundle = _bundle(tmp_path / "b", jit_cache={"host_root": "/root/.ssh"})
    with pytest.raises(SglxError, match=r"names the JIT cache root '/root/\.ssh'"):
        _jit_root_trusted(bundle, InstallOptions(state=tmp_path))
    _jit_root_trusted(bundle, InstallOptions(state=tmp_path, jit_root=tmp_path / "jit"))


def test_a_jit_root_inside_the_bundle_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path).path.parent.parent
    options = InstallOptions(state=tmp_path / "state", jit_root=bundle / "jit")
    with pytest.raises(SglxError, match=r"JIT cache root \(--jit-root\) .* is inside the bundle"):
        _outputs_outside(bundle, options)


def test_a_quadlet_folder_inside_the_bundle_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path).path.parent.parent
    options = InstallOptions(state=tmp_path / "state", quadlet=bundle / "units")
    with pytest.raises(SglxError, match=r"Quadlet folder \(--quadlet\) .* is inside the bundle"):
        _outputs_outside(bundle, options)
