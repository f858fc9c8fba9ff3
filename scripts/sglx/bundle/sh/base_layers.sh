#: Without its base: the base's layers, named by the base's reference and how to load it
#: (sglx.bundle.base_layers.refusal says the same). After layers_held.sh.
  base_ref=@REF@ base_image=@IMAGE@ base_layers=@LAYERS@
  layers_held "$base_image" "$base_layers" ||
    die "this bundle leaves out the @COUNT@ layers of the base image \
$(q "$base_ref") ($base_image): this engine lacks them; nothing was loaded" @HOW@
