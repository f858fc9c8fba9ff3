"""Hash many files at once, near the machine's hashing limit.

hashlib releases the GIL while it digests large buffers, so threads (one per CPU this process
may use) hash files in parallel; reads go through `hashlib.file_digest`. Big files are hashed
first so the last thread is not left alone with the largest one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from sglx.progress import Progress
from sglx_core.hashing import sha256_file
from sglx_core.sizes import human_bytes

PROGRESS_EVERY_S = 2.0


@dataclass(frozen=True)
class HashJob:
    key: str
    path: Path
    size: int


def hash_files(
    jobs: Sequence[HashJob],
    *,
    threads: int,
    progress: Progress,
    on_done: Callable[[HashJob, str], None] | None = None,
) -> dict[str, str]:
    """sha256 of every job's file, by key; `on_done` runs (in a worker) as each one finishes."""
    total = sum(job.size for job in jobs)
    done = 0
    last = time.monotonic()
    results: dict[str, str] = {}
    started = time.monotonic()
    if jobs:
        progress(f"hashing {len(jobs)} files, {human_bytes(total)}, {threads} threads")

    def work(job: HashJob) -> tuple[HashJob, str]:
        digest = sha256_file(job.path)
        if on_done is not None:
            on_done(job, digest)
        return job, digest

    ordered = sorted(jobs, key=lambda job: -job.size)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for future in as_completed([pool.submit(work, job) for job in ordered]):
            job, digest = future.result()
            results[job.key] = digest
            done += job.size
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S:
                last = now
                rate = done / max(now - started, 1e-6)
                shown = f"{human_bytes(done)} of {human_bytes(total)}"
                progress(f"hashed {shown} ({human_bytes(int(rate))}/s)")
    return results
