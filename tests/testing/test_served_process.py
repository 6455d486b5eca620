"""rnnkit/testing/_served_process.py: made-up children that answer, chatter,
quit or hang."""

from __future__ import annotations

import pytest

from rnnkit.testing._served_process import ServedProcess, ServedProcesses

CHILDREN = {
    # Prints a line of its own before each answer, without flushing it apart.
    "chatty": (
        "import sys\n"
        "for line in sys.stdin:\n"
        "    print('noise before the answer')\n"
        "    print('A: got ' + line.strip(), flush=True)\n"
    ),
    "quits": "import sys\nprint('leaving', file=sys.stderr)\nsys.exit(3)\n",
    "hangs": "import time\ntime.sleep(60)\n",
}


@pytest.fixture
def start(tmp_path, monkeypatch):
    monkeypatch.setattr(ServedProcess, "TIMEOUT_SECONDS", 5)
    for name, source in CHILDREN.items():
        (tmp_path / f"{name}.py").write_text(source)

    def start(name):
        return lambda: ServedProcess(
            name, name, answer="A: ", env={"PYTHONPATH": str(tmp_path)}
        )

    return start


@pytest.fixture
def served():
    """The children of one test, stopped after it even when it fails."""
    served = ServedProcesses()
    yield served
    served.stop_all()


def test_lines_printed_before_an_answer_do_not_hide_it(start, served):
    child = served.get("chatty", start("chatty"))
    assert [child.ask("one"), child.ask("two")] == ["got one", "got two"]
    assert served.get("chatty", start("chatty")) is child  # alive: the same child
    log = child.log
    served.stop_all()
    assert not child.alive() and not log.exists()


@pytest.mark.parametrize("name", ["quits", "hangs"])
def test_a_child_that_dies_or_hangs_fails_the_request_with_its_log(start, served, name):
    child = served.get(name, start(name))
    if name == "quits":
        child.process.wait(timeout=30)  # dead before the request
    with pytest.raises(AssertionError, match=f"the {name} process died or hung") as e:
        child.ask("x")
    assert ("leaving" in str(e.value)) == (name == "quits")  # the end of its log
    assert not child.alive() and not child.log.exists()
    again = served.get(name, start("chatty"))  # replaced, without a second failure
    assert again is not child and again.alive()
