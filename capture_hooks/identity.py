"""Who wrote a capture: rank, world size, node, attempt, host and accelerator.

Runs inside training jobs, so it depends on the standard library and (lazily) torch only.

Launcher environment variables, in order of precedence (the first launcher whose rank *and*
world-size variables are both set wins); each row is rank / local rank / world size / node / attempt:

- torchrun: ``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` / ``GROUP_RANK`` / ``TORCHELASTIC_RESTART_COUNT``
- SLURM (srun): ``SLURM_PROCID`` / ``SLURM_LOCALID`` / ``SLURM_NTASKS`` / ``SLURM_NODEID`` / ``SLURM_RESTART_COUNT``
- Open MPI: ``OMPI_COMM_WORLD_RANK`` / ``OMPI_COMM_WORLD_LOCAL_RANK`` / ``OMPI_COMM_WORLD_SIZE`` / — / —
- MPICH, Intel MPI (PMI): ``PMI_RANK`` / ``MPI_LOCALRANKID`` / ``PMI_SIZE`` / — / —

(``SLURM_NPROCS`` is accepted when ``SLURM_NTASKS`` is absent.) MPI launchers do not export a
node index, so ``node`` is ``None`` there rather than a guess. Under torchrun without a restart
count, ``SLURM_RESTART_COUNT`` is used for the attempt. When ``torch.distributed`` is initialized,
its ``get_rank()`` / ``get_world_size()`` override the environment (the process group is the
truth the trace's ``distributedInfo`` also reports).
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Identity", "LaunchInfo", "launch_info_from_env", "detect_identity"]


@dataclass(frozen=True)
class LaunchInfo:
    """Process placement as told by the launcher.

    ``rank`` and ``world_size`` are global; ``local_rank`` is the rank on the node; ``node`` the
    node index; ``attempt`` the restart count (``None`` when the launcher does not say);
    ``launcher`` one of ``torchrun``, ``slurm``, ``openmpi``, ``pmi``, ``torch.distributed``,
    ``default`` (single process: rank 0 of 1).
    """

    rank: int
    local_rank: int | None
    world_size: int
    node: int | None
    attempt: int | None
    launcher: str


@dataclass(frozen=True)
class Identity:
    """Everything a manifest says about the writer of a capture.

    Placement fields as in :class:`LaunchInfo`, plus ``host`` (``socket.gethostname()``),
    ``pid``, ``accelerator`` (``cuda``, ``rocm`` or ``cpu``), ``device_name`` (the current
    accelerator's name, ``None`` on CPU), ``torch_version``, ``cuda_version`` (CUDA or HIP
    runtime version torch was built with, ``None`` on CPU builds) and ``driver_version``
    (kernel driver version read from ``/proc`` / ``/sys``, ``None`` when unreadable).
    """

    rank: int
    local_rank: int | None
    world_size: int
    node: int | None
    attempt: int | None
    launcher: str
    host: str
    pid: int
    accelerator: str
    device_name: str | None
    torch_version: str | None
    cuda_version: str | None
    driver_version: str | None


def _int(env: Mapping[str, str], name: str) -> int | None:
    """``int(env[name])``, ``None`` when unset or empty; ValueError naming the variable if malformed."""
    raw = env.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"environment variable {name}={raw!r} is negative")
    return value


# (launcher, rank var, local-rank var, world-size vars, node var, attempt var)
_LAUNCHERS: tuple[tuple[str, str, str, tuple[str, ...], str | None, str | None], ...] = (
    ("torchrun", "RANK", "LOCAL_RANK", ("WORLD_SIZE",), "GROUP_RANK", "TORCHELASTIC_RESTART_COUNT"),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", ("SLURM_NTASKS", "SLURM_NPROCS"), "SLURM_NODEID", "SLURM_RESTART_COUNT"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", ("OMPI_COMM_WORLD_SIZE",), None, None),
    ("pmi", "PMI_RANK", "MPI_LOCALRANKID", ("PMI_SIZE",), None, None),
)


def launch_info_from_env(env: Mapping[str, str]) -> LaunchInfo:
    """Parse the launcher's placement variables from ``env`` (pure; see the module table).

    Returns rank 0 of 1 (``launcher="default"``) when no launcher's variables are set.

    Raises:
        ValueError: a variable of the chosen launcher is not a non-negative integer, the
            world size is 0, or rank >= world size (the message names the variables).
    """
    for launcher, rank_var, local_var, size_vars, node_var, attempt_var in _LAUNCHERS:
        rank = _int(env, rank_var)
        size_var = next((v for v in size_vars if _int(env, v) is not None), None)
        if rank is None or size_var is None:
            continue
        world_size = _int(env, size_var)
        assert world_size is not None
        if world_size < 1 or rank >= world_size:
            raise ValueError(f"inconsistent {launcher} environment: {rank_var}={rank} with {size_var}={world_size}")
        attempt = _int(env, attempt_var) if attempt_var else None
        if attempt is None and launcher == "torchrun":
            attempt = _int(env, "SLURM_RESTART_COUNT")
        return LaunchInfo(
            rank=rank,
            local_rank=_int(env, local_var),
            world_size=world_size,
            node=_int(env, node_var) if node_var else None,
            attempt=attempt,
            launcher=launcher,
        )
    return LaunchInfo(rank=0, local_rank=None, world_size=1, node=None, attempt=None, launcher="default")


def _read_first_line(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def _driver_version(accelerator: str) -> str | None:
    """Kernel driver version: NVIDIA from ``/proc/driver/nvidia/version``, AMD from ``/sys/module/amdgpu/version``."""
    if accelerator == "cuda":
        line = _read_first_line("/proc/driver/nvidia/version")
        # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..."
        if line:
            for token in line.split():
                if token[:1].isdigit() and "." in token:
                    return token
        return None
    if accelerator == "rocm":
        return _read_first_line("/sys/module/amdgpu/version")
    return None


def _torch_facts() -> tuple[str | None, str, str | None, str | None, int | None, int | None]:
    """(torch_version, accelerator, device_name, cuda_version, dist_rank, dist_world_size); never raises."""
    try:
        import torch  # heavy: torch
    except Exception:  # torch missing or broken: still describe the host
        return None, "cpu", None, None, None, None
    torch_version = str(torch.__version__)
    accelerator, device_name, cuda_version = "cpu", None, None
    try:
        if torch.cuda.is_available():
            hip = getattr(torch.version, "hip", None)
            accelerator = "rocm" if hip else "cuda"
            cuda_version = str(hip) if hip else (str(torch.version.cuda) if torch.version.cuda else None)
            device_name = torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:
        pass
    dist_rank = dist_size = None
    try:
        import torch.distributed as dist  # heavy: torch

        if dist.is_available() and dist.is_initialized():
            dist_rank, dist_size = dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    return torch_version, accelerator, device_name, cuda_version, dist_rank, dist_size


def detect_identity(env: Mapping[str, str] | None = None) -> Identity:
    """Identity of the calling process (``env`` defaults to ``os.environ``).

    Placement from :func:`launch_info_from_env`, overridden by an initialized
    ``torch.distributed`` process group (then ``launcher`` is ``torch.distributed`` if the
    environment named none). Accelerator facts from torch; never initializes
    ``torch.distributed``.

    Raises:
        ValueError: as :func:`launch_info_from_env`.
    """
    env = os.environ if env is None else env
    info = launch_info_from_env(env)
    torch_version, accelerator, device_name, cuda_version, dist_rank, dist_size = _torch_facts()
    rank, world_size, launcher = info.rank, info.world_size, info.launcher
    if dist_rank is not None and dist_size is not None:
        rank, world_size = dist_rank, dist_size
        if launcher == "default":
            launcher = "torch.distributed"
    return Identity(
        rank=rank,
        local_rank=info.local_rank,
        world_size=world_size,
        node=info.node,
        attempt=info.attempt,
        launcher=launcher,
        host=socket.gethostname() or platform.node() or "unknown-host",
        pid=os.getpid(),
        accelerator=accelerator,
        device_name=device_name,
        torch_version=torch_version,
        cuda_version=cuda_version,
        driver_version=_driver_version(accelerator),
    )
