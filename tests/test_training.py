"""The training package's network and its numpy export compute the same thing, and it learns."""

from __future__ import annotations

import collections
import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from analyzer.acoustics.audibility import energy_mean_db
from analyzer.config import DetectorSettings
from analyzer.detect.classifier import N_BANDS, N_CHANNELS, N_MELS, DogModel, logits_of_stream
from tests.conftest import ROOT
from training import augment, cli, corpus, fit, network, trainset, validate


@pytest.mark.parametrize("band_channels, time_channels", [((8, 16, 16), 32), ((16, 32, 24), 48)])
def test_the_exported_numpy_network_equals_the_torch_network(
    band_channels: tuple[int, ...], time_channels: int
) -> None:
    architecture = network.widened(band_channels, time_channels)
    net = network.build_network(architecture)
    generator = torch.Generator().manual_seed(3)
    for module in net.modules():  # batch norms with statistics, so that folding them matters
        if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            size = module.num_features
            module.running_mean.copy_(torch.rand(size, generator=generator) - 0.5)
            module.running_var.copy_(torch.rand(size, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(size, generator=generator) + 0.5)
            module.bias.data.copy_(torch.rand(size, generator=generator) - 0.5)
    net.eval()
    model = network.export_network(net, {})
    c = model.context_steps
    inputs = np.random.default_rng(4).random((140, N_BANDS, N_CHANNELS)).astype(np.float32)
    padded = np.concatenate([np.repeat(inputs[:1], c, 0), inputs, np.repeat(inputs[-1:], c, 0)])
    with torch.no_grad():
        expected = net(torch.from_numpy(padded.transpose(2, 1, 0)[None].copy()))[0, 0].numpy()
    assert expected.shape == (140,)
    assert np.allclose(logits_of_stream(model, inputs), expected, atol=1e-4)
    assert model.version.startswith("dog-cnn-")
    assert [layer.weight.shape[0] for layer in model.layers] == [out for _, out, *_ in architecture]
    assert c == network.context_steps()  # width never changes the context


def test_the_default_widths_are_the_bundled_architecture() -> None:
    assert network.widened((8, 16, 16), 32) == network.ARCHITECTURE
    assert network.for_input_bands(N_BANDS) == network.ARCHITECTURE


def test_a_network_over_all_64_mel_bands_exports_what_torch_computes() -> None:
    # The first band convolution sees every mel band and pools by 4; the rest is unchanged.
    architecture = network.for_input_bands(N_MELS)
    assert architecture[0][4] == 4 and architecture[1:] == network.ARCHITECTURE[1:]
    net = network.build_network(architecture, input_bands=N_MELS)
    net.eval()
    model = network.export_network(net, {}, input_pool=1)
    c = model.context_steps
    inputs = np.random.default_rng(6).random((90, N_MELS, N_CHANNELS)).astype(np.float32)
    padded = np.concatenate([np.repeat(inputs[:1], c, 0), inputs, np.repeat(inputs[-1:], c, 0)])
    with torch.no_grad():
        expected = net(torch.from_numpy(padded.transpose(2, 1, 0)[None].copy()))[0, 0].numpy()
    assert model.input_bands == N_MELS
    assert np.allclose(logits_of_stream(model, inputs), expected, atol=1e-4)
    # Later layers have the bundled shapes: the cost per step grows only in the first layer.
    bundled = network.export_network(network.build_network(), {})
    assert [la.weight.shape for la in model.layers] == [la.weight.shape for la in bundled.layers]
    with pytest.raises(ValueError, match="input bands must be 32 or 64, not 16"):
        network.for_input_bands(16)


def test_band_augmentation_over_64_bands_shifts_and_masks_band_pairs() -> None:
    # The same random draws shift and mask twice as many bands as over 32 band pairs.
    coarse = np.tile(np.arange(N_BANDS, dtype=np.float32)[None, :, None], (20, 1, N_CHANNELS))
    fine = np.repeat(coarse, 2, axis=1)
    for seed in range(40):
        a = fit._augment(np.random.default_rng(seed), coarse)
        b = fit._augment(np.random.default_rng(seed), fine)
        assert np.array_equal(b, np.repeat(a, 2, axis=1)), seed


def test_dropout_follows_every_hidden_time_convolution() -> None:
    net = network.build_network(dropout=0.3)
    hidden = sum(kind == "conv1d" for kind, *_ in network.ARCHITECTURE) - 1
    rates = [m.p for m in net.modules() if isinstance(m, torch.nn.Dropout)]
    assert rates == [0.3] * hidden


@pytest.mark.parametrize("option, value, message", [
    ("--band-channels", "16,32", "3 band-convolution channel counts are needed, not 2"),
    ("--band-channels", "16,x,32", "expected comma-separated channel counts such as 8,16,16"),
    ("--time-channels", "0", "channel counts must be at least 1"),
    ("--dropout", "1", "--dropout must be at least 0 and under 1, not 1.0"),
    ("--ema", "1", "--ema must be at least 0 and under 1, not 1.0"),
    ("--ema", "-0.5", "--ema must be at least 0 and under 1, not -0.5"),
    ("--train-fraction", "0", "--train-fraction must be over 0 and at most 1, not 0.0"),
    ("--train-fraction", "1.5", "--train-fraction must be over 0 and at most 1, not 1.5"),
    ("--input-bands", "16", "argument --input-bands: invalid choice: 16 (choose from 32, 64)"),
])  # fmt: skip
def test_a_wrong_network_option_is_refused_by_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, value: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--corpus", str(tmp_path), "--out", str(tmp_path / "m.npz"), option,
                  value])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_teacher_over_other_input_bands_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--corpus", str(tmp_path), "--out", str(tmp_path / "m.npz"),
                  "--input-bands", "64",
                               "--teacher", str(ROOT / "models" / "dog_classifier.npz")])
    assert exit_info.value.code == 2
    assert "reads 32 input bands, not the 64 asked for (--input-bands)" in capsys.readouterr().err


