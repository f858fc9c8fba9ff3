"""`sglx scan`: the three ways in (a tree, an image in the engine, a `docker save` archive
kept as chunks), each returning a `Result`. Scratch space is removed whatever happens. A bundle
folder is an archive to scan: `sglx.bundle.scan_target` says which chunks and wheels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sglx.progress import Progress
from sglx.scan.analysis import ScanReport, Target, analyze
from sglx.scan.archive import ChunkedArchive, chunked_targets
from sglx.scan.image import export_image
from sglx.scan.result import build_result
from sglx.scan.rules import Rules
from sglx_core.errors import SglxError
from sglx_core.report import Result
from sglx_core.rootfs import RootFS
from sglx_core.scratch import scratch_dir

Inspect = Callable[[RootFS, ScanReport], None]
"""Called for each image target while its unpacked root still exists (the SBOM reads it)."""


def scan_paths(
    paths: Sequence[Path], *, root: Path | None, rules: Rules, jobs: int, progress: Progress
) -> Result:
    """Scan trees (see `tree_target` for what PATHs and --root mean)."""
    target = tree_target(paths, root=root, rules=rules)
    report = analyze(target, rules, jobs=jobs, progress=progress)
    source = {"kind": "tree", "paths": [str(p) for p in paths], "root": str(target.root)}
    return build_result([report], source)


def tree_target(paths: Sequence[Path], *, root: Path | None, rules: Rules) -> Target:
    """Without `root`, the single path is the root (an unpacked image, a venv...); with it, the
    paths are parts of that root and resolve against all of it (`--root /` asks whether the
    files work on this machine)."""
    if not paths:
        raise SglxError(
            "nothing to scan",
            hint="give a PATH, --image REF, --archive FILE or --bundle DIR",
            code="usage",
        )
    for path in paths:
        if not path.exists():
            raise SglxError(f"{path} does not exist", hint="give an existing folder", code="usage")
    if root is None:
        if len(paths) > 1:
            raise SglxError(
                "several PATHs need --root",
                hint="a single PATH is scanned as a root; with --root DIR, PATHs are parts of DIR",
                code="usage",
            )
        if not paths[0].is_dir():
            raise SglxError(
                f"{paths[0]} is not a folder",
                hint="a single PATH is scanned as a root folder; to scan one file, add --root /",
                code="usage",
            )
        base = paths[0].resolve()
        subtrees: tuple[str, ...] = ("/",)
    else:
        if not root.is_dir():
            raise SglxError(f"--root {root} is not a folder", code="usage")
        base = root.resolve()
        subtrees = tuple(_inside(base, path) for path in paths)
    ldlp = (rules.ld_library_path,) if rules.ld_library_path else ()
    return Target(
        kind="tree",
        label=" ".join(str(p) for p in paths),
        root=base,
        subtrees=subtrees,
        ld_library_path=ldlp,
        env_source=f"the env of {rules.profile_file}" if ldlp else "none",
    )


def scan_image(
    ref: str, *, rules: Rules, jobs: int, progress: Progress, inspect: Inspect | None = None
) -> Result:
    """Scan an image of the local engine: exported (never started) into scratch space."""
    with scratch_dir("sglx-scan-") as scratch:
        root = scratch / "rootfs"
        facts = export_image(ref, root, progress)
        ldlp = facts.env.get("LD_LIBRARY_PATH")
        target = Target(
            kind="image",
            label=ref,
            root=root,
            ld_library_path=(ldlp,) if ldlp else (),
            env_source="the image config",
            placeholders=facts.placeholders,
        )
        report = analyze(target, rules, jobs=jobs, progress=progress)
        if inspect is not None:
            inspect(RootFS(root, facts.placeholders), report)
    source = {"kind": "image", "ref": ref, "id": facts.image_id}
    return build_result([report], source)


def scan_archive(
    spec: ChunkedArchive,
    source: dict[str, str],
    *,
    rules: Rules,
    jobs: int,
    progress: Progress,
    inspect: Inspect | None = None,
) -> Result:
    """Scan the images of a `docker save` archive read from its chunks, and the wheels `spec`
    lays into it; `source` is what the report says was scanned (a bundle, an image ref)."""
    with scratch_dir("sglx-scan-") as scratch:
        targets = chunked_targets(spec, scratch, progress)
        reports = []
        for target in targets:
            reports.append(analyze(target, rules, jobs=jobs, progress=progress))
            if inspect is not None and target.kind == "image_archive":
                inspect(RootFS(target.root, target.placeholders), reports[-1])
    return build_result(reports, source)


def archive_files(files: Sequence[Path]) -> ChunkedArchive:
    """`sglx scan --archive FILE...`: a saved archive, or its pieces in the order given."""
    first = files[0]
    name = first.with_suffix("") if len(files) > 1 and first.suffix[1:].isdigit() else first
    return ChunkedArchive(
        archive=name,
        chunks=tuple(files),
        fix="give a file written by `docker save -o FILE IMAGE`, or all its pieces in order",
    )


def _inside(root: Path, path: Path) -> str:
    real = path.resolve()
    if real != root and root not in real.parents:
        raise SglxError(
            f"{path} is not inside --root {root}",
            hint="PATHs must be parts of the root they are resolved against",
            code="usage",
        )
    relative = real.relative_to(root).as_posix()
    return "/" if relative == "." else f"/{relative}"
