"""The serving gate: numerics, speed, collective, vendor tools, communication share; metrics."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)

from sglx_core.profile.schema.types import AbsPath, Text, _Strict

ServedDtype = Literal["float32", "float16", "bfloat16"]


class NumericsTolerance(_Strict):
    """How far served log-probabilities may stray from the float32 reference, for one served
    dtype (sglx_core.gate.golden_compare.Tolerance; docs/reference/gate.md derives each)."""

    max_abs: StrictFloat = Field(
        gt=0, description="Largest |served - reference| log-probability at any token of a prompt."
    )
    mean_abs: StrictFloat = Field(
        gt=0, description="Largest mean |served - reference| over one prompt's tokens."
    )
    min_top1_agreement: StrictFloat = Field(
        ge=0,
        le=1,
        description="Least fraction of one prompt's positions whose served argmax equals the "
        "reference's.",
    )
    source: Text = Field(
        description="How the numbers were derived: a measurement (bench/gate) or the reasoning."
    )


class GateNumerics(_Strict):
    """The golden-numerics replay of the serving gate (docs/reference/gate.md)."""

    tolerances: dict[ServedDtype, NumericsTolerance] = Field(
        default_factory=dict,
        description="Served weights dtype -> tolerance. The replay takes the dtype the server "
        "runs (`--dtype`, or sglang's auto rule over the checkpoint's dtype: float32 serves as "
        "float16); a dtype with no entry fails the gate.",
    )


class SpeedFloors(_Strict):
    """Absolute limits a host must meet alone, CVS-style (sglx_core.gate.speed.Floors); every
    one optional. AMD's CVS holds Llama-3.1-70B TP8 on MI300X to 900 output tok/s at
    concurrency 64, mean TPOT <= 150 ms and goodput >= 0.99: numbers of one model, so a site
    sets its own (the rollout's sglang_service_gate_speed_floors) rather than the arch."""

    min_output_tok_s: StrictFloat | None = Field(default=None, gt=0, description="Output tok/s.")
    max_tpot_mean_ms: StrictFloat | None = Field(
        default=None, gt=0, description="Mean time per output token, ms."
    )
    max_ttft_p99_ms: StrictFloat | None = Field(
        default=None, gt=0, description="p99 time to first token, ms."
    )
    min_goodput: StrictFloat | None = Field(
        default=None, gt=0, le=1, description="SLO attainment: good requests / requests sent."
    )


class SpeedSlos(_Strict):
    """The goodput SLOs bench_serving judges each request by (`--goodput ttft:MS tpot:MS`): the
    run records goodput, the share of requests that met every one. None: that SLO unset; none
    set: no goodput is recorded."""

    ttft_ms: StrictFloat | None = Field(default=None, gt=0, description="Time to first token.")
    tpot_ms: StrictFloat | None = Field(default=None, gt=0, description="Time per output token.")


class GateSpeed(_Strict):
    """The short benchmark of the serving gate: sglang's own bench_serving on random token ids,
    the same work on every host, judged against the fleet's median (docs/reference/gate.md)."""

    concurrency: StrictInt = Field(default=4, ge=1, description="Requests in flight at once.")
    num_prompts: StrictInt = Field(
        default=16, ge=1, description="Requests sent: at least `concurrency`."
    )
    input_len: StrictInt = Field(default=128, ge=1, description="Prompt tokens per request.")
    output_len: StrictInt = Field(default=64, ge=2, description="Output tokens per request.")
    slos: SpeedSlos = Field(default_factory=SpeedSlos)
    floors: SpeedFloors = Field(default_factory=SpeedFloors)
    source: Text = Field(
        default="", description="Why these sizes: what they measure and what they cost."
    )

    @model_validator(mode="after")
    def _enough_prompts(self) -> GateSpeed:
        if self.num_prompts < self.concurrency:
            raise ValueError(
                f"num_prompts {self.num_prompts} is below concurrency {self.concurrency}: the "
                "run would never hold that many requests at once"
            )
        return self


class GateCollective(_Strict):
    """The serving gate's collective smoke, an all-reduce before a multi-device server starts.

    Over every device the server will use, one process each, with the profile's
    distributed_backend (`python -m sglx_runtime.collective_smoke`; docs/reference/gate.md)."""

    enabled: StrictBool = Field(
        default=True,
        description="Run the smoke before a serving group's server starts (the rollout's "
        "sglang_service_gate_collective switches it off for a site).",
    )
    size_bytes: StrictInt = Field(
        default=64 << 20,
        ge=4,
        le=16 << 30,
        description="Bytes all-reduced per operation (float32), on each rank.",
    )
    iters: StrictInt = Field(default=20, ge=1, description="Timed all-reduce operations.")
    warmup: StrictInt = Field(default=5, ge=0, description="Untimed operations before them.")
    timeout_s: StrictInt = Field(
        default=120,
        ge=1,
        description="Seconds each phase may take (the rendezvous, joining the group, the "
        "results): a rank missing after it is named with its host.",
    )
    # Lax keys: a mapping key read back from YAML or JSON (the baked profile) is a string.
    floor_gbps: dict[Annotated[int, Field(strict=False, ge=2)], StrictFloat] = Field(
        default_factory=dict,
        description="World size (ranks: nodes x devices per node) -> the least bus bandwidth, "
        "GB/s, that passes. A floor is measured on one number of devices, so it holds only "
        "there; a world size with no entry is measured, not judged. {} = never judged.",
    )
    source: Text | None = Field(
        default=None, description="Where the floors come from (a vendor's acceptance document)."
    )

    @field_validator("floor_gbps")
    @classmethod
    def _positive_floors(cls, values: dict[int, float]) -> dict[int, float]:
        bad = sorted(world for world, floor in values.items() if not floor > 0)
        if bad:
            raise ValueError(f"the floors of world sizes {bad} are not above 0 GB/s")
        return values

    @model_validator(mode="after")
    def _floors_have_a_source(self) -> GateCollective:
        if self.floor_gbps and self.source is None:
            raise ValueError("floor_gbps is set without a source: name the document it comes from")
        return self


VendorTool = Literal["amd-smi", "rvs", "rccl-tests", "xpu-smi"]
# One word of a vendor tool's command line: flags and values, nothing a shell reads specially.
ToolArg = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.,:=/+-]+$")]


