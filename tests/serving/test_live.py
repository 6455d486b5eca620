"""`rnnkit serve` over a real socket: the page in a headless Chromium (the system's,
driven by Selenium) and a short load test of the Keras and ONNX runtimes.

CI installs Chromium and its driver (.ci/run); elsewhere the browser test is skipped
when they are missing, unless RNNKIT_REQUIRE_BROWSER=1. The page's screenshots are
kept in `test-artifacts/` at the repository root.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.serving.conftest import live_server

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve as serve_benchmark  # noqa: E402


def chromium():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        if os.environ.get("RNNKIT_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium and chromedriver are not installed (.ci/run does it)")
        pytest.skip("no Chromium and chromedriver on this machine")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1200,1000")
    return webdriver.Chrome(service=Service(driver), options=options)


def ask(page, url, model: str, text: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    page.get(url)
    wait = WebDriverWait(page, 60)
    wait.until(lambda p: len(p.find_elements(By.CSS_SELECTOR, "#model option")) == 2)
    Select(page.find_element(By.ID, "model")).select_by_value(model)
    page.find_element(By.ID, "input").send_keys(text)
    page.find_element(By.ID, "submit").click()
    wait.until(
        lambda p: (
            p.find_element(By.ID, "result").get_attribute("data-done")
            or p.find_element(By.ID, "error").text
        )
    )
    assert page.find_element(By.ID, "error").text == ""
    ARTIFACTS.mkdir(exist_ok=True)
    page.save_screenshot(str(ARTIFACTS / f"serve_{model}.png"))
    return By


def test_the_page_classifies_and_translates_in_a_browser(keras_client, keras_models):
    from rnnkit import serving

    review = "The acting was wonderful and the story moving, a fine film."
    sentence = "Ein Mann fährt Fahrrad."
    expected = keras_client.post(
        "/models/sentiment/predict", json={"inputs": [review]}
    ).json()["predictions"][0]
    translated = keras_client.post(
        "/models/translation/predict",
        json={"inputs": [sentence], "options": {"beam": 1}},
    ).json()["predictions"][0]
    page = chromium()
    try:
        with live_server(serving.create_app(keras_models)) as url:
            By = ask(page, url, "sentiment", review)
            label = page.find_element(By.ID, "label").text
            assert label.startswith(expected["label"])
            words = page.find_elements(By.CSS_SELECTOR, "#words .word")
            assert [w.text for w in words] == review.split()
            shades = {w.get_attribute("style") for w in words}
            assert len(shades) > 1  # the words are shaded by their weights

            ask(page, url, "translation", sentence)
            shown = page.find_element(By.ID, "translation").text
            assert shown == translated["translation"]
            rows = page.find_elements(By.CSS_SELECTOR, "#heatmap tr")
            assert len(rows) == 1 + len(translated["target_tokens"])
            cells = rows[1].find_elements(By.TAG_NAME, "td")
            assert len(cells) == len(translated["source_tokens"])
    finally:
        page.quit()


@pytest.mark.parametrize("runtime", ["keras", "onnx"])
def test_no_request_fails_under_concurrent_load(runtime, keras_models, onnx_models):
    from rnnkit import serving

    models = keras_models if runtime == "keras" else onnx_models
    bodies = [{"inputs": [text]} for text in serve_benchmark.inputs("sentiment", 16)]
    with live_server(serving.create_app(models)) as url:
        endpoint = f"{url}/models/sentiment/predict"
        load = serve_benchmark.load_test(
            endpoint,
            bodies,
            clients=8,
            seconds=3,
            check=lambda answer: (
                answer["predictions"][0]["label"] in {"negative", "positive"}
            ),
        )
        print(f"{runtime}: {load.row()}")
        assert load.failures == 0, load.first_failure
        assert load.requests >= 8
        status, health = serve_benchmark.post(f"{url}/predict", {"inputs": ["x"]})
        assert status == 400  # two models: /predict names them
