#: A delta: the layers it takes from its parent (after layers_held.sh).
  parent_bundle=@BUNDLE@ parent_digest=@DIGEST@
  parent_ref=@REF@ parent_image=@IMAGE@ parent_layers=@LAYERS@
  layers_held "$parent_image" "$parent_layers" ||
    die "this bundle is a delta over the bundle $(q "$parent_bundle") \
(bundle.json $parent_digest, image $(q "$parent_ref") $parent_image): this engine lacks \
@COUNT@ layers it takes from it; nothing was loaded" "install the bundle $(q "$parent_bundle") \
first (sh $(q "$parent_bundle")/install.sh or sglx bundle install), then this one"
