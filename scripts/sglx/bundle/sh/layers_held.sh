#: A bundle that leaves out layers (bundle.json's image.parent, image.base): before anything
#: loads, the engine must hold them, as `sglx bundle install` asks (sglx.bundle.delta.
#: engine_missing). It holds them when an image's layers start with the bundle's own, up to the
#: highest one left out: the image named (the parent's, the base's) is asked first, then every
#: image the engine lists. `layers_held ID PREFIX`.
  layers_start() {
    layers=$(docker image inspect --format '{{range .RootFS.Layers}}{{.}} {{end}}' "$1" \
      2>/dev/null) || return 1
    case $layers in "$2"*) return 0 ;; esac
    return 1
  }
  layers_held() {
    ! layers_start "$1" "$2" || return 0
    for id in $(docker image ls -aq --no-trunc 2>/dev/null | sort -u); do
      ! layers_start "$id" "$2" || return 0
    done
    return 1
  }