class VendorIdle(_Strict):
    """What the idle checks accept as idle (vendor_amd_smi_idle, vendor_xpu_smi_idle)."""

    max_utilization_pct: StrictFloat = Field(
        default=0.0,
        ge=0,
        le=100,
        description="Highest utilization (GFX activity), %, of an idle device.",
    )
    max_temperature_c: StrictFloat | None = Field(
        default=None,
        gt=0,
        le=150,
        description="Every temperature the tool reports must be strictly under this, °C; null: "
        "temperatures are reported, not judged.",
    )
    source: Text | None = Field(default=None, description="Where the limits come from.")

    @model_validator(mode="after")
    def _limit_has_a_source(self) -> VendorIdle:
        if self.max_temperature_c is not None and self.source is None:
            raise ValueError("max_temperature_c is set without a source: name the document")
        return self


class VendorPartitions(_Strict):
    """The partition modes every GPU must be in (vendor_amd_smi_partitions); null: unchecked."""

    compute: Literal["SPX", "DPX", "TPX", "QPX", "CPX"] | None = Field(
        default=None, description="Accelerator partition mode (`amd-smi partition --current`)."
    )
    memory: Literal["NPS1", "NPS2", "NPS4", "NPS8"] | None = Field(
        default=None, description="Memory partition mode."
    )
    source: Text | None = Field(default=None, description="Why these modes.")

    @model_validator(mode="after")
    def _both_or_neither(self) -> VendorPartitions:
        if (self.compute is None) != (self.memory is None):
            raise ValueError("set both compute and memory, or neither")
        if self.compute is not None and self.source is None:
            raise ValueError("the partition modes are set without a source")
        return self


class VendorRvsTest(_Strict):
    """One RVS run: `rvs -c <conf_dir>/<conf>`, judged as its module's actions."""

    module: Literal["gst", "iet", "mem", "pebb", "pbqt", "peqt"] = Field(
        description="The RVS module the conf file runs (sglx_core.gate.tools.rvs judges these)."
    )
    conf: Annotated[
        str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.conf$")
    ] = Field(description="The conf file, relative to conf_dir (MI300X/gst_single.conf).")


class VendorRvs(_Strict):
    """The ROCm Validation Suite runs of vendor_rvs."""

    conf_dir: AbsPath = Field(
        default="/opt/rocm/share/rocm-validation-suite/conf",
        description="Where RVS's conf files are installed.",
    )
    tests: tuple[VendorRvsTest, ...] = Field(default=(), description="The runs, in order.")
    timeout_s: StrictInt = Field(default=1800, ge=1, description="Seconds each run may take.")
    source: Text | None = Field(default=None, description="Where the selection comes from.")


