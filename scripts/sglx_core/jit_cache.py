"""The node-local JIT cache folder: its name on the host, its mode, and the variable naming it.

Each host keeps one folder per image id, `<host_root>/<image id hex>` (the profile's
`container.jit_cache`), mounted at `target` in the server container, where the profile points
Triton's, AITER's and the other JIT caches. Never shared between images, it is never reused
across arch or image, and it outlives the container that every start removes. The host side
(sglx.run_spec and sglx.jit_cache: the systemd unit, install.sh, `sglx bundle install`) and
the plugin (sglx_runtime.jit_cache, which refuses a folder that is not the server's own) both
take these facts from here.
"""

from __future__ import annotations

from sglx_core.digests import sha256_hex

# The variable every `docker run` sglx writes sets to the host folder, so that the server can
# name it in a refusal (the container sees only the target).
HOST_ENV = "SGLX_JIT_CACHE_HOST"
# The site's root of the folders, on the host (install.sh and `sglx bundle install`; the role
# has sglang_service_jit_cache_root): unset = the profile's container.jit_cache.host_root.
ROOT_ENV = "SGLX_JIT_ROOT"
# The only mode the folder may have: the server's own, nobody else's (it loads code from it).
MODE = 0o700


def folder_name(image_id: str) -> str:
    """The folder of `image_id` under the host root: its 64 hex digits."""
    return sha256_hex(image_id, "an image id")


def host_folder(host_root: str, image_id: str) -> str:
    """The host folder of `image_id`'s JIT cache under `host_root`."""
    return f"{host_root.rstrip('/')}/{folder_name(image_id)}"
