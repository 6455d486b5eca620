"""`rnnkit.models` gives its classes and builders by the names the docs cite."""

from __future__ import annotations

import re
from pathlib import Path

import rnnkit.models

ROOT = Path(__file__).resolve().parents[2]


def test_every_cited_model_name_is_importable_from_the_package():
    cited = set()
    for folder in ("rnnkit", "recipes", "docs", "notebooks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".ipynb"):
                text = path.read_text("utf-8")
                cited |= set(re.findall(r"rnnkit\.models\.([A-Z]\w*)", text))
    assert {"EncoderDecoder", "ImageCaptioner", "LanguageModel"} <= cited
    missing = sorted(name for name in cited if not hasattr(rnnkit.models, name))
    assert not missing, f"cited as rnnkit.models.NAME but not exported: {missing}"
    assert set(rnnkit.models.__all__) <= set(dir(rnnkit.models))