class VendorRcclTests(_Strict):
    """The rccl-tests all_reduce_perf run of vendor_rccl_all_reduce."""

    args: tuple[ToolArg, ...] = Field(
        default=("-b", "8", "-e", "8G", "-f", "2", "-g", "8"),
        description="all_reduce_perf's arguments.",
    )
    min_busbw_gbps: StrictFloat | None = Field(
        default=None,
        gt=0,
        description="Least in-place bus bandwidth, GB/s, at the largest message; null: reported, "
        "not judged.",
    )
    min_size_bytes: StrictInt | None = Field(
        default=None, ge=1, description="The largest message must reach this size (the floor's)."
    )
    timeout_s: StrictInt = Field(default=900, ge=1, description="Seconds the run may take.")
    source: Text | None = Field(default=None, description="Where the floor comes from.")

    @model_validator(mode="after")
    def _floor_has_a_source(self) -> VendorRcclTests:
        if self.min_busbw_gbps is not None and self.source is None:
            raise ValueError("min_busbw_gbps is set without a source: name the document")
        return self


class GateVendor(_Strict):
    """Vendor health tools the host checks run where installed (docs/reference/preflight.md).

    A tool that is absent is reported as not run (the check is skipped), never as passed."""

    tools: tuple[VendorTool, ...] = Field(
        default=(),
        description="The tools that apply to this arch; the checks of the others do not run.",
    )
    search_path: tuple[AbsPath, ...] = Field(
        default=(),
        description="Folders searched for a tool after PATH (xpu-smi: the role's "
        "accel_host_xpu_smi instead).",
    )
    timeout_s: StrictInt = Field(
        default=120, ge=1, description="Seconds an amd-smi or xpu-smi read may take."
    )
    idle: VendorIdle = Field(default_factory=VendorIdle)
    partitions: VendorPartitions = Field(default_factory=VendorPartitions)
    rvs: VendorRvs = Field(default_factory=VendorRvs)
    rccl_tests: VendorRcclTests = Field(default_factory=VendorRcclTests)

    @model_validator(mode="after")
    def _rvs_has_tests(self) -> GateVendor:
        if "rvs" in self.tools and not self.rvs.tests:
            raise ValueError("tools lists rvs but rvs.tests is empty: name the runs")
        return self


class CommShare(_Strict):
    """How much of a served step's time goes to communication, read from a torch-profiler trace
    of the server (`sglx trace comm-share`, sglx_core/comm_share.py): seed S0-36's check of
    a multi-card server (all-reduce above 30% of step time: change the parallel strategy)."""

    max_share: float = Field(
        default=0.30,
        gt=0,
        le=1,
        description="Share of the busy time above which the trace is a finding.",
    )
    patterns: tuple[Text, ...] = Field(
        default=(),
        description="Regular expressions (case-insensitive) matching the names of the "
        "collective library's kernels and ops in a trace.",
    )
    fixes: tuple[Text, ...] = Field(
        default=(),
        description="What to try when the share is above max_share (the finding's hint).",
    )
    source: Text = Field(default="derived", description="Where the threshold and names come from.")

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"pattern {pattern!r} is not a regular expression ({exc})"
                ) from None
        return patterns


class Gate(_Strict):
    """What a host must serve before it joins the fleet, beyond /health."""

    numerics: GateNumerics = Field(default_factory=GateNumerics)
    vendor: GateVendor = Field(default_factory=GateVendor)
    collective: GateCollective = Field(default_factory=GateCollective)
    speed: GateSpeed = Field(default_factory=GateSpeed)
    comm_share: CommShare = Field(default_factory=CommShare)


class Observability(_Strict):
    """What the server exposes for the site's Prometheus (docs/reference/observability.md)."""

    metrics: StrictBool = Field(
        default=True,
        description="Start the server with sglang's metrics (--enable-metrics), sglx's own "
        "series beside them; SGLX_METRICS=0 in the server's environment (the sglang_service "
        "role's sglang_service_metrics: false) turns them off on a host.",
    )
    metrics_path: Annotated[str, StringConstraints(strict=True, pattern=r"^/[a-z_/]*$")] = Field(
        default="/metrics",
        description="Where the server serves them, on its port (sglang's route).",
    )
