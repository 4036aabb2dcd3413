"""The method registry: every training method the labs compare, declared once.

A :class:`Method` says what a method is called, which settings it reads (with their defaults and help,
:class:`adapterlab.settings.Setting`), its default learning rate and the grid it is tuned over, how it is
added to a fresh model and what it then trains, what its saved set holds (:class:`SavedSet`), whether and
how it merges into the backbone's weights, and its closed-form count of trained parameters. The rest of
the package asks the registry: the training config and the command line take their settings from it, a
stored run's key holds exactly the settings its method reads, checkpoints save and rebuild a set through
it, and the counts, the training panel and the trade-off figure list its methods.

Adding a method: write its module in this package (the surgery, if it adds modules, and one
``register(Method(...))``) and import it in ``adapterlab/methods/__init__.py``. Nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from torch import nn

from ..settings import Setting

#: The pooler switch every method but full fine-tuning reads (full trains the pooler anyway).
TRAIN_POOLER = Setting(
    "train_pooler", False, "train the pretrained pooler too (frozen by default, as in the original adapter code)",
    bool)


@dataclass(frozen=True)
class SavedSet:
    """How a method's trained tensors are saved and loaded (:mod:`adapterlab.model.checkpoints`).

    ``entry`` names the manifest entry that describes the set ("adapter", "lora", "bitfit", ...);
    ``format`` is the manifest's ``method`` value (None: the entry alone says it, as adapter sets written
    before other methods could be saved do). ``describe(model)`` returns the entry's JSON value for a model
    prepared by the method, or None when the model holds no such set; ``holds(entry, name, group)`` says
    whether a parameter is in the saved set; ``rebuild(model, entry)`` gives a fresh backbone the set's
    structure and returns what undoes it; ``check(entry)`` returns the entry checked, or refuses it with a
    ValueError; ``forget(model)`` drops the mark of a set that adds nothing to the model (only says what
    trains), when the model is set to train something else.
    """

    entry: str
    format: str | None
    describe: Callable[[nn.Module], dict | None]
    holds: Callable[[dict, str, str], bool]
    rebuild: Callable[[nn.Module, dict], Callable[[], None] | None]
    check: Callable[[dict], dict]
    kind: str = "a trained set"  # how messages name it: "adapters", "LoRA layers", ...
    forget: Callable[[nn.Module], None] | None = None  # a mark that only says what trains: dropped when that changes


@dataclass(frozen=True)
class Method:
    """One training method. ``prepare(model, **settings)`` adds what the method adds and leaves trainable
    exactly what it trains (the classifier always; the pooler as ``train_pooler`` says); ``settings`` are
    the names of the settings it reads (a stored run's key holds those and no other method setting).
    ``merge(model)`` folds the trained part into the backbone's weights, leaving its exact architecture
    (None: it cannot be merged); ``count(bert_config, **settings)`` is the closed-form number of parameters
    it adds or unfreezes in the backbone, the classifier and pooler not included."""

    name: str
    label: str
    summary: str
    learning_rate: float
    learning_rates: tuple[float, ...]
    prepare: Callable[..., nn.Module]
    settings: tuple[str, ...] = ("train_pooler",)
    own_settings: tuple[Setting, ...] = ()
    #: Keyword arguments ``prepare`` also takes that are no training setting (an adapter set's ``layers``, ...).
    options: tuple[str, ...] = ()
    saved: SavedSet | None = None
    merge: Callable[[nn.Module], nn.Module] | None = None
    count: Callable[..., int] | None = None
    #: What a run's key says beyond its settings: a mark that keeps runs of an earlier computation under the
    #: same name from standing in for this one.
    key_marks: dict = field(default_factory=dict)
    family: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.family:
            object.__setattr__(self, "family", self.name)


def pooler_entry_check(entry_name: str) -> Callable[[dict], dict]:
    """The ``check`` of a saved set whose manifest entry says only whether the pooler trained (BitFit, (IA)³)."""
    def check(entry: dict) -> dict:
        if set(entry) != {"train_pooler"} or not isinstance(entry["train_pooler"], bool):
            raise ValueError(f"the {entry_name} entry must be {{'train_pooler': true or false}}; got {entry!r}")
        return dict(entry)

    return check


REGISTRY: dict[str, Method] = {}
_SETTINGS: dict[str, Setting] = {TRAIN_POOLER.name: TRAIN_POOLER}


def register(method: Method) -> Method:
    """Add ``method`` to the registry (a name already taken is an error, not a silent replacement)."""
    if method.name in REGISTRY:
        raise ValueError(f"a method named {method.name!r} is already registered")
    for setting in method.own_settings:
        known = _SETTINGS.get(setting.name)
        if known is not None and known is not setting:
            raise ValueError(f"method {method.name!r} declares setting {setting.name!r}, which another method declares")
        _SETTINGS[setting.name] = setting
    unknown = [name for name in method.settings if name not in _SETTINGS]
    if unknown:
        raise ValueError(f"method {method.name!r} reads undeclared settings {unknown}")
    REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    """Take a method out again (a test's throwaway method); its own settings stay declared."""
    REGISTRY.pop(name)


def get(name: str) -> Method:
    """The method called ``name``, or a PlacementError (a ValueError) that lists the methods there are."""
    from ..model.placement import PlacementError

    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise PlacementError(f"method must be one of {', '.join(REGISTRY)}; got {name!r}") from None


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def method_settings() -> tuple[Setting, ...]:
    """Every setting some method reads, in the order the methods declared them."""
    return tuple(_SETTINGS.values())


def saved_sets() -> list[SavedSet]:
    """The saved-set kinds, one each (the three adapter placements share one)."""
    kinds = []
    for method in REGISTRY.values():
        if method.saved is not None and method.saved not in kinds:
            kinds.append(method.saved)
    return kinds


def saveable() -> tuple[str, ...]:
    return tuple(name for name, method in REGISTRY.items() if method.saved is not None)


def prepared_by(model: nn.Module) -> Method | None:
    """The method whose saved set the model holds (the first of a family that shares one), or None for a
    model whose trained tensors are the backbone's own (full, head, layernorm, top-k)."""
    for method in REGISTRY.values():
        if method.saved is not None and method.saved.describe(model) is not None:
            return method
    return None


def apply_method(model: nn.Module, method: str, **settings) -> nn.Module:
    """Prepare a fresh model for ``method``: add what it adds, train what it trains. Settings the method
    does not read are ignored, so that one set of arguments (``TrainConfig.method_kwargs()``) serves every
    method; a name that no method reads is an error."""
    from ..model.placement import encoder_layers

    chosen = get(method)
    encoder_layers(model)  # a model of a family the surgery knows, or a PlacementError naming it
    options = {name for m in REGISTRY.values() for name in m.options}
    unknown = sorted(set(settings) - set(_SETTINGS) - options)
    if unknown:
        raise TypeError(f"apply_method got unknown settings {unknown}; the method settings are "
                        f"{', '.join([*_SETTINGS, *sorted(options)])}")
    reads = (*chosen.settings, *chosen.options)
    return chosen.prepare(model, **{name: settings[name] for name in reads if name in settings})


def set_trainable(model: nn.Module, method: str, train_layernorm: bool = True, top_k: int | None = None,
                  train_pooler: bool = False) -> nn.Module:
    """Freeze the model, then unfreeze what ``method`` trains, without adding anything: ``"adapters"`` (the
    adapters already added, plus LayerNorms when ``train_layernorm``), ``"lora"`` (the LoRA layers already
    added), or any registered method that adds nothing (full, head, layernorm, top_k, bitfit)."""
    from ..model.placement import PlacementError, adapted_outputs, adapters_train
    from ..model.trainable import LORA_PARAMETERS, train_only

    if method in ("adapters", "lora"):
        _forget_others(model, None)
    if method == "adapters":
        if not adapted_outputs(model):
            raise PlacementError("method 'adapters' needs adapters; call add_adapters first")
        return train_only(model, adapters_train(train_layernorm), train_pooler=train_pooler)
    if method == "lora":
        if not any(name.rpartition(".")[2] in LORA_PARAMETERS for name, _ in model.named_parameters()):
            raise PlacementError("method 'lora' needs LoRA layers; call adapterlab.model.lora.add_lora first")
        return train_only(model, lambda name, group: group == "adapters", train_pooler=train_pooler)
    chosen = REGISTRY.get(method)
    if chosen is None or chosen.saved is not None and chosen.saved.entry != method:
        allowed = ["adapters", "lora"] + [m.name for m in REGISTRY.values() if m.saved is None or m.saved.entry == m.name
                                          and m.name not in ("lora", "ia3")]
        raise PlacementError(f"method must be one of {', '.join(allowed)}; got {method!r}")
    settings = {"top_k": top_k} if method == "top_k" else {}
    _forget_others(model, chosen)
    return apply_method(model, method, train_pooler=train_pooler, **settings)


def _forget_others(model: nn.Module, chosen: Method | None) -> None:
    for kind in saved_sets():
        if kind.forget is not None and (chosen is None or kind is not chosen.saved):
            kind.forget(model)
