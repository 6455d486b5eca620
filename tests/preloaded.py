"""`python ARGS` in a new process that starts with TensorFlow and Keras imported.

Importing TensorFlow and Keras takes 7 to 8 s of CPU on the 2-core machines, and the
suite starts dozens of Python processes that import them (killed runs, distributed
workers, reloads in a fresh process, the docs' Python examples). `run` and `Popen` here
start them with multiprocessing's fork server instead: one server per test worker
imports TensorFlow and Keras once (nothing else: rnnkit and the code under test are
imported by each new process, as a fresh `python` imports them), and each process is
forked from it, a new interpreter state as far as the code under test can tell: its own
`sys.argv`, `sys.path`, working directory, environment, standard streams, process
group, exit status and death by signal, as `python -c`/`-m`/`SCRIPT` gives them.

What a forked process cannot give falls back to a real `python` start: another Keras
backend, or another value of a variable that TensorFlow or Keras reads at import
(`TF_ENABLE_ONEDNN_OPTS`, ...). TensorFlow's native start-up lines are not written by
a forked process (the server imported TensorFlow with them off): tests of the start
itself (what `rnnkit --help` imports, native log lines, modules a file needs alone)
start a real `python` with `subprocess`.
"""

from __future__ import annotations

import atexit
import builtins
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

PRELOAD = ("tensorflow", "keras")
# Read when TensorFlow or Keras is imported: a process that sets them differently from
# the fork server's starts a real `python`.
IMPORT_TIME_VARIABLES = (
    "KERAS_BACKEND",
    "KERAS_HOME",
    "TF_CPP_MAX_VLOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "CUDA_VISIBLE_DEVICES",
    "PYTHONPATH",
)
# RNNKIT_REAL_PROCESSES=1 starts every process with a real `python` (to compare).
REAL = os.environ.get("RNNKIT_REAL_PROCESSES") == "1"

_context = None
_server_environment: dict[str, str] | None = None
_base_path: list[str] | None = None


