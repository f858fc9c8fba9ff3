"""The JSON Schema of `bundle.json`, generated from the models sglx reads it with
(sglx.bundle.manifest.BundleManifest, through pydantic), so that a site's own tools can check a
manifest without sglx and the schema never says other than the reader. `sglx bundle schema`
prints it, writes it, or checks the committed copy (bundles/bundle.schema.json, by `make lint`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglx.bundle import layout
from sglx.bundle.manifest import BundleManifest
from sglx.rendered import print_write_or_check
from sglx_core.report import Result

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def manifest_schema() -> dict[str, Any]:
    """bundle.json's schema: the reader's own, with the dialect and a title that says so."""
    schema = BundleManifest.model_json_schema(mode="validation")
    return {
        "$schema": DIALECT,
        "title": f"sglx {layout.MANIFEST}",
        "description": "The manifest of an sglx bundle (docs/reference/bundle.md), as `sglx "
        "bundle verify` reads it: generated from sglx.bundle.manifest by `sglx bundle schema`.",
        **{key: value for key, value in schema.items() if key not in ("title", "description")},
    }


def schema_text() -> str:
    return json.dumps(manifest_schema(), indent=2, sort_keys=True) + "\n"


def bundle_schema(out: Path | None, check: bool) -> Result:
    """Print the schema, write it to `out` (atomically), or check `out` is current."""
    return print_write_or_check(
        ("bundle", "schema"),
        schema_text(),
        {"schema": manifest_schema()},
        out,
        check,
        again="sglx bundle schema",
        source="sglx.bundle.manifest",
        stale_code="bundle_schema_stale",
    )
