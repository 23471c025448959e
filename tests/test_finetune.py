"""Fine-tuning YAMNet (training/yamnet_torch.py, training/finetune.py): the PyTorch network
computes what the bundled ONNX graph computes, the cached-activation path trains exactly as
the whole network would, and the placement of a sound at a distance is what its recipe says."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from analyzer.acoustics.propagation import absorption_db_per_m
from sensor.yamnet_features import clip_patches
from sensor.yamnet_network import DEFAULT_SENSOR_NETWORK_PATH, DEFAULT_YAMNET_PATH, YamnetNetwork
from training.corpus import RATE, Clip
from training.finetune import (
    DogTop,
    Examples,
    SensorNetwork,
    at_distance,
    build_examples,
    example_logits,
    export_sensor_network,
    placed,
)
from training.finetune_recipe import Recipe
from training.head_data import CorpusClip, is_background, is_held_out_background
from training.yamnet_torch import YamnetTorch, block_start

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def base() -> YamnetTorch:
    torch.set_num_threads(1)
    return YamnetTorch().eval()


@pytest.fixture(scope="module")
def demo_patches() -> np.ndarray:
    """Patches of the demo recording's 60-80 s: barks, a yelp and its background."""
    audio, rate = soundfile.read(ROOT / "demo" / "example.flac", dtype="float32")
    assert rate == RATE
    return clip_patches(audio[60 * RATE:80 * RATE]).astype(np.float32)


def test_the_pytorch_network_reproduces_the_onnx_graph(
    base: YamnetTorch, demo_patches: np.ndarray
) -> None:
    reference = YamnetNetwork().run(demo_patches)
    with torch.no_grad():
        logits, embedding = base(torch.from_numpy(demo_patches)[:, None])
    np.testing.assert_allclose(embedding.numpy(), reference.embeddings, atol=1e-4, rtol=0)
    np.testing.assert_allclose(logits.numpy(), reference.logits, atol=1e-4, rtol=1e-5)


def test_the_cached_bottom_then_the_top_equals_the_whole_network(
    base: YamnetTorch, demo_patches: np.ndarray
) -> None:
    x = torch.from_numpy(demo_patches[:8])[:, None]
    with torch.no_grad():
        whole, _ = base(x)
        start = block_start(12)
        parts, _ = base.top(base.features(x, start), start)
    torch.testing.assert_close(parts, whole, atol=1e-5, rtol=0)


def test_training_on_cached_activations_gives_the_gradients_of_the_whole_network(
    base: YamnetTorch, demo_patches: np.ndarray
) -> None:
    # The loss through the whole network with the bottom frozen, and through the cache (kept
    # as float32 here: the cache's float16 rounding is a choice of storage, not of maths).
    x = torch.from_numpy(demo_patches[:6])[:, None]
    start = block_start(12)
    target = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    whole, cached = DogTop(base, start, 69), DogTop(base, start, 69)

    def full_loss() -> torch.Tensor:
        with torch.no_grad():
            bottom = base.features(x, start)  # frozen: no gradient reaches it
        return torch.nn.functional.binary_cross_entropy_with_logits(whole(bottom), target)

    cache = base.features(x, start).detach().clone()
    full_loss().backward()
    torch.nn.functional.binary_cross_entropy_with_logits(cached(cache), target).backward()
    for a, b in zip(whole.parameters(), cached.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5)
    assert any(float(p.grad.abs().max()) > 0 for p in whole.convs.parameters()
               if p.grad is not None)  # the top blocks do learn


def test_the_dog_output_starts_as_yamnets_dog_class(
    base: YamnetTorch, demo_patches: np.ndarray
) -> None:
    x = torch.from_numpy(demo_patches[:4])[:, None]
    start = block_start(12)
    with torch.no_grad():
        logits, _ = base(x)
        dog = DogTop(base, start, 69)(base.features(x, start))
    torch.testing.assert_close(dog, logits[:, 69], atol=1e-5, rtol=0)


