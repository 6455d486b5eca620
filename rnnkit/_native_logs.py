"""Quiets the start-up lines that TensorFlow's C++ runtime writes to stderr.

TensorFlow prints lines such as "WARNING: All log messages before absl::InitializeLog()
is called are written to STDERR", "I0000 ... cudart_stub.cc:31] Could not find cuda
drivers" and "E0000 ... failed call to cuInit" before any output of ours; a new user
reads them as errors. Some are written before TensorFlow reads `TF_CPP_MIN_LOG_LEVEL`,
so the launcher imports TensorFlow with the process's stderr (file descriptor 2)
redirected to a temporary file and writes back every line that is not such a native
log line, Python warnings included. `TF_CPP_MIN_LOG_LEVEL=3` then quiets the lines
that come later. `rnnkit --verbose` skips both.

Light module: the launcher imports it before TensorFlow.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# absl/glog lines "I0000 00:00:1795453771.613136   13498 port.cc:153] ..." (severity,
# date, time, thread, file:line), absl's pre-initialisation notice, and the second
# line of the CPU-feature notice.
NATIVE_LOG_LINE = re.compile(
    r"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\s:]+:\d+\] "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: .* rebuild TensorFlow)"
)


def is_native_log_line(line: str) -> bool:
    return NATIVE_LOG_LINE.match(line) is not None


@contextlib.contextmanager
def native_logs_filtered() -> Iterator[None]:
    """Drops native log lines written to file descriptor 2 inside the block."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (embedded interpreters)
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            _flush_c_streams()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = [
                line
                for line in text.splitlines(keepends=True)
                if not is_native_log_line(line)
            ]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def _flush_c_streams() -> None:
    """Flushes the C library's buffered streams, where native code may hold lines."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        import ctypes

        ctypes.CDLL(None).fflush(None)


def quiet_native_logs() -> None:
    """Sets the C++ log level to errors-off unless the user chose one."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def import_frameworks_quietly() -> None:
    """Imports TensorFlow (if installed) and Keras, native start-up lines dropped."""
    with native_logs_filtered():
        if importlib.util.find_spec("tensorflow") is not None:
            importlib.import_module("tensorflow")
        importlib.import_module("keras")
