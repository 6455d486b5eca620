"""tests/preloaded.py: a forked process behaves as `python ARGS` does, where the tests
that use it can tell."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests import preloaded

REPORT = (
    "import json, os, sys\n"
    "print(json.dumps({'argv': sys.argv, 'path0': sys.path[0],\n"
    "    'cwd': os.getcwd(),\n"
    "    'marker': os.environ.get('PRELOADED_MARKER'),\n"
    "    'rnnkit': 'rnnkit' in sys.modules,\n"
    "    'tensorflow': 'tensorflow' in sys.modules,\n"
    "    'session': os.getsid(0) == os.getpid()}))\n"
    "print('to stderr', file=sys.stderr)\n"
    "sys.exit(int(sys.argv[1]))\n"
)


def report(completed):
    import json

    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_a_forked_process_gets_its_arguments_folder_environment_and_exit_status(
    tmp_path,
):
    env = {**os.environ, "PRELOADED_MARKER": "on"}
    completed = preloaded.run(["-c", REPORT, "3", "x y"], cwd=tmp_path, env=env)
    assert completed.returncode == 3, completed.stderr
    seen = report(completed)
    assert seen["argv"] == ["-c", "3", "x y"]
    assert seen["path0"] == "" and seen["cwd"] == str(tmp_path)
    assert seen["marker"] == "on"
    # TensorFlow came with the fork; rnnkit is imported by the process, as python would.
    assert seen["tensorflow"] is True and seen["rnnkit"] is False
    assert seen["session"] is False
    assert completed.stderr.strip() == "to stderr"


def test_a_module_and_a_script_run_as_main(tmp_path):
    (tmp_path / "probe_module.py").write_text(REPORT)
    module = preloaded.run(["-m", "probe_module", "0"], cwd=tmp_path)
    assert module.returncode == 0, module.stderr
    assert report(module)["argv"] == [str(tmp_path / "probe_module.py"), "0"]
    assert report(module)["path0"] == str(tmp_path)
    script = preloaded.run([str(tmp_path / "probe_module.py"), "0"], cwd="/")
    assert script.returncode == 0, script.stderr
    assert report(script)["path0"] == str(tmp_path)


def test_new_session_signals_and_uncaught_errors():
    process = preloaded.Popen(
        ["-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        # Its own session and group once Popen returns, as subprocess gives them: a
        # caller may signal the group at once (jupyter_client's kernel launcher does).
        assert os.getsid(process.pid) == process.pid
        assert os.getpgid(process.pid) == process.pid
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(0.2)
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(30) == -signal.SIGTERM
    finally:
        process.kill()
        process.cleanup()
    interrupted = preloaded.run(["-c", "raise KeyboardInterrupt"])
    assert interrupted.returncode == -signal.SIGINT
    failed = preloaded.run(["-c", "raise ValueError('bad value')"])
    assert failed.returncode == 1
    assert failed.stderr.rstrip().endswith("ValueError: bad value")


def test_another_backend_starts_a_real_python():
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    assert not preloaded.forkable(env)
    process = preloaded.Popen(["-c", "import sys; print(sys.executable)"], env=env)
    try:
        assert process.wait(120) == 0
        assert process.forked is False
        assert process.output()[0].strip() == sys.executable
    finally:
        process.cleanup()
