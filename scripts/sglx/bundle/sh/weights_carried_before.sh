#: Carried weights, before the load: the entry is checked once; one that is there and holds
#: other bytes is refused unless --replace-weights (every image that mounts it would serve
#: them), before anything is loaded, as `sglx bundle install` refuses it.
if weights_ok "$models_root/$weights_hex"; then
  weights_state=ok
else
  weights_state=$weights_why
  [ "$weights_why" = "is not there" ] || [ "$replace_weights" = 1 ] ||
    die "the weights store's entry $(q "$models_root/$weights_hex") $weights_why; install \
never replaces an entry that holds other bytes, since every image that mounts it would serve \
them; nothing was loaded" "look at what changed there; to put the bundle's weights in its \
place, run install.sh again with --replace-weights (the bundle's bytes are checked first)"
fi
