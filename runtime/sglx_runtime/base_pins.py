"""Write pip constraints pinning the packages the base provides to their installed versions.

Run at image build time (`python -m sglx_runtime.base_pins PROFILE OUT`); images of bases that own
torch set PIP_CONSTRAINT to the output, so a later `pip install` cannot replace the base's
ROCm or XPU torch with a PyPI build.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from sglx_core.output_files import atomic_write_text
from sglx_core.profile import load_profile_file


def pins(provides: tuple[str, ...]) -> list[str]:
    lines = []
    for name in provides:
        try:
            lines.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            continue  # the base does not carry it after all: nothing to protect
    return lines


def main(argv: list[str] | None = None) -> int:
    profile_file, out = (argv if argv is not None else sys.argv[1:])[:2]
    lines = pins(load_profile_file(Path(profile_file)).base.provides)
    atomic_write_text(Path(out), "".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
