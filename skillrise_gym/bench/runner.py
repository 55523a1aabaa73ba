"""The bench runner: N pinned K-task sequences per K, played by one agent on envs in worker processes.

Top to bottom:
1. Open the run directory (`store.RunStore`): a new one gets a manifest of what the run measures; an
   existing one must match it, and its finished sequences are skipped.
2. For each K, draw N sequences (`Draws`: the index-th is `SequenceSampler.sequence(seed, index)`, drawn when
   played, `PLAY_CHUNK` at a time, so a huge N starts at once): the same sequences for every agent and every
   re-run. Each is pinned on an env with ``reset(options={"task_ids": [...]})``.
3. Keep `parallel` sequences in flight on an env pool (`pools.make_pool`: an `EnvPool`, a `RayEnvPool` with
   `ray_address`; envs that hold memory of their own, ScienceWorld's JVMs, no more than the memory holds);
   each round, every in-flight sequence's observation goes to the agent in one `act` call
   (batched agents batch it), and the answers are stepped together. A finished sequence is committed (its
   turns, then its result line) and its env slot takes the next sequence.
4. Summaries: metrics with 95% CIs (summary.json; Wilson score intervals for rates of 0/1 outcomes, a
   percentile bootstrap over sequences for other means: `bench.metrics`), a Markdown table (summary.md and
   stdout), plots.

Carry modes (`BenchConfig.carry`: what crosses from one task to the next, `prompts.CARRY_MODES`): the
default, ``["skill"]`` alone, keeps the single-mode layout above. Several modes (or another single one) use
`store.CarrySetDir`: the sequences are drawn once and every mode plays the same ones, each mode in its own
`RunStore` under ``OUT/carry-<mode>/`` (resumed independently; a mode added later plays only itself), and
the top of OUT gets the side-by-side summary (``by_carry``, and each mode's paired success difference from
the first mode), table and plots. Trial ids are the same in every mode (they name the draw, not the mode);
records say their mode in ``Turn.extra["carry"]`` and in each result line's ``carry``.

Records: a turn stores at most `MAX_STORED_CHARS` characters of the agent's response and of the parsed
action (the env gets the whole reply); a longer one keeps its start, and ``Turn.extra["truncated"]`` gives
each cut field's full length in characters.

Failures: a worker process that dies costs only the sequences in flight, which are replayed from their
start (at most `max_attempts` times each). An `AgentError` (endpoint down after its retries) or Ctrl-C
stops the run after writing the summary of what finished; re-running the same command resumes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from skillrise_gym import memory, prompts
from skillrise_gym.agents.base import Agent, AgentError, AgentOutput
from skillrise_gym.backends import backend_class, check_options
from skillrise_gym.bench import metrics
from skillrise_gym.benchmarks import bench_envs
from skillrise_gym.bench.store import CarrySetDir, OutputError, RunStore, carry_dir_name, is_carry_set, trial_id
from skillrise_gym.cli_fields import option
from skillrise_gym.episode import EpisodeSpec
from skillrise_gym.fingerprint import fingerprint
from skillrise_gym.panels import PANELS, panel_record, panel_seed
from skillrise_gym.player import Player, Trial
from skillrise_gym.pools import PoolConfig, WorkerError, env_fn, make_pool
from skillrise_gym.records import Turn, turn_from_step
from skillrise_gym.resources import envs_memory_holds
from skillrise_gym.sequences import TaskSequence

#: characters of a turn's response and of its parsed action kept in turns.jsonl (the rest is cut, and
#: ``extra["truncated"]`` records the full lengths)
MAX_STORED_CHARS = 100_000

#: bench env name -> what `pools.env_fn` makes (a registered gym id, or a backend name for SequenceEnv)
ENVS = bench_envs()  # skillrise_gym.benchmarks: "toy", the unit-test backend, has no gym id


def parse_backend_options(items: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE pairs (--backend-option); a VALUE is read as JSON (true, null, 3, "x"), else as a Python
    literal (False, None, 1e3, (1, 2)), else kept as the string it is."""
    import ast

    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--backend-option expects KEY=VALUE, got {item!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            try:
                options[key] = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                options[key] = value
    return options


@dataclass
class BenchConfig:
    """What to measure and how to run it. Each field's help is its `skillrise-bench` flag's, and the flag's
    default and type are the field's (`cli_fields`; bench/cli.py lays the flags out)."""

    env: str = option(help="benchmark (toy: the unit-test backend); required, except with a trained policy's "
                      "episode (--episode, or --agent hf with a trained --model folder), whose benchmark it is then",
                      choices=ENVS)
    out: str = option(help="run directory (resumed when it exists)")
    K: list[int] = option([1, 2, 4, 6], "sequence lengths")
    mode: str = option("cross", "cross: K tasks of a family, easy to hard; repeat: one task K times (Pass@k)",
                       choices=["cross", "repeat"])
    num_sequences: int = option(20, "sequences per K")
    split: str | None = option(None, "backend split (default: with a trained policy's episode, the held-out split "
                               "its training evaluated on; else the backend's first: test for WebShop, train for "
                               "the others)")
    seed: int = option(0, "draws the sequences (unless --panel names them); seeds random agent and bootstrap")
    panel: str | None = option(
        None, "play a named panel of sequences, drawn by the generator seed reserved for it: dev (for every design "
        "choice) or test (for reported results, used once); each summary block records its panel's hash "
        "(skillrise_gym.panels)", choices=list(PANELS), metavar="NAME")
    workers: int = option(1, "env worker processes (0: in this process)", flag="--env-workers",
                          aliases=("--workers",))
    parallel: int | None = option(None, "envs, each playing one sequence at a time (default: max(env workers, "
                                  "agent batch size))", flag="--envs", aliases=("--parallel",))
    max_task_steps: int | None = option(None, "per-task step limit (default: backend's)")
    family: str | None = option(None, "draw only from this task family")
    backend_options: dict[str, Any] = option(
        {}, "backend keyword argument (VALUE parsed as JSON when it can be); repeatable", flag="--backend-option",
        metavar="KEY=VALUE", action="append", parse=parse_backend_options)
    worker_timeout: float | None = option(600.0, "seconds a worker (or Ray actor) may take to answer one round "
                                          "before it is replaced and its sequences replayed",
                                          flag="--env-timeout", aliases=("--worker-timeout",))
    ray_address: str | None = option(
        None, "run each env in a Ray actor instead of --env-workers processes: local (a Ray instance on this machine) "
        "or a running cluster's address (host:port, ray://host:10001, auto); needs pip install 'skillrise-gym[ray]'",
        metavar="ADDRESS")
    ray_num_cpus: float | None = option(
        None, "with --ray-address: CPUs reserved per env (default: none held while it runs, as for any Ray actor)",
        metavar="N")
    ray_memory: float | None = option(
        None, "with --ray-address: memory reserved per env, e.g. 1.5e9 for a ScienceWorld JVM", metavar="BYTES")
    max_attempts: int = option(2, "plays of a sequence whose worker died before the run gives up", cli=False)
    overlap: bool = option(False, "step envs while the agent answers for other sequences, instead of in rounds "
                           "(with --env-workers or --ray-address; an API agent's calls then hide the envs' time)")
    report_to: list[str] = option(
        ["none"], "experiment trackers that get the run's summary (success by mode, K and position; cost per task) "
        "with its settings as hyperparameters: tensorboard (OUT/tensorboard/), wandb (offline unless WANDB_MODE "
        "says otherwise), trackio, or none (skillrise_gym/tracking.py)",
        choices=["none", "tensorboard", "wandb", "trackio"], metavar="TRACKER")
    progress: bool = option(True, "no progress bar", flag="--no-progress")  # False: no progress bar on stderr
    plots: bool = option(True, "no PNG plots", flag="--no-plots")  # False: no PNG plots
    carry: list[str] = option(
        ["skill"], "what crosses from task to task and who writes it: skill (the agent curates the document), none "
        "(nothing, no curate turn), reflect (per-task reflections), or a published memory method over the agent: "
        "reflexion, expel, awm, dc, ace (skillrise_gym.memory); several modes play the same sequences, each in "
        "OUT/carry-MODE/, compared side by side in OUT", metavar="MODE", flag="--memory", also=("--carry",))
    prompt_style: str | None = option(
        None, "full (reason, then answer) or compact (answer only; small models); default: the backend's, or "
        "the style the --model folder (or --episode) was trained with", metavar="STYLE")
    end_on_success: bool = option(
        False, "end a sequence at its first solved task, without a curate turn after it (LaMer's attempts, "
        "with --mode repeat); default: off, or as the --model folder (or --episode) was trained")
    admissible_actions: bool | None = option(
        None, "observations list the engine's admissible actions (None: the backend's default, or on when the "
        "agent needs them)", cli=False)
    freeze_after: int | None = option(
        None, "keep the document fixed after the curate turn at this task position (0-based): later curate turns "
        "return it unchanged, with no model call", metavar="POSITION")
    documents_from: str | None = option(
        None, "replay the documents another bench run wrote (its folder, carry-MODE/ folder or documents.jsonl), "
        "position by position on the same sequences, instead of curating: a transplant", metavar="RUN")
    price: list[float] | None = option(
        None, "dollars per million prompt tokens and per million completion tokens (two numbers): the summary's "
        "cost blocks then say dollars too", metavar="DOLLARS", flag="--price")
    #: where the episode's defaults came from (a trained model's episode.json) and how this run differs from
    #: it: {"from": path, "differs": {field: [trained, now]}} (the bench CLI fills it; part of the identity)
    episode_from: dict[str, Any] | None = option(None, "the saved episode this run follows", cli=False)

    _data_identity: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.env not in ENVS:
            raise ValueError(f"unknown env {self.env!r}; choose from {', '.join(ENVS)}")
        if not self.K or any((not isinstance(k, int)) or k < 1 for k in self.K):
            raise ValueError(f"K must be positive integers, got {self.K!r}")
        self.K = sorted(set(self.K))
        if self.mode not in ("cross", "repeat"):
            raise ValueError(f"mode must be cross or repeat, got {self.mode!r}")
        if self.num_sequences < 1:
            raise ValueError("--num-sequences must be at least 1")
        if self.workers < 0:
            raise ValueError("--env-workers must be >= 0")
        if self.parallel is not None and self.parallel < 1:
            raise ValueError("--envs must be at least 1")
        if self.max_task_steps is not None and (not isinstance(self.max_task_steps, int)
                                                or isinstance(self.max_task_steps, bool) or self.max_task_steps < 1):
            raise ValueError(f"--max-task-steps must be an integer >= 1 (leave it out for the backend's limit), got "
                             f"{self.max_task_steps!r}")
        if self.worker_timeout is not None and (isinstance(self.worker_timeout, bool)
                                                or not isinstance(self.worker_timeout, (int, float))
                                                or not math.isfinite(self.worker_timeout) or self.worker_timeout <= 0):
            raise ValueError(f"--env-timeout must be a finite number of seconds > 0, got {self.worker_timeout!r}")
        if self.panel is not None:
            panel_seed(self.panel)  # ValueError naming the panels
        self.pool.check()  # the Ray settings: ValueError naming the flag
        cls = backend_class(self.env)
        check_options(cls, self.backend_options)
        self.split = cls.canonical_split(self.split or cls.splits[0])
        self.max_task_steps = self.max_task_steps or cls.default_max_task_steps
        self.benchmark = cls.benchmark
        carry = [self.carry] if isinstance(self.carry, str) else list(self.carry or [])
        if not carry:
            raise ValueError(f"--carry needs at least one mode ({', '.join(prompts.CARRY_MODES)})")
        self.carry = list(dict.fromkeys(carry))  # order kept: the first mode is the reference of comparisons
        for mode in self.carry:
            if memory.is_method(mode):
                continue
            if mode not in prompts.CARRY_MODES:
                raise ValueError(f"--memory: unknown mode {mode!r}; known: {', '.join(prompts.CARRY_MODES)} (what the env "
                                 f"carries) and the memory methods {', '.join(memory.METHODS)}")
            try:
                prompts.check_carry(mode, self.benchmark)
            except ValueError as exc:
                raise ValueError(f"--memory: {exc}") from None
        if self.price is not None and (len(self.price) != 2 or any(
                isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0
                for x in self.price)):
            raise ValueError(f"--price takes two numbers >= 0 (dollars per million prompt tokens, per million "
                             f"completion tokens), got {self.price!r}")
        if self.freeze_after is not None and (isinstance(self.freeze_after, bool) or not isinstance(self.freeze_after, int)
                                              or self.freeze_after < 0):
            raise ValueError(f"--freeze-after must be a task position >= 0, got {self.freeze_after!r}")
        if (self.freeze_after is not None or self.documents_from) and not any(
                memory.env_carry(mode) == "skill" for mode in self.carry):
            raise ValueError("--freeze-after and --documents-from act on documents: play a mode that carries one "
                             f"(skill or a memory method: {', '.join(memory.METHODS)})")
        if self.prompt_style is not None:
            try:
                prompts.check_style(self.prompt_style)
            except ValueError as exc:
                raise ValueError(f"--prompt-style: {exc}") from None
        #: the style the prompts use (the backend's default unless --prompt-style names one)
        self.style = self.prompt_style or cls.prompt_style

    @property
    def pool(self) -> PoolConfig:
        """The env pool settings (`workers`, `worker_timeout`, the Ray ones); each K's pool has at most one
        worker per env."""
        return PoolConfig(workers=self.workers, timeout=self.worker_timeout, ray_address=self.ray_address,
                          ray_num_cpus=self.ray_num_cpus, ray_memory=self.ray_memory)

    @property
    def draw_seed(self) -> int:
        """The generator seed of the sequences: the named panel's reserved seed, else --seed."""
        return panel_seed(self.panel) if self.panel is not None else self.seed

    @property
    def prices(self) -> tuple[float, float] | None:
        """(dollars per million prompt tokens, per million completion tokens), or None."""
        return (float(self.price[0]), float(self.price[1])) if self.price else None

    @property
    def drawn_by(self) -> str:
        """How the sequences were drawn, as titles say it: "panel test" or "seed 0"."""
        return f"panel {self.panel}" if self.panel is not None else f"seed {self.seed}"

    def panel_of(self, results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """What a summary block says of the panel its `results` played (name, seed, size, hash)."""
        return panel_record(self.env, self.split, self.backend_options, self.draw_seed, results)

    @property
    def single_mode(self) -> bool:
        """The layout of before carry modes: the default carry alone, in a directory not holding several."""
        return self.carry == ["skill"] and not is_carry_set(self.out)

    def identity(self, agent: Agent, carry: str | None = None) -> dict[str, Any]:
        """What makes two runs comparable sequence by sequence (K and N may grow on a resume); with `carry`,
        one carry mode's run (without: what the modes of one run directory share)."""
        identity = {"env": self.env, "split": self.split, "mode": self.mode, "seed": self.seed,
                    "max_task_steps": self.max_task_steps, "family": self.family,
                    "backend_options": self.backend_options, "prompt_style": self.style, "agent": agent.describe(),
                    "end_on_success": self.end_on_success, "episode_from": self.episode_from, "panel": self.panel}
        if self.admissible_actions is not None:
            identity["admissible_actions"] = self.admissible_actions
        data = self.data_identity()
        if data:
            identity["data"] = data
        if carry is not None:
            identity["carry"] = carry
        return identity

    def episode(self, K: int, carry: str, agent: Agent | None = None) -> EpisodeSpec:
        """The episode one carry mode plays at one K: every env of that block is made from it; with `agent`,
        the episode it sees (admissible actions on when it needs them, and its call framing)."""
        admissible = self.admissible_actions
        if agent is not None and agent.needs_admissible:
            admissible = True
        return EpisodeSpec.resolve(
            self.env, K, self.split, mode=self.mode, carry=memory.env_carry(carry), end_on_success=self.end_on_success,
            max_task_steps=self.max_task_steps, prompt_style=self.style, family=self.family,
            admissible_actions=admissible, backend_options=self.backend_options,
            **(agent.framing() if agent is not None else {}))

    @classmethod
    def from_episode(cls, spec: EpisodeSpec, **settings: Any) -> "BenchConfig":
        """A bench that plays `spec` (its K, its carry mode, on its split); `settings`: the run's other fields
        (out, num_sequences, seed, workers...). The trainer's evaluation is one."""
        return cls(env=spec.env, K=[spec.K], split=spec.split, mode=spec.mode, carry=[spec.carry],
                   end_on_success=spec.end_on_success, max_task_steps=spec.max_task_steps,
                   prompt_style=spec.prompt_style, family=spec.family, admissible_actions=spec.admissible_actions,
                   backend_options=dict(spec.backend_options), **settings)

    def data_identity(self) -> dict[str, str]:
        """The backend's data source and fingerprint for these options (computed once)."""
        if self._data_identity is None:
            self._data_identity = backend_class(self.env).data_identity(dict(self.backend_options))
        return self._data_identity


@dataclass
class BenchOutcome:
    summary: dict[str, Any]
    table: str
    status: str  # "complete", "agent_error", "interrupted" ("error" in a summary.json written before a raise)
    message: str = ""
    resumable: bool = True  # agent_error: whether the same command, re-run later, can go on


@dataclass
class _Flight:
    """One sequence's records while it is played (the `Trial.key` of a bench trial): its turns so far (a replay
    starts them again) and the seconds its agent calls took."""

    K: int
    index: int
    sequence: TaskSequence
    turns: list[Turn] = field(default_factory=list)
    agent_s: float = 0.0

    @property
    def trial_id(self) -> str:
        return trial_id(self.sequence.id, self.index)


class Draws(Sequence[TaskSequence]):
    """The N sequences of one K, each drawn when it is asked for (`SequenceSampler.sequence(seed, index)`: the
    same in any order, process or chunking), so a huge N costs nothing before play starts."""

    def __init__(self, sampler: Any, n: int, seed: int) -> None:
        self.sampler, self.n, self.seed = sampler, int(n), int(seed)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.n))]
        if not -self.n <= index < self.n:
            raise IndexError(f"draw {index} of {self.n}")
        return self.sampler.sequence(self.seed, index % self.n)


