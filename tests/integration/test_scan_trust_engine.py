"""SIGTERM (what `docker stop`, systemd and CI send) during `sglx scan --image` cleans up as
Ctrl-C does (issue 21, item 15): the export container is removed, the scratch root too, and the
run ends with "interrupted", exit 2. The image is a tiny one made with `docker import`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import import_tiny_image
from helpers.signals import default_sigint

pytestmark = pytest.mark.docker

EXPORT_BLOCKED = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sglx.cli import main
    from sglx.scan.layers import RootWriter

    def blocked(self, fileobj, *, whiteouts):
        Path(sys.argv[2]).write_text(self.root)
        time.sleep(120)

    RootWriter.apply = blocked
    sys.exit(main(["scan", "--image", sys.argv[1], "--arch", "cpu", "-q"]))
    """
)


def test_sigterm_during_scan_image_removes_the_container_and_the_scratch_root(
    docker: Any, run_id: str, tmp_path: Path
) -> None:
    ref = f"sglx-test/scan-sigterm:{run_id}"
    image_id = import_tiny_image(docker, ref, blob_bytes=1000)
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    ready = tmp_path / "ready"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", EXPORT_BLOCKED, ref, str(ready)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TMPDIR": str(scratch)},
            preexec_fn=default_sigint,
        )
        try:
            deadline = time.monotonic() + 120
            while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert Path(ready.read_text()).is_relative_to(scratch)
            filters = {"label": "sglx.purpose=scan-export", "ancestor": image_id}
            assert len(docker.containers.list(all=True, filters=filters)) == 1
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 2, out + err
        assert err.endswith("sglx: interrupted\n") and "Traceback" not in err
        assert docker.containers.list(all=True, filters=filters) == []
        assert list(scratch.iterdir()) == []
    finally:
        docker.images.remove(ref, force=True)