def _toy_problem() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """160 padded input streams: "dog" steps are bursts in bands 8-11; the other streams carry
    bursts in bands 24-27."""
    rng = np.random.default_rng(5)
    context = network.context_steps()
    inputs, labels = [], []
    for k in range(160):
        x = rng.random((300, N_BANDS, N_CHANNELS)).astype(np.float32) * 0.2
        lab = np.zeros(300, np.int8)
        start = int(rng.integers(50, 200))
        bands = slice(8, 12) if k % 2 else slice(24, 28)
        x[start : start + 40, bands, 0] += 1.5
        if k % 2:
            lab[start : start + 40] = 1
        padded = np.concatenate([np.repeat(x[:1], context, 0), x, np.repeat(x[-1:], context, 0)])
        inputs.append(padded.astype(np.float16))
        labels.append(lab)
    return inputs, labels


def _separates_the_held_out_toy_streams(net: object, inputs: list[np.ndarray],
                                        labels: list[np.ndarray]) -> bool:
    context = network.context_steps()
    model = network.export_network(net, {})
    dog, other = [], []
    for x, lab in zip(inputs, labels, strict=True):
        logits = logits_of_stream(model, x[context:-context].astype(np.float32))
        (dog if lab.any() else other).append(float(logits.max()))
    return min(dog) > max(other)


def test_training_learns_a_separable_toy_problem() -> None:
    inputs, labels = _toy_problem()
    net = fit.fit_network(inputs[:120], labels[:120], seed=1, epochs=8)
    assert _separates_the_held_out_toy_streams(net, inputs[120:], labels[120:])


def test_the_weight_average_learns_the_toy_problem_and_differs_from_the_last_weights() -> None:
    import torch

    inputs, labels = _toy_problem()
    last = fit.fit_network(inputs[:120], labels[:120], seed=1, epochs=8)
    averaged = fit.fit_network(inputs[:120], labels[:120], seed=1, epochs=8,
                                            ema_decay=0.5)  # fmt: skip
    assert _separates_the_held_out_toy_streams(averaged, inputs[120:], labels[120:])
    last_state, averaged_state = last.state_dict(), averaged.state_dict()
    assert last_state.keys() == averaged_state.keys()
    weights = [k for k in last_state if k.endswith("weight")]
    statistics = [k for k in last_state if k.endswith("running_mean")]
    assert weights and statistics  # batch-norm statistics are averaged with the weights
    for key in weights + statistics:
        assert not torch.equal(last_state[key], averaged_state[key]), key


