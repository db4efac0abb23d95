"""
The Milvus Lite gRPC server (`milvus-lite server`, from the installed `milvus-lite` package) in
its own process group: the server path with BM25 functions, which the Milvus 2.3 standalone lacks.
It binds 127.0.0.1 only (its own default is every interface), keeps its data in a folder of its
own and is one process, not a cluster: a stand-in for a Milvus >= 2.5 server's protocol, not its
scale (see docs/milvus.md).

Usage example:

```python
with LiteServerProcess(tmp_path / "lite") as server:
    cfg = load_config(["milvus=server", f"milvus.uri={server.uri}", "milvus.full_text=true"])
```
"""

import subprocess
import sys
from pathlib import Path

from pipelines.dev.milvus_server import MilvusServerProcess, MilvusServerUnavailableError, check_port_free

# The Lite server answers within seconds; the standalone's three minutes would only hide a failure.
LITE_READY_TIMEOUT_S = 60.0


class LiteServerProcess(MilvusServerProcess):
    """`milvus-lite server --host 127.0.0.1` in a child process group; `uri` is where to reach it."""

    def start(self, timeout_s: float = LITE_READY_TIMEOUT_S) -> "LiteServerProcess":
        return super().start(timeout_s)

    def restart(self, timeout_s: float = LITE_READY_TIMEOUT_S) -> "LiteServerProcess":
        return super().restart(timeout_s)

    @staticmethod
    def _check_installed() -> None:
        try:
            import milvus_lite  # noqa: F401  (only to fail early and clearly)
        except ImportError as exc:
            raise MilvusServerUnavailableError("the `milvus-lite` package is not installed") from exc

    def _launch(self) -> subprocess.Popen:
        # gRPC binds with SO_REUSEPORT: a second server on a busy port would share it silently.
        check_port_free(self.port)
        command = [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(self.data_dir / "data")]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                process_group=self._watched_group(log),
            )

    @property
    def log_path(self) -> Path:
        return self.data_dir / "lite-server.log"
