"""Tuned GEMM sets and the communication-debug switch."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
)

from sglx_core.profile.schema.types import AbsPath, EnvName, Name, Text, _Strict

TunedFormat = Literal["aiter_csv", "tunableop_csv", "hipblaslt_override"]
TunedPattern = Annotated[
    str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.*\[\]-]+$", max_length=128)
]


class TunedFileRule(_Strict):
    """One kind of file a tuned set may hold (sglx_core/tuned.py), and what makes the server
    read it from the mounted set."""

    pattern: TunedPattern = Field(description="fnmatch pattern of the file's name.")
    format: TunedFormat = Field(
        description="How the file is read and checked: aiter_csv (AITER's tuned tables, one row "
        "per shape keyed by cu_num and, in newer tables, gfx), tunableop_csv (PyTorch "
        "TunableOp results: Validator lines, then one tuned op per line), hipblaslt_override "
        "(hipBLASLt's offline-tuning result: a 'Git Version:' line, then one problem per line)."
    )
    env: dict[EnvName, StrictStr] = Field(
        description="Variables sglx-serve sets when the set holds such a file: {path} is the "
        "file's path in the container, {target} the set's folder."
    )
    source: Text = Field(description="Where the library documents the file and its variable.")


class Tuning(_Strict):
    """Tuned GEMM configurations carried from the host that tuned them to the hosts that serve
    (seed 004: tune AITER and hipBLASLt per M, N, K once, reuse the results).

    A tuned set is a folder with a manifest (`sglx tuned capture`): checked against this arch
    (the gfx and compute-unit counts its rows name), carried in a bundle (`sglx bundle create
    --tuned`), placed on each host under host_root/<digest> and mounted read-only at target.
    sglx-serve reads the mounted manifest, checks it again against the host's devices, and sets
    each file's variables before the server starts. An arch with no rules takes no set."""

    target: AbsPath = Field(
        default="/etc/sglx/tuned", description="Where the container sees the host's tuned set."
    )
    host_root: AbsPath = Field(
        default="/var/lib/sglx/tuned",
        description="Folder on the host holding one folder per tuned set, named by its digest.",
    )
    capture_from: AbsPath | None = Field(
        default=None,
        description="Folder in a server container where tuning runs write their results "
        "(`sglx tuned capture --container` copies it out); None = capture from a folder only.",
    )
    gfx: Name | None = Field(
        default=None, description="The gfx name AITER's rows carry for this arch (column gfx)."
    )
    compute_units: tuple[Annotated[int, Field(strict=True, ge=1)], ...] = Field(
        default=(),
        description="Compute-unit counts of this arch's cards (AITER keys its rows by cu_num, "
        "torch's multi_processor_count): a set with no row for any of them is another arch's.",
    )
    files: dict[Name, TunedFileRule] = Field(
        default_factory=dict, description="The kinds of file a tuned set may hold, by name."
    )
    max_file_bytes: StrictInt = Field(
        default=64 << 20, ge=1, description="Largest tuned file read (bytes)."
    )
    max_files: StrictInt = Field(default=64, ge=1, description="Most files in one tuned set.")


class CommDebugVar(_Strict):
    """One variable of the communication-debugging restart (comm-debug.yml)."""

    value: Annotated[str, StringConstraints(strict=True)] = Field(description="Its value.")
    source: Text = Field(description="What it turns on, and where that is documented.")