def test_a_distilled_network_learns_the_teachers_scores_where_labels_are_unknown() -> None:
    # Dog bursts (bands 8-11) are labelled; a second burst (bands 24-27) in every stream is
    # labelled unknown, so only the teacher's targets (1 there, 0 elsewhere) say what it is.
    rng = np.random.default_rng(6)
    context = network.context_steps()
    inputs, labels, soft = [], [], []
    for k in range(120):
        x = rng.random((300, N_BANDS, N_CHANNELS)).astype(np.float32) * 0.2
        lab = np.zeros(300, np.int8)
        teacher = np.zeros(300, np.float32)
        if k % 2:
            x[20:60, 8:12, 0] += 1.5
            lab[20:60] = teacher[20:60] = 1
        start = int(rng.integers(100, 240))
        x[start : start + 40, 24:28, 0] += 1.5
        lab[start : start + 40] = -1
        teacher[start : start + 40] = 1.0
        padded = np.concatenate([np.repeat(x[:1], context, 0), x, np.repeat(x[-1:], context, 0)])
        inputs.append(padded.astype(np.float16))
        labels.append(lab)
        soft.append(teacher)
    net = fit.fit_network(inputs, labels, seed=1, epochs=60, soft=soft,
                                       distil_weight=1.0)  # fmt: skip
    model = network.export_network(net, {})
    probe = rng.random((300, N_BANDS, N_CHANNELS)).astype(np.float32) * 0.2
    probe[130:170, 24:28, 0] += 1.5
    scores = 1 / (1 + np.exp(-logits_of_stream(model, probe)))
    assert scores[135:165].mean() > 0.5 > scores[220:280].mean()


def _random_model(seed: int) -> DogModel:
    generator = torch.Generator().manual_seed(seed)
    net = network.build_network()
    for parameter in net.parameters():
        parameter.data.normal_(0.0, 0.3, generator=generator)
    return network.export_network(net.eval(), {})


def test_teacher_targets_are_the_teachers_mean_probability_at_every_step() -> None:
    context = network.context_steps()
    teachers = [_random_model(1), _random_model(2)]
    x = np.random.default_rng(7).random((200, N_BANDS, N_CHANNELS)).astype(np.float32)
    padded = np.concatenate([np.repeat(x[:1], context, 0), x, np.repeat(x[-1:], context, 0)])
    probabilities = [1 / (1 + np.exp(-logits_of_stream(t, x))) for t in teachers]
    (targets,) = fit.teacher_targets(teachers, [padded.astype(np.float16)], context)
    assert targets.shape == (200,)
    assert not np.allclose(probabilities[0], probabilities[1], atol=1e-2)
    assert np.allclose(targets, (probabilities[0] + probabilities[1]) / 2, atol=1e-3)


def test_several_models_validate_as_an_ensemble_of_their_mean_scores() -> None:
    first, second = _random_model(3), _random_model(4)
    mel = np.random.default_rng(8).uniform(20.0, 80.0, (400, N_MELS)).astype(np.float32)
    settings = DetectorSettings()
    one = validate.stream_scores(first, mel, settings)
    other = validate.stream_scores(second, mel, settings)
    both = validate.stream_scores((first, second), mel, settings)
    assert one.shape == other.shape == both.shape == (400,)
    assert not np.allclose(one, other, atol=1e-2)
    assert np.allclose(both, (one + other) / 2)


