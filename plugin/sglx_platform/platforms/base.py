"""What every sglx platform shares: its behaviour is read from the baked arch profile.

Hooks are grouped in sglang's `SRTPlatform` order (interface.py); each says when core calls it.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sglx_core.profile import Profile
from sglx_platform.cpu_binding import apply_default
from sglx_platform.failures import FailureClass, PlatformError
from sglx_platform.graph_config import phases_turned_off, with_phases_off
from sglx_platform.image_profile import baked_profile
from sglx_platform.model_config import model_facts
from sglx_platform.server_args import (
    explicit_fields,
    fields_read,
    plan,
    reads_model,
    refusal_error,
    unknown_fields,
)

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def server_arg_defaults() -> dict[str, Any]:
    """sglang's own default for every ServerArgs field (a value != default was set on purpose)."""
    import msgspec
    from sglang.srt.arg_groups.arg_utils import record_fields
    from sglang.srt.server_args import ServerArgs

    defaults: dict[str, Any] = {}
    for field in record_fields(ServerArgs):
        if field.default is not msgspec.NODEFAULT:
            defaults[field.name] = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            defaults[field.name] = field.default_factory()
    return defaults


class SglxPlatformMixin:
    """Profile-driven hooks, mixed in front of the sglang platform class of each family."""

    sglx_profile: Profile

    if TYPE_CHECKING:  # provided by the sglang platform class the mixin is mixed into

        def is_out_of_tree(self) -> bool: ...

    def _sglx_setup(self) -> None:
        """Read the profile once; called by each platform's __init__ (declares, no device work)."""
        from sglang.srt.platforms.interface import PlatformCapabilities

        self.sglx_profile = baked_profile()
        caps = self.sglx_profile.platform.capabilities
        self.capabilities = PlatformCapabilities(**caps.model_dump())

    # ------------------------------------------------------------------
    # Configuration lifecycle
    # ------------------------------------------------------------------

    def apply_server_args_defaults(self, server_args: Any) -> None:
        """Called once while sglang resolves ServerArgs, before memory settings.

        The platform sglx stands on applies its own defaults first (sglang-kunlun's page size,
        for one). Then sglx writes the profile's defaults for fields the user left unset, and
        refuses values the arch cannot serve, naming the reason and what to use instead.
        """
        super().apply_server_args_defaults(server_args)  # type: ignore[misc]
        profile = self.sglx_profile
        defaults = server_arg_defaults()
        unknown = unknown_fields(profile, set(defaults))
        if unknown:
            raise PlatformError(
                FailureClass.CONFIG_REFUSED,
                f"the {profile.arch} profile names fields sglang {profile.sglang.version} "
                f"does not have: {', '.join(unknown)}",
                "fix server.defaults / rules / disabled_features in the arch profile",
            )
        names = fields_read(profile)
        current = {name: getattr(server_args, name) for name in names}
        # What the user asked for, before sglang's resolution filled values in; records built
        # without it (tests) count their current values as asked.
        asked = getattr(server_args, "_raw_input", None) or current
        explicit = explicit_fields({n: asked.get(n) for n in names if n in asked}, defaults)
        model = (
            model_facts(getattr(server_args, "model_path", None)) if reads_model(profile) else {}
        )
        decided = plan(profile, current, explicit, model)
        for warning in decided.warnings:
            logger.warning("sglx: %s", warning)
        if decided.refusals:
            raise refusal_error(profile, decided.refusals)
        for name, value in decided.writes.items():
            setattr(server_args, name, value)
        phases = phases_turned_off(decided.writes, asked)
        resolved = getattr(server_args, "cuda_graph_config", None)
        if phases and resolved is not None:
            server_args.cuda_graph_config = with_phases_off(resolved, phases)
        if decided.writes:
            logger.info("sglx: %s defaults applied: %s", profile.arch, decided.writes)
        apply_default(profile.ranks, server_args)

    # ------------------------------------------------------------------
    # Subsystem factory methods
    # ------------------------------------------------------------------

    def get_default_attention_backend(self) -> str:
        """Consulted for out-of-tree platforms when --attention-backend is unset: the profile's
        default, else the answer of the platform sglx stands on."""
        backend = self.sglx_profile.server.defaults.get("attention_backend")
        if isinstance(backend, str):
            return backend
        inherited: str = super().get_default_attention_backend()  # type: ignore[misc]
        return inherited

    # ------------------------------------------------------------------
    # Speculative decoding
    # ------------------------------------------------------------------

    def supports_speculative_algorithm(self, algorithm: str) -> bool:
        """Consulted for out-of-tree platforms when a speculative algorithm is asked for."""
        return self.sglx_profile.server.speculative_decoding != "never"

    # ------------------------------------------------------------------
    # Profiling
    # ------------------------------------------------------------------

    def get_torch_profiler_activity_str(self) -> str:
        """Asked of out-of-tree platforms when /start_profile starts sglang's torch profiler.
        sglang 0.5.23's DeviceMixin raises NotImplementedError there, which took the whole
        server down (tests/integration/test_cpu_server.py); the profile names the activity."""
        return self.sglx_profile.platform.profiler_activity

    def get_torch_profiler_activity(self) -> Any:
        import torch

        return getattr(
            torch.profiler.ProfilerActivity, self.sglx_profile.platform.profiler_activity
        )

    # ------------------------------------------------------------------
    # Distributed and dispatch
    # ------------------------------------------------------------------

    def get_torch_distributed_backend_str(self) -> str:
        return self.sglx_profile.platform.distributed_backend

    def get_dispatch_key_name(self) -> str:
        """Key of fused-op forwards on out-of-tree platforms (register_oot_forward)."""
        return self.sglx_profile.platform.dispatch_key
