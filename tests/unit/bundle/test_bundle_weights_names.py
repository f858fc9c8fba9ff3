"""`bundle create --weights-outside` of converted weights carrying a file whose name cannot be a
bundle path (`chat template.json`, a space) is refused naming the file (issue 37 item 14: it
ended in "unexpected ValidationError ... bug in sglx")."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.weights_store import converted_weights

from sglx.bundle.weights_plan import plan_weights
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_core.weights_manifest import FileRecord, manifest_digest, read_manifest, write_manifest


def test_a_file_name_that_cannot_be_a_bundle_path_is_refused_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "converted"
    converted_weights(folder)
    odd = folder / "chat template.json"
    odd.write_text("{}")
    manifest = read_manifest(folder)
    record = FileRecord(name=odd.name, size=2, sha256=hashlib.sha256(b"{}").hexdigest())
    write_manifest(folder, manifest.model_copy(update={"files": (*manifest.files, record)}))
    digest = manifest_digest(folder)
    image = SimpleNamespace(labels={"io.sglx.weights.digest": digest,
                                    "io.sglx.weights.outside": "true"})  # fmt: skip
    with pytest.raises(SglxError, match=r"the file name 'chat template\.json' cannot be a bundle"):
        plan_weights(image, "sglx/cpu:test", load_profile("cpu"), folder, None, None)
