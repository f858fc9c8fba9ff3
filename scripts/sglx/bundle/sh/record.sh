#: The install record (sglx.bundle.record), in sh and coreutils. `record_plan` stats every
#: SHA256SUMS file before any is hashed and keeps to hash only those whose line differs from the
#: record's verified line (the same sha256, device, inode, size, mtime and ctime);
#: `record_prepare` makes sure the record can be written before the image is loaded;
#: `record_write` writes it (FIELDS, by @PRINTF@: sglx.bundle.install_sh.record_sh) to a
#: temporary file and renames it.
# The install record: STATE/sha256-<hex of bundle.json>.json (sglx.bundle.record).
state=${SGLX_STATE_DIR:-@DEFAULT_STATE@}
door=${SGLX_INSTALL_DOOR:-install.sh}
case $door in
  install.sh | bundle_install) ;;
  *) die "SGLX_INSTALL_DOOR is $(q "$door"), not install.sh or bundle_install" \
    "unset it (only the bundle_install role sets it)" ;;
esac
record_reused='' record_said='' record_file='' digest='' record_at='' record_steps={}
# The folder $1 with its existing part resolved (pwd -P), so that a link is seen through.
resolved() {
  p=$1 rest=
  while [ ! -d "$p" ]; do
    rest=/$(basename -- "$p")$rest
    p=$(dirname -- "$p")
  done
  printf '%s%s\n' "$(cd -- "$p" && pwd -P)" "$rest"
}
# $tmp/stamps: `  "PATH": ["SHA256", dev, ino, size, mtime_ns, ctime_ns]` for each line of
# $tmp/tohash (the record's verified layout), stat taken before any hashing; $tmp/tohash: the
# lines whose stamp is not in this bundle's record (all of them without one).
record_plan() {
  case $(resolved "$state")/ in
    "$(pwd -P)"/*) die "the install record folder $(q "$state") is inside the bundle" \
      "pass --state DIR outside it: a file written there fails the next check" ;;
  esac
  digest=$(sed -n 's/^\(@HEX64_BRE@\)  bundle\.json$/\1/p' "$tmp/tohash")
  record_file=$state/sha256-$digest.json
  LC_ALL=C sed 's/^\(@HEX64_BRE@\)  \(.*\)$/\2 \1/' "$tmp/tohash" |
    LC_ALL=C sort -k1,1 >"$tmp/bypath"
  cut -d' ' -f1 "$tmp/bypath" | split -l 500 - "$tmp/names."
  : >"$tmp/stat"
  for batch in "$tmp"/names.*; do
    [ -f "$batch" ] || continue
    # bundle paths hold no space and no glob character (check_sums): split on purpose
    # shellcheck disable=SC2046
    stat -c '%n %d %i %s %.9Y %.9Z' -- $(cat "$batch") >>"$tmp/stat" 2>/dev/null || :
  done
  # PATH SHA256 dev ino size mtime ctime (s.ns): the record's line, the times in ns
  line='^([^ ]+) (@HEX64@) ([0-9]+) ([0-9]+) ([0-9]+) ([0-9]+)\.([0-9]{9})'
  line="$line"' ([0-9]+)\.([0-9]{9})$'
  LC_ALL=C grep -E '^[^ ]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+\.[0-9]{9} [0-9]+\.[0-9]{9}$' \
    "$tmp/stat" | LC_ALL=C sort -k1,1 | LC_ALL=C join "$tmp/bypath" - |
    LC_ALL=C sed -E -e "s/$line/  \"\1\": [\"\2\", \3, \4, \5, \6\7, \8\9]/" \
      -e 's/, 0+([0-9])/, \1/g' | LC_ALL=C sort >"$tmp/stamps"
  : >"$tmp/known"
  if [ -f "$record_file" ] && [ ! -L "$record_file" ] &&
    LC_ALL=C grep -qxF -e @KEY_DIGEST@ "$record_file" &&
    LC_ALL=C grep -qxF -e @KEY_FORMAT@ "$record_file" &&
    LC_ALL=C grep -qxF -e @KEY_VERSION@ "$record_file"; then
    LC_ALL=C grep -E '^  "[^"]+": \["@HEX64@"(, [0-9]+){5}\],?$' "$record_file" |
      sed 's/,$//' | LC_ALL=C sort >"$tmp/known"
    if LC_ALL=C grep -qxF -e @KEY_IMAGE@ "$record_file" &&
      ! LC_ALL=C grep -qxF -e @KEY_NOT_DONE@ "$record_file"; then
      record_door=$(sed -n 's/^ "door": "\([a-z_.]*\)",$/\1/p' "$record_file")
      record_at=$(sed -n 's/^ "installed_at": "\([0-9TZ:-]*\)",$/\1/p' "$record_file")
      record_steps=$(sed -n 's/^ "steps": \({.*}\),$/\1/p' "$record_file")
      [ -z "$record_door" ] || [ -z "$record_at" ] || [ -z "$record_steps" ] ||
        record_said="by $record_door at $record_at"
    fi
  fi
  LC_ALL=C comm -12 "$tmp/stamps" "$tmp/known" | sed 's/^  "\([^"]*\)".*$/\1/' |
    LC_ALL=C sort >"$tmp/reused"
  LC_ALL=C join -v 1 "$tmp/bypath" "$tmp/reused" | sed 's/^\([^ ]*\) \(.*\)$/\2  \1/' \
    >"$tmp/tohash"
  reused=$(wc -l <"$tmp/reused")
  [ "$reused" = 0 ] || record_reused=", $reused unchanged since verified, by $(q "$record_file")"
}
# The record can be written (before the image is loaded): a temporary file in its folder.
record_prepare() {
  mkdir -p -- "$state" 2>/dev/null && record_tmp=$(mktemp "$state/.sha256-$digest.XXXXXXXX") ||
    die "cannot write the install record in $(q "$state"); nothing was loaded" \
      "run as root, or pass --state DIR (or set SGLX_STATE_DIR) to a writable folder"
}
# A value for the record's JSON: control and non-ASCII characters as '?', \ and " escaped.
record_text() {
  printf '%s' "$1" | LC_ALL=C tr -c '[:print:]' '?' | sed 's/[\\"]/\\&/g'
}
# An install the record names (its image still in the engine) keeps its door, time and steps.
record_write() {
  if [ -n "$record_said" ]; then
    say "already installed ($record_said); the record keeps that"
  else
    record_door=$door record_at=$(date -u +%Y-%m-%dT%H:%M:%SZ) record_steps={}
  fi
  sha256_of SHA256SUMS || die "SHA256SUMS cannot be read" "$recopy" 1
  sums=$sha
  {
    printf '{\n'
@PRINTF@
    printf ' "verified": {\n'
    sed '$!s/$/,/' "$tmp/stamps"
    printf ' }\n}\n'
  } >"$record_tmp"
  mv -f -- "$record_tmp" "$record_file"
  record_tmp=
  say "recorded the install in $(q "$record_file")"
}
