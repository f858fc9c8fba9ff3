"""`bundle create --tar`: the bundle folder as one tar, staged and renamed, with the bundle's
install.sh beside it (`NAME.install.sh`) for a host without Python."""

from __future__ import annotations

import shutil
import tarfile
import uuid
from pathlib import Path

from sglx.bundle import install_sh, layout


def write_tar(folder: Path, tar_path: Path) -> None:
    """The tar, and beside it a copy of the bundle's install.sh (`NAME.install.sh`): a host
    without Python checks and unpacks the tar with it (`sh NAME.install.sh NAME.tar`)."""
    staging = tar_path.with_name(f".{tar_path.name}.partial-{uuid.uuid4().hex[:8]}")
    script = install_sh.beside_tar(tar_path)
    script_staging = script.with_name(f".{script.name}.partial-{uuid.uuid4().hex[:8]}")
    try:
        with tarfile.open(staging, "w", format=tarfile.PAX_FORMAT) as tar:
            tar.add(folder, arcname=folder.name, recursive=True)
        shutil.copyfile(folder / layout.INSTALL_SH, script_staging)
        script_staging.chmod(0o755)
        script_staging.rename(script)
        staging.rename(tar_path)
    except BaseException:
        staging.unlink(missing_ok=True)
        script_staging.unlink(missing_ok=True)
        raise
