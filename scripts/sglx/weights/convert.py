"""`sglx weights convert`: a checkpoint re-stored in the arch's dtype, with a manifest.

The whole source is checked first (headers, index, quantization rule), so bad input stops the
run before anything is written. The output is built in a hidden staging folder next to DST and
renamed to DST only when every shard, the index, the carried files and the manifest are written:
a failed or interrupted run (Ctrl-C, SIGTERM) removes the staging folder and never leaves a
half-converted model where DST should be.

Each output shard is streamed (`writer.write_shard`): its header is known up front (sizes
follow from shapes and dtypes), then the tensor data goes through in blocks of a few MiB,
converted on `jobs` threads, written in order and hashed on a thread of its own. Peak memory is
a few blocks, whatever the model size. Source files that are not carried verbatim are hashed on
one more thread meanwhile, for the manifest's provenance.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from packaging.version import InvalidVersion, Version

from sglx import __version__
from sglx.weights.checkpoint import CONFIG_NAME, Checkpoint, read_checkpoint
from sglx.weights.dtypes import CODE_TO_PROFILE
from sglx.weights.plan import OutputPlan, ShardPlan, plan_output
from sglx.weights.policy import dtype_policy
from sglx.weights.writer import write_shard
from sglx_core import model_assets
from sglx_core.errors import SglxError
from sglx_core.hashing import CHUNK, sha256_file
from sglx_core.processes import default_jobs
from sglx_core.profile.schema import Profile
from sglx_core.report import Result, Table
from sglx_core.sizes import human_bytes
from sglx_core.weights_manifest import (
    ConverterRecord,
    FileRecord,
    Manifest,
    SourceRecord,
    TensorRecord,
    manifest_digest,
    source_digest,
    write_manifest,
)

ProgressFn = Callable[[str], None]
STAGING_MARK = ".sglx-partial-"
PROGRESS_EVERY_S = 5.0
# transformers renamed config.json's `torch_dtype` to `dtype` in 4.56.
DTYPE_KEY_RENAMED_IN = Version("4.56")


class _Meter:
    """Progress of the bytes written, at most one line every few seconds."""

    def __init__(self, progress: ProgressFn, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0
        self.started = self.last = time.monotonic()
        self.lock = threading.Lock()

    def advance(self, count: int) -> None:
        with self.lock:
            self.done += count
            now = time.monotonic()
            due = now - self.last >= PROGRESS_EVERY_S
            if due:
                self.last = now
        if due:
            rate = self.done / max(now - self.started, 1e-9)
            self.progress(
                f"{self.done / max(self.total, 1):4.0%}  {human_bytes(self.done)} of "
                f"{human_bytes(self.total)}  ({human_bytes(rate)}/s)"
            )


def _hash_file(checkpoint: Checkpoint, name: str, stop: threading.Event) -> FileRecord:
    path = checkpoint.root / name
    digest = hashlib.sha256()
    size = 0
    try:
        with checkpoint.open(name) as handle:
            while chunk := handle.read(CHUNK * 4):
                if stop.is_set():
                    raise SglxError("source hashing stopped", code="interrupted")
                digest.update(chunk)
                size += len(chunk)
    except OSError as exc:
        raise read_failed(path, exc) from None
    return FileRecord(name=name, size=size, sha256=digest.hexdigest())


def read_failed(path: Path, exc: OSError) -> SglxError:
    """A source file that could be read while checking but not while converting."""
    return SglxError(
        f"{path}: cannot read: {exc.strerror}",
        hint="check the source file system (a disk error, or the file changed meanwhile)",
        code="environment",
        path=str(path),
    )


def _check_destination(dst: Path) -> None:
    if dst.exists() or dst.is_symlink():
        raise SglxError(
            f"{dst} already exists",
            hint="sglx never writes over a model: remove it or pick a new DST",
            code="dst_exists",
            path=str(dst),
        )
    if not dst.parent.is_dir():
        raise SglxError(
            f"{dst.parent}: the folder DST goes in does not exist",
            hint=f"create it first (mkdir -p {dst.parent})",
            code="usage",
            path=str(dst.parent),
        )


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def _staging(dst: Path, size: int) -> Iterator[Path]:
    """A hidden folder next to `dst`, renamed to `dst` on success and removed on any failure.

    Reads of the source raise `SglxError` themselves, so an `OSError` here comes from writing
    (`size` bytes in all): it becomes `write_failed`, naming DST and the file system's reason.
    SIGTERM is turned into KeyboardInterrupt meanwhile (main thread only), so `kill` cleans up
    like Ctrl-C does.
    """
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{dst.name}{STAGING_MARK}", dir=dst.parent))
    except OSError as exc:
        raise write_failed(dst, size, exc) from None
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield staging
        _publish(staging, dst)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise write_failed(dst, size, exc) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def write_failed(dst: Path, size: int, exc: OSError) -> SglxError:
    """The error for a conversion the file system of DST refused, with what to do about it."""
    reason = exc.strerror or str(exc)
    where = dst.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        hint = (
            f"the converted model needs about {human_bytes(size)}: free space on the file "
            f"system of {where} (df -h {where}) or pick a DST on another one"
        )
    elif exc.errno == errno.EROFS:
        hint = f"{where} is on a read-only file system: pick a DST on a writable one"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        hint = f"this user may not write in {where}: pick a DST you can write, or fix its mode"
    else:
        hint = f"check the file system of {where} (dmesg may say more), then convert again"
    return SglxError(
        f"{dst}: writing the converted model failed: {reason} (nothing was left behind)",
        hint=hint,
        code="write_failed",
        path=str(dst),
    )


def _publish(staging: Path, dst: Path) -> None:
    """Give the files ordinary modes (umask) and move the folder into place."""
    umask = os.umask(0)
    os.umask(umask)
    for path in staging.iterdir():
        path.chmod(0o666 & ~umask)
    staging.chmod(0o777 & ~umask)
    if dst.exists():
        raise SglxError(
            f"{dst} appeared while converting",
            code="dst_exists",
            path=str(dst),
            hint="another run wrote it; remove one of them",
        )
    staging.rename(dst)


def _write_text(folder: Path, name: str, text: str) -> FileRecord:
    data = text.encode()
    (folder / name).write_bytes(data)
    return FileRecord(name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def _copy_file(checkpoint: Checkpoint, name: str, folder: Path) -> FileRecord:
    with checkpoint.open(name) as source, (folder / name).open("xb") as target:
        shutil.copyfileobj(source, target)
    copied = folder / name
    return FileRecord(name=name, size=copied.stat().st_size, sha256=sha256_file(copied))


def retarget_config(config: Mapping[str, Any], dtype_name: str) -> dict[str, Any]:
    """config.json with every dtype entry (nested configs too) set to the stored dtype.

    sglang's ``--dtype auto`` reads it, so it must say what the weights now are.
    """

    def visit(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: dtype_name
                if k in ("dtype", "torch_dtype") and isinstance(v, str) and v in _FLOAT_NAMES
                else visit(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [visit(v) for v in node]
        return node

    out: dict[str, Any] = visit(dict(config))
    if "dtype" not in out and "torch_dtype" not in out:
        try:
            old = Version(str(out.get("transformers_version", "0")))
        except InvalidVersion:
            old = Version("0")
        out["torch_dtype" if old < DTYPE_KEY_RENAMED_IN else "dtype"] = dtype_name
    return out


_FLOAT_NAMES = frozenset({"float32", "float16", "bfloat16", "float64", "float", "half"})


def _direction_table(plan: OutputPlan) -> tuple[Table, list[dict[str, Any]]]:
    counts: Counter[tuple[str, str]] = Counter()
    sizes: Counter[tuple[str, str]] = Counter()
    for t in plan.tensors:
        key = (t.source.dtype.code, t.dtype.code)
        counts[key] += 1
        sizes[key] += t.nbytes
    rows = []
    data = []
    for (src, dst), count in sorted(counts.items()):
        kept = "kept as is" if src == dst else "converted"
        rows.append((src, dst, kept, str(count), human_bytes(sizes[(src, dst)])))
        data.append({"from": src, "to": dst, "tensors": count, "bytes": sizes[(src, dst)]})
    table = Table(("source dtype", "stored as", "", "tensors", "size"), tuple(rows))
    return table, data


def _tensor_records(plan: OutputPlan) -> tuple[TensorRecord, ...]:
    records = (
        TensorRecord(
            name=t.source.name,
            file=shard.name,
            dtype=t.dtype.code,
            shape=t.source.shape,
            source_dtype=t.source.dtype.code,
        )
        for shard in plan.shards
        for t in shard.tensors
    )
    return tuple(sorted(records, key=lambda r: r.name))


def _write_all(
    checkpoint: Checkpoint,
    plan: OutputPlan,
    staging: Path,
    dtype_name: str,
    jobs: int,
    progress: ProgressFn,
) -> tuple[list[FileRecord], list[FileRecord]]:
    """Write shards, index and carried files into `staging`; return (output, source) records."""
    stop = threading.Event()
    with ExitStack() as stack:
        fds: dict[str, int] = {}
        for source in checkpoint.shards:
            name = source.path.name
            fds[name] = stack.enter_context(checkpoint.open(name)).fileno()
        hasher = ThreadPoolExecutor(1, thread_name_prefix="sglx-hash")
        stack.callback(hasher.shutdown, wait=True, cancel_futures=True)
        # A verbatim shard's output digest is its source digest: no second read.
        verbatim = {s.verbatim.path.name for s in plan.shards if s.verbatim is not None}
        source_names = [s.path.name for s in checkpoint.shards if s.path.name not in verbatim]
        if checkpoint.index_name:
            source_names.append(checkpoint.index_name)
        source_names += checkpoint.carried
        source_hashes = [hasher.submit(_hash_file, checkpoint, n, stop) for n in source_names]
        pool = ThreadPoolExecutor(jobs, thread_name_prefix="sglx-convert")
        stack.callback(pool.shutdown, wait=True, cancel_futures=True)
        # Shards are written `jobs` at a time: each has its own digest thread, and one sha256
        # stream is the slowest stage of a same-dtype conversion.
        writers = ThreadPoolExecutor(min(jobs, len(plan.shards)), thread_name_prefix="sglx-shard")
        stack.callback(writers.shutdown, wait=True, cancel_futures=True)
        stack.callback(stop.set)  # runs first: shard writers stop at their next block

        meter = _Meter(progress, sum(s.size for s in plan.shards))
        count = len(plan.shards)

        def write(numbered: tuple[int, ShardPlan]) -> FileRecord:
            number, shard = numbered
            progress(f"shard {number}/{count}: {shard.name} ({human_bytes(shard.size)})")
            return write_shard(shard, staging, fds, pool, 2 * jobs, meter.advance, stop)

        outputs = list(writers.map(write, enumerate(plan.shards, start=1)))
        if plan.index_name is not None:
            text = json.dumps(plan.index(), indent=2, sort_keys=True) + "\n"
            outputs.append(_write_text(staging, plan.index_name, text))
        for name in checkpoint.carried:
            if name == CONFIG_NAME and checkpoint.config is not None:
                config = retarget_config(checkpoint.config, dtype_name)
                text = json.dumps(config, indent=2, sort_keys=True) + "\n"
                outputs.append(_write_text(staging, name, text))
            else:
                outputs.append(_copy_file(checkpoint, name, staging))
        progress("hashing the source checkpoint")
        sources = [future.result() for future in source_hashes]
        sources += [record for record in outputs if record.name in verbatim]
    return outputs, sources


def convert_weights(
    src: Path,
    dst: Path,
    profile: Profile,
    *,
    max_shard_size: int | None = None,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
) -> Result:
    """Convert the checkpoint in `src` to `profile`'s storage dtype in the new folder `dst`."""
    started = time.monotonic()
    progress = progress or (lambda message: None)
    jobs = jobs or default_jobs(cap=4)
    if jobs < 1:
        raise SglxError(f"--jobs {jobs}: need at least 1", code="usage")
    _check_destination(dst)
    checkpoint = read_checkpoint(src)
    if checkpoint.config is None:
        raise SglxError(
            f"{src}: no {CONFIG_NAME}: the server reads the model's architecture, sizes and "
            "dtype from it",
            hint=f"copy {CONFIG_NAME} from the original checkpoint into {src}",
            code="missing_config",
            path=str(src / CONFIG_NAME),
        )
    policy, warnings = dtype_policy(profile, checkpoint.config)
    # Files the model loads at start (gpt-oss's vocabulary): carried beside config.json, so an
    # offline server finds them; refused here, before anything is written, when missing.
    model_assets.require(profile, checkpoint.config, src)
    plan = plan_output(checkpoint, policy, max_shard_size)
    dtype_name = CODE_TO_PROFILE[policy.target.code]
    progress(
        f"{len(checkpoint.tensors)} tensors, {human_bytes(checkpoint.weight_bytes)} in "
        f"{len(checkpoint.shards)} file(s) -> {dtype_name} for arch {profile.arch}"
    )
    with _staging(dst, sum(s.size for s in plan.shards)) as staging:
        outputs, sources = _write_all(checkpoint, plan, staging, dtype_name, jobs, progress)
        source_files = tuple(sorted(sources, key=lambda f: f.name))
        manifest = Manifest(
            converter=ConverterRecord(version=__version__),
            arch=profile.arch,
            dtype=dtype_name,
            quantization=policy.quant_method,
            source=SourceRecord(digest=source_digest(source_files), files=source_files),
            files=tuple(sorted(outputs, key=lambda f: f.name)),
            tensors=_tensor_records(plan),
        )
        write_manifest(staging, manifest)
    seconds = time.monotonic() - started
    digest = manifest_digest(dst)
    table, directions = _direction_table(plan)
    written = sum(f.size for f in outputs)
    lines = [
        f"converted {src} -> {dst} for arch {profile.arch} ({dtype_name}): "
        f"{len(plan.tensors)} tensors in {len(plan.shards)} shard(s), "
        f"{human_bytes(written)} in {seconds:.1f} s",
        f"weights digest: {digest}",
        f"source digest:  {manifest.source.digest}",
    ]
    lines += [f"skipped {name}: {why}" for name, why in checkpoint.skipped]
    lines += [f"warning: {w}" for w in warnings]
    return Result(
        command=("weights", "convert"),
        data={
            "src": str(src),
            "dst": str(dst),
            "arch": profile.arch,
            "dtype": dtype_name,
            "quantization": policy.quant_method,
            "weights_digest": digest,
            "source_digest": manifest.source.digest,
            "shards": [s.name for s in plan.shards],
            "files": [f.name for f in manifest.files],
            "tensors": len(plan.tensors),
            "bytes": written,
            "seconds": round(seconds, 3),
            "directions": directions,
            "skipped": [{"name": n, "reason": why} for n, why in checkpoint.skipped],
            "warnings": list(warnings),
        },
        tables=(table,),
        lines=tuple(lines),
    )