def test_a_training_subset_keeps_whole_recordings_and_about_its_fraction_of_them() -> None:
    meta = [{"group": f"recording {k % 400}", "kind": "clip"} for k in range(2400)]
    for kind in ("background", "synthetic"):
        meta += [{"group": kind, "kind": kind} for _ in range(400)]
    half = fit.training_subset(meta, 0.5, seed=1)
    assert half == fit.training_subset(meta, 0.5, seed=1)  # the same every run
    assert half != fit.training_subset(meta, 0.5, seed=2)
    kept = {meta[i]["group"] for i in half if meta[i]["kind"] == "clip"}
    for i, m in enumerate(meta[:2400]):  # a recording's streams all stay or all go
        assert (i in half) == (m["group"] in kept)
    assert 0.43 < len(kept) / 400 < 0.57  # binomial(400, 0.5): 0.5 +- 3.5 standard deviations
    for kind in ("background", "synthetic"):  # one by one, not as one "group"
        assert 0.4 < sum(meta[i]["kind"] == kind for i in half) / 400 < 0.6
    quarter = set(fit.training_subset(meta, 0.25, seed=1))
    assert quarter <= set(half)  # a smaller fraction of the same seed is nested in a larger
    assert len(fit.training_subset(meta, 1.0, seed=1)) == len(meta)


@pytest.mark.parametrize("power", [0.0, 0.5, 1.0])
def test_balance_weights_give_each_label_a_share_in_proportion_to_its_count_to_1_minus_power(
    power: float,
) -> None:
    names = ["bark"] * 90 + ["growl"] * 9 + ["whine"] * 1
    weights = fit.balance_weights(names, power)
    share = {n: sum(w for m, w in zip(names, weights, strict=True) if m == n) for n in set(names)}
    total = sum(share.values())
    expected = {n: names.count(n) ** (1 - power) for n in share}
    for name in share:
        assert share[name] / total == pytest.approx(expected[name] / sum(expected.values()))
    within = [w for m, w in zip(names, weights, strict=True) if m == "bark"]
    assert max(within) == min(within)


def test_batches_draw_streams_in_proportion_to_their_weights() -> None:
    rng = np.random.default_rng(9)
    dog, other = list(range(100)), list(range(100, 140))
    names = ["bark"] * 90 + ["growl"] * 10
    weights = fit.balance_weights(names, 1.0)
    draws = np.concatenate([
        fit.batch_streams(rng, (dog, weights / weights.sum()), (other, None))
        for _ in range(400)
    ])  # fmt: skip
    assert draws.size == 400 * fit.BATCH
    dog_draws = draws[draws < 100]
    assert dog_draws.size == draws.size // 2
    # Every label alike: growl streams (10 of 100) take half the dog draws, not a tenth.
    assert np.mean(dog_draws >= 90) == pytest.approx(0.5, abs=0.03)
    # Uniform draws among the others: each of the 40 about 1/40 of them.
    counts = np.bincount(draws[draws >= 100] - 100, minlength=40)
    assert counts.min() > 0.5 * counts.mean() and counts.max() < 1.5 * counts.mean()


def test_rare_labels_get_more_copies_within_the_limit() -> None:
    clips = [corpus.Clip(f"bark{i}", "", True, "dog_bark", f"g{i}", 1.0) for i in range(200)]
    clips += [corpus.Clip(f"car{i}", "", False, "car_horn", f"c{i}", 1.0) for i in range(70)]
    clips += [corpus.Clip("howl", "", True, "dog_howl", "h", 1.0)]
    clips += [corpus.Clip(f"bird{i}", "", False, "bird", f"b{i}", 1.0) for i in range(12)]
    tasks = trainset.plan_tasks(clips, seed=1, fraction=0.0, dog_copies=8, other_copies=5,
                           extra_negatives=0, val_copies=2, rare_copy_factor=3)  # fmt: skip
    copies: dict[str, int] = {}
    for task in tasks:
        label = clips[task.clip_index].label
        copies[label] = copies.get(label, 0) + 1
    assert copies["dog_bark"] == 200 * 8  # common labels: the base number
    assert copies["car_horn"] == 70 * 5
    assert copies["dog_howl"] == 8 * 3  # one clip: capped at 3x
    assert copies["bird"] == 12 * round(5 * 35 / 12)  # 15 each


