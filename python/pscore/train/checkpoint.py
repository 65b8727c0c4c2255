"""The Trainer's checkpoints: what the chief writes every N steps / seconds and at the end of
fit, and what every worker reads back on resume.

    checkpoint_dir/
      latest                 one line: the name of the newest complete checkpoint
      step-00000120/         one checkpoint (step-00000120-2 when that name was taken before)
        trainer.safetensors  "model/<state_dict key>" and "strategy/<state name>" tensors; the
                             position (global step, epoch, batch in epoch) and the job's shape
                             (strategy, workers, seed, batch size) in the safetensors metadata
        ...                  PS strategies: the servers' tables (strategy.save_servers)

A checkpoint is written into a hidden temporary directory beside its final name (file fsynced),
renamed into place, and only then named in `latest` (itself replaced atomically), so a crash at
any moment leaves `latest` naming a complete checkpoint. The last `keep` checkpoints are kept."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from typing import Any

from .checks import check_int, check_seconds

__all__ = [
    "FILE_NAME",
    "FORMAT",
    "LATEST",
    "Saver",
    "check_same_data",
    "check_same_job",
    "latest",
    "pack",
    "read",
    "unpack",
]

FORMAT = "pscore.train/1"  # metadata "format": bumped when the layout changes
FILE_NAME = "trainer.safetensors"
LATEST = "latest"
_NAME = re.compile(r"^step-(\d+)(?:-(\d+))?$")
_TEMP_PREFIX = ".tmp-"
_MODEL, _STRATEGY = "model/", "strategy/"  # tensor name prefixes
# The job's shape: a checkpoint resumes only a job of the same shape.
_SAME_JOB = ("strategy", "world_size")
# The data position means the same batches only with the same data, batch size and seed.
_SAME_DATA = ("seed", "batch_size", "num_samples")


def pack(model_state: dict, strategy_state: dict) -> dict:
    """The checkpoint's tensors: the model's state_dict under "model/", the strategy's state
    under "strategy/" (copies on the CPU, contiguous, unshared, as safetensors wants)."""
    tensors = {f"{_MODEL}{k}": t.detach().cpu().clone() for k, t in model_state.items()}
    for k, t in strategy_state.items():
        tensors[f"{_STRATEGY}{k}"] = t.detach().cpu().clone()
    return {k: t.contiguous() for k, t in tensors.items()}


def unpack(tensors: dict) -> tuple[dict, dict]:
    """(model state_dict, strategy state) from pack()'s tensors."""
    parts: tuple[dict, dict] = ({}, {})
    for name, t in tensors.items():
        for part, prefix in zip(parts, (_MODEL, _STRATEGY), strict=True):
            if name.startswith(prefix):
                part[name[len(prefix) :]] = t
    return parts


def latest(directory: str) -> str | None:
    """The newest complete checkpoint under `directory` (a path), or None when there is none."""
    pointer = os.path.join(directory, LATEST)
    try:
        with open(pointer) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    path = os.path.join(directory, name)
    if not _NAME.match(name) or not os.path.isfile(os.path.join(path, FILE_NAME)):
        raise ValueError(
            f"{pointer} names {name!r}, which is not a complete checkpoint in {directory} "
            f"(no {FILE_NAME}); restore that checkpoint or remove {pointer} to start afresh"
        )
    return path


