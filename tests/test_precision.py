"""The precision choice: the probe's decision (with an injected timer, never the wall clock), its cache, the
environment override, and the autocast that bf16 training runs under."""

from __future__ import annotations

import json

import pytest
import torch

from adapterlab import precision
from adapterlab.backbones import TINY, load_backbone
from adapterlab.placement import apply_method
from adapterlab.precision import Choice, resolve
from adapterlab.training import TrainConfig


@pytest.fixture(autouse=True)
def probe_for_real(monkeypatch):
    """The suite pins "auto" to fp32 (conftest); these tests are about what "auto" does without the pin."""
    monkeypatch.delenv(precision.PRECISION_ENV, raising=False)


@pytest.fixture(scope="module")
def model():
    return load_backbone(TINY, seed=0)[0]


class FakeTimer:
    """Seconds per training step for each precision, whatever the machine; records every call."""

    def __init__(self, fp32: float, bf16: float):
        self.seconds = {"fp32": fp32, "bf16": bf16}
        self.calls = []

    def __call__(self, model, batch, chosen, device):
        self.calls.append(chosen)
        return self.seconds[chosen]


@pytest.mark.parametrize("fp32, bf16, expected", [
    (1.0, 0.5, "bf16"),    # twice as fast
    (1.2, 1.0, "bf16"),    # exactly the threshold
    (1.19, 1.0, "fp32"),   # faster, but not by enough
    (1.0, 1.6, "fp32"),    # a CPU without native bf16: slower
])
def test_auto_picks_bf16_only_where_it_is_at_least_the_threshold_faster(model, fp32, bf16, expected):
    timer = FakeTimer(fp32, bf16)
    choice = resolve("auto", "some backbone", model=model, timer=timer)
    assert choice == Choice(expected, "auto", pytest.approx(fp32 / bf16))
    steps = precision.PROBE_WARMUP + precision.PROBE_STEPS
    assert sorted(timer.calls) == ["bf16"] * steps + ["fp32"] * steps
    assert timer.calls[:2] in (["fp32", "bf16"], ["bf16", "fp32"])  # the two take turns


def test_the_probe_is_cached_per_backbone_and_machine(model, monkeypatch):
    fast = FakeTimer(1.0, 0.5)
    assert resolve("auto", "backbone A", model=model, timer=fast).precision == "bf16"
    probed = len(fast.calls)

    def no_loading():
        raise AssertionError("a cached probe loaded the backbone")

    again = resolve("auto", "backbone A", load=no_loading, timer=FakeTimer(1.0, 5.0))
    assert again == Choice("bf16", "auto", pytest.approx(2.0)) and len(fast.calls) == probed
    # Another backbone, or another thread count, is probed anew.
    assert resolve("auto", "backbone B", model=model, timer=FakeTimer(1.0, 5.0)).precision == "fp32"
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)
    assert resolve("auto", "backbone A", model=model, timer=FakeTimer(1.0, 5.0)).precision == "fp32"
    entries = json.loads(precision.cache_file().read_text())
    assert len(entries) == 3
    assert set(entries[0]["key"]) == {"backbone", "device", "processor", "torch", "threads"}
    assert entries[0]["key"]["torch"] == torch.__version__


def test_the_backbone_is_loaded_only_when_no_probe_is_cached(model):
    loads = []

    def load():
        loads.append(1)
        return model

    resolve("auto", "loaded once", load=load, timer=FakeTimer(1.0, 1.0))
    resolve("auto", "loaded once", load=load, timer=FakeTimer(1.0, 1.0))
    assert loads == [1]
    with pytest.raises(ValueError, match="needs the model to probe"):
        resolve("auto", "never probed")