def test_extra_corpus_clips_get_their_own_number_of_copies() -> None:
    clips = [corpus.Clip(f"bark{i}", "", True, "dog_bark", f"g{i}", 1.0) for i in range(3)]
    clips += [corpus.Clip(f"car{i}", "", False, "car_horn", f"c{i}", 1.0) for i in range(4)]
    clips += [corpus.Clip(f"owl{i}", "", False, "other_animal", f"o{i}", 1.0, extra=True)
              for i in range(2)]  # fmt: skip
    tasks = trainset.plan_tasks(clips, seed=1, fraction=0.0, dog_copies=8, other_copies=5,
                           extra_negatives=0, val_copies=2, extra_copies=15)  # fmt: skip
    per_clip = collections.Counter(clips[task.clip_index].clip_id for task in tasks)
    assert per_clip == {**{f"bark{i}": 8 for i in range(3)}, **{f"car{i}": 5 for i in range(4)},
                        "owl0": 15, "owl1": 15}  # fmt: skip
    unset = trainset.plan_tasks(clips, seed=1, fraction=0.0, dog_copies=8, other_copies=5,
                           extra_negatives=0, val_copies=2)  # fmt: skip
    assert collections.Counter(clips[t.clip_index].clip_id for t in unset)["owl0"] == 5


def _write_manifest(folder: Path, rows: list[tuple[str, str]]) -> None:
    folder.mkdir()
    with open(folder / "manifest.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["clip_id", "binary", "group", "file", "label"])
        writer.writerows([clip_id, binary, clip_id, f"{clip_id}.flac", "x"]
                         for clip_id, binary in rows)  # fmt: skip


def test_extra_corpora_join_the_main_one_and_a_clip_id_may_not_repeat(tmp_path: Path) -> None:
    _write_manifest(tmp_path / "main", [("a", "dog"), ("b", "not_dog")])
    _write_manifest(tmp_path / "extra", [("c", "not_dog")])
    clips = corpus.read_manifests(tmp_path / "main", [tmp_path / "extra"])
    assert [(c.clip_id, c.is_dog, c.extra) for c in clips] == [
        ("a", True, False), ("b", False, False), ("c", False, True)]  # fmt: skip
    assert clips[2].path == str(tmp_path / "extra" / "c.flac")
    _write_manifest(tmp_path / "again", [("b", "not_dog")])
    with pytest.raises(ValueError, match="'b' appears twice"):
        corpus.read_manifests(tmp_path / "main", [tmp_path / "again"])


def test_a_balance_power_outside_0_to_1_is_refused_by_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--corpus", str(tmp_path), "--out", str(tmp_path / "m.npz"),
                  "--balance", "1.5"])
    assert exit_info.value.code == 2
    assert "--balance must be between 0 and 1, not 1.5" in capsys.readouterr().err


def test_tonal_negatives_come_last_in_the_plan_and_only_in_training() -> None:
    clips = [corpus.Clip(f"bark{i}", "", True, "dog_bark", f"g{i}", 1.0) for i in range(20)]
    clips += [corpus.Clip(f"car{i}", "", False, "car_horn", f"c{i}", 1.0) for i in range(20)]
    without = trainset.plan_tasks(clips, seed=1, fraction=0.2, dog_copies=2, other_copies=2,
                             extra_negatives=8, val_copies=1)  # fmt: skip
    with_tonal = trainset.plan_tasks(clips, seed=1, fraction=0.2, dog_copies=2, other_copies=2,
                                extra_negatives=8, val_copies=1, tonal_negatives=5)  # fmt: skip
    assert with_tonal[: len(without)] == without  # every other stream unchanged, bit for bit
    assert [(t.kind, t.split, t.clip_index) for t in with_tonal[len(without) :]] == [
        ("tonal", "train", -1)] * 5  # fmt: skip
    assert len({t.seed for t in with_tonal[len(without) :]}) == 5


