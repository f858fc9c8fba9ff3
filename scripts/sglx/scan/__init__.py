"""`sglx scan`: resolve every ELF dependency of a tree, an image or a bundle without running it.

Modules, one job each: `elf` reads headers (pyelftools), `rootfs` reads a root as a chroot would,
`abi` and `ldconf` hold the loader's defaults and the root's ld.so.conf, `loader` resolves like
glibc's ld.so, `inventory` finds and reads the ELF files (in parallel), `rules` checks the arch
profile's scan rules, `analysis` runs one scan, `result` turns scans into a `Result`, `layers`
unpacks image tars safely, `image` and `bundle` get roots out of the engine and bundle folders,
and `command` ties them to the CLI. docs/reference/scan.md describes the behaviour.

Nothing is imported here: `ldconf` and `rootfs` are also read by the plugin's preflight inside
images, which carry sglx without pyelftools.
"""
