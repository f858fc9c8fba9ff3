"""Which dtype each tensor is stored in, and whether the arch accepts the checkpoint at all.

The storage dtype comes from the arch profile (`weights.dtype`) and nothing else: plain
floating-point tensors (F64, F32, F16, BF16) become that dtype; integer, boolean, complex and
low-bit (FP8/FP6/FP4) tensors are carried byte for byte.

A quantized checkpoint (config.json `quantization_config.quant_method`) is first held against
the profile's unconditional rules on `quantization` (`server.rules`), the same rules the
plugin applies to `--quantization`, as the method sglang serves it as on the arch
(`weights.checkpoint_routes`: on HIP a ModelOpt checkpoint is served through Petit, although
`--quantization modelopt` has no HIP kernel): a refused method stops the conversion with the rule's
reason and what to use instead; a `warn` rule lets it through with the reason as a warning.
Inside an accepted quantized checkpoint the quantization parameters (scales, zero points,
packed weights, group indices) keep their dtype, because the kernels read them at the precision
they were calibrated in; only the remaining float tensors (embeddings, norms, unquantized
layers) follow the arch dtype. Methods whose parameter names sglx does not know are refused
rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from sglx.weights.dtypes import Dtype, storage_dtype
from sglx_core.errors import SglxError
from sglx_core.profile.schema import Profile

QUANTIZATION_RULE = "quantization"

# quant_method values (config.json) whose parameter tensors the patterns below cover. The
# names follow the checkpoint formats (transformers/sglang quantization configs), not any arch.
KNOWN_QUANT_METHODS = frozenset(
    {
        "awq",
        "awq_marlin",
        "bitsandbytes",
        "compressed-tensors",
        "fbgemm_fp8",
        "fp8",
        "gptq",
        "gptq_marlin",
        "modelopt",
        "modelopt_fp4",
        "modelopt_fp8",
        "moe_wna16",
        "mxfp4",
        "mxfp8",
        "quark",
        "quark_mxfp4",
        "w4afp8",
        "w8a8_fp8",
        "w8a8_int8",
    }
)
# Last component of a tensor name (after the final '.') that marks a quantization parameter.
QUANT_PARAMETER_PATTERNS = (
    "*scale*",
    "*zero*",
    "g_idx",
    "qweight",
    "*absmax*",
    "quant_map",
    "*quant_state*",
    "*_packed",
    "weight_shape",
    "SCB",
)


@dataclass(frozen=True)
class DtypePolicy:
    """The storage decision for every tensor of one checkpoint on one arch."""

    target: Dtype
    quant_method: str | None = None

    def output_dtype(self, name: str, dtype: Dtype) -> Dtype:
        if not dtype.is_float:
            return dtype
        if self.quant_method is not None and is_quant_parameter(name):
            return dtype
        return self.target


def is_quant_parameter(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return any(fnmatchcase(leaf, pattern) for pattern in QUANT_PARAMETER_PATTERNS)


def quant_method_of(config: Mapping[str, Any] | None) -> str | None:
    """The checkpoint's quantization method from config.json, or None when unquantized."""
    if not config:
        return None
    section = config.get("quantization_config")
    if section is None:
        return None
    method = section.get("quant_method") if isinstance(section, dict) else None
    if not isinstance(method, str) or not method:
        raise SglxError(
            "config.json: quantization_config has no quant_method",
            hint="the checkpoint is quantized but does not say how; fix its config.json",
            code="unsupported_quantization",
        )
    return method


def quant_algo_of(config: Mapping[str, Any]) -> str | None:
    """The checkpoint's `quant_algo` (ModelOpt's name for its format) from config.json's
    quantization_config, flat or under `quantization` as hf_quant_config.json writes it."""
    section = config.get("quantization_config")
    if not isinstance(section, dict):
        return None
    nested = section.get("quantization")
    algo = section.get("quant_algo", nested.get("quant_algo") if isinstance(nested, dict) else None)
    return algo if isinstance(algo, str) and algo else None


def served_method(profile: Profile, config: Mapping[str, Any], method: str) -> str:
    """The method sglang serves a `method` checkpoint as on `profile`'s arch (its
    `weights.checkpoint_routes`); a checkpoint the route cannot take is refused here."""
    route = profile.weights.checkpoint_routes.get(method)
    if route is None:
        return method
    algo = quant_algo_of(config)
    if route.quant_algo and algo not in route.quant_algo:
        raise SglxError(
            f"the checkpoint is quantized with '{method}' (quant_algo {algo or 'not given'}); "
            f"arch '{profile.arch}' serves '{method}' checkpoints as '{route.served_as}', which "
            f"takes quant_algo {', '.join(route.quant_algo)} only: {route.reason}",
            hint=f"use a {' or '.join(route.quant_algo)} '{method}' checkpoint, "
            "or an unquantized one",
            code="unsupported_quantization",
        )
    return route.served_as


def dtype_policy(
    profile: Profile, config: Mapping[str, Any] | None
) -> tuple[DtypePolicy, tuple[str, ...]]:
    """The policy for `config`'s checkpoint on `profile`'s arch, plus warnings to show.

    Raises `SglxError` (code ``unsupported_quantization``) when the arch's quantization rule
    refuses the method sglang serves the checkpoint as, or when sglx does not know the
    method's tensors.
    """
    target = storage_dtype(profile.weights.dtype)
    method = quant_method_of(config)
    if method is None or config is None:
        return DtypePolicy(target), ()
    served = served_method(profile, config, method)
    named = f"'{method}'" if served == method else f"'{method}' (served as '{served}')"
    warnings: list[str] = []
    # Conditional rules depend on other server arguments or the served model, which a
    # conversion does not know; the unconditional ones hold for every launch.
    rules = [r for r in profile.server.rules_on(QUANTIZATION_RULE) if not r.conditional]
    for rule in sorted(rules, key=lambda r: r.action != "refuse"):
        if rule.permits(served):
            continue
        message = (
            f"the checkpoint is quantized with {named}, which arch '{profile.arch}' "
            f"{'refuses' if rule.action == 'refuse' else 'warns about'}: {rule.reason}"
        )
        if rule.action == "refuse":
            raise SglxError(
                message,
                hint=f"use {rule.instead}" if rule.instead else "use an unquantized checkpoint",
                code="unsupported_quantization",
            )
        warnings.append(message + (f" (instead: {rule.instead})" if rule.instead else ""))
    if method not in KNOWN_QUANT_METHODS:
        raise SglxError(
            f"the checkpoint is quantized with '{method}', a method whose tensor layout sglx "
            "does not know, so it cannot tell quantization parameters from weights",
            hint=f"methods sglx converts: {', '.join(sorted(KNOWN_QUANT_METHODS))}; "
            "or serve the checkpoint unconverted",
            code="unsupported_quantization",
        )
    return DtypePolicy(target, method), tuple(warnings)
