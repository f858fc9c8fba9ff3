"""`install.sh`: install a bundle on one host that has no Python and no Ansible.

POSIX sh, coreutils, grep, sed and the docker CLI only (GNU tar too, for a bundle tar). It
applies bundle.json's path rules to every `SHA256SUMS` line (a plain relative path of the
bundle: no `..`, no absolute path, no leading `-` or dot, at most 400 characters and 16
levels), refuses a link, FIFO, device or socket anywhere in the folder before any file is
opened (a FIFO would hang the hasher), hashes every listed file on its own, read on stdin
(`sha256_of`: one hashing function for the files, the script's self-check and the record),
naming each that fails, checks that no file is there that SHA256SUMS does not list, streams
the chunks through `cat` into `docker load` (skipped when the engine already has the image
id), creates the node-local JIT cache folder of the image (`<root>/<image id hex>`, owned by
the container's uid, mode 0700; the root is `--jit-root DIR`, `$SGLX_JIT_ROOT` or the profile's
container.jit_cache.host_root) unless the bundle_install role runs it (the sglang_service role
creates the folder its unit mounts), and prints the `docker run` line of the bundle's run spec
(sglx.run_spec, the one the systemd unit and `sglx bundle install` use), with the groups by this
host's numeric GID (`getent group`) where the profile says so, mounting that folder.

Given a bundle tar (`sh NAME.install.sh NAME.tar`, the copy `bundle create --tar` writes
beside the tar), it checks the tar as GNU tar itself reads it (`tar -tf`/`-tvf`, so a tar that
Python's tarfile and GNU tar read differently is judged by what GNU tar would write): every
member under the one bundle folder, a regular file or folder with a bundle path, the files
exactly SHA256SUMS's list; only then does GNU tar unpack it into a new folder beside the tar,
which gets the checks above and is removed again when they fail.

The hasher is picked once: `openssl dgst -sha256` when an `openssl` binary is on PATH and
hashes the empty input right, else coreutils' `sha256sum`. OpenSSL uses the CPU's SHA
extensions (SHA-NI) where Debian's sha256sum does not: about 1 GB/s against 230 MB/s on this
project's build machine (measured), so checking a 6.4 GB cpu bundle takes about 7 s of a core
instead of 28, and a ROCm bundle of tens of GB a quarter of the time. Each file costs one
hasher process (about 6 ms for openssl), which a bundle of 1 GiB chunks and a few hundred
small files does not notice.

Unless `--check`, it reads and writes the install record (sglx.bundle.record, the one `sglx
bundle install` and the bundle_install role share) in `--state DIR`: files whose stat matches
their recorded line are not hashed again (`sh/record.sh`, its writer generated from FIELDS).

The script is rendered from the real sh files in `sh/` (sglx.bundle.install_sh_values.part):
`install.sh` with its parts `record.sh`, `weights*.sh`, `layers_held.sh` and `*_layers.sh`.

Every value the script prints comes from sglx at create time, is refused here when it holds a
control character, and is single-quoted for the shell; the image reference and id are checked
again by the script against the same patterns Python uses.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from pydantic import StringConstraints

from sglx import image_reference
from sglx.bundle import install_sh_weights, layout, manifest, record
from sglx.bundle.install_sh_values import fill, part, plain
from sglx.run_spec import Site, head_words, lock_folder, run_spec, tail_words
from sglx_core.digests import DIGEST, HEX64
from sglx_core.errors import SglxError
from sglx_core.jit_cache import ROOT_ENV, folder_name
from sglx_core.profile import Profile
from sglx_core.weights_store import ROOT_ENV as MODELS_ROOT_ENV

_ID = re.compile(DIGEST)
# Stands for the JIT cache root in the rendered run line; install.sh puts the root in its place
# (a plain path: a word shlex leaves bare stays one word).
JIT_MARK = "@SGLX_JIT_ROOT@"
# Where the printed line names the bundle: install.sh puts the digest of its bundle.json there.
BUNDLE_MARK = "@SGLX_BUNDLE@"
# A bundle path can hold 100,000 lines of a 400-character path plus a hash: the bound on
# SHA256SUMS that install.sh reads before trusting it.
MAX_SUMS_BYTES = layout.MAX_FILES * (layout.MAX_PATH_CHARS + 67)


def _pattern(annotated: object) -> str:
    """The `pattern` of an Annotated str type's StringConstraints, without its anchors."""
    for meta in get_args(annotated)[1:]:
        if isinstance(meta, StringConstraints) and isinstance(meta.pattern, str):
            return meta.pattern.removeprefix("^").removesuffix("$")
    raise TypeError(f"{annotated} has no pattern")


