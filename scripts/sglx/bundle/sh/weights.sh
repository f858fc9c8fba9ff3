#: The weights store's functions (sglx.bundle.install_sh_weights says what they do).
# The weights outside the image (bundle.json weights; '' when there are
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
}
