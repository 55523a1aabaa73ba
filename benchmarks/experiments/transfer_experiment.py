"""The transfer experiment: does SkillRise's decoupled credit teach a policy to carry rules across tasks?

Arms, trained with the same seed and step budget on the training families of the transfer probe
(SkillRise-Rulebook-v0, skillrise_gym/backends/rulebook.py):

    skillrise       solve turns credited with their task's reward, curate turns with later tasks' rewards
    own             curate turns credited with their own task's reward (the coupled ablation)
    none            curate turns generated, not trained
    grpo            independent single-task episodes, no document (the baseline)
    gigpo           grpo's episodes plus GiGPO's step-level advantage (on the probe, one step per task: every
                    trial of a task shares its one state, so the step part repeats the episode part)
    norepeat        (not in the default arms) skillrise plus --repetition-penalty 2: a curate turn whose document
                    states a clause twice loses 2 from its advantage (the R=2 regrowth); a change of method
    lamer           (not in the default arms) K attempts at one task with reflections between them, LaMer's
                    cross-attempt return; started from its own format warm start (reflections, not documents)

plus the untrained policy (the format warm start alone: answers in the tags, knows no rule). Every policy is
then evaluated through the bench runner (`skillrise-bench`'s code path) on held-out families (the probe's
test split: other rules, and words never seen in training) at K = 1, 2, 4, 6 and every carry mode (skill,
none, reflect), on the same pinned sequences. Outputs (benchmarks/results/):

    transfer_experiment.json         configuration, wall time, learning curves, evaluation tables with 95% CIs
    transfer_learning_curves.png     training success at positions 0 and 1 per arm
    transfer_success_by_position.png held-out success by position at the largest K, per arm (carry skill),
                                     with the probe's ceilings (document ignored; perfect curator)
    transfer_success_vs_K.png        held-out success against K, per arm and carry mode

    python benchmarks/experiments/transfer_experiment.py                  # the CPU preset (tiny model; see --help)
    python benchmarks/experiments/transfer_experiment.py --scale          # a GPU preset (SmolLM2 with LoRA, more steps)
    python benchmarks/experiments/transfer_experiment.py --arms skillrise grpo --steps 50 --eval-sequences 40
    python benchmarks/experiments/transfer_experiment.py --rules 2 --bins 4 --init runs/r1/skillrise/final ...  # a curriculum
    python benchmarks/experiments/transfer_experiment.py --warmstart-only --work-dir runs/ws ...  # the warm start alone
    python benchmarks/experiments/transfer_experiment.py --arms skillrise lamer --feedback success --bins 4 --K 3 \
        --repeat-k 3 --eval-K 3 --work-dir runs/lamer --results-dir benchmarks/results/lamer   # vs LaMer

`--repeat-k K` also evaluates every policy in repeat mode (one task K times; Pass@k) with carry skill and
reflect; `--feedback success` makes the probe withhold the rule after a wrong answer (rulebook.py), so that
a second attempt must explore.

Each arm's run lives in --work-dir (default runs/transfer/<arm>): metrics.jsonl, turns.jsonl, final/ and its
bench evaluation (eval-bench/); a rerun reuses finished arms (their final/ and bench summaries) unless
--fresh is given. One experiment at a time uses a work dir (it holds WORK_DIR/.lock; a second is refused),
and --fresh deletes only what the experiment made there (`clear_experiment`), never other files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from skillrise_train.algorithms import algorithm  # noqa: E402
from skillrise_gym.cli_fields import add_arguments, option  # noqa: E402  (fields and flags, as every CLI's)
from skillrise_gym.panels import TEST_IS_FOR_REPORTING  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ARMS = {
    "skillrise": {"algo": "skillrise", "curate_credit": "future"},
    "own": {"algo": "skillrise", "curate_credit": "own"},
    "none": {"algo": "skillrise", "curate_credit": "none"},
    "grpo": {"algo": "grpo", "curate_credit": "future"},
    "gigpo": {"algo": "gigpo", "curate_credit": "future"},
    "lamer": {"algo": "lamer", "curate_credit": "future"},
    # a change of method, not SkillRise: its curate turns also lose 2 for a document stating a clause twice
    "norepeat": {"algo": "skillrise", "curate_credit": "future", "repetition_penalty": 2.0},
}
DEFAULT_ARMS = [arm for arm in ARMS if arm not in ("lamer", "norepeat")]
CARRY = ("skill", "none", "reflect")


@dataclass
class Preset:
    """What one experiment runs (the CLI flags override these fields; each field's help is its flag's)."""

    model: str = option("tiny", "the policy: 'tiny' (built offline), an embedded model name or a model folder")
    tiny_width: int = option(64, "the tiny model's hidden size (64: the embedded 'tiny'; wider: built in WORK_DIR)")
    tiny_layers: int = option(2, "the tiny model's layers")
    lora: bool = option(False, "train LoRA adapters instead of every weight")
    steps: int = option(60, "RL steps per arm")
    K: int = option(2, "tasks per training sequence")
    G: int = option(8, "trials per sequence (the group of the group-relative advantage)")
    S: int = option(8, "sequences per RL step")
    lr: float = option(1e-3, "RL learning rate")
    warmstart_steps: int = option(600, "steps of the format warm start (0: none)")
    warmstart_sequences: int = option(1000, "sequences the format warm start draws its examples from")
    warmstart_documents: str = option("one", "the warm start's documents: 'one' rule, or 'several' (R >= 2)")
    warmstart_reading: int = option(2, "reading examples per warm-start sequence")
    warmstart_reading_first: int = option(0, "> 0: first this many steps of a reading-only warm start (notes of "
                                           "several rules, the item's clause as the target: "
                                           "benchmarks/experiments/reading_probe.py), its LoRA merged in; the "
                                           "format warm start follows")
    warmstart_reading_rank: int = option(16, "the LoRA rank of the reading-only warm start")
    warmstart_lr: float = option(3e-3, "the warm starts' learning rate")
    warmstart_batch: int = option(32, "the warm starts' batch size")
    init: str = option("", "a model folder (a whole model or a LoRA adapter, e.g. an arm's final/ from an earlier "
                         "run) every arm starts from instead of the format warm start: a curriculum, such as R=2 "
                         "training from an arm trained at R=1")
    max_new_tokens: int = option(24, "token budget of every completion (training and evaluation)")
    overlong_penalty: float = option(0.0, "subtracted from a turn cut off at --max-new-tokens (skillrise-train's "
                                        "flag)")
    invalid_penalty: float = option(0.5, "subtracted from a turn whose answer lacks its closed tags (skillrise-"
                                       "train's flag); at or above the overlong penalty, an open tag is no "
                                       "cheaper than a cut (docs/results/transfer-r2.md, 'Training at K=5')")
    rules: int = option(1, "R: rules (kinds) per family of the probe")
    bins: int = option(3, "N: bins per family (chance is 1/N)")
    novel: str = option("none", "held-out answers: the test families' kinds/colours never seen in training "
                              "(none, kinds, colours, both)")
    feedback: str = option("full", "'success': a wrong answer's feedback names only the wrong bin (rulebook.py)")
    repeat_k: int = option(0, "> 0: also evaluate in repeat mode (one task this many times; Pass@k)")
    eval_K: list[int] = option([1, 2, 4, 6], "sequence lengths of the held-out evaluation")
    eval_sequences: int = option(100, "held-out sequences per K and carry mode")
    eval_temperature: float = option(0.0, "sampling temperature of the evaluation (0: greedy)")
    eval_carry: list[str] = option(list(CARRY), "carry modes evaluated per policy", choices=CARRY)
    seed: int = option(0, "RL sampling and the training families drawn (not the evaluation's sequences: --panel)")
    panel: str = option("dev", "the held-out panel every evaluation plays (skillrise_gym.panels): dev for every "
                        "design choice; test only for a reported result (with --report)", choices=["dev", "test"])
    threads: int = option(1, "torch threads")
    dtype: str = option("float32", "bfloat16: RL generates with a bf16 copy and autocasts its update; evaluation "
                                 "in bf16")


CPU = Preset()
SCALE = Preset(model="smollm2", lora=True, steps=300, K=3, G=8, S=16, lr=1e-4, warmstart_steps=0, warmstart_sequences=0,
               max_new_tokens=24,
               rules=2, bins=4, eval_sequences=300)


def backend_options(p: Preset) -> dict[str, Any]:
    return {"rules": p.rules, "bins": p.bins, **({"novel": p.novel} if p.novel != "none" else {}),
            **({"feedback": p.feedback} if p.feedback != "full" else {})}


class Refused(SystemExit):
    """The experiment cannot go on as asked (a work dir in use, a trainer's refusal): one line, exit 2."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


# ------------------------------------------------------------------------------------------ the work dir
#: what the experiment makes in a work dir (or a seed's folder in it) besides the arms' runs and evaluations:
#: the warm starts and the sized tiny models
OWN_FOLDERS = re.compile(r"^(untrained(-[a-z]+)?|reading-first(\.tmp)?|tiny-\d+x\d+)$")
#: its evaluation folders, each holding one bench run per policy (named by `EVALUATED`)
EVALUATION_FOLDERS = ("eval-bench", "eval-reading", "eval-repeat")
EVALUATED = re.compile(r"^(untrained(-[a-z]+)?|init|latest-rule-only|perfect-curator|" + "|".join(ARMS) + ")$")


def lock_work_dir(work: Path) -> Any:
    """`work` made and locked for this experiment (the bench's and trainer's lock file, WORK_DIR/.lock) until the
    returned handle is closed; a work dir in use by another experiment, or unusable, is `Refused`."""
    from skillrise_gym.bench.store import LockHeld, RunDirError, _lock

    if work.exists() and not work.is_dir():
        raise Refused(f"--work-dir {work} exists and is not a folder; choose another --work-dir")
    try:
        work.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise Refused(f"--work-dir {work} cannot be created: a part of its path is a file, not a folder") from None
    try:
        return _lock(work)
    except LockHeld:
        raise Refused(f"another transfer_experiment is using --work-dir {work} (it holds {work / '.lock'}); wait for "
                      "it to end or choose another --work-dir") from None
    except RunDirError as exc:
        raise Refused(f"--work-dir {work}: {exc}") from None


def remove_evaluation(folder: Path) -> None:
    """Delete one evaluation's bench run folder, under the bench's lock (one a bench is writing is `Refused`)."""
    from skillrise_gym.bench.store import RunDirError, _lock

    if folder.is_symlink():
        folder.unlink()
        return
    try:
        held = _lock(folder)
    except (RunDirError, OSError) as exc:
        raise Refused(f"cannot delete the evaluation in {folder}: {exc}") from None
    try:
        shutil.rmtree(folder)
    finally:
        held.close()


def clear_arm(out: Path) -> list[str]:
    """Delete an arm's run in `out` under the trainer's lock: the run's own files (`checkpoints.clear_run`) and
    the experiment's wall_seconds.txt; a folder holding files the trainer did not write is left alone."""
    from skillrise_train.checkpoints import RUN_MARKER, RunFolderError, clear_run, foreign_entries, lock_output_dir

    try:
        held = lock_output_dir(out)
    except RunFolderError as exc:
        raise Refused(str(exc)) from None
    try:
        if foreign_entries(out):
            return []
        removed = clear_run(out)
        for name in ("wall_seconds.txt", RUN_MARKER):
            if (out / name).exists():
                (out / name).unlink()
                removed.append(name)
        return removed
    finally:
        held.close()


def clear_experiment(work: Path) -> list[Path]:
    """--fresh: delete what the experiment made in `work` and its seed<N>/ folders: the warm starts and sized
    tiny models (`OWN_FOLDERS`), the arms' runs (`clear_arm`), the evaluations (`EVALUATED` in
    `EVALUATION_FOLDERS`, each under its lock; the folder itself when nothing else is left in it); nothing
    else. Returns what went."""
    removed: list[Path] = []
    seeds = sorted(p for p in work.iterdir() if re.fullmatch(r"seed\d+", p.name) and p.is_dir() and not p.is_symlink())
    for folder in [work, *seeds]:
        for entry in sorted(folder.iterdir()):
            if OWN_FOLDERS.match(entry.name) and (entry.is_dir() or entry.is_symlink()):
                entry.unlink() if entry.is_symlink() else shutil.rmtree(entry)
            elif entry.name in ARMS and entry.is_dir() and not entry.is_symlink():
                if not clear_arm(entry):
                    continue
            elif entry.name in EVALUATION_FOLDERS and entry.is_dir() and not entry.is_symlink():
                for evaluated in sorted(entry.iterdir()):
                    if EVALUATED.match(evaluated.name) and (evaluated.is_dir() or evaluated.is_symlink()):
                        remove_evaluation(evaluated)
                        removed.append(evaluated)
                if not any(entry.iterdir()):
                    entry.rmdir()
                continue
            else:
                continue
            removed.append(entry)
    return removed


# ------------------------------------------------------------------------------------------ training
def trained_steps(out: Path) -> int | None:
    """The steps an arm's finished run in `out` was asked for (its config.json), or None without one."""
    try:
        return int(json.loads((out / "config.json").read_text())["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _recorded_seconds(metrics: Path) -> float:
    """The seconds an interrupted run's recorded steps took (the sum of their `step_seconds`): the wall time it
    had spent before it is continued (the step in flight when it stopped, and any records the resume drops,
    are not exact: an approximation, for the record only)."""
    total = 0.0
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            total += float(json.loads(line).get("step_seconds", 0.0))
        except (ValueError, TypeError, AttributeError):
            continue
    return total


def train_arm(arm: str, start: str, p: Preset, work: Path, log, extend: bool = False,
              save_every: int | None = None) -> dict[str, Any]:
    """Train one arm from the `start` model (the shared warm start) with skillrise-train's own entry point;
    returns its learning curve and wall time. A finished arm is reused when it was trained for `p.steps`;
    one trained for fewer steps is continued from its last checkpoint to `p.steps` with `extend` (skillrise-
    train --resume: optimizer and RNG state kept, the linear learning-rate decay stretched to the new end),
    and refused otherwise. Whenever the arm trains, its earlier evaluations are deleted.

    `save_every` N: a checkpoint every N steps (the last two kept), and an unfinished run of the same settings
    (a process killed mid-arm) is continued from its newest complete checkpoint by skillrise-train --resume,
    exactly as if it had not stopped; without it (the default) only the end is saved and an unfinished run
    is started over."""
    from skillrise_gym.models import is_model_folder
    from skillrise_train.cli import run
    from skillrise_train.config import TrainConfig

    out = work / arm
    final = out / "final"
    finished = is_model_folder(final)  # a whole model, or a LoRA adapter (--scale)
    done = trained_steps(out) if finished else None
    resume = False
    if done is not None and done != p.steps:
        if not extend or done > p.steps:
            raise SystemExit(f"transfer_experiment: {out} holds the {arm} arm trained for {done} steps, not --steps "
                             f"{p.steps}: " + (f"--extend continues it to {p.steps}, " if done < p.steps else "")
                             + "--fresh retrains every arm, or choose another --work-dir")
        resume = True
        log(f"[{arm}] continuing from step {done} to {p.steps} (--extend)")
    elif not finished and save_every and (out / "config.json").is_file():
        resume = True  # the trainer checks the run's settings against these and finds its newest checkpoint
        log(f"[{arm}] continuing the unfinished run in {out} from its newest complete checkpoint")
    if resume or not finished:
        # without save_every an unfinished run is started over by the trainer's --overwrite, under its lock (a
        # trainer still writing there is refused, nothing deleted), which deletes the run's own files only
        saving = ({"save_interval": save_every, "trl_options": {"save_total_limit": 2}} if save_every
                  else {"save_interval": max(1, p.steps)})
        config = TrainConfig(**{**dict(
            env="rulebook", model=start, lora=p.lora, K=p.K, G=p.G, S=p.S, steps=p.steps, lr=p.lr,
            max_task_steps=1, max_new_tokens=p.max_new_tokens, warmstart_steps=0,
            invalid_penalty=p.invalid_penalty, overlong_penalty=p.overlong_penalty, entropy_coef=0.0,
            **saving, output_dir=str(out), overwrite=not resume,
            seed=p.seed, resume=resume, threads=p.threads, backend_options=backend_options(p), record_turns=True,
            **({"generation_dtype": p.dtype, "bf16": p.dtype == "bfloat16"} if p.dtype != "float32" else {}),
        ), **ARMS[arm]})
        log(f"[{arm}] training: {config.algo}, curate credit {config.curate_credit}, {p.steps} steps")
        wall = out / "wall_seconds.txt"
        before = float(wall.read_text()) if resume and wall.exists() else 0.0
        if resume and not wall.exists() and (out / "metrics.jsonl").is_file():
            # an interrupted run: the wall time of its steps kept (the metrics' elapsed seconds, if recorded)
            before = _recorded_seconds(out / "metrics.jsonl")
        started = time.perf_counter()
        from skillrise_train.checkpoints import RunFolderError

        try:
            run(config)
        except RunFolderError as exc:
            raise Refused(f"[{arm}] {exc}") from None
        wall.write_text(f"{before + time.perf_counter() - started:.1f}\n")
        for evaluated in sorted(work.glob(f"eval-*/{arm}")):  # of the weights before: never resumed for these
            remove_evaluation(evaluated)
    curve = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {
        "output_dir": str(out),
        "wall_seconds": float((out / "wall_seconds.txt").read_text()),
        "curve": [{"step": r["rollout"], **{k: r[k] for k in r if k.startswith("success/") or k == "format_valid"}}
                  for r in curve if "success/mean" in r],
    }


def untrained(p: Preset, work: Path, log, algo: str = "skillrise") -> str:
    """The format warm start alone, saved as a model folder: the 'untrained' policy (no RL step) and the
    starting point of every arm (so arms differ only in their RL credit). Without a warm start: the model.
    An `algo` that writes reflections (lamer): the warm start on its episodes, in untrained-<algo>/."""
    from skillrise_gym.models import is_model_folder
    from skillrise_train.config import TrainConfig
    from skillrise_train.trainer import save_warm_started

    reflects = algorithm(algo).reflects
    out = work / (f"untrained-{algo}" if reflects else "untrained")
    if p.warmstart_reading_first and not reflects:
        p = replace(p, model=reading_first(p, work, log))
    if not p.warmstart_steps:
        return p.model
    if is_model_folder(out):
        return str(out)
    log(f"[{out.name}] format warm start: {p.warmstart_steps} steps on {p.warmstart_sequences} sequences' examples")
    # a pretrained model (--lora) warm-starts an adapter, which the arms load merged and train a new one on
    config = TrainConfig(env="rulebook", algo=algo, model=p.model, lora=p.lora, K=p.K, max_task_steps=1,
                         max_new_tokens=p.max_new_tokens, warmstart_steps=p.warmstart_steps,
                         warmstart_sequences=p.warmstart_sequences, warmstart_documents=p.warmstart_documents,
                         warmstart_reading=p.warmstart_reading, warmstart_lr=p.warmstart_lr,
                         warmstart_batch=p.warmstart_batch,
                         seed=p.seed, threads=p.threads,
                         backend_options=backend_options(p))
    return save_warm_started(config, str(out))


#: where `reading_first` saves its LoRA adapter (with --lora), beside the merged model folder
READING_FIRST_ADAPTER = "reading-first-adapter"


def restore_reading_first(p: Preset, adapter: Path, out: Path) -> str:
    """The reading-first model folder `out` rebuilt from its saved LoRA adapter (`READING_FIRST_ADAPTER`):
    `p.model` with the adapter merged in, as `reading_first` merges it."""
    from peft import PeftModel

    from skillrise_gym.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(p.model)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    scratch = Path(str(out) + ".tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    model.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    scratch.rename(out)
    return str(out)


def reading_first(p: Preset, work: Path, log) -> str:
    """A reading-only warm start of `p.model` (`several_reading_examples`: two or three clauses naming
    different bins, the target the bin of the one about the item; `p.warmstart_reading_first` steps of
    `p.warmstart_batch` at `p.warmstart_lr`), saved as a model folder in WORK/reading-first/; with --lora an
    adapter of rank `p.warmstart_reading_rank` merged into the weights. It teaches generic reading (which
    clause is about this item), never a family's answer: the notes' clauses come from other tasks."""
    import numpy as np
    import torch

    from skillrise_gym.env import SequenceEnv
    from skillrise_gym.models import encode_chat, is_model_folder, load_model_and_tokenizer
    from skillrise_train.warmstart import several_reading_examples, warm_start

    out = work / "reading-first"
    if is_model_folder(out):
        return str(out)
    log(f"[reading-first] {p.warmstart_reading_first} steps on notes of several rules only")
    torch.manual_seed(p.seed)
    env = SequenceEnv(backend="rulebook", K=p.K, split="train", max_task_steps=1, prompt_style="compact",
                      backend_options=backend_options(p))
    try:
        examples = several_reading_examples(env, p.warmstart_sequences, 6, np.random.default_rng(p.seed))
    finally:
        env.close()
    model, tokenizer = load_model_and_tokenizer(p.model)
    if p.lora:
        from peft import LoraConfig, get_peft_model

        rank = p.warmstart_reading_rank
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    losses = warm_start(model, tokenizer, lambda prompt, prefix: encode_chat(tokenizer, prompt, prefix, max_tokens=4096),
                        examples, p.warmstart_reading_first, batch_size=p.warmstart_batch, lr=p.warmstart_lr,
                        seed=p.seed, progress=lambda line: log(f"[reading-first] {line}"))
    if p.lora:
        # the adapter itself too: a few MB that rebuild this folder on another machine (`restore_reading_first`),
        # where retraining it would not give the same bits
        adapter = work / READING_FIRST_ADAPTER
        model.save_pretrained(Path(str(adapter) + ".tmp"))
        shutil.rmtree(adapter, ignore_errors=True)
        Path(str(adapter) + ".tmp").rename(adapter)
        model = model.merge_and_unload()
    scratch = Path(str(out) + ".tmp")
    model.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    scratch.rename(out)
    tail = losses[-20:]
    log(f"[reading-first] {len(examples)} notes, final loss {sum(tail) / max(1, len(tail)):.3f}")
    return str(out)


# ------------------------------------------------------------------------------------------ evaluation
class ScriptedCurator:
    """A reference row with no model, reading what the feedback states: the rule ("glass items go in the blue
    bin") and, with the probe's ``feedback="success"``, the bin a wrong answer ruled out ("the Dalu ladle does
    not go in the red bin", kept as "plastic items not in the red bin", the kind read from the task line).
    `keep=True` is the perfect curator (keeps every rule and exclusion revealed, applies the rule about the
    item's kind, else the first bin not ruled out for it: with withheld feedback it explores without
    repeating a wrong bin); `keep=False` carries the latest revelation only and applies a rule whatever the
    item (what a curator that carries the last answer, not the rules, achieves). Without anything to apply
    it takes the first bin (chance: bins are drawn uniformly)."""

    RULE = re.compile(r"(\w+) items go in the (\w+) bin")
    NOT = re.compile(r"(\w+) items not in the (\w+) bin")
    RULED_OUT = re.compile(r"does not go in the (\w+) bin")
    KIND = re.compile(r"made of (\w+)")

    def __new__(cls, keep: bool):
        from skillrise_gym.agents.base import Agent, AgentOutput, is_curate
        from skillrise_gym.prompts import action_answer, skill_answer

        rule, ruled_out, excluded, kind_of = cls.RULE, cls.RULED_OUT, cls.NOT, cls.KIND

        class Scripted(Agent):
            name = "perfect-curator" if keep else "latest-rule-only"

            def act(self, observations, infos=None):
                out = []
                for obs in observations:
                    document = str(obs.get("skill_document") or "")
                    rules = dict(rule.findall(document))
                    exclusions = set(excluded.findall(document))
                    if is_curate(obs):
                        attempt = str(obs["prompt"]).split("Did:", 1)[-1]
                        revealed = rule.findall(attempt)
                        kind = kind_of.search(str(obs["prompt"]).split("Did:", 1)[0].rsplit("Task:", 1)[-1])
                        wrong = {(kind.group(1), c) for c in ruled_out.findall(attempt)} if kind else set()
                        if not keep:
                            rules, exclusions = {}, set()
                            if revealed:
                                wrong = set()  # the latest revelation only: a rule, else what was ruled out
                        rules.update(revealed[-1:])
                        exclusions |= wrong
                        text = "; ".join([f"{k} items go in the {c} bin" for k, c in rules.items()]
                                         + [f"{k} items not in the {c} bin" for k, c in sorted(exclusions)
                                            if k not in rules]) or "none"
                        out.append(AgentOutput(skill_answer(text)))
                        continue
                    actions = list(obs["admissible_actions"])
                    kind = kind_of.search(str(obs.get("task") or ""))
                    colour = rules.get(kind.group(1)) if keep and kind else next(iter(rules.values()), None)
                    if colour and f"{colour} bin" in actions:
                        command = f"{colour} bin"
                    else:
                        ruled = {c for k, c in exclusions if (kind and k == kind.group(1)) or not keep}
                        command = next((a for a in actions if a.split()[0] not in ruled), actions[0])
                    out.append(AgentOutput(action_answer(command)))
                return out

            def describe(self):
                return {"name": self.name}

        return Scripted()


class PerfectDocuments:
    """The solver of `solver` (an agent: the policy under test) reading the perfect curator's documents:
    curate turns are the scripted perfect curator's, solve turns the policy's. Its success by position
    against the perfect curator's row is what the policy's reading loses (documents.py's `reads_own_rule`
    on its turns: the share of items solved whose document holds two rules naming different bins)."""

    def __new__(cls, solver: Any):
        from skillrise_gym.agents.base import Agent, is_curate

        curator = ScriptedCurator(keep=True)

        class Hybrid(Agent):
            name = "perfect-documents"
            batch_size = getattr(solver, "batch_size", 1)

            def act(self, observations, infos=None):
                out: list[Any] = [None] * len(observations)
                for agent, curate in ((curator, True), (solver, False)):
                    picked = [i for i, obs in enumerate(observations) if bool(is_curate(obs)) == curate]
                    if picked:
                        answers = agent.act([observations[i] for i in picked],
                                            [infos[i] for i in picked] if infos is not None else None)
                        for i, answer in zip(picked, answers):
                            out[i] = answer
                return out

            def describe(self):
                return {"name": self.name, "solver": solver.describe()}

            def close(self):
                solver.close()

        return Hybrid()


def probe_episode(p: Preset) -> Any:
    """The probe's episode as the experiment's policies train on it (compact prompts, one step a task, carry
    skill, the preset's engine options and token budget), on the held-out split: what rows without a trained
    episode of their own play when no arm's saved episode is given (`held_out_bench`)."""
    from skillrise_gym.episode import EpisodeSpec

    return EpisodeSpec.resolve("rulebook", p.K, "test", mode="cross", carry="skill", max_task_steps=1,
                               prompt_style="compact", backend_options=backend_options(p),
                               max_new_tokens=p.max_new_tokens)


def arm_episode(final: Path) -> Any:
    """The episode an arm's run trained on (its final/episode.json), as the experiment evaluates it: every
    evaluation of the experiment plays the episode its arms were trained on, on the held-out split."""
    from skillrise_gym.episode import EpisodeFileError, load

    try:
        return load(final)
    except EpisodeFileError as exc:
        raise Refused(f"{final}: {exc}") from None


def experiment_episode(work: Path, arms: list[str]) -> Any:
    """The one episode of an experiment's evaluations: the saved episode of its first arm that trains on K-task
    sequences (skillrise, own, none), else of its first arm; every other such arm must have trained on the
    same one (a difference is `Refused`, naming it). None before any arm has a final/ folder."""
    saved = [(arm, arm_episode(work / arm / "final")) for arm in arms if (work / arm / "final" / "episode.json").is_file()]
    sequences = [(arm, episode) for arm, episode in saved if ARMS[arm]["algo"] == "skillrise"]
    if not saved:
        return None
    first_arm, first = (sequences or saved)[0]
    for arm, episode in sequences:
        differs = first.spec.differences(episode.spec, tuple(n for n in first.spec.shape_fields()))
        if differs:
            raise Refused(f"the arms {first_arm} and {arm} trained on different episodes ({differs}): their "
                          "evaluations would not measure one episode")
    return first


def policy_agent(model_dir: str, p: Preset, spec: Any = None) -> Any:
    """The bench's hf agent on `model_dir`, framed as the episode `spec` (default: `probe_episode`) frames its
    calls: token budgets, system message, chat template arguments."""
    from skillrise_gym.agents.hf_agent import HFAgent, HFConfig

    spec = spec if spec is not None else probe_episode(p)
    return HFAgent(HFConfig(model=model_dir, max_new_tokens=spec.max_new_tokens,
                            **({"max_prompt_tokens": spec.max_prompt_tokens} if spec.max_prompt_tokens else {}),
                            system_prompt=spec.system_prompt, chat_template_kwargs=dict(spec.chat_template_kwargs) or None,
                            temperature=p.eval_temperature, batch_size=64, seed=p.seed, threads=p.threads,
                            dtype=None if p.dtype == "float32" else p.dtype))


def held_out_bench(model_dir: str | None, p: Preset, out: Path, agent: Any = None, episode: Any = None,
                   **config: Any) -> dict[str, Any]:
    """The bench runner on the probe's held-out families, on the preset's panel (`--panel`: the same sequences
    for every RL seed and every arm): the hf agent on `model_dir` (or `agent`), the agent closed after.
    `episode`: the saved episode played (`experiment_episode`; default: `probe_episode`); `config`: the
    BenchConfig fields that differ from it (K, carry, mode). Its summary."""
    import dataclasses

    from skillrise_gym.bench.runner import BenchConfig, run_bench

    spec = episode.spec.replace(split="test") if episode is not None else probe_episode(p)
    if agent is None:
        agent = policy_agent(model_dir, p, spec)
    try:
        bench = BenchConfig.from_episode(
            spec, out=str(out), num_sequences=p.eval_sequences, seed=p.seed, panel=p.panel, workers=0, parallel=64,
            progress=False, episode_from={"from": str(episode.path), "differs": {}} if episode is not None else None)
        # every sequence played to its end (a LaMer-only experiment's episode ends on a success)
        config = {"mode": "cross", "end_on_success": False, **config}
        return run_bench(dataclasses.replace(bench, **config), agent).summary
    finally:
        agent.close()


def evaluate(name: str, model_dir: str | None, p: Preset, work: Path, log, agent: Any = None,
             carry: tuple[str, ...] | None = None, repeat_agent: Any = None, episode: Any = None,
             reading: bool = True) -> dict[str, Any]:
    """Held-out families, every K and carry mode, through the bench runner with the hf agent (or `agent`),
    playing `episode` (`experiment_episode`: the one its arms trained on); with what the curated documents
    hold (carry skill: `skillrise_gym.documents`); with `reading` and R >= 2, the reading check too."""
    from skillrise_gym.bench.store import carry_run_dir

    carry = tuple(p.eval_carry) if carry is None else carry
    out = work / "eval-bench" / name
    log(f"[{name}] evaluating on held-out families: K={p.eval_K}, carry={list(carry)}, "
        f"{p.eval_sequences} sequences each")
    summary = held_out_bench(model_dir, p, out, agent, episode, K=list(p.eval_K), carry=list(carry))
    table: dict[str, Any] = {}
    for mode, per_mode in summary["by_carry"].items():
        table[mode] = {
            str(b["K"]): {"success": b["success"], "success_by_position": b["success_by_position"],
                          "invalid_format_rate": b["invalid_format_rate"]}
            for b in per_mode["blocks"] if b["sequences"]
        }
    result = {"model_dir": model_dir, "bench_dir": str(out), "by_carry": table, "panel": panel_of(summary),
              "episode": str(episode.path) if episode is not None else None,
              "documents": held_documents(carry_run_dir(out, "skill") / "turns.jsonl", p)}
    if reading and model_dir is not None and p.rules > 1:
        result["reading"] = reading_check(name, model_dir, p, work, log, episode)
    if p.repeat_k:
        result["repeat"] = evaluate_repeat(name, model_dir, p, work, log, agent=repeat_agent,
                                           carry=tuple(m for m in carry if m in ("skill", "reflect")), episode=episode)
    return result


def panel_of(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The panel an evaluation's blocks played (name, seed, hash per K), from its bench summary."""
    panels = {str(b["K"]): b["panel"] for mode in summary["by_carry"].values() for b in mode["blocks"]
              if b.get("panel")}
    if not panels:
        return None
    first = next(iter(panels.values()))
    return {"name": first["name"], "seed": first["seed"], "hash_by_K": {k: v["hash"] for k, v in panels.items()}}


def reading_check(name: str, model_dir: str, p: Preset, work: Path, log, episode: Any = None) -> dict[str, Any]:
    """The policy's solver on the perfect curator's documents (`PerfectDocuments`), held out, carry skill, at
    the largest K: success by position, and `reads_own_rule` (documents.py)."""
    K = max(p.eval_K)
    log(f"[{name}] reading check: its solver on the perfect curator's documents, K={K}")
    out = work / "eval-reading" / name
    spec = episode.spec if episode is not None else None
    summary = held_out_bench(None, p, out, PerfectDocuments(policy_agent(model_dir, p, spec)), episode, K=[K],
                             carry=["skill"])
    block = summary["by_carry"]["skill"]["blocks"][0]
    held = held_documents(out / "turns.jsonl", p).get(str(K), {})
    return {"K": K, "success": block["success"], "success_by_position": block["success_by_position"],
            "reads_own_rule": held.get("reads_own_rule"), "reading_turns": held.get("reading_turns", 0.0)}


def evaluate_repeat(name: str, model_dir: str | None, p: Preset, work: Path, log, agent: Any = None,
                    carry: tuple[str, ...] = ("skill", "reflect"), episode: Any = None) -> dict[str, Any]:
    """Repeat mode on held-out families: one task `p.repeat_k` times, the carry carrying across attempts;
    Pass@k (solved in one of the first k attempts) per carry mode."""
    log(f"[{name}] repeat mode on held-out families: {p.repeat_k} attempts, carry={list(carry)}")
    summary = held_out_bench(model_dir, p, work / "eval-repeat" / name, agent, episode, K=[p.repeat_k],
                             mode="repeat", carry=list(carry))
    return {mode: {"pass_at_k": list(per_mode["blocks"][0]["pass_at_k"].values()),
                   "success_by_position": per_mode["blocks"][0]["success_by_position"]}
            for mode, per_mode in summary["by_carry"].items() if per_mode["blocks"] and per_mode["blocks"][0]["sequences"]}


def held_documents(turns_path: Path, p: Preset) -> dict[str, dict[str, float]]:
    """Per K: the shares of curate turns whose document states every rule revealed so far, the latest rule,
    instance words (`skillrise_gym.documents.document_stats`)."""
    from skillrise_gym.backends.rulebook import RulebookBackend
    from skillrise_gym.documents import document_stats
    from skillrise_gym.records import iter_jsonl

    if not turns_path.exists():
        return {}
    tasks = {t.id: t for t in RulebookBackend(**backend_options(p)).list_tasks("test")}
    by_K: dict[str, list[dict[str, Any]]] = {}
    for row in iter_jsonl(turns_path):  # a torn last line (a killed bench) is skipped
        by_K.setdefault(str(row["extra"]["K"]), []).append(row)
    return {K: stats for K, rows in sorted(by_K.items()) if (stats := document_stats(rows, tasks.get,
                                                                                    lambda b: RulebookBackend))}


# ------------------------------------------------------------------------------------------ report
def ceilings(p: Preset) -> dict[str, list[float]]:
    from skillrise_gym.backends.rulebook import RulebookBackend

    return RulebookBackend(**backend_options(p)).ceilings(max(p.eval_K), "test")


def markdown(report: dict[str, Any]) -> str:
    p = report["preset"]
    spread = ("mean over seeds %s [range over seeds]" % ", ".join(map(str, p["seeds"]))) if p.get("seeds") else \
        f"seed {p['seed']}, success [95% CI]"
    lines = [f"Held-out families (test split), {spread} by K; carry skill / none / reflect. "
             f"Model {p['model']}" + (f" (arms start from {p['init']})" if p.get("init") else "")
             + f", {p['steps']} steps, R={p['rules']} rules, N={p['bins']} bins.", ""]
    header = "| policy | carry | " + " | ".join(f"K={k}" for k in p["eval_K"]) + f" | by position (K={max(p['eval_K'])}) |"
    lines += [header, "|" + "---|" * (len(p["eval_K"]) + 3)]
    for name, result in report["evaluations"].items():
        for mode, blocks in result["by_carry"].items():
            cells = []
            for k in p["eval_K"]:
                s = blocks.get(str(k), {}).get("success")
                cells.append(f"{s['mean']:.2f} [{s['ci'][0]:.2f}, {s['ci'][1]:.2f}]" if s else "-")
            top = blocks.get(str(max(p["eval_K"])), {}).get("success_by_position", [])
            lines.append(f"| {name} | {mode} | " + " | ".join(cells) + " | " + " / ".join(f"{x['mean']:.2f}" for x in top) + " |")
    if p.get("seeds"):
        K = str(max(p["eval_K"]))
        lines += ["", f"Per seed ({', '.join(map(str, p['seeds']))}), carry skill, K={K}, overall success:"]
        for name, result in report["evaluations"].items():
            values = result["by_carry"].get("skill", {}).get(K, {}).get("success", {}).get("per_seed", [])
            lines.append(f"- {name}: " + " / ".join(f"{v:.2f}" for v in values))
    K = str(max(p["eval_K"]))
    lines += ["", f"What the curated documents hold (carry skill, K={K}, share of curate turns): every rule revealed "
              "so far / the latest rule / instance words (brand, object); then keeping alone: of the turns with an "
              "earlier rule the latest task did not reveal again, the share that keeps it (0: latest rule only):"]
    for name, result in report["evaluations"].items():
        held = (result.get("documents") or {}).get(K)
        if held:
            keeps = (f"; keeps {held['keeps_earlier']:.2f} of {held['keeping_turns']:.0f}"
                     if "keeps_earlier" in held else "")
            lines.append(f"- {name}: {held['states_all']:.2f} / {held['states_latest']:.2f} / "
                         f"{held['instance_words']:.2f}{keeps}")
    reading = {name: r["reading"] for name, r in report["evaluations"].items() if r.get("reading")}
    if reading:
        lines += ["", f"Reading: each policy's solver on the perfect curator's documents (K={K}): success by position; "
                  "share of items solved whose document holds two rules naming different bins (0.5: one clause "
                  "followed whatever the item):"]
        for name, r in reading.items():
            share = r.get("reads_own_rule")
            lines.append(f"- {name}: " + " / ".join(f"{x['mean']:.2f}" for x in r["success_by_position"])
                         + (f"; reads its own rule {share:.2f} of {r['reading_turns']:.0f}" if share is not None else ""))
    c = report["ceilings"]
    lines += ["", "Ceilings at K=%d by position: " % max(p["eval_K"]) + "; ".join(
        f"{key.replace('_', ' ')} " + " / ".join(f"{x:.2f}" for x in values) for key, values in c.items())]
    repeats = {name: r["repeat"] for name, r in report["evaluations"].items() if r.get("repeat")}
    if repeats:
        lines += ["", f"Repeat mode (one held-out task {p.get('repeat_k')} times), Pass@k for k = 1..{p.get('repeat_k')} "
                  "[95% CI of the last]:", "", "| policy | carry | Pass@k | success by attempt |", "|---|---|---|---|"]
        for name, modes in repeats.items():
            for mode, block in modes.items():
                last = block["pass_at_k"][-1]
                lines.append(f"| {name} | {mode} | " + " / ".join(f"{x['mean']:.2f}" for x in block["pass_at_k"])
                             + f" [{last['ci'][0]:.2f}, {last['ci'][1]:.2f}] | "
                             + " / ".join(f"{x['mean']:.2f}" for x in block["success_by_position"]) + " |")
    return "\n".join(lines) + "\n"


def plots(report: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    def line_with_band(ax: Any, xs: list[int], items: list[dict[str, Any]], label: str) -> None:
        """Means as a line, their 95% CI (or range over seeds) as a shaded band; one point: an error bar."""
        means = [i["mean"] for i in items]
        if len(xs) == 1:
            ax.errorbar(xs, means, yerr=[[max(0.0, means[0] - items[0]["ci"][0])],
                                         [max(0.0, items[0]["ci"][1] - means[0])]], marker="o", capsize=3, label=label)
            return
        (line,) = ax.plot(xs, means, marker="o", label=label)
        ax.fill_between(xs, [i["ci"][0] for i in items], [i["ci"][1] for i in items], color=line.get_color(),
                        alpha=0.2, linewidth=0)

    paths = []
    p = report["preset"]
    # learning curves
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=100, sharey=True)
    for name, arm in report["arms"].items():
        steps = [r["step"] for r in arm["curve"]]
        for pos, ax in enumerate(axes):
            values = [r.get(f"success/pos{pos}", float("nan")) for r in arm["curve"]]
            window = max(1, len(values) // 15)
            smooth = [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1])
                      for i in range(len(values))]
            ax.plot(steps, smooth, label=name)
    for pos, ax in enumerate(axes):
        ax.axhline(report["ceilings"]["ignore_document"][0], color="grey", ls=":", label="chance")
        ax.set_title(f"training success at position {pos} (moving mean)")
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("success rate")
    axes[1].legend()
    paths.append(_save(fig, RESULTS / "transfer_learning_curves.png"))

    # success by position at the largest K, carry skill
    K = max(p["eval_K"])
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    xs = list(range(1, K + 1))
    for name, result in report["evaluations"].items():
        items = result["by_carry"].get("skill", {}).get(str(K), {}).get("success_by_position")
        if items:
            line_with_band(ax, xs, items, label=name)
    c = report["ceilings"]
    ax.plot(xs, c["ignore_document"], "k:", label="ceiling: document ignored")
    if "perfect_curator" in c:
        ax.plot(xs, c["perfect_curator"], "k--", label="ceiling: perfect curator")
    ax.set_xticks(xs)
    ax.set_xlim(0.5, K + 0.5)
    ax.set_xlabel("task position")
    ax.set_ylabel("success rate (held-out families)")
    ax.set_ylim(-0.02, 1.02)
    what = "range over seeds" if p.get("seeds") else "95% CI"
    ax.set_title(f"held-out success by position, K={K}, carry skill ({what})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    paths.append(_save(fig, RESULTS / "transfer_success_by_position.png"))

    # success against K, per arm and carry mode
    fig, axes = plt.subplots(1, len(CARRY), figsize=(13, 4), dpi=100, sharey=True)
    for ax, mode in zip(axes, CARRY):
        for name, result in report["evaluations"].items():
            blocks = result["by_carry"].get(mode, {})
            ks = [k for k in p["eval_K"] if str(k) in blocks]
            if ks:
                line_with_band(ax, ks, [blocks[str(k)]["success"] for k in ks], label=name)
        ax.set_title(f"carry {mode}")
        ax.set_xlabel("K")
        ax.set_xticks(p["eval_K"])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("success over all positions")
    axes[-1].legend(fontsize=8)
    paths.append(_save(fig, RESULTS / "transfer_success_vs_K.png"))
    return paths


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)


# ------------------------------------------------------------------------------------------ seeds
def sized(p: Preset, shared: Path, log) -> Preset:
    """`p` with a tiny model of another size than the embedded one (--tiny-width/--tiny-layers) built in
    `shared` and named as its model; `p` itself otherwise."""
    if p.model == "tiny" and (p.tiny_width, p.tiny_layers) != (64, 2):
        return replace(p, model=sized_tiny_model(p, shared, log))
    return p


def sized_tiny_model(p: Preset, work: Path, log) -> str:
    """The tiny model's recipe at `p.tiny_width` x `p.tiny_layers`, built once into `work` (offline)."""
    from skillrise_gym.models import build_tiny_model, is_model_folder

    folder = work / f"tiny-{p.tiny_width}x{p.tiny_layers}"
    if not is_model_folder(folder):
        log(f"building the tiny model at hidden size {p.tiny_width}, {p.tiny_layers} layers in {folder}")
        build_tiny_model(folder, hidden_size=p.tiny_width, num_layers=p.tiny_layers)
    return str(folder)


def run_seed(p: Preset, work: Path, args: Any, log, shared: Path) -> dict[str, Any]:
    """One whole experiment (warm start, arms, evaluations) with `p.seed`, in `work`; what all seeds share
    (a sized tiny model) goes in `shared`."""
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"preset": asdict(p), "arms": {}, "evaluations": {}, "ceilings": ceilings(p)}
    p = sized(p, shared, log)
    start = p.init or untrained(p, work, log)
    starts = {}
    for arm in args.arms:  # trained first: every evaluation plays the episode they trained on
        algo = algorithm(ARMS[arm]["algo"])  # one that writes reflections starts from its own warm start
        starts[arm] = untrained(p, work, log, algo=algo.name) if algo.reflects else start
        report["arms"][arm] = train_arm(arm, starts[arm], p, work, log, extend=args.extend)
    episode = experiment_episode(work, list(args.arms))
    report["episode"] = episode.spec.to_dict() if episode is not None else None
    for keep, name in ((False, "latest-rule-only"), (True, "perfect-curator")):  # reference rows, no model
        report["evaluations"][name] = evaluate(name, None, p, work, log, agent=ScriptedCurator(keep), carry=("skill",),
                                               repeat_agent=ScriptedCurator(keep), episode=episode)
    if not args.no_untrained:  # the policy before RL: the warm start, or the --init model ("init")
        name = "init" if p.init else "untrained"
        report["evaluations"][name] = evaluate(name, start, p, work, log, episode=episode)
    for arm in args.arms:
        own = f"untrained-{ARMS[arm]['algo']}"
        if starts[arm] != start and not args.no_untrained and own not in report["evaluations"]:
            report["evaluations"][own] = evaluate(own, starts[arm], p, work, log, carry=("reflect",), episode=episode)
        report["evaluations"][arm] = evaluate(arm, str(work / arm / "final"), p, work, log, episode=episode)
    return report


def combine(runs: dict[int, dict[str, Any]], p: Preset) -> dict[str, Any]:
    """Several seeds' reports as one: every success figure is the mean over seeds, with the range over
    seeds (min, max) where a single run has its 95% CI; the seeds' own reports are kept under "seeds"."""
    first = next(iter(runs.values()))
    evaluations: dict[str, Any] = {}
    for name in first["evaluations"]:
        by_carry: dict[str, Any] = {}
        for mode in first["evaluations"][name]["by_carry"]:
            blocks = {}
            for k in first["evaluations"][name]["by_carry"][mode]:
                per_seed = [r["evaluations"][name]["by_carry"][mode][k] for r in runs.values()]
                overall = [b["success"]["mean"] for b in per_seed]
                positions = list(zip(*[[x["mean"] for x in b["success_by_position"]] for b in per_seed]))
                blocks[k] = {
                    "success": {"mean": sum(overall) / len(overall), "ci": [min(overall), max(overall)],
                                "per_seed": overall},
                    "success_by_position": [{"mean": sum(v) / len(v), "ci": [min(v), max(v)], "per_seed": list(v)}
                                            for v in positions],
                    "invalid_format_rate": sum(b["invalid_format_rate"] for b in per_seed) / len(per_seed),
                }
            by_carry[mode] = blocks
        documents: dict[str, dict[str, float]] = {}
        for K in first["evaluations"][name].get("documents", {}):
            per_seed = [r["evaluations"][name].get("documents", {}).get(K) for r in runs.values()]
            per_seed = [d for d in per_seed if d]
            documents[K] = {key: sum(d[key] for d in per_seed) / len(per_seed) for key in per_seed[0]
                            if all(key in d for d in per_seed)}
        evaluations[name] = {"by_carry": by_carry, "documents": documents}
        readings = [r["evaluations"][name].get("reading") for r in runs.values()]
        if all(readings):
            positions = list(zip(*[[x["mean"] for x in r["success_by_position"]] for r in readings]))
            shares = [r["reads_own_rule"] for r in readings if r.get("reads_own_rule") is not None]
            evaluations[name]["reading"] = {
                "K": readings[0]["K"],
                "success_by_position": [{"mean": sum(v) / len(v), "ci": [min(v), max(v)], "per_seed": list(v)}
                                        for v in positions],
                "reads_own_rule": sum(shares) / len(shares) if shares else None,
                "reading_turns": sum(r["reading_turns"] for r in readings)}
    arms = {}
    for name in first["arms"]:
        curves = [r["arms"][name]["curve"] for r in runs.values()]
        arms[name] = {"curve": [{"step": rows[0]["step"], **{key: sum(row.get(key, 0.0) for row in rows) / len(rows)
                                                            for key in rows[0] if key != "step"}}
                                for rows in zip(*curves)],
                      "wall_seconds": sum(r["arms"][name]["wall_seconds"] for r in runs.values())}
    return {"preset": {**asdict(p), "seeds": list(runs)}, "arms": arms, "evaluations": evaluations,
            "ceilings": first["ceilings"], "seeds": {str(seed): r for seed, r in runs.items()},
            "aggregate": "mean over seeds; brackets and error bars: the range over seeds (min, max)"}


# ------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    global RESULTS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                     epilog="Writes transfer_experiment.json (configuration, learning curves, held-out "
                                            "tables with 95% CIs), transfer_experiment.md and the PNGs to --results-dir "
                                            "(default: benchmarks/results/).")
    parser.add_argument("--scale", action="store_true", help="the GPU preset (SmolLM2 + LoRA, K=3, more steps)")
    parser.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=list(ARMS))
    parser.add_argument("--no-untrained", action="store_true", help="skip evaluating the untrained policy")
    parser.add_argument("--warmstart-only", action="store_true",
                        help="build the warm start (WORK_DIR/reading-first/, WORK_DIR/untrained/) and stop: no arm, "
                             "no evaluation, no results; later runs link or reuse it")
    parser.add_argument("--work-dir", default="runs/transfer")
    parser.add_argument("--fresh", action="store_true",
                        help="retrain and re-evaluate every arm: deletes what the experiment made in WORK_DIR (warm "
                             "starts, the arms' runs, evaluations), nothing else")
    parser.add_argument("--extend", action="store_true",
                        help="continue arms trained for fewer than --steps from their last checkpoint (the "
                             "learning-rate decay stretched to the new end) instead of refusing them")
    parser.add_argument("--results-dir", default=str(RESULTS), help="where the JSON, Markdown and PNGs go")
    parser.add_argument("--report", action="store_true",
                        help="this run reports a result with settings fixed before "
                             "(benchmarks/experiments/decisive_experiment.py): needed for --panel test, which is never "
                             "for a design choice")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="run the whole experiment once per seed (each in WORK_DIR/seed<s>) and report the mean "
                             "over seeds with their range")
    # the preset's fields, made as every other CLI's (skillrise_gym.cli_fields); not given: absent from args
    # (SUPPRESS), so the preset's value stands; the help names both presets' values
    shown = lambda v: " ".join(map(str, v)) if isinstance(v, list) else (v if v != "" else "none")  # noqa: E731
    helps = {}
    for spec in fields(Preset):
        value, scale = getattr(CPU, spec.name), getattr(SCALE, spec.name)
        helps[spec.name] = (f"{spec.metadata['help']} (default: {shown(value)}"
                            + (f"; --scale: {shown(scale)})" if scale != value else ")")).replace("%", "%%")
    add_arguments(parser, Preset, [spec.name for spec in fields(Preset)],
                  defaults=dict.fromkeys((spec.name for spec in fields(Preset)), argparse.SUPPRESS), helps=helps)
    args = parser.parse_args(argv)
    RESULTS = Path(args.results_dir)
    preset = asdict(SCALE if args.scale else CPU)
    preset.update({k: v for k, v in vars(args).items() if k in preset and v is not None})
    p = Preset(**preset)
    if p.panel == "test" and not args.report:
        parser.error(f"--panel test without --report: {TEST_IS_FOR_REPORTING}")
    if p.warmstart_reading_first < 0 or p.warmstart_reading_rank < 1:
        parser.error("--warmstart-reading-first must be >= 0 and --warmstart-reading-rank >= 1")
    if p.init:
        from skillrise_gym.models import is_model_folder

        if not is_model_folder(p.init):
            parser.error(f"--init {p.init!r} is not a model folder (config.json) nor a LoRA adapter folder")
        if any(algorithm(ARMS[arm]["algo"]).reflects for arm in args.arms):
            parser.error("--init does not apply to the lamer arm (it starts from its own reflection warm start)")
        if args.warmstart_only:
            parser.error("--warmstart-only builds the format warm start, which --init replaces: give one of them")
    if args.warmstart_only and not (p.warmstart_steps or p.warmstart_reading_first):
        parser.error("--warmstart-only with --warmstart-steps 0 and no --warmstart-reading-first: nothing to build")
    if not args.warmstart_only:  # what the arms and evaluations need, before any warm start is built
        if not p.eval_K or min(p.eval_K) < 1:
            parser.error(f"--eval-K must be sequence lengths >= 1, got {' '.join(map(str, p.eval_K)) or 'none'}")
        if p.eval_sequences < 1:
            parser.error(f"--eval-sequences must be at least 1, got {p.eval_sequences}")
        if p.repeat_k < 0:
            parser.error(f"--repeat-k must be >= 0 (0: no repeat-mode evaluation), got {p.repeat_k}")
    from skillrise_train.config import TrainConfig

    try:  # the penalties (and the arms' G, S, K, steps) as skillrise-train checks them, before anything runs
        TrainConfig(invalid_penalty=p.invalid_penalty, overlong_penalty=p.overlong_penalty,
                    **({} if args.warmstart_only else {"G": p.G, "S": p.S, "K": p.K, "steps": p.steps}))
    except ValueError as exc:
        parser.error(str(exc))
    try:
        return _run(args, p)
    except Refused as exc:
        print(f"transfer_experiment: error: {exc.message}", file=sys.stderr, flush=True)
        return 2


