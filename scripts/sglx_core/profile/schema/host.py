"""What a host needs: driver floors, kernel arguments, after-boot checks, ranks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from sglx_core.profile.schema.types import AbsPath, EnvName, Name, Text, _Strict


class VersionFloor(_Strict):
    """A minimum version on the host, and where to read the installed one."""

    min_version: Text | None = Field(
        default=None, description="Lowest known-good version; null = unpinned."
    )
    version_file: AbsPath | None = Field(
        default=None,
        description="File the host reports it in; its first dotted number with the most "
        "parts is the version.",
    )
    tool: Literal["xpu-smi"] | None = Field(
        default=None,
        description="Vendor tool that reports it instead of a file: xpu-smi (`xpu-smi -q`, "
        "each card's firmware; the path is the role's accel_host_xpu_smi). Hosts without "
        "the tool are reported as not checked. Firmware floors only.",
    )
    module: Name | None = Field(
        default=None,
        description="Kernel module whose `modinfo -F version MODULE` is read when version_file "
        "is absent: the driver is installed but not loaded (yet), e.g. blacklisted at boot "
        "(host.after_boot). Driver floors only.",
    )
    note: Text = Field(description="Source of the floor, or why it is not pinned.")

    @model_validator(mode="after")
    def _one_source(self) -> VersionFloor:
        """A pinned floor the host cannot be read against fails on every host: refused here."""
        if self.version_file is not None and self.tool is not None:
            raise ValueError("set one of 'version_file' and 'tool', not both")
        if self.min_version is not None and self.version_file is None and self.tool is None:
            raise ValueError(
                f"min_version {self.min_version!r} is pinned but nothing says where the host "
                "reports its version: set 'version_file' (a file) or 'tool' (e.g. xpu-smi)"
            )
        return self

    @model_validator(mode="after")
    def _module_backs_a_file(self) -> VersionFloor:
        if self.module is not None and self.version_file is None:
            raise ValueError(
                f"module {self.module!r} is read only when version_file is absent: set "
                "version_file too (e.g. /sys/module/MODULE/version)"
            )
        return self


class KernelArg(_Strict):
    """One kernel command-line argument and who asks for it."""

    arg: Annotated[str, StringConstraints(strict=True, pattern=r"^[^\s\"'\\$`]+$")] = Field(
        description="The argument as /proc/cmdline shows it (one word, no quotes), e.g. iommu=pt."
    )
    source: Text = Field(description="The vendor document (URL) or guide that asks for it.")


class AfterBoot(_Strict):
    """Modules the vendor allows loading after boot rather than by the kernel at boot."""

    modules: tuple[Name, ...] = Field(
        min_length=1,
        description="Blacklisted on the kernel command line (modprobe.blacklist=) and loaded by "
        "a systemd unit once the host is up, when the site sets accel_host_load_after_boot; "
        "each must be in host.modules.",
    )
    source: Text = Field(description="The vendor document (URL) that describes it, and why.")


class Host(_Strict):
    """Host settings the Ansible role applies and the host checks verify."""

    kernel_cmdline: tuple[KernelArg, ...] = Field(
        default=(),
        description="Arguments the kernel command line must carry (reboot to apply), each with "
        "its source.",
    )
    sysctl: dict[Annotated[str, StringConstraints(pattern=r"^[a-z0-9_.]+$")], StrictStr] = Field(
        default_factory=dict, description="sysctl name -> value, persisted in /etc/sysctl.d."
    )
    gpu_max_hw_queues: StrictInt | None = Field(
        default=None, ge=1, description="GPU_MAX_HW_QUEUES for the server; null = leave unset."
    )
    modules: tuple[Name, ...] = Field(default=(), description="Kernel modules that must load.")
    udev_rules: tuple[Text, ...] = Field(
        default=(), description="udev rules giving the device nodes their group and mode."
    )
    driver: VersionFloor | None = Field(default=None, description="Kernel driver floor.")
    firmware: VersionFloor | None = Field(default=None, description="Device firmware floor.")
    after_boot: AfterBoot | None = Field(
        default=None,
        description="Modules a site may load after boot instead (opt-in: the accel_host role's "
        "accel_host_load_after_boot); null = none.",
    )

    @model_validator(mode="after")
    def _host_consistent(self) -> Host:
        args = [a.arg for a in self.kernel_cmdline]
        repeated = sorted({a for a in args if args.count(a) > 1})
        if repeated:
            raise ValueError(f"kernel_cmdline lists {repeated} more than once")
        if self.after_boot is not None:
            stray = [m for m in self.after_boot.modules if m not in self.modules]
            if stray:
                raise ValueError(
                    f"after_boot.modules {stray} are not in host.modules {list(self.modules)}: "
                    "only a module the host loads can be loaded after boot"
                )
            if any(a.startswith("modprobe.blacklist=") for a in args):
                raise ValueError(
                    "kernel_cmdline carries modprobe.blacklist= while after_boot is set: the role "
                    "adds the blacklist itself when the site opts in; remove it from kernel_cmdline"
                )
        return self

    @model_validator(mode="after")
    def _driver_read_from_a_file(self) -> Host:
        """xpu-smi's `Driver Version` can be an NVIDIA-compatibility string (515.58 beside a
        5.0.21.47 driver, baidu/vLLM-Kunlun PR #148), and no reader of the role or the checks
        takes a driver from a tool: a driver floor reads its version_file."""
        if self.driver is not None and self.driver.tool is not None:
            raise ValueError(
                f"driver.tool {self.driver.tool!r}: a driver floor is read from its "
                "version_file (or module); 'tool' is for firmware floors"
            )
        return self


class Ranks(_Strict):
    """What the ranks of one server (on one host or several) compare before serving, and what
    differs between them by design. Ranks that differ in anything else wait on collectives the
    others never issue; every rank refuses to start instead, naming the keys and who holds which
    value."""

    env_prefixes: tuple[EnvName, ...] = Field(
        description="Variables with these prefixes change code paths across ranks: compared."
    )
    per_node_env: tuple[EnvName, ...] = Field(
        default=(),
        description="Variables that differ per launch or per node by design (run ids, device "
        "and core bindings, per-process folders): never compared.",
    )
    per_node_args: tuple[Name, ...] = Field(
        default=(),
        description="ServerArgs fields that name the node or process itself (rank, address, "
        "port, local device): never compared. Every other server argument is.",
    )
    timeout_s: Annotated[int, Field(strict=True, ge=5, le=3600)] = Field(
        default=60,
        description="Bound on the exchange of fingerprints: a rank that does not answer "
        "within it fails the start (never a hang).",
    )
    bind_cpu_cores: bool = Field(
        default=False,
        description="cpu: when SGLANG_CPU_OMP_THREADS_BIND is unset, split the cores this "
        "process may use among the node's local ranks, so `--tp N` needs no binding by hand.",
    )
