"""The install record has one format (sglx.bundle.record.FIELDS): install.sh's writer is
generated from it, and the bundle_install role's writer and reader use the same names, file
name, format and version. (tests/integration/test_install_record.py runs all three doors.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from sglx.bundle import install_sh, record
from sglx_core.profile import load_profile

ROLE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "bundle_install"
DIGEST = "sha256:" + "ab" * 32
IMAGE = "sha256:" + "cd" * 32


def role_tasks() -> list[dict[str, Any]]:
    found = []
    for task in yaml.safe_load((ROLE / "tasks" / "install.yml").read_text()):
        found += [task, *task.get("block", [])]
    return found


def task(name: str) -> dict[str, Any]:
    [found] = [t for t in role_tasks() if t["name"] == name]
    return found


def test_install_sh_writes_the_fields_in_order() -> None:
    names = [name for name in record.FIELDS if name != "verified"]
    assert list(record.FIELDS)[-1] == "verified"
    assert list(install_sh.record_values("cpu", "x:1", IMAGE)) == names
    script = install_sh.render(
        load_profile("cpu"), version="test", image_ref="x:1", image_id=IMAGE,
        chunks=("image/image.tar.000",), weights_path=None,
    )  # fmt: skip
    written = re.findall(r"^    printf ' \"([a-z_]+)\": %s,\\n' ", script, flags=re.MULTILINE)
    assert written == names
    assert f"state=${{{record.STATE_ENV}:-{record.DEFAULT_STATE}}}" in script
    assert f"record_file=$state/{record.file_name('sha256:$digest')}" in script


def test_the_role_writes_and_reads_the_same_fields() -> None:
    writer = task("Write the install record")
    document = writer["vars"]["__bundle_install_record_doc"]
    assert list(document) == list(record.FIELDS)
    reader = task("Read whether the record says the bundle is installed")
    read = set(re.findall(r"__doc\.([a-z_]+)", reader["ansible.builtin.set_fact"][
        "__bundle_install_recorded"]))  # fmt: skip
    assert read == {"format", "version", "bundle_digest", "image_id", "installed_at"}
    assert read <= set(record.FIELDS)
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert variables["_bundle_install_record_format"] == record.FORMAT
    assert variables["_bundle_install_record_version"] == record.VERSION
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["bundle_install_state_dir"] == record.DEFAULT_STATE
    # Every task that names the record names the file record.file_name names.
    paths = [
        t.get("ansible.builtin.slurp", {}).get("src") or t["ansible.builtin.copy"]["dest"]
        for t in role_tasks()
        if "install record" in t["name"] and ("ansible.builtin.slurp" in t or "dest" in t.get(
            "ansible.builtin.copy", {}))
    ]  # fmt: skip
    assert len(paths) == 3
    named = "{{ bundle_install_state_dir }}/{{ bundle_install_digest | replace(':', '-') }}.json"
    assert set(paths) == {named}
    assert record.file_name(DIGEST) == DIGEST.replace(":", "-") + ".json"
    assert task("Verify every file and load the image (install.sh)")["environment"] == {
        record.STATE_ENV: "{{ bundle_install_state_dir }}",
        "SGLX_INSTALL_DOOR": "bundle_install",
        "SGLX_MODELS_ROOT": "{{ bundle_install_models_root }}",
        "SGLX_REPLACE_WEIGHTS": "{{ '1' if bundle_install_replace_weights | bool else '0' }}",
        "SGLX_NO_SCAN": "{{ '1' if bundle_install_no_scan | bool else '0' }}",
    }


def test_a_record_the_role_writes_is_read_by_sglx(tmp_path: Path) -> None:
    """to_nice_json of the role's document (not the fixed layout) is a record all the same."""
    document = {
        "format": record.FORMAT, "version": record.VERSION, "bundle_digest": DIGEST,
        "sums": DIGEST, "arch": "cpu", "image_ref": "x:1", "image_id": IMAGE,
        "bundle_path": "/srv/b", "door": "bundle_install", "installed_at": "2026-01-01T00:00:00Z",
        "steps": {}, "verified": {},
    }  # fmt: skip
    (tmp_path / record.file_name(DIGEST)).write_text(json.dumps(document, indent=4))
    loaded = record.InstallRecord.load(tmp_path, DIGEST.split(":")[1], fresh=False)
    assert loaded.before == {
        "door": "bundle_install", "installed_at": "2026-01-01T00:00:00Z", "image_id": IMAGE,
    }  # fmt: skip
    assert record.installed(document, DIGEST)
    assert not record.installed({**document, "installed_at": None}, DIGEST)
    assert not record.installed(document, "sha256:" + "ef" * 32)
    assert not record.installed({**document, "version": 2}, DIGEST)


def test_render_is_one_field_a_line_and_one_file_a_line() -> None:
    document: dict[str, Any] = dict.fromkeys(record.FIELDS)
    document.update(bundle_digest=DIGEST, steps={"b": 1, "a": 2}, verified={
        "b/x": ["00" * 32, 1, 2, 3, 4, 5], "a": ["11" * 32, 6, 7, 8, 9, 10]})  # fmt: skip
    text = record.render(document)
    assert json.loads(text) == document
    lines = text.splitlines()
    assert (
        lines[1 : len(record.FIELDS)]
        == [f" {json.dumps(n)}: {json.dumps(document[n], sort_keys=True)}," for n in record.FIELDS][
            :-1
        ]
    )
    assert lines[-4:] == [
        f'  "a": ["{"11" * 32}", 6, 7, 8, 9, 10],',
        f'  "b/x": ["{"00" * 32}", 1, 2, 3, 4, 5]',
        " }",
        "}",
    ]
