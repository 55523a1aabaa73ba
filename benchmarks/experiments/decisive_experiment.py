"""The experiment that decides: SkillRise's curate credit against its matched controls, over RL seeds, on a
test panel used once (issue 43).

Every setting is fixed here, in `SETTINGS` and `STAGES`, before any result exists; the evaluation plays the
reserved test panel (`skillrise_gym.panels`), which nothing else may tune on. Changing a setting is a commit,
seen in the history, not a flag.

Stages, in the order they run; each writes one JSON under benchmarks/results/decisive/ when it finishes, and a
rerun skips every stage whose JSON is there, so the experiment resumes from what is committed, on any machine:

    warmstart                  readfirst16's warm start (a reading-only LoRA merged in, then the format warm
                               start on R=2, N=4 families): the starting point of every R=1 run
    r1/<arm>-seed<s>           R=1, N=3, K=2, 25 RL steps from the warm start, arms skillrise and none, RL seeds
                               0 1 2; held out on the R=1 test panel (K=6, 100 sequences). Two of them are the
                               inits of the R=2 arms (`INITS`): skillrise seed 1, the init that curates, and the
                               first none run whose documents state the rule in at most 10% of curate turns,
                               the init that cannot
    r2/reference               the scripted rows (latest rule only, perfect curator) on the R=2 test panel
    r2/<init>/<arm>-seed<s>    R=2, N=4, K=4, 40 RL steps from <init> (curates | cannot), arms skillrise, none,
                               own, RL seeds 0 1 2; held out on the R=2 test panel (K=6, 100 sequences)
    r2/<init>/init             the init itself, before any R=2 step, on the same panel
    r2/<init>/norepeat-seed<s> last: SkillRise plus --repetition-penalty 2 (the document regrowth), a change of
                               method with its own arm on the same panel, reported beside SkillRise

Models live in --work-dir (default runs/decisive). The stages later stages start from (the warm start, the two
inits' R=1 runs) also pack their LoRA adapters into benchmarks/results/decisive/inits/ (with a manifest of
sha256), to be committed with their JSON: a machine without the work dir (a new session) restores them from
there, each file checked against the manifest and the weights against the stage's recorded digest, instead of
retraining them, which on another machine does not give the same bits (the first lineage's warm start, rebuilt
a day later, did not: benchmarks/results/decisive/lineage-1/, a pilot reported on its own). A model no commit
holds is rebuilt by the same code. Each run records the digest of the weights it started from and ended with
(`weights_digest`), and the report says when arms compared did not start from the same bits.

    python benchmarks/experiments/decisive_experiment.py status            # what is done, what is left, its cost
    python benchmarks/experiments/decisive_experiment.py run               # every unfinished stage, in order
    python benchmarks/experiments/decisive_experiment.py run --only r1/    # the stages whose name starts so
    python benchmarks/experiments/decisive_experiment.py pack              # pack the finished inits in --work-dir
    python benchmarks/experiments/decisive_experiment.py report            # decisive.json and decisive.md from the stages

A session that may end abruptly runs `bash scripts/commit_stages.sh` beside `run`: it commits each stage's JSON
(and the packed inits) as it lands, with the report and every page that renders it brought up to date.

The report (`analyse`): success on the test panel by arm x init x seed; per seed, SkillRise minus each control
on the same 100 sequences (positions 2-5, the positions where a document of two rules can be read: the
pre-registered measure), with a bootstrap CI over sequences; over seeds, the mean of the per-seed differences
with a t interval over the 3 seeds (a run-level interval: run-to-run variance included, sequences not pooled;
every seed plays the same panel, so the sequences drawn are not in it, and each verdict holds for this panel),
and how many seeds are positive; a verdict per comparison by the rule in `verdict` (decided only over every
seed). `verdicts` is the table of them that the README, docs/rulebook.md and the results page render.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:  # run as a file
    sys.path.insert(0, str(ROOT))

from benchmarks.experiments import documents_by_position  # noqa: E402
from benchmarks.experiments import transfer_experiment as te  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "decisive"

#: what every stage shares (the R=2 curriculum's settings: benchmarks/results/r2_smollm2/README.md), except the
#: dtype: float32 since the second lineage (2026-12-07). The curriculum and the pilot lineage ran RL and
#: generation in bfloat16, which is fast on a CPU with bfloat16 units and slow where it is emulated (a machine
#: without them: benchmarks/results/cpu_generation_no_bf16_units.json; there an R=1 arm's steps took several
#: times the pilot's); float32 runs alike on every machine a session may get
SMOL = dict(model="smollm2-135m-instruct", lora=True, max_new_tokens=48, dtype="float32", threads=2,
            lr=1e-4, G=8, S=1, overlong_penalty=2.0)
#: the warm start (readfirst16's); made once, seed 0
WARMSTART = te.Preset(**{**SMOL, "rules": 2, "bins": 4, "K": 3, "warmstart_reading_first": 100,
                         "warmstart_reading_rank": 16, "warmstart_steps": 200, "warmstart_batch": 8,
                         "warmstart_lr": 1e-3, "warmstart_sequences": 300, "warmstart_documents": "several",
                         "warmstart_reading": 16, "seed": 0})
#: the held-out evaluation of every stage: the test panel, K=6, 100 sequences, carry skill, greedy
EVALUATION = dict(panel="test", eval_K=[6], eval_sequences=100, eval_carry=["skill"], eval_temperature=0.0)
R1 = te.Preset(**{**SMOL, **EVALUATION, "rules": 1, "bins": 3, "K": 2, "steps": 25, "warmstart_steps": 0})
R2 = te.Preset(**{**SMOL, **EVALUATION, "rules": 2, "bins": 4, "K": 4, "steps": 40, "invalid_penalty": 2.0,
                  "warmstart_steps": 0})
SETTINGS = {"warmstart": WARMSTART, "r1": R1, "r2": R2}
#: the two inits of the R=2 arms, each the first of its candidate R=1 stages (in this order) that keeps
#: `INIT_PROMISE`. Until 2026-12-07 the init that cannot curate was R=1 SkillRise seed 2 (the pilot lineage's
#: seed 2 stayed at chance); in the second lineage that run learned to curate (its documents state the rule in
#: 0.72 of curate turns), so the choice was made again, in a commit, before any R=2 arm ran from it and before
#: any R=1 `none` run had finished: the R=1 runs whose curate turns are not trained (arm none), the same RL
#: budget from the same warm start, the curator left as the warm start made it. R=1 SkillRise seed 2 stays a
#: row of the R=1 table. If no candidate keeps its promise, the R=2 arms from that init are refused.
INITS = {"curates": ("r1/skillrise-seed1",), "cannot": ("r1/none-seed0", "r1/none-seed1", "r1/none-seed2")}
#: what each init's name promises, checked on its R=1 stage before any R=2 arm starts from it: the share of
#: curate turns whose documents state the rule on the R=1 test panel (`evaluation.documents.states_all`).
#: An R=1 run's outcome is not fixed by its seed across machines (the second lineage's SkillRise seed 2
#: curates, the pilot's did not), so an init is chosen by what its R=1 run does, not by its seed
INIT_PROMISE = {"curates": (0.9, 1.0), "cannot": (0.0, 0.1)}
#: a checkpoint every this many RL steps: an arm stopped mid-run (a session's end) is continued from its newest
#: complete checkpoint, exactly (skillrise-train --resume), not started over; not a setting of the science
SAVE_EVERY = 5
R2_ARMS = ("skillrise", "none", "own")
#: a change of method with its own arm, run after the main arms: SkillRise plus --repetition-penalty 2 (the
#: document regrowth); reported beside SkillRise, never folded into its figures
R2_METHOD_ARMS = ("norepeat",)
SEEDS = (0, 1, 2)
#: the measure pre-registered for the paired comparisons: mean success at these positions (0-based) of K=6
MEASURE = (2, 6)


R1_ARMS = ("skillrise", "none")


def stages() -> list[str]:
    """Every stage's name, in the order `run` plays them: the warm start, every R=1 run (the inits are among
    them), then one RL seed of every R=2 arm at a time (so a partial experiment is a whole seed)."""
    names = ["warmstart"] + [f"r1/{arm}-seed{s}" for arm in R1_ARMS for s in SEEDS] + ["r2/reference"]
    for seed in SEEDS:
        for init in INITS:
            names += [f"r2/{init}/{arm}-seed{seed}" for arm in R2_ARMS]
            if seed == SEEDS[0]:
                names.append(f"r2/{init}/init")
    for seed in SEEDS:
        for init in INITS:
            names += [f"r2/{init}/{arm}-seed{seed}" for arm in R2_METHOD_ARMS]
    return names


#: rough CPU minutes of each kind of stage at 2 threads on the 2-core box, float32, from the stages' recorded
#: stage_wall_seconds: warmstart 3149 s, r1/none-seed2 736 s; an R=2 arm 2600-3739 s in one sitting
#: (r2/curates/skillrise-seed0, r2/curates/own-seed0, r2/cannot/none-seed0, r2/cannot/skillrise-seed0: the
#: arms from the init that cannot curate step slower), an init's evaluation 509 s
COST_MINUTES = {"warmstart": 53, "r1": 12, "r2/reference": 1, "init": 9, "r2": 52}  # r2: an arm


def progress(name: str, work: Path) -> str | None:
    """Where an unfinished arm stage stands in the work dir (the steps its metrics record, its newest
    checkpoint, which a rerun continues from), or None when nothing of it is there."""
    parts = name.split("/")
    if parts[0] not in ("r1", "r2") or "-seed" not in parts[-1]:
        return None
    arm, seed = parts[-1].rsplit("-seed", 1)
    folder = work.joinpath(*parts[:-1], f"seed{seed}", arm)
    metrics = folder / "metrics.jsonl"
    if not metrics.is_file():
        return None
    steps = sum(1 for line in metrics.read_text(encoding="utf-8").splitlines() if '"success/mean"' in line)
    saved = sorted((int(c.name.split("-")[1]) for c in folder.glob("checkpoint-*") if c.name.split("-")[1].isdigit()),
                   reverse=True)
    total = (R1 if parts[0] == "r1" else R2).steps
    trained = (folder / "final").is_dir()
    return (f"trained ({total} steps), evaluation not finished" if trained else
            f"in progress: {steps} of {total} steps recorded, newest checkpoint "
            + (f"{saved[0]} (a rerun continues from it)" if saved else "none yet (a rerun starts it over)"))


def cost(name: str) -> int:
    if name in COST_MINUTES:
        return COST_MINUTES[name]
    if name.endswith("/init"):
        return COST_MINUTES["init"]
    return COST_MINUTES[name.split("/")[0]]


def result_path(name: str, results: Path | None = None) -> Path:
    return (results or RESULTS) / f"{name}.json"


def r1_run(stage: str) -> tuple[str, int]:
    """An R=1 stage's arm and seed ("r1/none-seed0" -> ("none", 0))."""
    arm, seed = stage[3:].rsplit("-seed", 1)
    return arm, int(seed)