def test_the_cache_lives_where_adapterlab_cache_says_and_a_broken_file_is_probed_again(model, tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.setenv(precision.CACHE_ENV, str(tmp_path / "cache"))
    assert precision.cache_file() == tmp_path / "cache" / precision.CACHE_NAME
    precision.cache_file().parent.mkdir()
    precision.cache_file().write_text("{not json")
    timer = FakeTimer(1.0, 0.5)
    assert resolve("auto", "x", model=model, timer=timer).precision == "bf16" and timer.calls
    # A cache that cannot be written is said once and costs only a probe next time.
    monkeypatch.setenv(precision.CACHE_ENV, str(tmp_path / "a file"))
    (tmp_path / "a file").write_text("")
    assert resolve("auto", "x", model=model, timer=FakeTimer(1.0, 0.5)).precision == "bf16"
    assert "could not cache the precision probe" in capsys.readouterr().err


def test_forced_precisions_and_the_environment_pin_never_probe(monkeypatch):
    def no_probe(*args):
        raise AssertionError("probed")

    assert resolve("fp32", "x", timer=no_probe) == Choice("fp32", "fp32")
    assert resolve("bf16", "x", timer=no_probe) == Choice("bf16", "bf16")
    monkeypatch.setenv(precision.PRECISION_ENV, "bf16")
    assert resolve("auto", "x", timer=no_probe) == Choice("bf16", "auto")
    assert "ADAPTERLAB_PRECISION" in resolve("auto", "x").describe()
    monkeypatch.setenv(precision.PRECISION_ENV, "half")
    with pytest.raises(ValueError, match="ADAPTERLAB_PRECISION must be fp32 or bf16"):
        resolve("auto", "x")


def test_bad_precisions_are_named():
    with pytest.raises(ValueError, match="precision must be 'auto', 'fp32' or 'bf16'; got 'fp16'"):
        TrainConfig(precision="fp16")
    with pytest.raises(ValueError, match="precision must be"):
        resolve("half", "x")


def test_a_device_whose_bf16_autocast_fails_trains_in_fp32(model, capsys):
    def timer(trial, batch, chosen, device):
        if chosen == "bf16":
            raise RuntimeError("unsupported autocast device_type")
        return 1.0

    assert resolve("auto", "x", model=model, timer=timer) == Choice("fp32", "auto", 0.0)
    assert "bf16 autocast failed on cpu (unsupported autocast device_type)" in capsys.readouterr().err


def test_the_probe_leaves_model_gradients_and_random_state_as_they_were(model):
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    precision.probe(model)  # the real timer: its numbers are not asserted
    assert torch.equal(torch.rand(3), expected)
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]) and parameter.grad is None


def test_the_probe_times_training_steps_of_an_adapted_copy(model):
    seen = []

    def timer(trial, batch, chosen, device):
        seen.append((trial is model, trial.training, sum(p.requires_grad for p in trial.parameters()),
                     tuple(batch["input_ids"].shape)))
        return 1.0

    precision.probe(model, timer=timer)
    adapted = apply_method(load_backbone(TINY, seed=0)[0], "houlsby", bottleneck=64)
    trainable = sum(p.requires_grad for p in adapted.parameters())
    assert set(seen) == {(False, True, trainable, (precision.PROBE_BATCH, precision.PROBE_TOKENS))}


def test_bf16_autocast_runs_matrix_products_in_bf16_and_fp32_leaves_them():
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(2, 8)
    with precision.autocast("bf16", torch.device("cpu")):
        assert layer(x).dtype == torch.bfloat16
    with precision.autocast("fp32", torch.device("cpu")):
        assert layer(x).dtype == torch.float32
    assert layer.weight.dtype == torch.float32


def test_the_line_under_the_backbone_says_what_ran_and_why():
    assert Choice("fp32", "fp32").describe() == "Precision: fp32 (as asked; evaluation in fp32)"
    auto = Choice("bf16", "auto", 1.4712).describe()
    assert auto.startswith("Precision: bf16 (auto:") and "1.47x" in auto and "1.2x" in auto
    assert "less than 1.2x" in Choice("fp32", "auto", 0.8).describe()
