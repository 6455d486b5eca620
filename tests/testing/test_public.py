"""rnnkit.testing is for plugin authors: importable without pytest, light until a
check module is used, and named in the API reference."""

from __future__ import annotations

import subprocess
import sys

from tests.markdown_examples import ROOT


def test_the_checks_import_without_pytest_and_the_package_without_keras():
    code = (
        "import sys\n"
        "import rnnkit.testing\n"
        "assert 'keras' not in sys.modules, 'rnnkit.testing imported keras'\n"
        "from rnnkit.testing import (check_attention_layer, check_recipe,\n"
        "    check_recurrent_layer, references)\n"
        "assert 'pytest' not in sys.modules, 'a check module imported pytest'\n"
        "assert callable(check_recurrent_layer) and callable(check_recipe)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_public_name_is_in_the_api_reference():
    import rnnkit.testing

    page = (ROOT / "docs" / "reference" / "testing.md").read_text(encoding="utf-8")
    for name in rnnkit.testing.__all__:
        if name != "references":
            assert f"- {name}" in page, name
    assert "::: rnnkit.testing.references" in page