def r1_folder(stage: str) -> str:
    """An R=1 stage's run folder under the work dir ("r1/none-seed0" -> "r1/seed0/none"), as `Experiment._r1`
    makes it."""
    arm, seed = r1_run(stage)
    return f"r1/seed{seed}/{arm}"


#: how `init_choice` begins its reason when every candidate ran and none keeps the promise
NO_CANDIDATE = "no candidate"


def init_choice(init: str, results: Path | None = None) -> tuple[str | None, str]:
    """The R=1 stage that is `init` (the first of its candidates, `INITS`, whose documents keep `INIT_PROMISE`)
    and why: (stage, "chosen"), or (None, what it waits for), or (None, why no candidate keeps it)."""
    low, high = INIT_PROMISE[init]
    seen = []
    for stage in INITS[init]:
        path = result_path(stage, results)
        if not path.is_file():
            return None, (f"the init '{init}' is the first of {', '.join(INITS[init])} whose documents state the "
                          f"rule in {low}-{high} of its curate turns; {stage} has not run yet (run it first: "
                          f"decisive_experiment.py run --only {stage})")
        share = json.loads(path.read_text())["evaluation"]["documents"].get("states_all")
        if share is not None and low <= share <= high:
            return stage, "chosen"
        seen.append(f"{path}: {share}")
    return None, (f"{NO_CANDIDATE} for the init '{init}' keeps its promise (documents state the rule in "
                  f"{low}-{high} of its curate turns, the init that "
                  f"{'curates' if init == 'curates' else 'cannot curate'}): {'; '.join(seen)}; choose the "
                  "init again (INITS, a commit) before any R=2 arm starts from it")