def _spectrum(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from scipy import signal

    return signal.welch(x, 16000, nperseg=1024)


def test_chirp_trains_and_beeps_are_narrow_band_sounds_where_a_bird_or_an_alarm_sings() -> None:
    for seed in range(20):
        freq, power = _spectrum(augment.chirp_train(np.random.default_rng(seed), 3 * 16000))
        assert power[freq >= 1400].sum() > 0.99 * power.sum()
        t = np.arange(2 * 16000) / 16000
        freq, power = _spectrum(augment.harmonic_beeps(np.random.default_rng(seed), t))
        assert 650 <= freq[power.argmax()] <= 3050  # the fundamental is the strongest
        assert power[freq >= 7900].sum() < 1e-3 * power.sum()  # no harmonic above 7.8 kHz
    flatness = []
    for seed in range(40):
        x = augment.tonal_negative(np.random.default_rng(seed))
        freq, power = _spectrum(x)
        flatness.append(np.exp(np.mean(np.log(power + 1e-20))) / np.mean(power))
        assert 16000 <= x.size <= 6 * 16000
    freq, noise = _spectrum(np.random.default_rng(0).standard_normal(3 * 16000))
    assert max(flatness) < 0.05 < np.exp(np.mean(np.log(noise))) / np.mean(noise)


def test_a_tonal_stream_is_mixed_like_a_synthetic_one_and_labelled_not_dog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    background = np.random.default_rng(3).standard_normal(5 * 16000) * 0.01
    monkeypatch.setitem(trainset._STATE, "clips", [])
    monkeypatch.setitem(trainset._STATE, "backgrounds",
                        {"train": [background], "val": [background]})  # fmt: skip
    mel, labels, meta = trainset.make_stream(trainset.Task(7, "tonal", -1, "train"))
    assert meta == {"clip_id": "tonal", "group": "tonal", "label": "tonal", "is_dog": False,
                    "snr_db": meta["snr_db"], "split": "train", "kind": "tonal"}  # fmt: skip
    assert mel.shape == (labels.size, N_MELS) and mel.dtype == np.float16
    assert labels.size > 50 and not labels.any()
    # At -3.5 dB broadband SNR the narrow-band sound still stands out in its own bands: the
    # stream's mean spectrum rises over the background's (each at its own random level) there.
    snr_db = meta["snr_db"]
    assert isinstance(snr_db, float) and -5.0 <= snr_db <= 20.0
    rise = energy_mean_db(mel.astype(float)) - energy_mean_db(
        trainset.mel_of_audio(background).astype(float))  # fmt: skip
    assert rise.max() - np.median(rise) > 6.0


def test_a_negative_number_of_tonal_negatives_is_refused_by_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _write_manifest(tmp_path / "corpus", [("a", "dog")])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["trainset", str(tmp_path / "corpus"), str(tmp_path / "out.npz"),
                  "--tonal-negatives", "-3"])  # fmt: skip
    assert exit_info.value.code == 2
    assert "--tonal-negatives must be 0 or more, not -3" in capsys.readouterr().err
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("command, options", [
    ([], ["trainset", "fit"]),
    (["trainset"], ["--seed", "--jobs", "--val-fraction", "--dog-copies", "--other-copies",
                    "--rare-copy-factor", "--no-lead-in-fraction", "--extra-negatives",
                    "--tonal-negatives", "--extra-corpus", "--extra-copies"]),
    (["fit"], ["--corpus", "--trainset", "--out", "--seed", "--epochs", "--mil-weight", "--jobs",
               "--threads", "--validate", "--extra-corpus", "--extra-copies", "--teacher",
               "--distil-weight", "--band-channels", "--time-channels", "--input-bands",
               "--dropout", "--train-fraction", "--ema", "--balance"]),
    (["finetune"], ["--corpus", "--out", "--every", "--copies", "--train-from", "--epochs",
                    "--batch-examples", "--learning-rate", "--head-learning-rate", "--folds",
                    "--seed", "--threads"]),
])  # fmt: skip
def test_barkwatch_train_and_each_command_explain_their_options(
    command: list[str], options: list[str]
) -> None:
    done = subprocess.run([sys.executable, "-m", "training", *command, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: barkwatch-train {' '.join(command)}".rstrip())
    for option in options:
        assert option in done.stdout, option


def test_the_trainset_command_refuses_a_corpus_without_a_manifest(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "training", "trainset", str(tmp_path / "nowhere"),
         str(tmp_path / "out.npz")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"error: {tmp_path / 'nowhere'}/manifest.csv not found" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("command", ["fit", "head"])
def test_training_never_overwrites_a_bundled_model_unless_told_where(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--corpus", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "the following arguments are required: --out" in capsys.readouterr().err


def test_the_fit_command_refuses_a_corpus_without_a_manifest_before_training(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Validation reads the corpus after training; without this check a run failed at its end.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--corpus", str(tmp_path / "nowhere"),
                  "--trainset", str(tmp_path / "set.npz"), "--out", str(tmp_path / "m.npz")])
    assert exit_info.value.code == 2
    assert f"{tmp_path / 'nowhere'}/manifest.csv not found" in capsys.readouterr().err
    assert not (tmp_path / "m.npz").exists()


def test_the_command_line_and_the_training_set_need_no_torch() -> None:
    # torch is the [train] extra: a machine without it still builds training sets.
    code = ("import sys\n"
            "class NoTorch:  # as if torch were not installed\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch':\n"
            "            raise ImportError(name)\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from training import cli\n"
            "try:\n"
            "    cli.main(['trainset', '--help'])\n"
            "finally:\n"
            "    assert 'torch' not in sys.modules\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "usage: barkwatch-train trainset" in done.stdout


@pytest.mark.parametrize(("options", "message"), [
    (["--exclude-fold", "1"], "--exclude-fold needs --export"),
    (["--export", "OUT", "--held-out-fold", "3", "--exclude-fold", "3"],
     "--exclude-fold 3: a fold from 0 to --folds - 1, not the held-out one"),
    (["--export", "OUT", "--held-out-fold", "3", "--exclude-fold", "5"],
     "--exclude-fold 5: a fold from 0 to --folds - 1, not the held-out one"),
    (["--exclude-source", "train/us8k"], "--exclude-source needs --export"),
    (["--export", "OUT", "--exclude-source", "train/us8k"],
     "--exclude-source train/us8k: no clip of the corpora has that source"),
    (["--voiced-copies", "2"], "--voiced-copies and --voiced-other-copies need --export"),
    (["--voiced-other-copies", "1"], "--voiced-copies and --voiced-other-copies need --export"),
    (["--voiced-other-copies", "-1"], "--voiced[-other]-copies must be 0 or more"),
])
def test_finetune_refuses_an_exclusion_it_cannot_use_before_training(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, options: list[str], message: str
) -> None:
    # A learning-curve control drops a fold or a source from training; dropping the judged
    # fold, or one that does not exist, or a misspelt source, would judge nothing or train on
    # everything without saying so.
    (tmp_path / "manifest.csv").write_text("clip_id,label\n")
    options = [str(tmp_path / "net.onnx") if o == "OUT" else o for o in options]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["finetune", "--corpus", str(tmp_path), *options])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "net.onnx").exists()


def test_a_training_set_held_out_by_a_report_leaves_out_its_sources_and_the_judges_beds(
    tmp_path: Path,
) -> None:
    """``trainset --held-out``: a CNN judged on a fold's soundscapes never hears that fold's
    sources, nor the held-out beds the judge lays under them (from any source)."""
    from training.head_data import is_held_out_background, read_corpora

    folder = tmp_path / "dogs"
    folder.mkdir()
    beds = [f"bed{k}" for k in range(12)]
    rows = [("a1", "dog", "alpha", "bark"), ("a2", "not_dog", "alpha", "cat"),
            ("b1", "dog", "beta", "bark")] + [(bed, "not_dog", "beta", "traffic")
                                              for bed in beds]  # fmt: skip
    with open(folder / "manifest.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["clip_id", "binary", "group", "file", "label", "source", "duration_s"])
        writer.writerows([c, b, c, f"{c}.flac", label, source, "10"]
                         for c, b, source, label in rows)  # fmt: skip
    report = tmp_path / "report.json"
    report.write_text('{"held_out_sources": ["dogs/alpha"]}')
    held_beds = {c.clip.clip_id for c in read_corpora([folder]) if is_held_out_background(c)}
    assert 0 < len(held_beds) < len(beds)  # both kinds of bed are present
    left_out = cli.held_out_clip_ids(report, [folder])
    assert left_out == {"a1", "a2"} | held_beds
    report.write_text('{"held_out": []}')
    with pytest.raises(ValueError, match="report.json: no held_out_sources"):
        cli.held_out_clip_ids(report, [folder])