def _run(args: Any, p: Preset) -> int:
    """`main` once the flags are checked: the work dir locked for the whole experiment (and cleared of the
    experiment's own folders with --fresh), then the warm start, the arms, the evaluations and the report."""
    work = Path(args.work_dir)
    held = lock_work_dir(work)
    try:
        if args.fresh:
            clear_experiment(work)
        return _experiment(args, p, work)
    finally:
        held.close()


def _experiment(args: Any, p: Preset, work: Path) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    started = time.perf_counter()
    seeds = list(dict.fromkeys(args.seeds or [p.seed]))
    folders = {seed: work / f"seed{seed}" if len(seeds) > 1 else work for seed in seeds}
    if args.warmstart_only:
        for seed, folder in folders.items():
            folder.mkdir(parents=True, exist_ok=True)
            log(f"warm start ready: {untrained(sized(replace(p, seed=seed), work, log), folder, log)}")
        log(f"done in {time.perf_counter() - started:.0f} s (--warmstart-only: no arm trained, no results written)")
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs = {}
    for seed, folder in folders.items():
        runs[seed] = run_seed(replace(p, seed=seed), folder, args, log, shared=work)
    report = runs[seeds[0]] if len(seeds) == 1 else combine(runs, p)
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    report["machine"] = {"cpus": os.cpu_count()}
    (RESULTS / "transfer_experiment.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (RESULTS / "transfer_experiment.md").write_text(table)
    print(table)
    for path in plots(report):
        log(f"wrote {path}")
    log(f"done in {report['wall_seconds']:.0f} s; results in {RESULTS}/transfer_experiment.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
