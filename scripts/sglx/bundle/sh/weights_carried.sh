#: Carried weights, after the load: kept when the entry matched, else placed.
if [ "$weights_state" = ok ]; then
  say "the weights $weights_digest are in the weights store already:" \
    "$(q "$models_root/$weights_hex")"
else
  [ "$weights_state" = "is not there" ] ||
    say "the weights store's $(q "$models_root/$weights_hex") $weights_state: replacing it" \
      "(--replace-weights)"
  weights_place
fi
