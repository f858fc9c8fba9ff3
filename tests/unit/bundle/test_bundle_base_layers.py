"""Base layers by reference (`create --exclude-base`, issue 26) without an engine: which base
create names and checks, bundle.json's base rules, the engine check of `install` and
install.sh's (the base named before a parent), inspect, and the role's copy of the rules.

The role's Jinja check of image.base runs in test_ansible_bundle_delta.py's one playbook run
(its ACCEPTED/REFUSED cases); the real engine's side is tests/integration/
test_bundle_exclude_base.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_bundle_layers import DIFFS, PARENT, FakeClient, image, manifest_of, sh_checks

from sglx import image_labels
from sglx.bundle import base_layers, layout
from sglx.bundle.delta import engine_missing, refusal
from sglx.bundle.install_sh import base_check, parent_check
from sglx.bundle.manifest import BaseRecord, dump, parse
from sglx_core.errors import SglxError
from sglx_core.profile import Profile, load_profile

ANSIBLE = Path(__file__).resolve().parents[3] / "ansible"
BASE = BaseRecord(
    ref="rocm/base:1",
    image_id="sha256:" + "e" * 64,
    layers=2,
    obtain="docker pull rocm/base:1 && docker save -o b.tar rocm/base:1; sglx base load b.tar",
)


def without_base(parent: bool = False) -> Any:
    """The lower two of three layers left to BASE; with `parent`, the third from PARENT."""
    return image(DIFFS, [False, False, not parent], PARENT if parent else None, base=BASE)


def test_the_base_explains_its_layers_and_a_parent_the_ones_above() -> None:
    record = without_base()
    assert parse(dump(manifest_of(record)), "b").image.base == BASE
    assert [x.diff_id for x in record.from_base()] == DIFFS[:2] and record.from_parent() == ()
    both = without_base(parent=True)
    assert parse(dump(manifest_of(both)), "b").image.parent == PARENT
    assert [x.diff_id for x in both.from_parent()] == DIFFS[2:]
    # A bundle without a base is written as before (no `base` key): an older sglx reads it.
    assert "base" not in json.loads(dump(manifest_of(image(DIFFS, [True] * 3))))["image"]


@pytest.mark.parametrize(
    ("record", "words"),
    [
        (image(DIFFS, [False, False, False], base=BASE), "a layer above the base is not carried"),
        (image(DIFFS, [True] * 3, base=BASE, layers=None), "without its base must list its layers"),
        (
            image(DIFFS, [False] * 2 + [True], base=BASE.model_copy(update={"layers": 4})),
            "image.base.layers: 4, but the image has 3 layers",
        ),
        (
            image(DIFFS, [False] * 2 + [True], base=BASE, id=BASE.image_id),
            "the base's image is this bundle's own image",
        ),
        (
            image(DIFFS, [False] * 2 + [True], base=BASE.model_copy(update={"ref": "Rocm/X"})),
            "image.base.ref: 'Rocm/X' is not an image reference",
        ),
    ],
)
def test_bundle_json_refuses_a_base_record_that_contradicts_the_layers(
    record: Any, words: str
) -> None:
    with pytest.raises(SglxError, match=words):
        parse(dump(manifest_of(record)), "b/bundle.json")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"obtain": "load it\nhint: all is well"}, "image.base.obtain"),
        ({"layers": 0}, "image.base.layers"),
        ({"image_id": "sha256:" + "E" * 64}, "image.base.image_id"),
        ({"extra": 1}, "image.base.extra"),
    ],
)
def test_bundle_json_refuses_a_base_record_of_the_wrong_shape(
    change: dict[str, Any], words: str
) -> None:
    raw = json.loads(dump(manifest_of(without_base())))
    raw["image"]["base"].update(change)
    with pytest.raises(SglxError, match=words):
        parse(json.dumps(raw).encode(), "b/bundle.json")


def test_install_refuses_without_the_base_naming_it_and_how_to_load_it() -> None:
    record = without_base(parent=True)
    # The parent's image holds the base's layers too: nothing is missing.
    assert engine_missing(FakeClient({PARENT.image_id: DIFFS}), record) == []
    held = FakeClient({BASE.image_id: DIFFS[:2]})
    assert engine_missing(held, without_base()) == [] and held.images.listed == 0
    missing = engine_missing(FakeClient({}), record)
    assert [x.diff_id for x in missing] == DIFFS
    error = refusal(record, missing)  # the base first: the parent's install needs it too
    assert error.code == "bundle_base"
    assert error.message == (
        f"this bundle leaves out the 2 layers of the base image rocm/base:1 ({BASE.image_id}): "
        f"this engine lacks 2 of them (e.g. {DIFFS[0]}); nothing was loaded"
    )
    assert error.hint == (
        f"load the base rocm/base:1 into this engine first ({BASE.obtain}), then install this "
        "bundle again"
    )
    on_base = engine_missing(FakeClient({BASE.image_id: DIFFS[:2]}), record)
    assert refusal(record, on_base).code == "bundle_parent"
    plain = base_layers.how_to_load(BASE.model_copy(update={"obtain": ""}))
    assert "`docker save -o FILE rocm/base:1` where the image was built" in plain
    assert "`sglx base load FILE`" in plain


def test_install_sh_checks_the_engine_for_the_bases_layers_before_the_parents(
    tmp_path: Path,
) -> None:
    record = without_base(parent=True)
    with_images = sh_checks(tmp_path, base_check(record), parent_check(record))
    assert with_images(f"{PARENT.image_id} {' '.join(DIFFS)}").stdout == "held\n"
    other = "sha256:" + "9" * 64
    done = with_images(f"{other} {DIFFS[0]}")
    assert done.returncode == 2 and done.stdout == ""
    assert (
        f"error: this bundle leaves out the 2 layers of the base image rocm/base:1 "
        f"({BASE.image_id}): this engine lacks them; nothing was loaded\n"
        f"hint: {base_layers.how_to_load(BASE)}\n"
    ) == done.stderr
    done = with_images(f"{BASE.image_id} {' '.join(DIFFS[:2])}")
    assert done.returncode == 2 and "is a delta over the bundle sglx-bundle-cpu-1" in done.stderr
    assert base_check(image(DIFFS, [True] * 3)).strip().startswith(": #")
    assert parent_check(without_base()).strip().startswith(": #")


class Engine:
    """An engine with the image and its base by id and reference."""

    def __init__(self, **by_key: list[str]) -> None:
        self.images = self
        self.by_key = by_key

    def get(self, key: str) -> Any:
        from docker.errors import ImageNotFound

        if key not in self.by_key:
            raise ImageNotFound(key)
        found = type("Found", (), {})()
        found.id = BASE.image_id if key != "self" else "sha256:" + "a" * 64
        found.attrs = {"RootFS": {"Layers": self.by_key[key]}}
        return found


def built(labels: dict[str, str]) -> Any:
    found = type("Image", (), {})()
    found.id, found.labels = "sha256:" + "a" * 64, labels
    return found


def profile_with(**base: Any) -> Profile:
    profile = load_profile("cpu")
    return profile.model_copy(update={"base": profile.base.model_copy(update=base)})


LABELS = {image_labels.BASE_NAME: BASE.ref, image_labels.BASE_DIGEST: BASE.image_id}


def test_create_names_the_base_by_the_images_labels_else_the_profile() -> None:
    loads = profile_with(ref=BASE.ref, source="load", obtain="  docker save\n  it ")
    found = base_layers.find_base(
        Engine(**{BASE.image_id: DIFFS[:2]}), built(LABELS), "t:1", DIFFS, loads
    )
    assert found == BASE.model_copy(update={"obtain": "docker save it"})
    # Labels that do not name a reference and an id: the profile's base.ref, by reference. A
    # base sglx builds gives another id each time, so its `obtain` is not recorded.
    odd = {image_labels.BASE_NAME: "debian (debootstrap)"}
    found = base_layers.find_base(
        Engine(**{"sglx/base-cpu:bookworm": DIFFS[:1]}),
        built(odd),
        "t:1",
        DIFFS,
        load_profile("cpu"),
    )
    assert (found.ref, found.layers, found.obtain) == ("sglx/base-cpu:bookworm", 1, "")


@pytest.mark.parametrize(
    ("engine", "profile", "words"),
    [
        ({}, {}, "is not in this engine, so which layers are its cannot be told"),
        ({BASE.image_id: [DIFFS[1]]}, {}, "is not built on the base rocm/base:1"),
        ({BASE.image_id: []}, {}, "is not built on the base rocm/base:1"),
    ],
)
def test_create_refuses_a_base_it_cannot_check(
    engine: dict[str, list[str]], profile: dict[str, Any], words: str
) -> None:
    with pytest.raises(SglxError, match=words) as caught:
        base_layers.find_base(
            Engine(**engine), built(LABELS), "t:1", DIFFS, profile_with(**profile)
        )
    assert "without --exclude-base" in str(caught.value.hint)


def test_create_refuses_a_base_other_than_the_pinned_one() -> None:
    pinned = profile_with(digest="sha256:" + "f" * 64)
    with pytest.raises(SglxError, match="the cpu profile pins sha256:ffff"):
        base_layers.find_base(
            Engine(**{"sglx/base-cpu:bookworm": DIFFS[:1]}), built({}), "t:1", DIFFS, pinned
        )


def test_inspect_shows_the_base_and_which_layers_are_its(tmp_path: Path) -> None:
    from sglx.bundle.inspect import inspect_bundle
    from sglx.progress import Progress

    (tmp_path / layout.MANIFEST).write_bytes(dump(manifest_of(without_base(parent=True))))
    result = inspect_bundle(tmp_path, Progress("t", quiet=True))
    assert result.data["base"] == BASE.model_dump(mode="json")
    assert [row[3] for row in result.tables[1].rows] == [
        "from the base rocm/base:1",
        "from the base rocm/base:1",
        "from sglx-bundle-cpu-1",
    ]
    assert result.data["base_bytes"] == 30 and result.data["referenced_bytes"] == 60
    about = {row[0]: row[1] for row in result.tables[0].rows}
    assert about["base"].startswith(f"rocm/base:1 {BASE.image_id}, its lowest 2 layers; load")
    assert "leaves 2 (30 B) to its base rocm/base:1" in result.lines[-1]


def test_the_roles_base_rules_are_sglxs() -> None:
    rules = yaml.safe_load((ANSIBLE / "roles/bundle_install/vars/main.yml").read_text())
    assert rules["_bundle_install_base_fields"] == list(BaseRecord.model_fields)
    obtain = BaseRecord.model_fields["obtain"].metadata[0]
    assert rules["_bundle_install_base_obtain_pattern"] == obtain.pattern
    assert rules["_bundle_install_base_obtain_max"] == obtain.max_length
