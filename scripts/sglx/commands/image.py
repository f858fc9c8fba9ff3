"""`sglx image`: render Dockerfiles, build serving images, prune leftovers (the parser and
its handlers).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sglx.cli_shared import EPILOG, Subparsers
from sglx_core.report import Result


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    image = sub.add_parser(
        "image",
        help="render Dockerfiles, build per-arch serving images, prune build leftovers",
        description="images/<arch>/Dockerfile is rendered from images/Dockerfile.j2 and the "
        "arch profile, and committed. Builds run through the Docker SDK with no network.",
        epilog=EPILOG,
    )
    verbs = image.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser(
        "render",
        parents=[common],
        help="render images/<arch>/Dockerfile from the template (--check: report drift)",
        description="Write every arch's Dockerfile (or the given ones). With --check nothing is "
        "written and stale files are findings (exit 1).",
    )
    p.add_argument("arches", nargs="*", metavar="ARCH", help="arches (default: all)")
    p.add_argument("--check", action="store_true", help="only report stale Dockerfiles")
    p.set_defaults(func=_cmd_image_render)

    p = verbs.add_parser(
        "build",
        parents=[common, arch_parent],
        help="build the serving image of an arch",
        description="Check the lock and the wheelhouse, convert the model (or generate the demo "
        "model), import wheels and weights into the engine, build the committed Dockerfile with "
        "no network and print tag, image id, size and the layers.",
    )
    p.add_argument("--base", help="base image reference (default: the profile's base.ref)")
    p.add_argument(
        "--model",
        type=Path,
        help="Hugging Face checkpoint folder (default: a generated demo model)",
    )
    p.add_argument("--tag", help="image tag (default: sglx/<arch>:latest)")
    p.add_argument("--wheelhouse", type=Path, help="wheel folder (default: wheelhouse/<arch>)")
    p.add_argument(
        "--no-cache", action="store_true", help="re-import wheels and weights, rebuild every layer"
    )
    p.add_argument(
        "--weights-outside-above",
        metavar="SIZE",
        help="keep converted weights larger than SIZE (e.g. 4GiB) outside the image, in the "
        "weights store (default: $SGLX_WEIGHTS_OUTSIDE_ABOVE or the profile's "
        "weights.outside_above)",
    )
    p.add_argument(
        "--models-root",
        type=Path,
        metavar="DIR",
        help="the weights store weights kept outside the image go to (default: "
        "$SGLX_MODELS_ROOT or the profile's weights.store, /var/lib/sglx/models)",
    )
    p.add_argument(
        "--golden-prompts",
        type=Path,
        metavar="FILE",
        help="your own prompts for the golden numerics, a JSON list of {id, text}, added to "
        "sglx's built-in set (docs/reference/gate.md)",
    )
    p.add_argument(
        "--golden",
        type=Path,
        metavar="FILE",
        help="a golden file made beforehand (`python -m sglx.gate.golden_build`, e.g. on a "
        "machine with the memory to run the checkpoint in float32) instead of computing it "
        "during the build",
    )
    p.set_defaults(func=_cmd_image_build)

    p = verbs.add_parser(
        "prune",
        parents=[common],
        help="remove sglx's build leftovers (unused deps and payload images) and say how "
        "much that freed",
        description="Remove the deps images (the base with the venv) and weights payload images "
        "no tagged serving image was built from, and serving images a rebuild untagged (and "
        "the deps stages and wheelhouse images of older sglx builds). Never a tagged serving "
        "image, a base, or an image a container uses (that one is a finding, exit 1). The "
        "next build is slower: it reinstalls the venv.",
    )
    p.add_argument("--arch", help="only this arch's leftovers (default: every arch)")
    p.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    p.set_defaults(func=_cmd_image_prune)


def _cmd_image_render(args: argparse.Namespace) -> Result:
    from sglx.image.render import render

    return render(args.arches, args.check)


def _cmd_image_build(args: argparse.Namespace) -> Result:
    from sglx.image.build import build_image
    from sglx.progress import Progress
    from sglx_core.profile import load_profile

    return build_image(
        load_profile(args.arch),
        base=args.base,
        model=args.model,
        tag=args.tag,
        wheels=args.wheelhouse,
        progress=Progress("image", quiet=args.quiet),
        no_cache=args.no_cache,
        weights_outside_above=args.weights_outside_above,
        models_root=args.models_root,
        golden_prompts=args.golden_prompts,
        golden=args.golden,
    )


def _cmd_image_prune(args: argparse.Namespace) -> Result:
    from sglx.image.prune import prune
    from sglx.progress import Progress

    return prune(args.arch, dry_run=args.dry_run, progress=Progress("image", quiet=args.quiet))
