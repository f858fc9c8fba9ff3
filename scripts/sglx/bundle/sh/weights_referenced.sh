#: A delta naming its parent's weights: the entry must be there and match, before anything loads.
weights_ok "$models_root/$weights_hex" ||
  die "this bundle takes its weights ($weights_digest) from this host's weights store, where \
the bundle $(q "$weights_from") put them: $(q "$models_root/$weights_hex") $weights_why; nothing \
was loaded" "install the bundle $(q "$weights_from") first (it carries them: sh \
$(q "$weights_from")/install.sh or sglx bundle install), then this one"
say "the weights $weights_digest are in the weights store: $(q "$models_root/$weights_hex")"
