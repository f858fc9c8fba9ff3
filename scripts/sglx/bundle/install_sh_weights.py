"""install.sh's part for weights outside the image: the node-local weights store in sh.

What sglx.weights.store does in Python, with coreutils: `weights_ok DIR` is true when DIR is a
folder (not a link) holding exactly the files of `weights_list` (the store entry's files, from
bundle.json at create time: `SHA256 SIZE NAME` lines), each a regular file of its size and
sha256 (install.sh's `sha256_of`); else `weights_why` says why. `weights_place` copies the
bundle's weights into a hidden staging folder beside the entry, checks the sha256 of every copy
and renames the folder into place (a damaged entry renamed aside first, removed last). Entries
of other digests are never touched.

Carried weights are placed after the image is loaded and before the install is recorded (the
bundle_install role takes a record as "installed"): an entry that matches is kept, one that
does not is placed again. A delta that names its parent's weights without carrying them checks
the entry before anything loads, and refuses, naming the parent bundle, when it is missing or
does not match: it cannot place what it does not carry.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from sglx.bundle.install_sh_values import fill, plain
from sglx.bundle.manifest import ImageRecord, WeightsFile, WeightsRecord
from sglx_core.errors import SglxError
from sglx_core.weights_store import entry_name

# Stands for the weights store's root in the rendered run line; install.sh puts its root there.
MODELS_MARK = "@SGLX_MODELS_ROOT@"

FUNCTIONS_SH = r"""# The weights outside the image (bundle.json weights; '' when there are
# none): their digest, their folder in this bundle ('' when not carried) and the bundle that
# carried them.
weights_digest=@DIGEST@ weights_hex=@HEX@ weights_src=@SRC@ weights_from=@FROM@
weights_why='' weights_state=''
weights_list() {
  cat <<'SGLX_WEIGHTS_LIST'
@LIST@
SGLX_WEIGHTS_LIST
}
weights_ok() {
  weights_why=
  if [ -L "$1" ] || [ ! -d "$1" ]; then
    weights_why="is not there"
    [ ! -e "$1" ] && [ ! -L "$1" ] || weights_why="is not a folder (a link or a file is there)"
    return 1
  fi
  weights_list >"$tmp/w.list"
  cut -d' ' -f3 "$tmp/w.list" | LC_ALL=C sort >"$tmp/w.want"
  # shellcheck disable=SC2012  # a name ls cannot print plainly fails the comparison anyway
  ls -A -- "$1" | LC_ALL=C sort >"$tmp/w.have"
  odd=$(LC_ALL=C comm -3 "$tmp/w.want" "$tmp/w.have" | head -n 1 | tr -d '\t')
  if [ -n "$odd" ]; then
    weights_why="lacks or holds $(q "$odd") against the weights manifest"
    return 1
  fi
  while read -r want size name; do
    f=$1/$name
    if [ -L "$f" ] || [ ! -f "$f" ]; then
      weights_why="has $name, which is not a regular file"
      return 1
    fi
    if [ "$(wc -c <"$f")" -ne "$size" ]; then
      weights_why="has $name, which is not $size bytes"
      return 1
    fi
    if ! sha256_of "$f" || [ "$sha" != "$want" ]; then
      weights_why="has $name, which does not match its sha256"
      return 1
    fi
  done <"$tmp/w.list"
}
weights_place() {
  entry=$models_root/$weights_hex
  mkdir -p -- "$models_root" 2>/dev/null &&
    wstaging=$(mktemp -d "$models_root/.$weights_hex.partial-XXXXXXXX") ||
    die "cannot write in the weights store $(q "$models_root")" \
      "run install.sh as root, or pass --models-root DIR (or set SGLX_MODELS_ROOT): a \
writable folder"
  for stale in "$models_root/.$weights_hex.partial-"*; do
    [ "$stale" = "$wstaging" ] || [ ! -e "$stale" ] || rm -rf -- "$stale"
  done
  chmod 0755 -- "$wstaging"
  weights_list >"$tmp/w.list"
  say "placing the weights $weights_digest in $(q "$entry") ($(wc -l <"$tmp/w.list") files)"
  while read -r want size name; do
    { cp -- "$weights_src/$name" "$wstaging/$name" && chmod 0644 -- "$wstaging/$name"; } ||
      die "cannot copy $(q "$weights_src/$name") into the weights store" \
        "check the free space of $(q "$models_root")"
    if ! sha256_of "$wstaging/$name" || [ "$sha" != "$want" ]; then
      die "$(q "$weights_src/$name") changed while it was placed" \
        "run install.sh again; do not edit the bundle while it installs"
    fi
  done <"$tmp/w.list"
  old=
  if [ -e "$entry" ] || [ -L "$entry" ]; then
    old=$models_root/.$weights_hex.old-$$
    mv -- "$entry" "$old" || die "cannot move $(q "$entry") aside" "remove it, then run again"
  fi
  if ! mv -- "$wstaging" "$entry"; then
    [ -z "$old" ] || mv -- "$old" "$entry"
    die "cannot rename the placed weights to $(q "$entry")" "run install.sh again"
  fi
  wstaging=
  [ -z "$old" ] || rm -rf -- "$old"
  say "placed the weights in $(q "$entry"), every sha256 checked"
}"""

# A delta naming its parent's weights: the entry must be there and match, before anything loads.
REFERENCED_SH = r"""weights_ok "$models_root/$weights_hex" ||
  die "this bundle takes its weights ($weights_digest) from this host's weights store, where \
the bundle $(q "$weights_from") put them: $(q "$models_root/$weights_hex") $weights_why; nothing \
was loaded" "install the bundle $(q "$weights_from") first (it carries them: sh \
$(q "$weights_from")/install.sh or sglx bundle install), then this one"
say "the weights $weights_digest are in the weights store: $(q "$models_root/$weights_hex")"
"""

# Carried weights, before the load: the entry is checked once; one that is there and holds
# other bytes is refused unless --replace-weights (every image that mounts it would serve them),
# before anything is loaded, as `sglx bundle install` refuses it.
CARRIED_BEFORE_SH = r"""if weights_ok "$models_root/$weights_hex"; then
  weights_state=ok
