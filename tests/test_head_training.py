"""Fitting the dog head and its fusion (training.head), the streams it learns from
(training.head_data) and the event thresholds' choice (training.head_eval)."""

from __future__ import annotations

import dataclasses

import numpy as np

from analyzer.offline import average_precision
from training.head import HeadRecipe, fit_fusion, fit_head
from training.head_cli import head_version
from training.head_data import (
    RATE,
    StreamSet,
    dog_step_labels,
    patch_labels,
    reference_spans,
    soundscape,
)
from training.head_eval import choose_thresholds, event_own_snr, own_snr_band, spans_of


def _separable_set(seed: int = 0, n: int = 400) -> StreamSet:
    """Patches whose embedding's first value says dog (+2) or not (-2), plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.3
    emb = rng.normal(size=(n, 1024)).astype(np.float32)
    emb[:, 0] += np.where(y, 2.0, -2.0)
    ys = np.full((n, 521), 0.01, np.float32)
    return StreamSet(emb.astype(np.float16), ys, np.zeros(0, np.float32), np.zeros(0, np.int8),
                     y.astype(np.int8), np.array([0, n]), np.array([0, 0]), [{}])  # fmt: skip


def test_a_logistic_head_separates_patches_that_one_embedding_value_separates() -> None:
    data = _separable_set(n=1000)
    head = fit_head(data, np.arange(1000), HeadRecipe(epochs=30), "t")
    scores = head.patch_scores(data.emb.astype(np.float32), data.ys)
    dog = data.patch_labels == 1
    assert average_precision(dog, scores) > 0.95


def test_the_same_seed_fits_the_same_head() -> None:
    data = _separable_set()
    first = fit_head(data, np.arange(400), HeadRecipe(hidden=8, epochs=2), "t")
    second = fit_head(data, np.arange(400), HeadRecipe(hidden=8, epochs=2), "t")
    for (w1, b1), (w2, b2) in zip(first.layers, second.layers, strict=True):
        np.testing.assert_array_equal(w1, w2)
        np.testing.assert_array_equal(b1, b2)


def test_patches_labelled_minus_one_are_left_out_of_training() -> None:
    data = _separable_set()
    data.patch_labels[:] = -1
    data.patch_labels[:2] = [0, 1]
    head = fit_head(data, np.arange(400), HeadRecipe(epochs=1), "t")
    assert head.feature_mean.shape == (1024 + 521,)  # fitted on the two labelled patches


def test_fusion_recovers_the_weights_its_labels_were_drawn_with() -> None:
    rng = np.random.default_rng(1)
    n = 200_000
    cnn, head = rng.uniform(0.01, 0.99, n), rng.uniform(0.01, 0.99, n)
    z = 1.5 * np.log(cnn / (1 - cnn)) + 0.5 * np.log(head / (1 - head)) - 0.0
    labels = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.int8)
    weights = fit_fusion(cnn, head, labels)
    # equal class totals leave the slopes alone (only the intercept moves with the balance)
    np.testing.assert_allclose(weights[:2], [1.5, 0.5], atol=0.05)


def test_a_patch_is_dog_with_a_tenth_of_a_second_of_dog_steps() -> None:
    steps = np.zeros(24 * 4, np.int8)  # patches start every 24 steps and span 48
    steps[30:35] = 1  # 5 dog steps (0.1 s) in patches 0 and 1
    steps[80:84] = 1  # 4 dog steps in patches 2 and 3 only
    assert patch_labels(steps, 4).tolist() == [1, 1, -1, -1]


def test_a_patch_without_dog_but_inside_a_dog_clip_is_not_called_not_dog() -> None:
    steps = np.zeros(96, np.int8)
    steps[60:70] = -1
    assert patch_labels(steps, 2).tolist() == [0, -1]


def test_reference_events_merge_across_gaps_under_the_merge_gap() -> None:
    labels = np.zeros(200, np.int8)
    labels[10:20] = 1  # 0.2-0.4 s
    labels[30:40] = 1  # 0.6-0.8 s: 0.2 s later, merges
    labels[100:102] = 1  # 0.04 s: shorter than the minimum, dropped
    assert reference_spans(labels, 0.5, 0.1) == [(0.2, 0.8)]


def test_a_loud_burst_in_a_dog_clip_is_labelled_dog_and_its_quiet_rest_unknown() -> None:
    rng = np.random.default_rng(2)
    n = RATE  # one second: 50 steps
    placed = rng.normal(size=n) * 1e-3
    placed[8000:9600] += np.sin(2 * np.pi * 800 * np.arange(1600) / RATE)  # steps 25-29
    region = np.ones(50, dtype=bool)
    labels = dog_step_labels(placed, np.zeros(n), region)
    dog = np.flatnonzero(labels == 1)
    assert dog.min() == 25 and set(range(25, 30)) <= set(dog) and dog.max() <= 31  # filter tail
    assert set(labels[:20]) == {-1}


def test_a_barks_own_snr_in_a_steady_bed_is_the_soundscapes_band() -> None:
    # One 1-s tone "bark" put at +5 dB over steady white noise: the power mean of its dog
    # steps' own SNR is the band, since the bed's power is the same at every step.
    rng = np.random.default_rng(3)
    bark = np.zeros(2 * RATE)
    bark[RATE // 2 : RATE + RATE // 2] = np.sin(2 * np.pi * 1000 * np.arange(RATE) / RATE)
    bed = np.random.default_rng(4).normal(size=20 * RATE)
    _, labels, own = soundscape(rng, [bark], [bed], (1.0, 1.0), (5.0, 5.0), is_dog=True)
    (event,) = reference_spans(labels, 0.5, 0.1)
    assert abs(event_own_snr(labels, own, event) - 5.0) < 0.5
    assert np.all(np.isnan(own[labels == 0]))  # the bed alone has no own SNR


def test_own_snr_bands_are_closed_below_and_open_above() -> None:
    assert own_snr_band(-5.0) == "-5..+0 dB"
    assert own_snr_band(4.99) == "+0..+5 dB"
    assert own_snr_band(15.0) == ">=+15 dB"
    assert own_snr_band(-7.0) == own_snr_band(float("nan")) == "<-5 dB"


def test_the_tracker_turns_a_score_bump_into_one_event() -> None:
    scores = np.zeros(500)
    scores[100:150] = 0.97  # 2.0-3.0 s
    assert spans_of(scores, 0.95, 0.75) == [(2.0, 3.0)]


def test_thresholds_are_chosen_for_f1_within_the_false_alarm_goal() -> None:
    rows = [
        {"on": 0.5, "off": 0.3, "f1_+0dB": 0.9, "false_alarms_per_hour": 3.0},
        {"on": 0.9, "off": 0.7, "f1_+0dB": 0.8, "false_alarms_per_hour": 0.5},
        {"on": 0.99, "off": 0.9, "f1_+0dB": 0.6, "false_alarms_per_hour": 0.0},
    ]
    assert choose_thresholds(rows, budget=1.0)["on"] == 0.9


def test_a_yamnet_veto_gives_the_head_another_version() -> None:
    data = _separable_set()
    head = fit_head(data, np.arange(400), HeadRecipe(epochs=1), "t")
    with_veto = dataclasses.replace(head, yamnet_veto=4.5)
    assert head_version(head) != head_version(with_veto)
    assert head_version(with_veto) == head_version(dataclasses.replace(head, yamnet_veto=4.5))