def ere(pattern: str) -> str:
    """A Python regex of the subset sglx's rules use (bracket classes, groups, `?*+{m,n}`,
    `\\.`, `\\w` inside brackets) as a POSIX extended regex for `grep -E`."""
    converted = pattern.replace("(?:", "(").replace(r"\w", "A-Za-z0-9_")
    if "(?" in converted or "\\" in converted.replace(r"\.", ""):
        raise ValueError(f"{pattern!r} uses regex syntax POSIX ERE does not have")
    return converted


REL_PATH_ERE = ere(_pattern(manifest.RelPath))
REF_ERE = ere(image_reference.REFERENCE.pattern)


def record_values(arch: str, image_ref: str, image_id: str) -> dict[str, str]:
    """install.sh's value of each install record field but `verified`, as a printf argument
    of JSON text (the values named at create time are rendered here, already checked)."""
    return {
        "format": shlex.quote(json.dumps(record.FORMAT)),
        "version": str(record.VERSION),
        "bundle_digest": '"\\"sha256:$digest\\""',
        "sums": '"\\"sha256:$sums\\""',
        "arch": shlex.quote(json.dumps(arch)),
        "image_ref": shlex.quote(json.dumps(image_ref)),
        "image_id": shlex.quote(json.dumps(image_id)),
        "bundle_path": '"\\"$(record_text "$(pwd -P)")\\""',
        "door": '"\\"$record_door\\""',
        "installed_at": '"\\"$record_at\\""',
        "steps": '"$record_steps"',
    }


def record_sh(arch: str, image_ref: str, image_id: str) -> str:
    """sh/record.sh for one bundle: its printf lines are FIELDS in order (so install.sh's record
    cannot drift from sglx's), and the lines that key a record are those `record.render`
    writes."""
    values = record_values(arch, image_ref, image_id)
    names = [name for name in record.FIELDS if name != "verified"]
    if list(values) != names:
        raise AssertionError(f"install.sh's record fields {list(values)} are not {names}")
    printf = "\n".join(f"    printf ' {json.dumps(n)}: %s,\\n' {values[n]}" for n in names)

    def line(name: str, value: object) -> str:
        return shlex.quote(f" {json.dumps(name)}: {json.dumps(value)},")

    keys = {
        "@KEY_FORMAT@": line("format", record.FORMAT),
        "@KEY_VERSION@": line("version", record.VERSION),
        "@KEY_DIGEST@": '" \\"bundle_digest\\": \\"sha256:$digest\\","',
        "@KEY_IMAGE@": line("image_id", image_id),
        "@KEY_NOT_DONE@": line("installed_at", None),
        "@DEFAULT_STATE@": record.DEFAULT_STATE,
        "@PRINTF@": printf,
        "@HEX64@": HEX64,
        "@HEX64_BRE@": HEX64.replace("{", "\\{").replace("}", "\\}"),
    }
    return fill(part("record.sh"), keys)


def parent_check(image: manifest.ImageRecord | None) -> str:
    """sh/parent_layers.sh for a delta's image record; a comment for a full bundle."""
    if image is None or image.parent is None or not image.from_parent():
        return "  : # a full bundle: every layer is in its archive"
    parent = image.parent
    return fill(
        part("layers_held.sh") + "\n" + part("parent_layers.sh"),
        {
            "@BUNDLE@": shlex.quote(plain(parent.bundle, "the parent bundle's name")),
            "@DIGEST@": shlex.quote(parent.digest),
            "@REF@": shlex.quote(plain(parent.image_ref, "the parent's image reference")),
            "@IMAGE@": shlex.quote(parent.image_id),
            **_left_out(image, image.from_parent()),
        },
    )


def base_check(image: manifest.ImageRecord | None) -> str:
    """sh/base_layers.sh for a bundle without its base's layers; a comment for any other."""
    if image is None or image.base is None or not image.from_base():
        return "  : # the base's layers are in the archive"
    from sglx.bundle.base_layers import how_to_load

    base = image.base
    return fill(
        part("layers_held.sh") + "\n" + part("base_layers.sh"),
        {
            "@REF@": shlex.quote(plain(base.ref, "the base's image reference")),
            "@IMAGE@": shlex.quote(base.image_id),
            **_left_out(image, image.from_base()),
            "@HOW@": shlex.quote(plain(how_to_load(base), "how to load the base")),
        },
    )


