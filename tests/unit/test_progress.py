"""Progress in CI logs: a line per fetched file and a heartbeat, so a long transfer is never silent."""

from __future__ import annotations

import io
import threading

from catalog_app.progress import LogProgress


def test_a_line_per_file_and_a_heartbeat_with_bytes_and_rate() -> None:
    out = io.StringIO()
    progress = LogProgress(total=4 * 1024 * 1024, stream=out, heartbeat=0.0)
    progress("m/a.safetensors", 1024 * 1024)
    progress.file_done("m/a.safetensors", 1024 * 1024)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("... 1.0 MiB of 4.0 MiB at ") and lines[0].endswith("/s")
    assert lines[1] == "fetched m/a.safetensors (1.0 MiB)"


def test_no_heartbeat_before_it_is_due_and_whole_lines_from_many_threads() -> None:
    out = io.StringIO()
    progress = LogProgress(total=1000, stream=out, heartbeat=3600.0)
    threads = [
        threading.Thread(target=lambda i=i: (progress(f"m/{i}", 1), progress.file_done(f"m/{i}", 1))) for i in range(50)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = out.getvalue().splitlines()
    assert sorted(lines) == sorted(f"fetched m/{i} (1 B)" for i in range(50))  # no heartbeat, no torn line
    assert progress.done == 50