#: sequences of one K handed to the player at a time (at least 4 per env): a huge --num-sequences starts playing
#: at once, and only this many are held in memory besides the finished ones' result lines
PLAY_CHUNK = 1024

Plan = dict[int, Sequence[TaskSequence]]


class BenchRunner:
    """One carry mode (`carry`, default the config's first) played into one `RunStore` (default: config.out)."""

    def __init__(self, config: BenchConfig, agent: Agent, log: Callable[[str], None] | None = None,
                 carry: str | None = None, store: RunStore | None = None, curator: Agent | None = None) -> None:
        self.config = config
        self.carry = carry or config.carry[0]
        self.agent = for_mode(agent, config, self.carry, curator)
        self.log = log or (lambda message: None)
        self.single = store is None  # the single-mode layout: the store is OUT itself
        self.store = store or RunStore(config.out, config.identity(self.agent, self.carry))
        self._bar: Any = None
        self.session = {"sequences": 0, "started": time.monotonic()}
        self.resumable = True
        self._calls = {"calls": 0, "tokens": 0, "shown": 0.0, "started": time.monotonic()}
        self._calls_lock = threading.Lock()

    # ----------------------------------------------------------------- top level
    def run(self, plan: Plan | None = None) -> BenchOutcome:
        self.store.open()
        try:
            status, message = self.play(plan)
            return self._finish(status, message)
        finally:
            self.store.close()

    def play(self, plan: Plan | None = None) -> tuple[str, str]:
        """Play this mode's unfinished sequences of `plan` (drawn when None) into the open store: returns
        (status, message); an env or worker failure is raised after the summary of what finished is written."""
        c = self.config
        where = self.store.dir
        try:
            if any(self.store.repaired.values()):
                self.log(f"resuming {where}: dropped unfinished records {self.store.repaired}")
            plan = plan if plan is not None else self.draw_all()
            total = len(c.K) * c.num_sequences
            done = sum(self._finished(K) for K in c.K)
            if done:
                self.log(f"resuming {where}: {done} of {total} sequences already finished")
            self._open_bar(total, done)
            for K in c.K:
                if self._finished(K) < c.num_sequences:
                    self._play(K, plan[K])
        except AgentError as exc:
            self.resumable = getattr(exc, "resumable", True)
            return "agent_error", f"the agent failed: {exc}"
        except KeyboardInterrupt:
            waiting = getattr(self.agent, "in_flight", lambda: 0)()  # agents not built on Agent have none
            if waiting:
                self.log(f"stopping: {waiting} model call(s) in flight end within their timeout at the latest "
                         f"(they are cut off now; no new calls or retries are made); finished sequences are kept")
            return "interrupted", "interrupted"
        except OutputError:
            raise  # the run folder cannot be written: no summary either; the caller says so once
        except Exception as exc:
            # an env or worker failure: summarise what finished, then let the caller report it
            if self.store.results:
                self._finish("error", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
                self.agent.on_call = None
        return "complete", ""

    def draw_all(self) -> Plan:
        return {K: self.draw(K) for K in self.config.K}

    def draw(self, K: int) -> "Draws":
        """The N sequences of this K: the same for every agent, every carry mode and every re-run (same seed),
        drawn when played (`Draws`)."""
        env = env_fn(ENVS[self.config.env], **self._env_kwargs(K))()
        try:
            sampler = env.unwrapped.sampler()
        finally:
            env.close()
        return Draws(sampler, self.config.num_sequences, self.config.draw_seed)

    def _finished(self, K: int) -> int:
        """Finished sequences of this K among the N asked for (counted from the records, not over N)."""
        n = self.config.num_sequences
        return sum(1 for k, i in self.store.results if k == K and i < n)

    def _env_kwargs(self, K: int) -> dict[str, Any]:
        """The envs of this mode at this K: its episode (`BenchConfig.episode`), and the expert's action in
        `info` for an agent that reads it."""
        kwargs = self.config.episode(K, self.carry, self.agent).env_kwargs()
        if self.agent.needs_expert_info:
            kwargs["expert_in_info"] = True
        if getattr(self.agent, "needs_attempt_info", False):
            kwargs["attempt_in_info"] = True
        return kwargs

    # ----------------------------------------------------------------- playing one K
    def _play(self, K: int, draws: Sequence[TaskSequence]) -> None:
        """Play the unfinished sequences of one K on a pool of `parallel` envs (`skillrise_gym.player.Player`: the
        loop the trainer's rollouts play with too); each finished sequence is committed as it ends. They are
        drawn and handed to the player `PLAY_CHUNK` at a time (at least 4 per env), one chunk after the other on
        the same envs, so a huge --num-sequences starts at once and holds only a chunk."""
        c = self.config
        remaining = c.num_sequences - self._finished(K)
        parallel = min(remaining, c.parallel or max(c.workers, self.agent.batch_size, 1))
        parallel = self._memory_bound(parallel)
        pool = make_pool([env_fn(ENVS[c.env], **self._env_kwargs(K))] * parallel,
                         dataclasses.replace(c.pool, workers=min(c.workers, parallel)))
        player = Player(pool, max_attempts=c.max_attempts, overlap=c.overlap,
                        log=lambda message: self.log(f"warning: {message}"))
        chunk = max(PLAY_CHUNK, 4 * parallel)
        try:
            for start in range(0, len(draws), chunk):
                trials = []
                for index in range(start, min(start + chunk, len(draws))):
                    if self.store.is_done(K, index):
                        continue
                    flight = _Flight(K, index, draws[index])
                    trials.append(Trial(len(trials), [t.id for t in flight.sequence.tasks], name=flight.trial_id,
                                        key=flight))
                if trials:
                    player.play(trials, self._act,
                                lambda trial, seen, out, reply: trial.key.turns.append(
                                    self._turn(trial.key, seen, out, reply)),
                                self._commit, on_lost=self._lost)
        finally:
            pool.close()

    def _memory_bound(self, parallel: int) -> int:
        """The envs of a K block, bounded by the memory for a backend whose envs hold memory of their own
        (`Backend.env_memory`: ScienceWorld's JVMs) as the trainer's pool is (`resources.envs_memory_holds`):
        unless --envs asks for a number (then it is played as asked, with a warning) or the envs run on Ray
        (whose nodes hold them: --ray-memory)."""
        c = self.config
        if c.ray_address:
            return parallel
        per_env = backend_class(c.env).env_memory
        holds = envs_memory_holds(per_env)
        if holds is None or parallel <= holds:
            return parallel
        gigabytes = per_env / 1e9
        if c.parallel is not None:
            self.log(f"warning: --envs {c.parallel}: {parallel} {c.env} envs of about {gigabytes:.1f} GB each, and "
                     f"the memory available holds {holds}")
            return parallel
        self.log(f"note: {holds} {c.env} env(s) at a time instead of {parallel} (about {gigabytes:.1f} GB each: what "
                 f"the memory available holds; --envs N sets the number)")
        return holds

    def _lost(self, trial: Trial, replay: bool, reason: str) -> None:
        """A sequence whose worker died or hung: played again from its start, or (attempts spent) the run
        stops, keeping what finished."""
        flight: _Flight = trial.key
        if not replay:
            raise WorkerError(
                f"sequence {flight.sequence.id} (K={flight.K}, index {flight.index}) lost its worker "
                f"{trial.attempts} times; stopping. Finished sequences are kept: re-run to resume.", [])
        flight.turns, flight.agent_s = [], 0.0

    def _act(self, trials: list[Trial]) -> list[AgentOutput]:
        # the trial and how many turns it has taken (a replayed sequence counts again from 0): what an agent
        # that seeds its sampling per turn needs (the trainer's evaluation agent)
        flights: list[_Flight] = [t.key for t in trials]
        infos = [{**(t.info or {}), "trial_id": t.key.trial_id, "turn": t.turns} for t in trials]
        started = time.monotonic()
        outputs = self.agent.act([t.observation for t in trials], infos)
        elapsed = time.monotonic() - started
        if len(outputs) != len(flights):
            raise AgentError(f"agent {self.agent.name} returned {len(outputs)} outputs for {len(flights)} observations")
        for flight, out in zip(flights, outputs):
            if not isinstance(out, AgentOutput) or not isinstance(out.text, str):
                raise AgentError(f"agent {self.agent.name} returned {type(out).__name__}, expected AgentOutput with text")
            flight.agent_s += out.latency_s or elapsed / len(flights)
        return outputs

    # ----------------------------------------------------------------- records
    def _turn(self, flight: _Flight, seen: dict[str, Any], out: AgentOutput, reply: tuple) -> Turn:
        observation, reward, _terminated, _truncated, info = reply
        extra: dict[str, Any] = {"K": flight.K, "index": flight.index, "mode": self.config.mode,
                                 "carry": self.carry, "latency_s": round(out.latency_s, 4)}
        if out.extra:
            extra["agent"] = out.extra
        turn = turn_from_step(
            prompt=str(seen["prompt"]), response=out.text, reward=reward, info=info,
            sequence_id=flight.sequence.id, trial_id=flight.trial_id, benchmark=self.config.benchmark,
            prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens, extra=extra,
        )
        cut = {name: len(getattr(turn, name)) for name in ("response", "action")
               if len(getattr(turn, name)) > MAX_STORED_CHARS}
        for name in cut:
            setattr(turn, name, getattr(turn, name)[:MAX_STORED_CHARS])
        if cut:
            turn.extra["truncated"] = cut
        return turn

    def _commit(self, trial: Trial, info: dict[str, Any]) -> None:
        flight: _Flight = trial.key
        tasks = list(info["summary"]["tasks"])
        # a sequence that ended early (--end-on-success: solved, nothing left to attempt) has positions it
        # never played: recorded as not solved, score 0, no step, as rescoring from its turns records them
        tasks += [{"success": False, "score": 0.0, "steps": 0, "engine_error": None}] * (flight.K - len(tasks))
        turns = flight.turns
        result = {
            "K": flight.K,
            "index": flight.index,
            "sequence_id": flight.sequence.id,
            "trial_id": flight.trial_id,
            "family": flight.sequence.family,
            "mode": self.config.mode,
            "carry": self.carry,
            "task_ids": [t.id for t in flight.sequence.tasks],
            "success": [bool(t["success"]) for t in tasks],
            "score": [float(t["score"]) for t in tasks],
            "steps": [int(t["steps"]) for t in tasks],
            "engine_errors": [t["engine_error"] for t in tasks],
            "calls": len(turns),
            "solve_calls": sum(t.role == "solve" for t in turns),
            "curate_calls": sum(t.role == "curate" for t in turns),
            "invalid_format": sum(not t.format_valid for t in turns),
            "invalid_format_solve": sum(not t.format_valid for t in turns if t.role == "solve"),
            "prompt_tokens": sum(t.prompt_tokens for t in turns),
            "completion_tokens": sum(t.completion_tokens for t in turns),
            **metrics.cost_fields(turns),
            "agent_s": round(flight.agent_s, 4),
            "wall_s": round(time.monotonic() - trial.started, 4),
            "attempt": trial.attempts,
            "finished_at": time.time(),
        }
        self.store.commit(turns, result)
        self.session["sequences"] += 1
        if self._bar is not None:
            self._bar.update(1)
            self._show_postfix()

    # ----------------------------------------------------------------- progress and summaries
    def _requested(self) -> list[dict[str, Any]]:
        c = self.config
        return [r for (K, i), r in sorted(self.store.results.items()) if K in c.K and i < c.num_sequences]

    def _running_success(self) -> float:
        flags = [s for r in self._requested() for s in r["success"]]
        return sum(flags) / len(flags) if flags else 0.0

    def _open_bar(self, total: int, done: int) -> None:
        if not self.config.progress:
            return
        from tqdm import tqdm

        desc = f"{self.config.env}/{self.agent.name}" + ("" if self.config.single_mode else f"/{self.carry}")
        self._bar = tqdm(total=total, initial=done, desc=desc, unit="seq", dynamic_ncols=True)
        self._calls.update(calls=0, tokens=0, shown=0.0, started=time.monotonic())
        self.agent.on_call = self._on_call  # the bar moves with every model call, not only per sequence
        # (agents not built on `Agent` just never call it)
        self._show_postfix()

    def _on_call(self, output: AgentOutput) -> None:
        """One model call ended (any thread): count it; refresh the bar at most twice a second."""
        with self._calls_lock:
            self._calls["calls"] += 1
            self._calls["tokens"] += int(output.completion_tokens or 0)
            now = time.monotonic()
            if now - self._calls["shown"] < 0.5:
                return
            self._calls["shown"] = now
        self._show_postfix()

    def _show_postfix(self) -> None:
        if self._bar is None:
            return
        elapsed = max(1e-9, time.monotonic() - self._calls["started"])
        self._bar.set_postfix_str(f"success={self._running_success():.3f} calls={self._calls['calls']} "
                                  f"tok/s={self._calls['tokens'] / elapsed:.1f}")

    def summary(self, status: str) -> dict[str, Any]:
        """This mode's summary: metrics of the requested finished sequences, and what was run."""
        c = self.config
        results = self._requested()
        summary = metrics.summarize(results, c.K, c.mode, seed=c.seed, prices=c.prices)
        for block in summary["blocks"]:
            if block["sequences"]:
                block["panel"] = c.panel_of([r for r in results if r["K"] == block["K"]])
        summary.update(
            env=c.env, benchmark=c.benchmark, split=c.split, agent=self.agent.describe(), seed=c.seed,
            num_sequences=c.num_sequences, K=c.K, max_task_steps=c.max_task_steps, carry=self.carry,
            prompt_style=c.style, status=status, finished=len(results), requested=len(c.K) * c.num_sequences,
            fingerprint=fingerprint(c.benchmark, c.data_identity(), self.agent),
            session=_session(self.session["sequences"], time.monotonic() - self.session["started"], c.workers),
        )
        return summary

    def export_documents(self) -> None:
        """documents.jsonl beside the records: the documents of the finished sequences, a versioned artifact
        (`skillrise_gym.memory.documents`), for a mode that carries a document."""
        if memory.env_carry(self.carry) == "skill":
            from skillrise_gym.memory.documents import write_documents

            write_documents(self.store.dir, set(self.store.results), self.agent.name)

    def _finish(self, status: str, message: str) -> BenchOutcome:
        c = self.config
        summary = self.summary(status)
        single = self.single
        title = f"{c.env} / {self.agent.name} / {c.mode} / split {c.split} / {c.drawn_by}"
        if not single or self.carry != "skill":
            title = f"{c.env} / {self.agent.name} / {c.mode} / carry {self.carry} / split {c.split} / {c.drawn_by}"
        table = metrics.markdown_table(summary, title)
        if single:
            summary["by_carry"] = {self.carry: dict(summary)}
        # several modes: the plots are drawn at the top of OUT, not per mode
        _write_outputs(self.store, summary, table, title, single and c.plots and bool(summary["finished"]),
                       ("plot_success_by_position", "plot_success_vs_K"))
        self.export_documents()
        return BenchOutcome(summary=summary, table=table, status=status, message=message, resumable=self.resumable)


def _write_outputs(where: Any, summary: dict[str, Any], table: str, title: str, draw: bool,
                   plotters: tuple[str, str]) -> None:
    """summary.json, summary.md and, with `draw`, the two plots (`plotters`: the bench.plots functions for
    success by position and against K) into a run directory; a write that fails raises OutputError. An
    interrupted run draws none: Ctrl-C or SIGTERM ends the process at once, and importing matplotlib and
    drawing (seconds on a loaded machine, more on a fresh one building its font cache) would hold it; the
    resumed run draws them."""
    where.write_text("summary.json", json.dumps(summary, indent=2) + "\n")
    where.write_text("summary.md", table)
    if not draw or summary.get("status") == "interrupted":
        return
    from skillrise_gym.bench import plots

    try:
        for name, file in zip(plotters, ("success_by_position.png", "success_vs_K.png")):
            getattr(plots, name)(summary, where.dir / file, title=title)
    except OSError as exc:
        raise OutputError(f"cannot write the plots in {where.dir}: {exc.strerror or exc}") from None


def _session(sequences: int, elapsed: float, workers: int) -> dict[str, Any]:
    return {"sequences": sequences, "wall_s": round(elapsed, 3),
            "sequences_per_minute": round(60 * sequences / elapsed, 3) if elapsed else None, "workers": workers}


class CarrySetRunner:
    """Several carry modes on the same drawn sequences: one `BenchRunner` per mode, each into its own store
    under OUT/carry-<mode>/ (all opened first, so a mismatching directory is refused before anything is
    played), then the side-by-side summary at the top of OUT."""

    def __init__(self, config: BenchConfig, agent: Agent, log: Callable[[str], None] | None = None,
                 curator: Agent | None = None) -> None:
        self.config = config
        self.agent = agent
        self.log = log or (lambda message: None)
        agents = {mode: for_mode(agent, config, mode, curator) for mode in config.carry}
        self.dir = CarrySetDir(config.out, config.identity(agent), lambda mode: config.identity(agents[mode], mode),
                               self.log)
        self.runners = {mode: BenchRunner(config, agents[mode], self.log, carry=mode, store=self.dir.member(mode))
                        for mode in config.carry}
        self.started = time.monotonic()
        self.resumable = True

    def run(self) -> BenchOutcome:
        self.dir.open()
        opened: list[BenchRunner] = []
        try:
            for runner in self.runners.values():
                runner.store.open()
                opened.append(runner)
            status, message = "complete", ""
            try:
                plan = next(iter(self.runners.values())).draw_all()  # drawn once: every mode plays these
                for runner in self.runners.values():
                    runner_status, runner_message = runner.play(plan)
                    if runner_status != "complete":
                        status, message = runner_status, runner_message
                        self.resumable = runner.resumable
                        break
            except OutputError:
                raise
            except Exception as exc:
                self._finish("error", f"{type(exc).__name__}: {exc}")
                raise
            return self._finish(status, message)
        finally:
            for runner in opened:
                runner.store.close()
            self.dir.close()

    def _finish(self, status: str, message: str) -> BenchOutcome:
        c = self.config
        by_carry = {}
        for mode, runner in self.runners.items():
            member = runner.summary(status)
            if member["finished"] == member["requested"]:
                member["status"] = "complete"
            by_carry[mode] = member
            table = metrics.markdown_table(member, f"{c.env} / {self.agent.name} / {c.mode} / carry {mode}")
            _write_outputs(runner.store, member, table, "", False, ("", ""))
            runner.export_documents()
        results = {mode: runner._requested() for mode, runner in self.runners.items()}
        sequences = sum(r.session["sequences"] for r in self.runners.values())
        summary: dict[str, Any] = {
            "layout": "carry", "carry": c.carry, "mode": c.mode, "env": c.env, "benchmark": c.benchmark,
            "fingerprint": fingerprint(c.benchmark, c.data_identity(), self.agent),
            "split": c.split, "agent": self.agent.describe(), "seed": c.seed, "num_sequences": c.num_sequences,
            "K": c.K, "max_task_steps": c.max_task_steps, "prompt_style": c.style, "status": status,
            "finished": sum(m["finished"] for m in by_carry.values()),
            "requested": sum(m["requested"] for m in by_carry.values()),
            "confidence": metrics.CONFIDENCE, "bootstrap_samples": metrics.BOOTSTRAP_SAMPLES,
            "session": _session(sequences, time.monotonic() - self.started, c.workers),
            "records": {mode: f"{carry_dir_name(mode)}/turns.jsonl" for mode in c.carry},
            "by_carry": by_carry,
            "difference": metrics.carry_differences(results, c.K, c.carry[0], seed=c.seed),
        }
        title = f"{c.env} / {self.agent.name} / {c.mode} / split {c.split} / {c.drawn_by} / {c.style} prompts"
        table = metrics.carry_table(summary, title)
        _write_outputs(self.dir, summary, table, title, c.plots and bool(summary["finished"]),
                       ("plot_carry_success_by_position", "plot_carry_success_vs_K"))
        return BenchOutcome(summary=summary, table=table, status=status, message=message, resumable=self.resumable)


def run_bench(config: BenchConfig, agent: Agent, log: Callable[[str], None] | None = None,
              curator: Agent | None = None) -> BenchOutcome:
    """Run (or resume) a bench: the single-mode layout for the default carry, else one sub-run per carry mode.
    `curator`: another agent that writes the documents (`MemoryAgent`); default: `agent` itself."""
    if config.single_mode:
        return BenchRunner(config, agent, log, curator=curator).run()
    return CarrySetRunner(config, agent, log, curator=curator).run()


def for_mode(agent: Agent, config: BenchConfig, mode: str, curator: Agent | None = None) -> Agent:
    """The agent one memory mode is played by: `agent` itself, or a `MemoryAgent` over it when a memory method,
    another curator, a frozen document or replayed documents decide the documents (modes that carry one).
    An agent already wrapped (a carry set's member) is returned as it is."""
    if isinstance(agent, memory.MemoryAgent):
        return agent
    method = memory.method(mode) if memory.is_method(mode) else None
    if memory.env_carry(mode) != "skill":
        if curator is not None and mode == "reflect":
            raise ValueError("--curator-model writes documents; carry reflect writes reflections with the solver")
        return agent
    documents = None
    if config.documents_from:
        from skillrise_gym.memory.documents import Documents, documents_file

        documents = Documents(documents_file(config.documents_from, mode))
    if method is None and documents is None and curator is None and config.freeze_after is None:
        return agent
    return memory.MemoryAgent(agent, method, config.benchmark, curator=curator, freeze_after=config.freeze_after,
                              documents=documents)
