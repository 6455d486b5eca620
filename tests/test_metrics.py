"""rnnkit.metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rnnkit import metrics


def test_mase_scales_by_the_in_sample_naive_error():
    training = np.array([10.0, 12.0, 11.0, 14.0])  # naive one-step MAE: (2+1+3)/3 = 2
    actual = np.array([15.0, 16.0])
    predicted = np.array([14.0, 19.0])  # MAE (1 + 3) / 2 = 2
    assert metrics.mase(actual, predicted, training) == pytest.approx(1.0)
    assert metrics.mase(actual, actual, training) == 0.0
    # The scale comes from the training series, not from the test days.
    assert metrics.mase(actual, predicted, training * 2) == pytest.approx(0.5)
    assert math.isnan(metrics.mase(actual, predicted, np.ones(5)))
    with pytest.raises(ValueError, match="longer than its seasonality"):
        metrics.mase(actual, predicted, np.array([1.0]))


def test_seasonal_mase_scales_by_the_seasonal_naive_error():
    # Period 2: |y_t - y_{t-2}| = |11-10|, |14-12|, |13-11| -> (1 + 2 + 2) / 3 = 5/3.
    training = np.array([10.0, 12.0, 11.0, 14.0, 13.0])
    actual, predicted = np.array([15.0, 16.0]), np.array([14.0, 19.0])  # MAE 2
    assert metrics.mase(actual, predicted, training, seasonality=2) == pytest.approx(
        2 / (5 / 3)
    )
    with pytest.raises(ValueError, match="longer than its seasonality"):
        metrics.mase(actual, predicted, training, seasonality=5)


def test_smape_msis_coverage_and_owa_by_hand():
    actual = np.array([100.0, 50.0])
    predicted = np.array([110.0, 50.0])  # 200 * 10 / 210 and 0 -> mean 4.7619
    assert metrics.smape(actual, predicted) == pytest.approx(1000 / 210)
    assert metrics.smape([0.0, 4.0], [0.0, 2.0]) == pytest.approx(200 * 2 / 6 / 2)
    training = np.array([1.0, 3.0, 2.0, 4.0])  # lag-1 scale (2 + 1 + 2) / 3 = 5/3
    lower, upper = np.array([95.0, 52.0]), np.array([105.0, 60.0])
    # Widths 10 and 8; the second misses below by 2: 2 / 0.05 * 2 = 80 -> (10 + 88) / 2
    expected = (10 + 8 + 80) / 2 / (5 / 3)
    assert metrics.msis(actual, lower, upper, training) == pytest.approx(expected)
    assert metrics.coverage(actual, lower, upper) == 0.5
    # The M4 Hourly table: seasonal naive's 13.912 and 1.193 against Naive2's.
    assert metrics.owa(13.912, 1.193, 18.383, 2.395) == pytest.approx(0.6275, abs=5e-5)


def test_relative_mae_is_against_the_reference_on_the_same_days():
    actual = np.array([1.0, 2.0, 3.0])
    reference = np.array([2.0, 2.0, 2.0])  # MAE 2/3
    predicted = np.array([1.0, 2.0, 4.0])  # MAE 1/3
    assert metrics.relative_mae(actual, predicted, reference) == pytest.approx(0.5)
    assert math.isnan(metrics.relative_mae(actual, predicted, actual))


def test_binary_classification_metrics_by_hand():
    labels = np.array([1, 1, 1, 0, 0, 0, 0])
    positive = np.array([0.9, 0.8, 0.3, 0.6, 0.2, 0.1, 0.3])
    probabilities = np.stack([1 - positive, positive], axis=1)
    figures = metrics.classification_metrics(labels, probabilities)
    # Predicted 1 for 0.9, 0.8, 0.6: tp 2, fp 1, fn 1.
    assert figures["accuracy"] == pytest.approx(5 / 7)
    assert figures["precision"] == pytest.approx(2 / 3)
    assert figures["recall"] == pytest.approx(2 / 3)
    assert figures["f1"] == pytest.approx(2 / 3)
    # Positive-negative pairs ranked right: 0.9 and 0.8 beat all 4; 0.3 beats 0.2, 0.1
    # and ties 0.3 (half): (4 + 4 + 2.5) / 12.
    assert figures["roc_auc"] == pytest.approx(10.5 / 12)
    matrix = metrics.confusion_matrix(labels, probabilities.argmax(1), 2)
    assert matrix.tolist() == [[3, 1], [1, 2]]


def test_multiclass_auc_averages_the_classes_present():
    labels = np.array([0, 0, 1, 1])  # class 2 is absent from the test labels
    probabilities = np.array(
        [[0.8, 0.1, 0.1], [0.4, 0.5, 0.1], [0.3, 0.6, 0.1], [0.2, 0.3, 0.5]]
    )
    # Class 0 one-vs-rest: 0.8, 0.4 vs 0.3, 0.2 -> 1.0. Class 1: 0.6, 0.3 vs 0.1, 0.5
    # -> (1 + 1 + 0 + 1) / 4 = 0.75.
    assert metrics.roc_auc(labels, probabilities) == pytest.approx(0.875)
    precision, recall, f1 = metrics.precision_recall_f1(
        labels, probabilities.argmax(1), 3
    )
    # Predictions 0, 1, 1, 2: class 0 p=1 r=.5, class 1 p=.5 r=.5, class 2 p=0 r=0.
    assert precision == pytest.approx((1 + 0.5 + 0) / 3)
    assert recall == pytest.approx((0.5 + 0.5 + 0) / 3)
    assert f1 == pytest.approx((2 / 3 + 0.5 + 0) / 3)


def test_auc_is_nan_with_a_single_class():
    probabilities = np.array([[0.2, 0.8], [0.6, 0.4]])
    assert math.isnan(metrics.roc_auc(np.array([1, 1]), probabilities))


def test_seasonal_scale_skips_missing_pairs_and_scales_short_series_naively():
    series = np.array([1.0, 2.0, np.nan, 5.0, 9.0, 8.0])
    # Lag 2: |nan - 1|, |5 - 2|, |9 - nan|, |8 - 5| -> the observed pairs 3 and 3.
    assert metrics.seasonal_scale(series, 2) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="longer than its seasonality"):
        metrics.seasonal_scale(series, 6)
    # No longer than a season: the naive (lag-1) scale, over observed pairs.
    assert metrics.seasonal_scale(series, 6, short="naive") == pytest.approx(
        np.mean([1.0, 4.0, 1.0])
    )
    assert np.isnan(metrics.seasonal_scale([3.0], 24, short="naive"))
    assert np.isnan(metrics.seasonal_scale([2.0, 2.0, 2.0], 1))  # never changes
    actual, lower, upper = np.array([4.0]), np.array([3.0]), np.array([5.0])
    assert metrics.msis(actual, lower, upper, series, 6, short="naive") == (
        pytest.approx(2.0 / 2.0)
    )