else
  weights_state=$weights_why
  [ "$weights_why" = "is not there" ] || [ "$replace_weights" = 1 ] ||
    die "the weights store's entry $(q "$models_root/$weights_hex") $weights_why; install \
never replaces an entry that holds other bytes, since every image that mounts it would serve \
them; nothing was loaded" "look at what changed there; to put the bundle's weights in its \
place, run install.sh again with --replace-weights (the bundle's bytes are checked first)"
fi
"""

# Carried weights, after the load: kept when the entry matched, else placed.
CARRIED_SH = r"""if [ "$weights_state" = ok ]; then
  say "the weights $weights_digest are in the weights store already:" \
    "$(q "$models_root/$weights_hex")"
else
  [ "$weights_state" = "is not there" ] ||
    say "the weights store's $(q "$models_root/$weights_hex") $weights_state: replacing it" \
      "(--replace-weights)"
  weights_place
fi
"""


def parts(
    weights: WeightsRecord | None, files: Sequence[WeightsFile], image: ImageRecord | None
) -> dict[str, str]:
    """The template's weights values: the functions, what runs before the image loads and
    after it, and the closing note."""
    if weights is None:
        none = {"@DIGEST@": "''", "@HEX@": "''", "@SRC@": "''", "@FROM@": "''", "@LIST@": ""}
        return {
            "weights_sh": fill(FUNCTIONS_SH, none),
            "weights_before_load": ": # no weights outside the image",
            "weights_after_load": ": # no weights outside the image",
            "weights_note": "",
        }
    if not files:
        raise SglxError("install.sh: weights outside the image with no files", code="usage")
    parent = None if image is None or image.parent is None else image.parent.bundle
    if not weights.carried and parent is None:
        raise SglxError("install.sh: weights not carried, but no parent bundle", code="usage")
    values = {
        "@DIGEST@": shlex.quote(weights.digest),
        "@HEX@": entry_name(weights.digest),
        "@SRC@": shlex.quote(weights.path or ""),
        "@FROM@": shlex.quote(plain(parent or "", "the parent bundle's name")),
        "@LIST@": "\n".join(f"{f.sha256} {f.size} {f.name}" for f in files),
    }
    note = "say " + shlex.quote(
        f"the weights {weights.digest} are outside the image, in the weights store: the line "
        "below mounts them read-only"
    )
    return {
        "weights_sh": fill(FUNCTIONS_SH, values),
        "weights_before_load": CARRIED_BEFORE_SH.rstrip("\n")
        if weights.carried
        else REFERENCED_SH.rstrip("\n"),
        "weights_after_load": CARRIED_SH.rstrip("\n")
        if weights.carried
        else ": # weights named, not carried: checked before the load",
        "weights_note": note,
    }
