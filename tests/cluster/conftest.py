"""Fixtures of the cluster tests: a SeaweedFS cluster (tests/servers.py) and nginx as a pull-through cache.

nginx comes from Debian's nginx-light, which `python3 dev.py test` installs (as root); the fixture fails, naming the
package, when it is missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import FaultProxy, SeaweedCluster, free_port, s3_env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedCluster]:
    server = SeaweedCluster(tmp_path_factory.mktemp("cluster")).start()
    saved = dict(os.environ)
    os.environ.update(s3_env(server.url))  # dummy credentials; every store names its endpoint in its URL anyway
    yield server
    os.environ.clear()
    os.environ.update(saved)
    server.stop()


def nginx_binary() -> str:
    """nginx from PATH (or /usr/sbin): Debian's nginx-light, which `python3 dev.py test` installs as root."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise RuntimeError("nginx is not installed: install Debian's nginx-light (`python3 dev.py test` does, as root)")
    return found


class Nginx:
    """nginx in the foreground on 127.0.0.1, caching GETs (per URI and Range) of `upstream_port`."""

    def __init__(self, binary: str, upstream_port: int, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.access_log = root / "access.log"
        user = "user root;\n" if os.geteuid() == 0 else ""  # workers must reach the temp dir (0700 under pytest)
        temps = "".join(
            f"{kind}_temp_path {root / ('tmp-' + kind)};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (root / "nginx.conf").write_text(f"""{user}daemon off;
worker_processes 1;
pid {root / "nginx.pid"};
error_log {root / "error.log"} warn;
events {{ worker_connections 256; }}
http {{
  {temps}
  access_log {self.access_log};
  proxy_cache_path {root / "cache"} keys_zone=models:10m use_temp_path=off;
  server {{
    listen 127.0.0.1:{self.port};
    location / {{
      proxy_pass http://127.0.0.1:{upstream_port};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Range $http_range;
      proxy_set_header If-Range $http_if_range;
      proxy_cache models;
      proxy_cache_valid 200 206 1d;
      proxy_cache_key $uri$http_range;
      add_header X-Cache $upstream_cache_status;
    }}
  }}
}}
""")
        self.process = subprocess.Popen(
            [binary, "-c", str(root / "nginx.conf"), "-p", str(root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"nginx exited: {self.process.stderr.read().decode() if self.process.stderr else ''}"
                )
            try:
                urllib.request.urlopen(self.url + "/", timeout=1)
                return
            except urllib.error.HTTPError:
                return  # it answers
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("nginx did not answer within 15 s")

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        if self.process.stderr is not None:
            self.process.stderr.close()  # the pipe read only when nginx exits at start; unclosed, a ResourceWarning


@pytest.fixture
def filer_proxy(cluster: SeaweedCluster) -> Iterator[FaultProxy]:
    """A counting proxy in front of the filer's HTTP: every request that reaches the store shows here."""
    proxy = FaultProxy(cluster.filer_port)
    yield proxy
    proxy.close()


@pytest.fixture
def nginx(filer_proxy: FaultProxy, tmp_path: Path) -> Iterator[Nginx]:
    binary = nginx_binary()
    root = tmp_path / "nginx"
    root.mkdir()
    server = Nginx(binary, filer_proxy.port, root)
    yield server
    server.stop()