def _fork_server():
    global _context, _server_environment, _base_path
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(list(PRELOAD))
        _server_environment = dict(os.environ)
        # The server's import of TensorFlow writes no native lines.
        level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            if level is None:
                del os.environ["TF_CPP_MIN_LOG_LEVEL"]
            else:
                os.environ["TF_CPP_MIN_LOG_LEVEL"] = level
        # sys.path of a fresh interpreter without its first entry (which -c, -m and a
        # script each set): the test worker's path holds the rootdir and its plugins.
        _base_path = subprocess.run(
            [sys.executable, "-c", "import sys; print('\\n'.join(sys.path[1:]))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    return _context


def forkable(environment: dict[str, str]) -> bool:
    """Whether a process with `environment` can be forked from the fork server."""
    if REAL:
        return False
    backend = environment.get("KERAS_BACKEND", "tensorflow")
    if backend != "tensorflow" or os.environ.get("KERAS_BACKEND", "tensorflow") != (
        "tensorflow"
    ):
        return False
    reference = _server_environment if _server_environment is not None else os.environ
    return all(
        environment.get(name) == reference.get(name) for name in IMPORT_TIME_VARIABLES
    )


def _child(
    args: list[str],
    cwd: str,
    environment: dict[str, str],
    output: str,
    errors: str,
    new_session: bool,
    base_path: list[str],
) -> None:
    """The forked process: `python *args` (multiprocessing's target)."""
    if new_session:
        os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, path in ((1, output), (2, errors)):
        if fd == 2 and errors == output:
            os.dup2(1, 2)
            continue
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environment)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code = 0
    try:
        if args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            sys.path[:] = ["", *base_path]
            namespace = {"__name__": "__main__", "__builtins__": builtins}
            exec(compile(args[1], "<string>", "exec"), namespace)
        elif args[0] == "-m":
            sys.argv = [args[1], *args[2:]]  # runpy puts the module's file first
            sys.path[:] = [os.getcwd(), *base_path]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(args[0])
            sys.argv = [args[0], *args[1:]]
            sys.path[:] = [os.path.dirname(script), *base_path]
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        # As python does: the traceback, then death by SIGINT.
        traceback.print_exc()
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    _finish()
    os._exit(code)


def _finish() -> None:
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


class Popen:
    """A subset of subprocess.Popen's interface for `python *args` (see module doc).

    stdout and stderr: a file path each (stderr may be subprocess.STDOUT), or None for
    temporary files that `communicate` reads.
    """

    def __init__(
        self,
        args: list[str],
        *,
        cwd=None,
        env=None,
        stdout=None,
        stderr=None,
        start_new_session: bool = False,
    ) -> None:
        environment = dict(os.environ if env is None else env)
        self.args = [sys.executable, *args]
        self._temporary: list[str] = []
        self._paths = [stdout, stderr]
        for index, target in enumerate(self._paths):
            if target is None:
                handle, path = tempfile.mkstemp(prefix="rnnkit-process-")
                os.close(handle)
                self._temporary.append(path)
                self._paths[index] = path
        if stderr == subprocess.STDOUT:
            self._paths[1] = self._paths[0]
        self.new_session = start_new_session
        self.forked = forkable(environment)
        if self.forked:
            context = _fork_server()
            self._process = context.Process(
                target=_child,
                args=(
                    list(args),
                    str(cwd or os.getcwd()),
                    environment,
                    str(self._paths[0]),
                    str(self._paths[1]),
                    start_new_session,
                    _base_path,
                ),
            )
            self._process.start()
            self.pid = self._process.pid
            if start_new_session:
                self._wait_for_own_session()
        else:
            merged = self._paths[1] == self._paths[0]
            with open(self._paths[0], "ab") as out, open(self._paths[1], "ab") as err:
                self._popen = subprocess.Popen(
                    self.args, cwd=cwd, env=environment, stdout=out,
                    stderr=subprocess.STDOUT if merged else err,
                    stdin=subprocess.DEVNULL, start_new_session=start_new_session,
                )  # fmt: skip
            self.pid = self._popen.pid
        self.returncode: int | None = None

    def _wait_for_own_session(self) -> None:
        """Returns once the forked process leads its own session, as
        subprocess.Popen(start_new_session=True) does: a caller that signals the
        process group at once (jupyter_client does) would otherwise reach the fork
        server's group, the test worker's own."""
        while self._process.exitcode is None:
            try:
                if os.getpgid(self.pid) == self.pid:
                    return
            except ProcessLookupError:
                return
            time.sleep(0.001)

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.forked:
                self.returncode = self._process.exitcode
            else:
                self.returncode = self._popen.poll()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.forked:
            self._process.join(timeout)
            if self._process.exitcode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = self._process.exitcode
        else:
            self.returncode = self._popen.wait(timeout)
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL to the process, and to its process group when it has its own."""
        if self.new_session:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.send_signal(signal.SIGKILL)

    def output(self) -> tuple[str, str]:
        """What the process wrote to stdout and stderr (one text if merged)."""
        out = Path(self._paths[0]).read_text(errors="replace")
        if self._paths[1] == self._paths[0]:
            return out, ""
        return out, Path(self._paths[1]).read_text(errors="replace")

    def cleanup(self) -> None:
        for path in self._temporary:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def run(
    args: list[str],
    *,
    cwd=None,
    env=None,
    timeout: float | None = None,
    check: bool = False,
    stderr_to_stdout: bool = False,
) -> subprocess.CompletedProcess:
    """`python *args` to its end, its output captured as text: subprocess.run(...,
    capture_output=True, text=True) for a process that imports TensorFlow."""
    process = Popen(
        args,
        cwd=cwd,
        env=env,
        stderr=subprocess.STDOUT if stderr_to_stdout else None,
    )
    try:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        out, err = process.output()
    finally:
        process.cleanup()
    completed = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    if check:
        completed.check_returncode()
    return completed