def test_the_exported_sensor_network_reproduces_pytorch_to_1e_4(
    base: YamnetTorch, demo_patches: np.ndarray, tmp_path: Path
) -> None:
    start = block_start(12)
    torch.manual_seed(3)
    top = DogTop(base, start, 69)
    with torch.no_grad():  # a top that differs from YAMNet's, as a trained one does
        for parameter in top.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    export_sensor_network(base, top, start, tmp_path / "sensor.onnx")
    network = YamnetNetwork(tmp_path / "sensor.onnx")
    assert network.fine_tuned
    got = network.run(demo_patches)
    with torch.no_grad():
        logits, embedding, dog = SensorNetwork(base, top, start)(
            torch.from_numpy(demo_patches)[:, None])
    assert got.dog_logits is not None
    np.testing.assert_allclose(got.dog_logits, dog.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(got.embeddings, embedding.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(got.logits, logits.numpy(), atol=1e-4, rtol=1e-5)
    assert float(np.abs(dog.numpy() - logits.numpy()[:, 69]).max()) > 1e-3  # the top was moved


def test_the_shipped_sensor_network_keeps_yamnets_own_outputs(demo_patches: np.ndarray) -> None:
    shipped = YamnetNetwork(DEFAULT_SENSOR_NETWORK_PATH).run(demo_patches)
    plain = YamnetNetwork(DEFAULT_YAMNET_PATH)
    assert not plain.fine_tuned
    reference = plain.run(demo_patches)
    assert reference.dog_logits is None and shipped.dog_logits is not None
    np.testing.assert_allclose(shipped.embeddings, reference.embeddings, atol=1e-4, rtol=0)
    np.testing.assert_allclose(shipped.logits, reference.logits, atol=1e-4, rtol=1e-5)


def test_an_examples_logit_is_the_largest_of_its_patches() -> None:
    patch_logits = torch.tensor([0.1, 2.0, -1.0, -3.0, 0.5])
    owner = torch.tensor([0, 0, 1, 1, 2])
    torch.testing.assert_close(example_logits(patch_logits, owner, 3),
                               torch.tensor([2.0, -1.0, 0.5]))


@pytest.mark.parametrize("ground_factor", [0.6, 0.9])
def test_a_tone_heard_far_away_loses_what_iso_9613_1_and_the_ground_reflection_say(
    ground_factor: float,
) -> None:
    # A 6.3 kHz tone 60 m away: ISO 9613-1's absorption at 10 degC, 70 % RH over 60 m, times
    # the ground reflection's |1 + g (r1 / r2) exp(-j w (r2 - r1) / c)| at that frequency.
    frequency, distance = 6300.0, 60.0
    tone = np.sin(2 * np.pi * frequency * np.arange(RATE) / RATE)
    heard = at_distance(tone, distance, ground_factor)
    assert heard.size == tone.size
    middle = slice(RATE // 4, 3 * RATE // 4)  # away from the filter's start and end
    gain_db = 20 * math.log10(np.std(heard[middle]) / np.std(tone[middle]))
    air_db = -float(absorption_db_per_m(frequency, 10.0, 70.0)) * distance
    direct, reflected = math.hypot(distance, 1.5), math.hypot(distance, 2.5)
    comb = 1 + ground_factor * direct / reflected * np.exp(
        -2j * np.pi * frequency * (reflected - direct) / 343.0)
    assert gain_db == pytest.approx(air_db + 20 * math.log10(abs(comb)), abs=0.05)
    assert air_db < -4  # far enough for the air to matter at 6.3 kHz (4.6 dB)


@pytest.mark.parametrize("snr_db", [0.0, 10.0])
def test_a_short_bark_placed_by_its_own_snr_stands_that_far_over_the_bed(snr_db: float) -> None:
    # A 0.12 s burst in a 4 s clip over its own faint floor (an UrbanSound8K slice's shape).
    # Placed by the clip's RMS it would stand about 15 dB over the bed at a nominal 0 dB; by
    # its prominent steps ("bark", as the soundscapes measure a bark's own SNR) at the SNR.
    rng = np.random.default_rng(5)
    clip = rng.standard_normal(4 * RATE) * 1e-4
    burst = slice(RATE, RATE + int(0.12 * RATE))
    clip[burst] += 0.3 * rng.standard_normal(burst.stop - burst.start)
    bed = rng.standard_normal(4 * RATE)
    quiet = slice(2 * RATE, 4 * RATE)

    def burst_over_bed_db(snr_of: str, seed: int) -> float:
        mix = placed(np.random.default_rng(seed), clip, bed, snr_db, 20.0, snr_of)
        bed_power = np.mean(mix[quiet] ** 2)
        return float(10 * np.log10(np.mean(mix[burst] ** 2) / bed_power - 1))

    # Seeds 1, 4 and 5 draw no reverberation: the burst stands at the SNR. With it (0, 2, 3)
    # the tail's steps count among the sound's prominent ones, as they do in the soundscapes,
    # and the burst itself stands 2-6 dB higher.
    for seed in (1, 4, 5):
        assert burst_over_bed_db("bark", seed) == pytest.approx(snr_db, abs=1.0)
    for seed in range(6):
        assert snr_db - 0.5 < burst_over_bed_db("bark", seed) < snr_db + 7
        assert burst_over_bed_db("clip", seed) > snr_db + 12
    with pytest.raises(ValueError, match="snr_of must be 'clip' or 'bark'"):
        placed(rng, clip, bed, snr_db, 20.0, "rms")


def _corpus_clip(name: str, is_dog: bool, label: str, group: str, source: str) -> CorpusClip:
    path = ROOT / "tests" / "data" / f"{name}.flac"
    info = soundfile.info(path)
    return CorpusClip(Clip(name, str(path), is_dog, label, group, info.duration), "fixtures",
                      source)


def _patches(examples: Examples, example: int) -> np.ndarray:
    """The cached activations of one example's patches."""
    return examples.activations[examples.example_of_patch == example]


def _fixture_clips(*more: CorpusClip) -> list[CorpusClip]:
    """A bark, a cat, ``more``, then the street as a training bed (itself also a clip of no
    dog) and as a held-out bed (for the evaluation copies only)."""
    street = "sonyc_street_ambience_01_027029"
    return [_corpus_clip("lugaru_bark2", True, "dog_bark", "bark", "lugaru"),
            _corpus_clip("modsounds_cat_meow", False, "cat", "cat", "modsounds"), *more,
            _corpus_clip(street, False, "traffic", "bed-a", "sonyc"),
            _corpus_clip(street, False, "traffic", "bed-c", "sonyc-held-out")]


def test_hard_negatives_and_bed_pieces_are_added_after_what_the_default_recipe_makes(
    base: YamnetTorch,
) -> None:
    clips = _fixture_clips()
    assert is_background(clips[2]) and not is_held_out_background(clips[2])
    assert is_held_out_background(clips[3])
    judged = lambda i: i < 2  # noqa: E731
    plain = build_examples(clips, Recipe(copies=1, other_copies=1, train_from=13), base,
                           judged=judged)
    more = build_examples(clips, Recipe(copies=1, other_copies=3, bed_pieces=2, train_from=13),
                          base, judged=judged)
    evals = ["eval-+0dB", "eval-+10dB"]
    assert plain.kind == ["clean", "train-copy", *evals] * 2 + ["clean", "train-copy"] * 2
    copies = ["clean", "train-copy", "train-copy", "train-copy"]
    assert more.kind == (["clean", "train-copy", *evals] + [*copies, *evals] + copies * 2
                         + ["train-bed"] * 2)
    assert more.labels.tolist() == [True] * 4 + [False] * 16
    assert more.clip_of[-2:].tolist() == [2, 2]  # a bed piece is its bed's (its source's fold)
    # the dog clip's examples, the first draws, are those of the default recipe
    first = int(np.sum(plain.example_of_patch < 4))
    np.testing.assert_array_equal(more.activations[:first], plain.activations[:first])
    # a bed piece is 10 s of the bed alone: YAMNet's 0.96 s patches every 0.48 s
    assert int(np.sum(more.example_of_patch == len(more.kind) - 1)) == 20


def test_a_training_seed_redraws_the_training_copies_but_not_the_judged_ones(
    base: YamnetTorch,
) -> None:
    street = "sonyc_street_ambience_01_027029"
    clips = [
        _corpus_clip("lugaru_bark2", True, "dog_bark", "bark", "lugaru"),
        _corpus_clip(street, False, "traffic", "bed-a", "sonyc"),
        _corpus_clip(street, False, "traffic", "bed-c", "sonyc-held-out"),
    ]
    recipe = Recipe(copies=1, other_copies=1, train_from=13)
    assert recipe.draw_seed == recipe.seed == Recipe(training_seed=recipe.seed).draw_seed
    first = build_examples(clips, recipe, base, judged=lambda i: i == 0)
    again = build_examples(clips, Recipe(copies=1, other_copies=1, train_from=13,
                                         training_seed=7), base, judged=lambda i: i == 0)
    assert first.kind == again.kind == ["clean", "train-copy", "eval-+0dB", "eval-+10dB",
                                        "clean", "train-copy", "clean", "train-copy"]

    for example in (0, 2, 3, 4, 6):  # as recorded, and the judged copies
        np.testing.assert_array_equal(_patches(again, example), _patches(first, example))
    for example in (1, 5):  # the training copies: another distance, bed and SNR
        assert not np.array_equal(_patches(again, example), _patches(first, example))


@pytest.mark.parametrize(("snr_db", "over_db"), [(0.0, -3.0), (10.0, 6.0)])
def test_a_voice_laid_over_a_placed_clip_stands_where_its_draw_says(snr_db: float,
                                                                   over_db: float) -> None:
    rng = np.random.default_rng(3)
    clip = rng.standard_normal(3 * RATE)
    bed = rng.standard_normal(3 * RATE)
    voice = rng.standard_normal(4 * RATE)  # longer than the clip: it is cut
    short = voice[: RATE]  # shorter than the clip: silence after it
    for seed in range(4):
        plain = placed(np.random.default_rng(seed), clip, bed, snr_db, 20.0)
        said = placed(np.random.default_rng(seed), clip, bed, snr_db, 20.0, "clip", voice,
                      over_db) - plain
        # the clip stands snr_db over a -35 dBFS bed, the voice over_db under the clip
        expected = 10 ** ((-35 + snr_db - over_db) / 20)
        assert np.sqrt(np.mean(said ** 2)) == pytest.approx(expected, rel=0.05)
        lead = int(np.argmax(np.correlate(voice[:RATE + RATE // 2], said[:RATE], "valid")))
        assert 0 <= lead < 0.5 * RATE
        np.testing.assert_allclose(said, voice[lead:lead + clip.size] * expected
                                   / np.sqrt(np.mean(voice ** 2)), rtol=1e-6, atol=1e-9)
        cut = placed(np.random.default_rng(seed), clip, bed, snr_db, 20.0, "clip", short,
                     over_db) - plain
        assert np.all(cut[RATE - lead:] == 0) and np.any(cut[: RATE - lead] != 0)


def test_voiced_copies_lay_the_training_sources_voices_over_the_clips_they_are_asked_for(
    base: YamnetTorch,
) -> None:
    clips = _fixture_clips(
        _corpus_clip("allison_vm_login_speech", False, "speech", "speech", "allison"))
    judged = lambda i: i < 2  # noqa: E731  (the voice's source is out of the judged fold)
    plain = build_examples(clips, Recipe(copies=1, other_copies=1, train_from=13), base,
                           judged=judged)
    voiced = build_examples(clips, Recipe(copies=1, other_copies=1, voiced_copies=2,
                                          train_from=13), base, judged=judged)
    evals = ["eval-+0dB", "eval-+10dB"]
    assert voiced.kind == ["clean", "train-copy", "train-voiced", "train-voiced", *evals,
                           "clean", "train-copy", *evals] + ["clean", "train-copy"] * 3
    assert voiced.labels[:4].tolist() == [True] * 4 and voiced.clip_of[2:4].tolist() == [0, 0]

    # every other example is the one the recipe made without voices
    for mine, theirs in [(0, 0), (1, 1), (4, 2), (5, 3), *((k, k - 2) for k in range(6, 14))]:
        np.testing.assert_array_equal(_patches(voiced, mine), _patches(plain, theirs))
    assert not np.array_equal(_patches(voiced, 2), _patches(voiced, 1))
    # over the other clips too (a voice must say nothing about a dog); the dog's are the same
    both = build_examples(clips, Recipe(copies=1, other_copies=1, voiced_copies=2,
                                        voiced_other_copies=1, train_from=13), base,
                          judged=judged)
    assert both.kind == ["clean", "train-copy", "train-voiced", "train-voiced", *evals,
                         "clean", "train-copy", "train-voiced", *evals] + [
                             "clean", "train-copy", "train-voiced"] * 3
    assert both.labels.tolist() == [True] * 6 + [False] * 14
    for example in (2, 3):
        np.testing.assert_array_equal(_patches(both, example), _patches(voiced, example))
    with pytest.raises(ValueError, match="voiced copies need speech clips"):
        build_examples(clips, Recipe(copies=1, voiced_copies=1, train_from=13), base,
                       judged=lambda i: i < 3)  # the only voice is judged