def init_stage(init: str, results: Path | None = None, strict: bool = True) -> str | None:
    """The R=1 stage that is `init` (`init_choice`). With `strict`, `te.Refused` saying why when there is none
    yet (a candidate before it has not run, or none keeps the promise: the files and their shares named);
    else None then."""
    stage, why = init_choice(init, results)
    if stage is None and strict:
        raise te.Refused(why)
    return stage


# ------------------------------------------------------------------------------------------ models
def weights_digest(folder: Path) -> str:
    """sha256 (16 hex digits) of a model folder's weight files (*.safetensors, *.bin, by relative path): two
    folders with the same digest hold the same bits, wherever they were made."""
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".safetensors", ".bin"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no weight file")
    for path in files:
        digest.update(str(path.relative_to(folder)).encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def machine() -> dict[str, Any]:
    """What a stage ran on, as far as it bears on the bits: the CPU count, its model, and the instruction set
    torch's kernels use (a rebuilt model matches a committed digest only where the kernels agree)."""
    import platform

    import torch

    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": model or platform.processor(), "torch": torch.__version__,
            "kernels": torch.backends.cpu.get_cpu_capability()}


# ------------------------------------------------------------------------------------------ committed inits
#: where the inits' bits are committed, under the results folder: retraining them on another machine does not
#: give the same bits (the warm start rebuilt on 2026-12-07 differed from the one committed the day before),
#: so arms run in later sessions could not be paired with earlier ones on the same init
INITS_FOLDER = "inits"
#: a placeholder for the work dir in the committed text files (adapter configs name their base by path)
WORK_MARK = "{WORK}"
TEXT_SUFFIXES = (".json", ".jsonl", ".txt", ".md", ".jinja")


def packed_paths(stage: str, results: Path | None = None) -> tuple[str, ...]:
    """The paths (under the work dir) whose files a stage's model is restored from: the warm start's two LoRA
    adapters (reading-first, and the format warm start on it), an init's R=1 run (its final/ adapter and what
    `te.train_arm` reads to know the run finished; an R=1 stage is an init once its record says it keeps the
    promise, `init_stage`). Empty for stages no later stage starts from."""
    if stage == "warmstart":
        adapter = WARMSTART.warmstart_reading_first and WARMSTART.lora  # else no reading-first adapter is made
        return (("warmstart/" + te.READING_FIRST_ADAPTER,) if adapter else ()) + ("warmstart/untrained",)
    if stage in {init_stage(init, results, strict=False) for init in INITS}:
        run = r1_folder(stage)
        return (f"{run}/final", f"{run}/config.json", f"{run}/metrics.jsonl", f"{run}/wall_seconds.txt")
    return ()


def _files(root: Path, relative: str) -> list[str]:
    path = root / relative
    if path.is_file():
        return [relative]
    return sorted(str(p.relative_to(root)) for p in path.rglob("*") if p.is_file())


