"""bundles/bundle.schema.json: the JSON Schema of bundle.json a site's tools check a manifest
with, without sglx. It is what sglx renders from its reader's models (make lint checks the same),
a manifest in the real format passes it, and the manifests the reader refuses for their shape
(an unknown key, a digest that is not one, a path with `..`, a file without its hash) fail it
too. The cpu bundle `bundle create` writes passes it in tests/integration/test_bundle_cpu.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import hand_bundle
from jsonschema import Draft202012Validator

from sglx.bundle.manifest import WeightsRecord, parse
from sglx.bundle.schema import schema_text
from sglx_core.errors import SglxError

SCHEMA = Path(__file__).resolve().parents[3] / "bundles" / "bundle.schema.json"


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    where = tmp_path_factory.mktemp("schema")
    archive = where / "image.tar"
    archive.write_bytes(os.urandom(5000))
    weights = WeightsRecord(name="demo", path="weights/demo", digest="sha256:" + "f" * 64, size=4)
    files = {"install.sh": b"#!/bin/sh\n", "weights/demo/model.safetensors": b"abcd"}
    bundle = hand_bundle(where / "bundle", archive, files, chunk_size=2048, weights=weights)
    document: dict[str, Any] = json.loads((bundle / "bundle.json").read_text())
    return document


def test_the_committed_schema_is_the_one_sglx_renders() -> None:
    assert SCHEMA.read_text() == schema_text(), "run: sglx bundle schema --out " + str(SCHEMA)


def test_a_manifest_in_the_real_format_passes(
    validator: Draft202012Validator, manifest: dict[str, Any]
) -> None:
    assert [e.message for e in validator.iter_errors(manifest)] == []


def _unknown_key(m: dict[str, Any]) -> None:
    m["extra"] = 1


def _bad_digest(m: dict[str, Any]) -> None:
    m["image"]["id"] = "sha256:XYZ"


def _dotdot_path(m: dict[str, Any]) -> None:
    m["files"][0]["path"] = "../etc/passwd"


def _no_hash(m: dict[str, Any]) -> None:
    del m["files"][0]["sha256"]


@pytest.mark.parametrize("change", [_unknown_key, _bad_digest, _dotdot_path, _no_hash])
def test_a_manifest_the_reader_refuses_for_its_shape_fails_the_schema_too(
    validator: Draft202012Validator, manifest: dict[str, Any], change: Any
) -> None:
    edited = json.loads(json.dumps(manifest))
    change(edited)
    with pytest.raises(SglxError):
        parse(json.dumps(edited).encode(), "bundle.json")
    assert list(validator.iter_errors(edited)), change.__name__
