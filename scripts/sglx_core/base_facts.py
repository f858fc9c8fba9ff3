"""A base image's declared versions against the profile: one comparison per fact.

Shared by `sglx image build` (labels, and the refusal of a base with another sglang) and the
plugin's preflight (which re-reads the facts in the running container). Pure: no engine, no
imports beyond packaging and the profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from sglx_core.profile import Profile


@dataclass(frozen=True)
class Fact:
    """One thing the base declares: what was found, what the profile expects, and whether
    they agree (None: the profile expects nothing here)."""

    name: str
    found: str | None
    expected: str | None
    matches: bool | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "found": self.found,
            "expected": self.expected,
            "matches": self.matches,
        }


def _version(text: str) -> Version | None:
    """A version from pip metadata or a ROCm version file ("7.2.0-43", "2.9.1+rocm7.2.0")."""
    for candidate in (text, text.split("-")[0]):
        try:
            return Version(candidate)
        except InvalidVersion:
            continue
    return None


def _satisfies(found: str | None, spec: str) -> bool:
    version = None if found is None else _version(found)
    if version is None:
        return False
    # A local tag (+rocm7.2) is the base's own build of that version.
    return SpecifierSet(spec).contains(Version(version.public), prereleases=True)


def compare(profile: Profile, probe: dict[str, Any]) -> list[Fact]:
    """sglang, torch, ROCm and Python of the base (as the probe read them) against the profile."""
    dists: dict[str, str] = dict(probe.get("distributions") or {})
    python = str(probe.get("python") or "")
    facts = [
        Fact(
            "python",
            python or None,
            profile.python.version,
            ".".join(python.split(".")[:2]) == profile.python.version,
        )
    ]
    sglang = dists.get("sglang")
    if profile.sglang.wheel == "base":
        facts.append(
            Fact("sglang", sglang, profile.sglang.version, sglang == profile.sglang.version)
        )
    else:
        facts.append(Fact("sglang", sglang, None, None))
    torch = dists.get("torch")
    owns_torch = "torch" in profile.base.provides
    facts.append(
        Fact(
            "torch",
            torch,
            profile.python.torch if owns_torch else None,
            _satisfies(torch, profile.python.torch) if owns_torch else None,
        )
    )
    rocm = probe.get("rocm")
    spec = profile.base.rocm
    facts.append(Fact("rocm", rocm, spec, None if spec is None else _satisfies(rocm, spec)))
    return facts


@dataclass(frozen=True)
class VendorRelease:
    """The vendor platform package the base carries, against the sglang its vendor runs it
    with (profile: platform.vendor.sglang_validated). Never a refusal: a site may serve a pair
    its vendor did not run, told so at build and in preflight."""

    distribution: str
    found: str | None
    validated_with: str | None
    sglang: str

    @property
    def validated(self) -> bool:
        return self.found is not None and self.validated_with == self.sglang

    def to_json(self) -> dict[str, Any]:
        return {
            "distribution": self.distribution,
            "found": self.found,
            "validated_with": self.validated_with,
            "sglang": self.sglang,
            "validated": self.validated,
        }

    def message(self) -> str:
        name, found, sglang = self.distribution, self.found, self.sglang
        if found is None:
            return f"the base carries no {name}"
        if self.validated:
            return f"{name} {found}, which its vendor runs with sglang {sglang}"
        if self.validated_with is None:
            return (
                f"{name} {found}: no sglang release its vendor runs it with is known "
                f"(platform.vendor.sglang_validated); this image serves sglang {sglang}: expect "
                "hook drift and test it before it serves"
            )
        return (
            f"{name} {found} is run by its vendor with sglang {self.validated_with}; this image "
            f"serves sglang {sglang}: expect hook drift and test it before it serves"
        )


def vendor_release(profile: Profile, probe: dict[str, Any]) -> VendorRelease | None:
    """The base's release of the profile's vendor platform package, or None without one."""
    vendor = profile.platform.vendor
    if vendor is None:
        return None
    dists: dict[str, str] = dict(probe.get("distributions") or {})
    found = dists.get(_canonical(vendor.distribution))
    return VendorRelease(
        vendor.distribution,
        found,
        None if found is None else vendor.sglang_validated.get(found),
        profile.sglang.version,
    )


def missing_provided(profile: Profile, probe: dict[str, Any]) -> list[str]:
    """Distributions the profile says the base provides that it does not carry."""
    dists = probe.get("distributions") or {}
    return [name for name in profile.base.provides if _canonical(name) not in dists]


def _canonical(name: str) -> str:
    return name.replace("_", "-").replace(".", "-").lower()


def labels(facts: list[Fact]) -> dict[str, str]:
    """Image labels: io.sglx.base.<fact> (the version found, or 'none') and
    io.sglx.base.matches (true, or the facts that differ from the profile)."""
    out = {f"io.sglx.base.{f.name}": f.found or "none" for f in facts}
    differ = [f.name for f in facts if f.matches is False]
    out["io.sglx.base.matches"] = "true" if not differ else "false: " + ", ".join(differ)
    return out
