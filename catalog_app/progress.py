"""Progress where CI users look: a bar with bytes, rate and ETA on a terminal (rich), and in logs (not a
terminal) one line per finished file plus a heartbeat every ~10 s, so a long transfer is never silent.

Transfers report through the `resolver.transfer.Progress` protocol; only this module draws.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

HEARTBEAT_SECONDS = 10.0


def plural(count: int, noun: str) -> str:
    """`1 request`, `2 requests`: English nouns of this CLI take an s."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


class LogProgress:
    """For logs: `fetched NAME/PATH (SIZE)` per file, and `... X of Y at R/s` every HEARTBEAT_SECONDS."""

    def __init__(self, total: int, stream: TextIO | None = None, heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.heartbeat = heartbeat
        self.started = time.monotonic()
        self.last_line = self.started
        self.lock = threading.Lock()

    def __call__(self, label: str, count: int) -> None:
        line = None
        with self.lock:  # short: the counters only; the (slow) write to the log happens outside
            self.done += count
            now = time.monotonic()
            if now - self.last_line >= self.heartbeat:
                self.last_line = now
                rate = self.done / max(now - self.started, 1e-9)
                line = f"... {human_bytes(self.done)} of {human_bytes(self.total)} at {human_bytes(rate)}/s"
        if line is not None:
            self._line(line)

    def file_done(self, label: str, size: int) -> None:
        with self.lock:
            self.last_line = time.monotonic()
        self._line(f"fetched {label} ({human_bytes(size)})")

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")  # one write: lines from several threads never interleave
        self.stream.flush()

    def finish(self) -> None:
        if self.done:
            seconds = time.monotonic() - self.started
            self._line(f"fetched {human_bytes(self.done)} in {seconds:.1f} s")


class BarProgress:
    """For a terminal: one rich bar (bytes, rate, ETA), the file in flight as its description."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        # Binary units, as every other size the CLI prints (rich's defaults are decimal).
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            transient=True,
            console=_stderr_console(),
        )
        self.task = self.bar.add_task("", total=total, rate="")
        self.started = False
        self.lock = threading.Lock()

    def __call__(self, label: str, count: int) -> None:
        with self.lock:
            if not self.started:
                self.bar.start()  # only once bytes move: a warm resolve draws nothing
                self.started = True
            self.bar.update(self.task, advance=count, description=label[-50:])
            speed = self.bar.tasks[0].speed
            self.bar.update(self.task, rate=f"{human_bytes(speed)}/s" if speed else "")

    def file_done(self, label: str, size: int) -> None:
        pass

    def finish(self) -> None:
        if self.started:
            self.bar.stop()


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(file=sys.stderr)


def for_terminal(total: int) -> LogProgress | BarProgress:
    """A bar on a terminal, lines otherwise (CI logs)."""
    return BarProgress(total) if sys.stderr.isatty() else LogProgress(total)