class Experiment:
    def __init__(self, work: Path, results: Path, log: Any) -> None:
        self.work, self.results, self.log = work, results, log
        self.code = code_version()  # the code this process loaded, not the tree's when a stage ends

    # ---------------------------------------------------------------------------------- inits
    @property
    def inits(self) -> Path:
        return self.results / INITS_FOLDER

    def manifest(self) -> dict[str, dict[str, str]]:
        path = self.inits / "manifest.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def pack(self, stage: str) -> list[str]:
        """Copy the files a finished stage's model is restored from into the committed inits folder (the work
        dir's path replaced by a placeholder in text files); their sha256 go to inits/manifest.json. The
        relative paths packed."""
        work = self.work.resolve()
        packed: dict[str, str] = {}
        for relative in packed_paths(stage, self.results):
            if not (work / relative).exists():
                raise te.Refused(f"cannot pack {stage}: {work / relative} is missing (the stage's model was not "
                                 "made in this work dir)")
            for name in _files(work, relative):
                data = (work / name).read_bytes()
                if Path(name).suffix in TEXT_SUFFIXES:
                    data = data.replace(str(work).encode(), WORK_MARK.encode())
                target = self.inits / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                packed[name] = hashlib.sha256(data).hexdigest()
        if packed:
            manifest = self.manifest()
            manifest[stage] = packed
            (self.inits / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            self.log(f"[inits] {stage}: {len(packed)} files packed in {self.inits} "
                     f"({sum((self.inits / n).stat().st_size for n in packed) / 1e6:.1f} MB)")
        return sorted(packed)

    def pack_inits(self) -> list[str]:
        """Pack every finished stage later stages start from that the manifest lacks and the work dir holds
        (the warm start, each chosen init): an R=1 run becomes an init when its own record lands, or later,
        when an earlier candidate's record lands and does not keep its promise. The stages packed."""
        manifest, packed = self.manifest(), []
        chosen = [init_stage(init, self.results, strict=False) for init in INITS]
        for stage in ["warmstart"] + [stage for stage in chosen if stage]:
            if (stage not in manifest and result_path(stage, self.results).is_file()
                    and all((self.work / p).exists() for p in packed_paths(stage, self.results))):
                self.pack(stage)
                packed.append(stage)
        return packed

    def restore(self, stage: str) -> bool:
        """A finished stage's model put back in the work dir from the committed inits, when the work dir lacks
        it (a fresh machine): every file checked against the manifest, the work dir's path put back, the
        weights' digest checked against the stage's record; the warm start's reading-first model rebuilt from
        its adapter (merged into the base model: on another CPU its merged bits may differ in the last place;
        the adapters are the committed bits). False when there is nothing to restore."""
        files = self.manifest().get(stage)
        record_path = result_path(stage, self.results)
        work = self.work.resolve()
        needed = [work / p for p in packed_paths(stage, self.results)]
        if stage == "warmstart" and any(p.name == te.READING_FIRST_ADAPTER for p in needed):
            needed.append(work / "warmstart" / "reading-first")  # the model merged from that adapter
        if not files or not record_path.is_file() or all(p.exists() for p in needed):
            return False
        for name, sha in sorted(files.items()):
            source = self.inits / name
            data = source.read_bytes() if source.is_file() else b""
            if hashlib.sha256(data).hexdigest() != sha:
                raise te.Refused(f"the committed init file {source} is missing or differs from "
                                 f"{self.inits / 'manifest.json'}: restore it from git (git checkout -- {source})")
            if Path(name).suffix in TEXT_SUFFIXES:
                data = data.replace(WORK_MARK.encode(), str(work).encode())
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        record = json.loads(record_path.read_text())
        folder = work / ("warmstart/untrained" if stage == "warmstart" else packed_paths(stage, self.results)[0])
        restored = weights_digest(folder)
        if restored != record["model"]["digest"]:
            raise te.Refused(f"{folder} restored from {self.inits} has weights digest {restored}, "
                             f"not the {record['model']['digest']} that {record_path} recorded")
        self.log(f"[inits] {stage} restored from {self.inits} (weights digest {record['model']['digest']})")
        if stage == "warmstart" and (work / "warmstart" / te.READING_FIRST_ADAPTER).is_dir():
            merged = te.restore_reading_first(WARMSTART, work / "warmstart" / te.READING_FIRST_ADAPTER,
                                              work / "warmstart" / "reading-first")
            digest, committed = weights_digest(Path(merged)), record["model"].get("reading_first")
            self.log(f"[inits] reading-first merged from its adapter: digest {digest}"
                     + (" (the committed one)" if digest == committed else
                        f" (committed {committed}: merged on another CPU, equal to rounding)"))
        return True

    def reading_first_digest(self) -> dict[str, str]:
        """The digest of the reading-first model this machine merged (under every init's adapters): equal
        across machines only where their CPUs merge alike, which a reader of two arms' records can check."""
        folder = self.work / "warmstart" / "reading-first"
        return {"reading_first": weights_digest(folder)} if folder.is_dir() else {}

    def warm_start(self) -> Path:
        """The warm start's folder: restored from the committed inits, else built, when absent."""
        folder = self.work / "warmstart"
        folder.mkdir(parents=True, exist_ok=True)
        self.restore("warmstart")
        return Path(te.untrained(WARMSTART, folder, self.log))

    def r1_final(self, arm: str, seed: int) -> Path:
        """The R=1 run's final/ (trained when absent); its train_arm record."""
        return self._r1(arm, seed)[0]

    def _r1(self, arm: str, seed: int) -> tuple[Path, dict[str, Any], Path]:
        start = self.warm_start()
        self.restore(f"r1/{arm}-seed{seed}")
        work = self.work / "r1" / f"seed{seed}"
        work.mkdir(parents=True, exist_ok=True)
        p = replace(R1, seed=seed)
        trained = te.train_arm(arm, str(start), p, work, self.log, save_every=SAVE_EVERY)
        return work / arm / "final", trained, work

    def init_final(self, init: str) -> Path:
        """The final/ of the R=1 run that is `init` (`init_stage`: refused when no recorded run keeps the promise),
        from the work dir or the committed inits, and only with the weights its record names: an init is never
        retrained here (on another machine that would not give the run whose documents kept the promise)."""
        stage = init_stage(init, self.results)
        self.restore(stage)
        final = self.work / r1_folder(stage) / "final"
        recorded = json.loads(result_path(stage, self.results).read_text())["model"]["digest"]
        if not final.is_dir():
            raise te.Refused(f"the init '{init}' is {stage}, but its model is neither in {final} nor committed in "
                             f"{self.inits} (pack it where it was made: decisive_experiment.py pack --work-dir "
                             "<that work dir>); retraining it would not give the run its record describes")
        found = weights_digest(final)
        if found != recorded:
            raise te.Refused(f"{final} has weights digest {found}, not the {recorded} that "
                             f"{result_path(stage, self.results)} recorded: not the init its record describes")
        return self.r1_final(*r1_run(stage))

    def _r2(self, init: str, arm: str, seed: int) -> tuple[Path, dict[str, Any], Path, Path]:
        start = self.init_final(init)
        work = self.work / "r2" / init / f"seed{seed}"
        work.mkdir(parents=True, exist_ok=True)
        p = replace(R2, seed=seed, init=str(start))
        trained = te.train_arm(arm, str(start), p, work, self.log, save_every=SAVE_EVERY)
        return work / arm / "final", trained, work, start

    def r2_episode(self, init: str) -> Any:
        """The episode the R=2 arms from `init` trained on, which its init is evaluated on: read from the
        committed record of its SkillRise seed-0 stage when there is one (a fresh machine does not retrain that
        arm to learn it), else from that arm's final/ (trained first)."""
        from skillrise_gym.episode import EpisodeSpec, SavedEpisode

        path = result_path(f"r2/{init}/skillrise-seed{SEEDS[0]}", self.results)
        if path.is_file():
            return SavedEpisode(EpisodeSpec.from_dict(json.loads(path.read_text())["episode"], str(path)), path)
        return te.arm_episode(self._r2(init, "skillrise", SEEDS[0])[0])

    # ---------------------------------------------------------------------------------- stages
    def run_stage(self, name: str) -> dict[str, Any]:
        started = time.perf_counter()
        if name == "warmstart":
            folder = self.warm_start()
            first = folder.parent / "reading-first"
            record = {"model": {"digest": weights_digest(folder),
                                **({"reading_first": weights_digest(first)} if first.is_dir() else {})},
                      "settings": asdict(WARMSTART)}
        elif name == "r2/reference":
            record = {"rows": {}}
            work = self.work / "r2" / "reference"
            for keep, row in ((False, "latest-rule-only"), (True, "perfect-curator")):
                evaluation = te.evaluate(row, None, R2, work, self.log, agent=te.ScriptedCurator(keep),
                                         carry=("skill",), reading=False)
                record["rows"][row] = self.held_out(evaluation, R2)
            record["settings"] = asdict(R2)
        elif name.startswith("r1/"):
            arm, seed = name[3:].rsplit("-seed", 1)
            final, trained, work = self._r1(arm, int(seed))
            record = self.trained_record(arm, final, trained, work, replace(R1, seed=int(seed)),
                                         start=self.work / "warmstart" / "untrained")
        elif name.endswith("/init"):
            init = name.split("/")[1]
            start = self.init_final(init)
            p = replace(R2, init=str(start))
            work = self.work / "r2" / init / "init"
            evaluation = te.evaluate("init", str(start), p, work, self.log, carry=("skill",),
                                     episode=self.r2_episode(init), reading=False)
            record = {"model": {"path": str(start), "digest": weights_digest(start)},
                      "evaluation": self.held_out(evaluation, p), "settings": asdict(p)}
        else:
            _, init, rest = name.split("/")
            arm, seed = rest.rsplit("-seed", 1)
            final, trained, work, start = self._r2(init, arm, int(seed))
            record = self.trained_record(arm, final, trained, work, replace(R2, seed=int(seed), init=str(start)),
                                         start=start)
        record.update(stage=name, code=self.code, machine=machine(),
                      stage_wall_seconds=round(time.perf_counter() - started, 1))
        return record

    def trained_record(self, arm: str, final: Path, trained: dict[str, Any], work: Path, p: te.Preset,
                       start: Path) -> dict[str, Any]:
        episode = te.arm_episode(final)
        evaluation = te.evaluate(arm, str(final), p, work, self.log, carry=("skill",), episode=episode,
                                 reading=False)
        return {"arm": arm, "settings": asdict(p), "episode": episode.spec.to_dict(),
                "start": {"path": str(start), "digest": weights_digest(start), **self.reading_first_digest()},
                "model": {"digest": weights_digest(final)},
                "train_wall_seconds": trained["wall_seconds"], "curve": trained["curve"],
                "evaluation": self.held_out(evaluation, p),
                "documents_by_position": documents_by_position.summarise(work, p.max_new_tokens, arm)}

    def held_out(self, evaluation: dict[str, Any], p: te.Preset) -> dict[str, Any]:
        """An evaluation's figures at K=6 with carry skill, and every sequence's success by position (what
        the paired comparisons are computed from)."""
        from skillrise_gym.bench.store import carry_run_dir
        from skillrise_gym.records import iter_jsonl

        K = str(max(p.eval_K))
        block = evaluation["by_carry"]["skill"][K]
        rows = sorted((r for r in iter_jsonl(carry_run_dir(Path(evaluation["bench_dir"]), "skill") / "results.jsonl")
                       if str(r["K"]) == K), key=lambda r: r["index"])
        return {"K": int(K), "panel": {**evaluation["panel"], "hash": evaluation["panel"]["hash_by_K"][K]},
                "success": block["success"], "success_by_position": block["success_by_position"],
                "invalid_format_rate": block["invalid_format_rate"],
                "documents": evaluation["documents"].get(K, {}),
                "per_sequence": {r["sequence_id"]: [int(bool(s)) for s in r["success"]] for r in rows}}


def code_version() -> dict[str, Any]:
    """The commit the stage ran and whether the tree had uncommitted changes."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = git("status", "--porcelain", "--", "skillrise_gym", "skillrise_train",
                "benchmarks/experiments/transfer_experiment.py", "benchmarks/experiments/decisive_experiment.py")
    return {"commit": git("rev-parse", "HEAD")[:12] or None, "dirty": bool(dirty)}


# ------------------------------------------------------------------------------------------ analysis
def measure(per_sequence: dict[str, list[int]]) -> dict[str, float]:
    """sequence id -> mean success at the pre-registered positions (`MEASURE`)."""
    a, b = MEASURE
    return {s: sum(v[a:b]) / (b - a) for s, v in per_sequence.items()}


def paired(mine: dict[str, Any], other: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """`mine` minus `other` on the one panel both played (refused otherwise): the mean per-sequence difference
    of `measure`, with a bootstrap 95% CI over sequences."""
    import numpy as np

    from skillrise_gym.bench.metrics import bootstrap_ci
    from skillrise_gym.panels import check_same_panel

    check_same_panel((mine["what"], mine["evaluation"]["panel"]["hash"]),
                     (other["what"], other["evaluation"]["panel"]["hash"]))
    a, b = measure(mine["evaluation"]["per_sequence"]), measure(other["evaluation"]["per_sequence"])
    diffs = np.array([a[s] - b[s] for s in sorted(a)])
    low, high = bootstrap_ci(diffs, seed=seed)
    return {"difference": round(float(diffs.mean()), 4), "ci": [round(float(low), 4), round(float(high), 4)],
            "sequences": len(diffs)}


def over_seeds(values: list[float]) -> dict[str, Any]:
    """The mean of per-seed values with a t 95% interval over seeds (None with fewer than 2)."""
    from skillrise_gym.bench.metrics import t_quantile

    n = len(values)
    if not n:
        raise ValueError("over_seeds needs at least one seed's value")
    mean = sum(values) / n
    if n < 2:
        return {"mean": round(mean, 4), "ci": None, "seeds": n, "positive": sum(v > 0 for v in values)}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return {"mean": round(mean, 4), "ci": [round(mean - half, 4), round(mean + half, 4)], "seeds": n,
            "positive": sum(v > 0 for v in values)}


def verdict(over: dict[str, Any], planned: int | None = None) -> str:
    """What a comparison shows, by a rule fixed before any R=2 comparison had more than one seed: nothing until
    every planned seed has landed; then "above" when the t interval over seeds lies above 0, "below" when it
    lies below, else "tie" (the interval includes 0, whatever the per-seed intervals say)."""
    planned = len(SEEDS) if planned is None else planned
    if over["seeds"] < planned or over["ci"] is None:
        return f"not decided ({over['seeds']} of {planned} seeds)"
    low, high = over["ci"]
    return "above" if low > 0 else "below" if high < 0 else "tie"


def r2_comparisons() -> list[tuple[str, str]]:
    """The paired comparisons planned at R=2 within each init: SkillRise minus each control and minus its init
    (no R=2 step), then each change of method minus SkillRise and minus `none`."""
    planned = [("skillrise", c) for c in [a for a in R2_ARMS if a != "skillrise"] + ["init"]]
    return planned + [(m, c) for m in R2_METHOD_ARMS for c in ("skillrise", "none")]


def load_stages(results: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for name in stages():
        path = result_path(name, results)
        if path.is_file():
            record = json.loads(path.read_text())
            record["what"] = name
            found[name] = record
    return found


def start_digests(done: dict[str, dict[str, Any]], init: str) -> set[str]:
    """The weights digests the R=2 stages from `init` started from: the init evaluated (its `model`) and every
    arm's `start`. One digest: every comparison from that init is paired on the same bits."""
    return {record["model"]["digest"] if name.endswith("/init") else record["start"]["digest"]
            for name, record in done.items() if name.startswith(f"r2/{init}/")}


def analyse(results: Path) -> dict[str, Any]:
    """The report of what has finished: every figure computed from the stages' JSON."""
    done = load_stages(results)
    choices = {init: init_choice(init, results) for init in INITS}
    report: dict[str, Any] = {
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "measure": f"mean success at positions {MEASURE[0]}-{MEASURE[1] - 1} (0-based) of K=6, test panel",
        "interval": "per seed: bootstrap 95% CI over the panel's sequences; over seeds: mean of the per-seed "
                    "differences, t 95% interval over seeds (df = seeds - 1). Every seed plays the same panel, so "
                    "the interval over seeds is over RL seeds on this panel: which sequences were drawn is not in "
                    "it. An init is one greedy evaluation shared by every seed, so a comparison with it varies "
                    "with the arm alone",
        "verdict_rule": f"a comparison is decided only when all {len(SEEDS)} seeds have landed: above when the t "
                        "interval over seeds lies above 0, below when it lies below, else a tie; each planned "
                        "comparison at 95%, not adjusted for their number",
        "stages_done": sorted(done), "stages_left": [n for n in stages() if n not in done],
        "inits": {init: stage for init, (stage, _) in choices.items()},
        "inits_why": {init: why for init, (_, why) in choices.items()},
        "inits_rule": f"each init is the first of its candidate R=1 runs whose documents state the rule in the "
                      f"promised share of curate turns: " + "; ".join(
                          f"{init}: {', '.join(INITS[init])}, {INIT_PROMISE[init][0]}-{INIT_PROMISE[init][1]}"
                          for init in INITS),
        "r2": {}, "r1": {}, "reference": {}}
    if "r2/reference" in done:
        report["reference"] = {row: summary_of(ev) for row, ev in done["r2/reference"]["rows"].items()}
    for init in INITS:
        section: dict[str, Any] = {"arms": {}, "paired": {}, "init": None}
        if f"r2/{init}/init" in done:
            section["init"] = summary_of(done[f"r2/{init}/init"]["evaluation"])
        for arm in R2_ARMS + R2_METHOD_ARMS:
            for seed in SEEDS:
                record = done.get(f"r2/{init}/{arm}-seed{seed}")
                if record:
                    section["arms"].setdefault(arm, {})[str(seed)] = {
                        **summary_of(record["evaluation"]), "documents": document_figures(record),
                        "start_digest": record["start"]["digest"]}
        section["same_start"] = len(start_digests(done, init)) <= 1
        for arm, control in r2_comparisons():
            per_seed = {}
            for seed in SEEDS:
                mine = done.get(f"r2/{init}/{arm}-seed{seed}")
                other = done.get(f"r2/{init}/init" if control == "init" else f"r2/{init}/{control}-seed{seed}")
                if mine and other:
                    per_seed[str(seed)] = paired(mine, other, seed=seed)
            if per_seed:
                over = over_seeds([d["difference"] for d in per_seed.values()])
                section["paired"][f"{arm} - {control}"] = {"per_seed": per_seed, "over_seeds": over,
                                                           "verdict": verdict(over)}
        report["r2"][init] = section
    for arm in R1_ARMS:
        for seed in SEEDS:
            record = done.get(f"r1/{arm}-seed{seed}")
            if record:
                report["r1"].setdefault(arm, {})[str(seed)] = {**summary_of(record["evaluation"]),
                                                              "documents": record["evaluation"]["documents"]}
    pairs = {}
    for seed in SEEDS:
        mine, other = done.get(f"r1/skillrise-seed{seed}"), done.get(f"r1/none-seed{seed}")
        if mine and other:
            pairs[str(seed)] = paired(mine, other, seed=seed)
    if pairs:
        over = over_seeds([d["difference"] for d in pairs.values()])
        report["r1_paired"] = {"skillrise - none": {"per_seed": pairs, "over_seeds": over, "verdict": verdict(over)}}
    return report


def document_figures(record: dict[str, Any]) -> dict[str, Any]:
    """What a trained arm's held-out documents hold: shares of curate turns stating every rule so far, keeping
    an earlier rule, repeating a clause (mean over curate positions: the regrowth pathology), and curate
    completions cut at the token budget."""
    held = record["evaluation"]["documents"]
    by_position = record.get("documents_by_position") or {}
    repeats = [r["repeats_a_clause"] for r in by_position.get("evaluation_by_curate_position", [])]
    return {"states_all": held.get("states_all"), "keeps_earlier": held.get("keeps_earlier"),
            "repeats_a_clause": round(sum(repeats) / len(repeats), 4) if repeats else None,
            "cut": (by_position.get("evaluation_curate") or {}).get("cut")}


def summary_of(evaluation: dict[str, Any]) -> dict[str, Any]:
    a, b = MEASURE
    per = list(evaluation["per_sequence"].values())
    return {"success": round(evaluation["success"]["mean"], 4), "ci": [round(x, 4) for x in evaluation["success"]["ci"]],
            "by_position": [round(x["mean"], 4) for x in evaluation["success_by_position"]],
            "measure": round(sum(sum(v[a:b]) / (b - a) for v in per) / len(per), 4),
            "panel": evaluation["panel"]["hash"]}


def not_chosen(why: str) -> str:
    return "none keeps its promise" if why.startswith(NO_CANDIDATE) else "not chosen yet"


def signed(x: Any) -> str:
    """A difference as the report writes it: +0.080 (- when there is none)."""
    return "-" if x is None else f"{x:+.3f}" if isinstance(x, float) else str(x)


def interval_of(ci: Any) -> str:
    """An interval as the report writes it: [+0.040, +0.125] (- when there is none)."""
    return "-" if not ci else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


#: how the verdicts table names an init and a comparison's arms
INIT_WORDS = {"curates": "the init that curates", "cannot": "the init that cannot curate"}
ARM_WORDS = {"skillrise": "SkillRise", "none": "`none`", "own": "`own`", "init": "its init (no R=2 step)",
             "norepeat": "`norepeat`"}
#: what the verdicts table says under itself of the change of method
NOREPEAT_WORDS = "`norepeat`: SkillRise with `--repetition-penalty {0:g}` (a curate turn whose document states a " \
                 "clause twice has {0:g} taken off its advantage), a change of method reported beside SkillRise, " \
                 "never folded into its rows.".format(te.ARMS["norepeat"]["repetition_penalty"])


def verdicts(report: dict[str, Any]) -> str:
    """One row per planned comparison, landed or not: how many seeds have landed, how many are above 0, the mean
    over seeds with its t interval, and the verdict by the committed rule. The README and the results page render
    this table (`decisive/verdicts`), so what they claim is what decisive.json decides, stage by stage."""
    def row(name: str, where: str, block: dict[str, Any] | None) -> str:
        arm, control = name.split(" - ")
        what = f"{ARM_WORDS[arm]} minus {ARM_WORDS[control]}"
        if not block:
            return f"| {what} | {where} | 0 of {len(SEEDS)} | - | - | {verdict({'seeds': 0, 'ci': None})} |"
        o = block["over_seeds"]
        ci = f" {interval_of(o['ci'])}" if o["ci"] else ""
        return (f"| {what} | {where} | {o['seeds']} of {len(SEEDS)} | {o['positive']} of {o['seeds']} | "
                f"{signed(o['mean'])}{ci} | {verdict(o)} |")

    lines = ["| comparison (positions 2-5, test panel) | trained from | seeds landed | seeds above 0 | "
             "over seeds: mean [t 95% interval] | verdict |", "|---|---|---|---|---|---|",
             row("skillrise - none", "the warm start, R=1", (report.get("r1_paired") or {}).get("skillrise - none"))]
    for init in INITS:
        paired = (report["r2"].get(init) or {}).get("paired", {})
        lines += [row(f"{arm} - {control}", f"{INIT_WORDS[init]}, R=2", paired.get(f"{arm} - {control}"))
                  for arm, control in r2_comparisons()]
    return "\n".join(lines) + "\n\n" + NOREPEAT_WORDS


def markdown(report: dict[str, Any]) -> str:
    """decisive.md: the report's tables, rendered from decisive.json alone."""
    lines = ["# The decisive experiment (generated by `python benchmarks/experiments/decisive_experiment.py report`; do not edit)",
             "", f"Measure: {report['measure']}. Intervals: {report['interval']}."
             + (f" Verdict: {report['verdict_rule']}." if report.get("verdict_rule") else ""), "",
             f"Stages done: {len(report['stages_done'])} of {len(report['stages_done']) + len(report['stages_left'])}"
             + (f"; left: {', '.join(report['stages_left'])}" if report["stages_left"] else ""), ""]
    if report.get("verdict_rule"):  # the pilot lineage's report predates the rule
        lines += ["## Verdicts", "", verdicts(report), ""]

    # a report from before the inits were chosen by their R=1 runs' behaviour (the pilot lineage) names none:
    # its inits were then SkillRise seeds 1 and 2
    inits = report.get("inits", {"curates": "r1/skillrise-seed1", "cannot": "r1/skillrise-seed2"})
    why = report.get("inits_why", {})
    if "inits_rule" in report:
        lines += ["Inits: " + "; ".join(f"{init}: {stage or not_chosen(why.get(init, ''))}" for init, stage in inits.items())
                  + f" ({report['inits_rule']}).", ""]
    if report["reference"]:
        lines += ["Scripted rows on the R=2 test panel: " + "; ".join(
            f"{row} {r['success']:.2f} (positions 2-5 {r['measure']:.2f})" for row, r in report["reference"].items()), ""]
    for init, section in report["r2"].items():
        if not section["arms"] and not section["init"]:
            continue
        lines += [f"## R=2 from the init that {'curates' if init == 'curates' else 'cannot curate'} "
                  f"(the R=1 run {inits.get(init) or not_chosen(why.get(init, ''))})", ""]
        if not section["same_start"]:
            lines += ["**Warning: these arms, and the init evaluated, did not all start from the same bits** (the "
                      "init was rebuilt between stages); their comparisons are not paired on the init.", ""]
        lines += ["| arm | seed | success [95% CI] | positions 2-5 | by position | documents: every rule / keeps / "
                  "repeats a clause / cut |", "|---|---|---|---|---|---|"]
        if section["init"]:
            r = section["init"]
            lines.append(f"| init (no R=2 step) | - | {r['success']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}] | "
                         f"{r['measure']:.2f} | {' / '.join(f'{x:.2f}' for x in r['by_position'])} | |")
        for arm, seeds in section["arms"].items():
            for seed, r in seeds.items():
                d = r["documents"]
                docs = " / ".join("-" if d.get(k) is None else f"{d[k]:.2f}"
                                  for k in ("states_all", "keeps_earlier", "repeats_a_clause", "cut"))
                lines.append(f"| {arm} | {seed} | {r['success']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}] | "
                             f"{r['measure']:.2f} | {' / '.join(f'{x:.2f}' for x in r['by_position'])} | {docs} |")
        lines += ["", "| comparison | per seed: difference [bootstrap CI] | over seeds: mean [t interval] | seeds > 0 "
                      "| verdict |", "|---|---|---|---|---|"]
        for name, block in section["paired"].items():
            per = "; ".join(f"seed {s}: {signed(d['difference'])} {interval_of(d['ci'])}" for s, d in block["per_seed"].items())
            o = block["over_seeds"]
            lines.append(f"| {name} | {per} | {signed(o['mean'])} {interval_of(o['ci'])} | {o['positive']} of {o['seeds']} "
                         f"| {verdict(o)} |")
        lines.append("")
    if report["r1"]:
        lines += ["## R=1 (N=3, K=2 training), on the R=1 test panel", "",
                  "| arm | seed | success [95% CI] | by position | documents state the rule |", "|---|---|---|---|---|"]
        for arm, seeds in report["r1"].items():
            for seed, r in seeds.items():
                d = r["documents"].get("states_all")
                lines.append(f"| {arm} | {seed} | {r['success']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}] | "
                             f"{' / '.join(f'{x:.2f}' for x in r['by_position'])} | {'-' if d is None else f'{d:.2f}'} |")
        if "r1_paired" in report:
            block = report["r1_paired"]["skillrise - none"]
            o = block["over_seeds"]
            lines += ["", "skillrise - none at R=1, positions 2-5: " + "; ".join(
                f"seed {s}: {signed(d['difference'])} {interval_of(d['ci'])}" for s, d in block["per_seed"].items())
                + f"; over seeds {signed(o['mean'])} {interval_of(o['ci'])}; verdict: {verdict(o)}"]
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Each stage writes benchmarks/results/decisive/<stage>.json (--results-dir) "
                                            "when it finishes;\n`report` writes decisive.json and decisive.md there.\n\n"
                                            "Stages:\n  " + "\n  ".join(stages()))
    parser.add_argument("command", choices=["status", "run", "report", "pack"],
                        help="pack: copy the inits of the finished stages made in --work-dir into "
                             f"<results-dir>/{INITS_FOLDER}/ (run does it as each such stage ends)")
    parser.add_argument("--only", nargs="+", default=None, metavar="PREFIX",
                        help="run only the stages whose name starts with one of these")
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "decisive"), help="where the models are made")
    parser.add_argument("--results-dir", default=str(RESULTS), help="where each stage's JSON and the report go")
    args = parser.parse_args(argv)
    results = Path(args.results_dir)
    names = [n for n in stages() if not args.only or any(n.startswith(p) for p in args.only)]
    if args.only and not names:
        parser.error(f"no stage starts with {' or '.join(args.only)}; the stages are listed in --help")
    if args.command == "status":
        left = [n for n in names if not result_path(n, results).is_file()]
        for name in names:
            where = progress(name, Path(args.work_dir)) if name in left else None
            print(f"{'done' if name not in left else 'left'}  {name}" + (f"  ({where})" if where else ""))
        for init in INITS:
            stage, why = init_choice(init, results)
            print(f"init  {init}: {stage}" if stage else f"init  {init}: {why}")
        print(f"{len(names) - len(left)} of {len(names)} stages done; about {sum(cost(n) for n in left)} CPU minutes "
              "left at 2 threads on a 2-core machine")
        return 0
    if args.command == "report":
        report = analyse(results)
        results.mkdir(parents=True, exist_ok=True)
        (results / "decisive.json").write_text(json.dumps(report, indent=1) + "\n")
        (results / "decisive.md").write_text(markdown(report))
        print(markdown(report))
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    # one code version per process: every module a stage imports is imported now, so edits of the tree while
    # the experiment runs for hours cannot mix into it (a lazily imported newer cli.py once met an older
    # TrainConfig); the commit recorded in each stage is the code loaded here
    import skillrise_gym.agents.hf_agent  # noqa: F401
    import skillrise_gym.bench.runner  # noqa: F401
    import skillrise_train.cli  # noqa: F401
    import skillrise_train.trainer  # noqa: F401

    work = Path(args.work_dir)
    if args.command == "pack":  # reads finished stages' folders only: no lock (a run may go on beside it)
        done = [n for n in names if packed_paths(n, results) and result_path(n, results).is_file()]
        try:
            for name in done:
                Experiment(work, results, log).pack(name)
        except te.Refused as exc:
            print(f"decisive_experiment: error: {exc.message}", file=sys.stderr, flush=True)
            return 2
        if not done:
            log("nothing to pack: no finished stage that later stages start from")
        return 0
    held = te.lock_work_dir(work)
    try:
        experiment = Experiment(work, results, log)
        for name in names:
            path = result_path(name, results)
            if path.is_file():
                continue
            log(f"stage {name}")
            record = experiment.run_stage(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_suffix(".json.tmp")
            scratch.write_text(json.dumps(record, indent=1) + "\n")
            scratch.replace(path)
            log(f"stage {name} done in {record['stage_wall_seconds']:.0f} s: {path}")
            experiment.pack_inits()  # this stage, or an earlier candidate it made the init
    except te.Refused as exc:
        print(f"decisive_experiment: error: {exc.message}", file=sys.stderr, flush=True)
        return 2
    finally:
        held.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