def read(path: str) -> tuple[dict, dict]:
    """(tensors, metadata) of the checkpoint at `path` (a checkpoint directory)."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    file = os.path.join(path, FILE_NAME)
    try:
        with safe_open(file, framework="pt") as f:
            metadata = dict(f.metadata() or {})
        tensors = load_file(file)
    except SafetensorError as e:
        raise ValueError(f"{file} is not a readable safetensors file: {e}") from e
    if metadata.get("format") != FORMAT:
        raise ValueError(
            f"{file} is not a pscore.train checkpoint of format {FORMAT!r} "
            f"(its format: {metadata.get('format')!r})"
        )
    return tensors, metadata


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _checkpoint_names(directory: str) -> list[str]:
    """The checkpoints under `directory`, oldest first (by step, then by write order)."""
    found = []
    for name in os.listdir(directory):
        m = _NAME.match(name)
        if m:
            found.append((int(m.group(1)), int(m.group(2) or 1), name))
    return [name for *_, name in sorted(found)]


def _free_name(directory: str, step: int) -> str:
    base = f"step-{step:08d}"
    name, n = base, 1
    while os.path.exists(os.path.join(directory, name)):
        n += 1
        name = f"{base}-{n}"
    return name


def _errno(e: OSError) -> tuple:
    """OSError(errno, text) keeps the subclass (PermissionError, ...); no errno, no subclass."""
    return (e.errno,) if e.errno is not None else ()


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_latest(directory: str, name: str) -> None:
    temp = os.path.join(directory, f"{_TEMP_PREFIX}{LATEST}")
    _write_file(temp, f"{name}\n".encode())
    os.replace(temp, os.path.join(directory, LATEST))
    _fsync(directory)


@dataclasses.dataclass
class Saver:
    """When and where the chief checkpoints; reads the latest checkpoint back on every worker."""

    directory: str
    every_steps: int | None = None
    every_secs: float | None = None
    keep: int = 5
    last_step: int = -1  # the global step of the last checkpoint written or restored
    last_time: float = dataclasses.field(default_factory=time.monotonic)

    @classmethod
    def create(cls, directory, every_steps, every_secs, keep, *, writer: bool) -> Saver | None:
        """The Trainer's options, checked; None without a directory. The writer (the chief)
        creates the directory now: an unusable path fails before training, not after it."""
        if every_steps is not None:
            check_int("save_every_steps", every_steps, 1)
        if every_secs is not None:
            every_secs = check_seconds("save_every_secs", every_secs)
        check_int("keep_checkpoints", keep, 1)
        if directory is None:
            if every_steps is not None or every_secs is not None:
                raise ValueError("save_every_steps / save_every_secs need a checkpoint_dir")
            return None
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"checkpoint_dir must be a path, not {type(directory).__name__}")
        directory = os.path.abspath(os.fspath(directory))
        if writer:
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as e:
                text = f"checkpoint_dir {directory} cannot be created: {e.strerror or e}"
                raise OSError(*_errno(e), text) from e
        return cls(directory, every_steps, every_secs, keep)

    def due(self, global_step: int) -> bool:
        """A checkpoint is due at this step boundary (every_steps, or every_secs elapsed)."""
        if global_step == self.last_step:
            return False
        by_steps = self.every_steps is not None and global_step % self.every_steps == 0
        by_time = (
            self.every_secs is not None and time.monotonic() - self.last_time >= self.every_secs
        )
        return by_steps or by_time

    def write(self, global_step: int, tensors: dict, metadata: dict, save_servers: Any) -> str:
        """Writes one checkpoint (tensors and metadata into FILE_NAME, then save_servers(dir)
        for the servers' part), names it in `latest`, prunes to `keep`; returns its path. An
        OSError names the path it could not write; `latest` still names the previous one."""
        from safetensors.torch import save

        temp = os.path.join(self.directory, f"{_TEMP_PREFIX}step-{global_step:08d}")
        try:
            os.makedirs(self.directory, exist_ok=True)
            shutil.rmtree(temp, ignore_errors=True)  # left by a crash mid-write
            os.makedirs(temp)
            data = save(tensors, metadata={k: str(v) for k, v in metadata.items()})
            _write_file(os.path.join(temp, FILE_NAME), data)
            save_servers(temp)
            _fsync(temp)
            name = _free_name(self.directory, global_step)
            os.replace(temp, os.path.join(self.directory, name))
            _fsync(self.directory)
            _write_latest(self.directory, name)
        except BaseException as e:
            shutil.rmtree(temp, ignore_errors=True)
            if not isinstance(e, OSError):
                raise
            where = f"the checkpoint of step {global_step} in {self.directory}"
            text = f"cannot write {where}: {e.strerror or e} ({e.filename or temp})"
            raise OSError(*_errno(e), text) from e
        self.last_step, self.last_time = global_step, time.monotonic()
        self._prune(name)
        return os.path.join(self.directory, name)

    def _prune(self, newest: str) -> None:
        """Keeps the newest `keep` checkpoints; drops temporary directories left by crashes."""
        names = _checkpoint_names(self.directory)
        stale = [n for n in names[: max(len(names) - self.keep, 0)] if n != newest]
        stale += [n for n in os.listdir(self.directory) if n.startswith(f"{_TEMP_PREFIX}step-")]
        for name in stale:
            shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def restore(self) -> tuple[str, dict, dict] | None:
        """(path, tensors, metadata) of the latest checkpoint, or None when there is none."""
        path = latest(self.directory) if os.path.isdir(self.directory) else None
        if path is None:
            return None
        tensors, metadata = read(path)
        self.last_step, self.last_time = int(metadata["global_step"]), time.monotonic()
        return path, tensors, metadata


def check_same_job(path: str, metadata: dict, current: dict) -> None:
    """ValueError unless the checkpoint at `path` was written by a job of the same shape."""
    _check_same(path, metadata, current, _SAME_JOB, "the same strategy and number of workers")


def check_same_data(path: str, metadata: dict, current: dict) -> None:
    """ValueError unless fit() resumes over the same data, batch size and seed (the keys the
    checkpoint records; a checkpoint written outside fit() records no data position)."""
    if "batch_size" in metadata:
        _check_same(path, metadata, current, _SAME_DATA, "the same data, batch_size and seed")


def _check_same(path: str, metadata: dict, current: dict, keys: tuple, what: str) -> None:
    differ = [k for k in keys if metadata.get(k) != str(current[k])]
    if differ:
        then = ", ".join(f"{k}={metadata.get(k)}" for k in differ)
        now = ", ".join(f"{k}={current[k]}" for k in differ)
        raise ValueError(
            f"the checkpoint {path} was written with {then}; this job has {now}. Resuming needs "
            f"{what}: run it so, or give a new checkpoint_dir to start afresh"
        )
