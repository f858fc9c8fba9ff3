"""`sglx scan`: resolve every ELF dependency of a tree, an image or an archive without running it.

Modules, one job each: `elf` reads headers (pyelftools), `abi` holds the loader's defaults,
`loader` resolves like glibc's ld.so (a root read as a chroot would and its ld.so.conf come
from `sglx_core.rootfs` and `sglx_core.ldconf`, which the plugin's preflight reads too),
`inventory` finds and reads the ELF files (in parallel), `rules` checks the arch profile's scan
rules, `analysis` runs one scan, `result` turns scans into a `Result`, `layers` unpacks image
tars safely, `image` gets a root out of the engine, `chunked` and `archive` out of a
`docker save` archive kept as chunks (a generic target: a bundle's layout is `sglx.bundle`'s,
which hands its chunks over), `command` runs the three ways in and `cli` parses them.
docs/reference/scan.md describes the behaviour.
"""