def _left_out(image: manifest.ImageRecord, left: Sequence[manifest.LayerEntry]) -> dict[str, str]:
    """@LAYERS@ (the diff ids, each followed by a space, up to the highest of the layers `left`
    out) and @COUNT@ (how many are left out)."""
    layers = image.layers or ()
    top = max(layers.index(layer) for layer in left)
    prefix = "".join(f"{layer.diff_id} " for layer in layers[: top + 1])
    return {"@LAYERS@": shlex.quote(prefix), "@COUNT@": str(len(left))}


def beside_tar(tar_path: Path) -> Path:
    """Where `bundle create --tar` puts the copy of install.sh for NAME.tar: NAME.install.sh."""
    return tar_path.with_name(tar_path.name.removesuffix(".tar") + "." + layout.INSTALL_SH)


def render(
    profile: Profile,
    *,
    version: str,
    image_ref: str,
    image_id: str,
    chunks: Sequence[str],
    weights: manifest.WeightsRecord | None = None,
    weights_files: Sequence[manifest.WeightsFile] = (),
    image: manifest.ImageRecord | None = None,
    weights_path: None = None,  # older callers' "no weights": `weights` names them now
) -> str:
    image_reference.check_reference(plain(image_ref, "the image reference"), "install.sh")
    if not _ID.fullmatch(image_id):
        raise SglxError(
            f"install.sh: {image_id!r} is not an image id (sha256:<64 hex>)",
            hint="pass the id the engine reports for the image",
            code="usage",
        )
    rel_path = re.compile(_pattern(manifest.RelPath))
    carried = [] if weights is None or weights.path is None else [weights.path]
    carried += [f.name for f in weights_files]
    for path in (*chunks, *carried):
        if not rel_path.fullmatch(path):
            raise SglxError(f"install.sh: {path!r} is not a bundle path", code="usage")
    # The weights store (install_sh_weights): placed, checked, mounted by the printed line.
    stored = install_sh_weights.parts(weights, weights_files, image)
    spec = run_spec(profile)
    assert spec.jit_cache is not None  # a spec made from a profile has one
    site = Site(
        image=image_ref,
        name=f"sglx-{profile.arch}",
        image_id=image_id,
        jit_root=JIT_MARK,
        weights_digest=None if weights is None else weights.digest,
        models_root=install_sh_weights.MODELS_MARK,
        bundle_digest=BUNDLE_MARK,
    )
    head, tail = (
        [plain(word, "a docker run argument") for word in words]
        for words in (head_words(spec, site), tail_words(spec, site))
    )
    values = dict(
        arch=plain(profile.arch, "the arch"),
        version=plain(version, "the sglx version"),
        image_ref=shlex.quote(image_ref),
        image_id=shlex.quote(image_id),
        manifest_id=shlex.quote("" if image is None else image.manifest_digest or ""),
        run_head=shlex.quote(shlex.join(head)),
        run_tail=shlex.quote(shlex.join(tail)),
        run_groups=shlex.quote(" ".join(spec.groups)),
        jit_root_default=shlex.quote(plain(spec.jit_cache.host_root, "the JIT cache root")),
        jit_mark=JIT_MARK,
        bundle_mark=BUNDLE_MARK,
        jit_name=folder_name(image_id),
        jit_uid=spec.jit_cache.uid,
        lock_dir=shlex.quote(plain(lock_folder(spec) or "", "the device-init lock folder")),
        numeric_gids=int(spec.numeric_gids),
        rel_path=shlex.quote(REL_PATH_ERE),
        digest_ere=ere(DIGEST),
        hex64=ere(HEX64),
        ref_pattern=shlex.quote(REF_ERE),
        max_sums=MAX_SUMS_BYTES,
        chunk_count=len(chunks),
        chunks=" ".join(shlex.quote(c) for c in chunks),
        scan_report=shlex.quote(layout.SCAN_REPORT),
        models_root_default=shlex.quote(plain(spec.models_root or "", "the weights store")),
        models_mark=install_sh_weights.MODELS_MARK,
        **stored,
        base_check=base_check(image),
        parent_check=parent_check(image),
        partial=int(image is not None and bool(image.referenced())),
        record_sh=record_sh(profile.arch, image_ref, image_id),
        default_state=record.DEFAULT_STATE,
    )
    return fill(_template(), {f"@{name.upper()}@": str(v) for name, v in values.items()}) + "\n"


def _template() -> str:
    """sh/install.sh, whose defaults name the JIT cache's and the weights store's variables
    as sglx_core names them (a literal in the template, so that it stays plain sh)."""
    text = part("install.sh")
    for variable in (ROOT_ENV, MODELS_ROOT_ENV):
        if f"${{{variable}:-" not in text:
            raise AssertionError(f"sh/install.sh does not default to ${variable}")
    return text
