"""How checkpoints are converted and carried: routes, model assets, the weights policy."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    StringConstraints,
)

from sglx_core.digests import StrictSha256
from sglx_core.profile.schema.types import EnvName, _Strict
from sglx_core.sizes import SIZE_PATTERN


class CheckpointRoute(_Strict):
    """How sglang serves a checkpoint of one `quant_method` (config.json) on this arch when no
    `--quantization` is given: the method it resolves it to, which the profile's quantization
    rules then judge at `sglx weights convert` as they judge the flag."""

    served_as: Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z0-9][a-z0-9_-]*$")] = (
        Field(description="The quantization method sglang serves such a checkpoint as.")
    )
    quant_algo: list[Annotated[str, StringConstraints(strict=True, min_length=1)]] = Field(
        default_factory=list,
        description="The checkpoint's `quant_algo` values that route takes (config.json "
        "quantization_config); another is refused naming them. Empty: any.",
    )
    reason: Annotated[str, StringConstraints(strict=True, min_length=1)] = Field(
        description="Why, with its source (the sglang wheel's file, a vendor's doc)."
    )


class ModelAssets(_Strict):
    """Files a model of one architecture reads from outside its weights when it starts, which
    nothing may download in an air-gapped site: they must lie beside config.json."""

    files: dict[
        Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")],
        StrictSha256,
    ] = Field(description="File name -> its sha256 (hex), each from its publisher's source.")
    env: dict[EnvName, Annotated[str, StringConstraints(strict=True, min_length=1)]] = Field(
        default_factory=dict,
        description="Variables that point the model's loaders at the files; `{model}` stands "
        "for the model's folder. A variable the server already has (docker run -e) is kept.",
    )
    source: Annotated[str, StringConstraints(strict=True, min_length=1)] = Field(
        description="Where each file is published, for the operator who fetches it."
    )
    reason: Annotated[str, StringConstraints(strict=True, min_length=1)] = Field(
        description="Why the model needs them, with its source."
    )


class Weights(_Strict):
    """How `sglx weights convert` stores weights for this arch, and where large ones live."""

    dtype: Literal["float32", "float16", "bfloat16"] = Field(
        description="Floating-point dtype converted weights are stored in."
    )
    outside_above: Annotated[str, StringConstraints(strict=True, pattern=SIZE_PATTERN)] = Field(
        description="Converted weights larger than this (a size: 4GiB, 700MB, bytes) are not "
        "baked into the image: `sglx image build` keeps them in the weights store, and a bundle "
        "carries them beside the image, or, for a delta over a bundle with the same weights, "
        "names them by digest only. A site overrides it with `sglx image build "
        "--weights-outside-above SIZE` or SGLX_WEIGHTS_OUTSIDE_ABOVE."
    )
    store: Annotated[str, StringConstraints(strict=True, pattern=r"^(/[A-Za-z0-9_.-]+)+$")] = Field(
        description="Root of the node-local weights store: one folder per weights manifest "
        "digest (`<store>/<64 hex>`), placed once and verified by `sglx bundle install`, "
        "install.sh and the bundle_install role, shared by image versions and mounted "
        "read-only at the image's model folder. A site moves it with --models-root, "
        "SGLX_MODELS_ROOT, bundle_install_models_root and sglang_service_models_root."
    )
    checkpoint_routes: dict[str, CheckpointRoute] = Field(
        default_factory=dict,
        description="By a checkpoint's config.json `quant_method`: the method sglang serves "
        "it as on this arch (e.g. ModelOpt NVFP4 through Petit on HIP). `sglx weights convert` "
        "holds that method, not the checkpoint's name for it, against the quantization rules.",
    )
    model_assets: dict[
        Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z][A-Za-z0-9_]*$")],
        ModelAssets,
    ] = Field(
        default_factory=dict,
        description="By a config.json architecture: files the model loads at start from outside "
        "its weights. `sglx weights convert` refuses a checkpoint without them (naming each "
        "file, its sha256 and its source) and carries them; sglx-serve refuses to start such a "
        "model without them and sets the variables that point at them.",
    )
