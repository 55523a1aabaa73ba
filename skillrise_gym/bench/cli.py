"""`skillrise-bench`: benchmark a non-RL agent on K-task sequences.

    skillrise-bench --env alfworld --agent expert --K 1 3 --num-sequences 20 --out runs/alf-expert
    skillrise-bench --env webshop --agent openai --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-4B \\
        --K 1 2 4 6 --workers 2 --concurrency 8 --out runs/webshop-qwen
    skillrise-bench --env scienceworld --agent hf --model smollm2 --K 2 --mode repeat --out runs/sw-smol
    skillrise-bench --env rulebook --agent hf --carry skill none reflect --K 1 3 --out runs/rb-carry

    skillrise-bench rescore runs/alf-expert     (results and summary rebuilt from turns.jsonl alone)

Re-running a command with the same --out resumes it. Exit status: 0 done, 2 bad arguments or run
directory, 3 the agent failed (resumable), 4 an environment failed, 5 --out could not be written mid-run
(full or read-only; resumable once it can), 130 interrupted (resumable). rescore: 0 turns and results
agree, 1 they differ (lost records included), 2 no run or a damaged manifest or record, 5 rescored.json
cannot be written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from skillrise_gym import memory
from skillrise_gym.agents.base import Agent, check_prefill
from skillrise_gym.backends.base import ConfigurationError, DataNotFoundError, MissingDependencyError, SkillRiseError
from skillrise_gym.bench.runner import ENVS, BenchConfig, for_mode, parse_backend_options, run_bench  # noqa: F401
from skillrise_gym.bench.store import OutputError, RunDirError
from skillrise_gym.cli_fields import add_arguments, field_values, flag_fields, given_flags, renamed  # noqa: F401
from skillrise_gym.models import DTYPES
from skillrise_gym.panels import TEST_IS_FOR_REPORTING

EXIT_OK, EXIT_USAGE, EXIT_AGENT, EXIT_ENV, EXIT_OUTPUT, EXIT_INTERRUPTED = 0, 2, 3, 4, 5, 130

#: where BenchConfig's flags appear in --help, in order ("env" first, then --agent): their names, defaults,
#: types and help are the fields' (`BenchConfig`, `cli_fields.option`)
MEASURE_FLAGS = ("K", "mode", "num_sequences", "split", "seed", "panel", "max_task_steps", "family", "backend_options",
                 "carry", "freeze_after", "documents_from", "prompt_style", "end_on_success", "price", "out")
EXECUTION_FLAGS = ("workers", "parallel", "worker_timeout", "ray_address", "ray_num_cpus", "ray_memory", "overlap",
                   "progress", "plots", "report_to")


class _DefaultsOnceFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to a flag's help only where it says something: not when the help already
    states its default in words, nor for a None or empty default, nor for on/off switches."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        default = action.default
        if ("default" in help_text.lower() or not action.option_strings or default is None
                or default is argparse.SUPPRESS or isinstance(default, bool) or default in ([], "")):
            return help_text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{help_text} (default: {shown.replace('%', '%%')})"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="skillrise-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=_DefaultsOnceFormatter,
                                epilog="skillrise-bench compare RUN RUN ...: several runs in one table (Markdown, "
                                "CSV, LaTeX), paired on the sequences they share, with cost. "
                                "skillrise-bench rescore RUN: rebuild a run's results and summary from its "
                                "turns.jsonl alone, and say where they differ from results.jsonl")
    from skillrise_gym import __version__

    p.add_argument("--version", action="version", version=f"skillrise-bench {__version__}")
    run = p.add_argument_group("what to measure")
    add_arguments(run, BenchConfig, ["env"], defaults={"env": None})  # optional with a saved episode (`main`)
    run.add_argument("--agent", required=True, choices=["expert", "random", "openai", "hf"],
                     help="expert (the backend's scripted expert), random, openai (an OpenAI-compatible "
                     "server), hf (local transformers)")
    add_arguments(run, BenchConfig, MEASURE_FLAGS)
    run.add_argument("--episode", default=None, metavar="PATH",
                     help="play the episode a policy was trained on (its episode.json: a training run's folder, "
                     "final/, checkpoint-N/ or the file): its carry mode, prompt style, step limit, engine options "
                     "and call framing become the defaults of the flags you do not give (default: read from "
                     "--model's folder with --agent hf); none: play the bench's own defaults, not the folder's "
                     "episode (e.g. a policy trained on one benchmark played on another)")
    exe = p.add_argument_group("execution")
    add_arguments(exe, BenchConfig, EXECUTION_FLAGS)
    unplaced = {f.name for f in flag_fields(BenchConfig)} - {"env", *MEASURE_FLAGS, *EXECUTION_FLAGS}
    if unplaced:  # a BenchConfig field with a flag that --help would not list
        raise RuntimeError(f"BenchConfig fields without a place among the flags: {sorted(unplaced)}")

    llm = p.add_argument_group("openai and hf agents")
    llm.add_argument("--model", default=None,
                     help="openai: the served model name; hf: smollm2 (default), tiny, a model folder, or a LoRA "
                     "adapter folder (a training run's final/ or checkpoint-N/)")
    llm.add_argument("--base-model", default=None, metavar="NAME",
                     help="hf: the base model of the adapter given as --model (smollm2, tiny, a folder or a cached "
                     "Hub id; default: $SKILLRISE_BASE_MODEL, else the base its adapter_config.json records)")
    llm.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)")
    llm.add_argument("--top-p", type=float, default=None,
                     help="nucleus sampling (default: the server's for openai, 1.0 for hf)")
    llm.add_argument("--max-new-tokens", type=int, default=512, dest="max_new_tokens",
                     help="completion tokens per call (default: 512, or the budget the --model folder was trained "
                     "with)")
    renamed(llm, "--max-tokens", "--max-new-tokens", dest="max_new_tokens", type=int)
    llm.add_argument("--base-url", default=None, help="openai: e.g. http://127.0.0.1:8000/v1")
    llm.add_argument("--api-key-env", default="OPENAI_API_KEY",
                     help="openai: NAME of the environment variable holding the key (the key is never logged)")
    llm.add_argument("--timeout", type=float, default=60.0, help="openai: seconds one request may take in all (connect, wait, read the whole reply)")
    llm.add_argument("--max-retries", type=int, default=100, help="openai: most retries of a failed request")
    llm.add_argument("--retry-deadline", type=float, default=600.0,
                     help="openai: seconds a failing request is retried in all (long enough for a server restart)")
    llm.add_argument("--system-prompt", default=None,
                     help="openai, hf: a system message before every prompt ('' sends an empty one, which stops "
                          "chat templates such as SmolLM2's from injecting their own; default: none)")
    llm.add_argument("--concurrency", type=int, default=4, help="openai: requests in flight")
    llm.add_argument("--prefill", default=None, choices=["continue"],
                     help="openai: continue: send a compact prompt's answer prefix (its opening tag) as a final "
                     "assistant message for the server to continue (continue_final_message, as vLLM serves it); "
                     "default: the server starts a fresh reply, so compact prompts are refused")
    llm.add_argument("--curator-model", default=None, metavar="MODEL",
                     help="another model writes the documents (curate turns, and a memory method's calls) while "
                     "--model solves: of the --curator-agent kind, with the same agent flags otherwise")
    llm.add_argument("--curator-agent", default=None, choices=["openai", "hf"],
                     help="the curator's kind (default: --agent's), e.g. an API curator for a local solver")
    llm.add_argument("--batch-size", type=int, default=8, help="hf: prompts generated together")
    llm.add_argument("--max-prompt-tokens", type=int, default=4096,
                     help="hf: longer prompts lose their middle (the head with the document and the tail with the "
                     "actions are kept, as in training); default: 4096, or the budget the --model folder was "
                     "trained with")
    llm.add_argument("--device", default="cpu", help="hf: torch device")
    llm.add_argument("--dtype", default=None, choices=DTYPES,
                     help="hf: the weights' dtype (default: float32 on a CPU, bfloat16 on a GPU that has it); "
                          "bfloat16 decodes faster on CPUs with bf16 units (slower where it is emulated), greedy "
                          "outputs drift from float32's (docs/train.md, CPU generation)")
    llm.add_argument("--threads", type=int, default=0,
                     help="hf: torch CPU threads (0, the default: the cores other work leaves free by the 1-minute "
                          "load average)")
    llm.add_argument("--prefix-cache-mb", type=int, default=1024,
                     help="hf: MB of prompt keys/values kept so a prompt that starts like an earlier one prefills "
                          "only the rest (a task's later turns); 0: off")
    return p


#: the agents' numeric flags: (argparse destination, flag, what it must be, the check)
AGENT_NUMBERS = (
    ("max_new_tokens", "--max-new-tokens", "an integer >= 1", lambda v: v >= 1),
    ("temperature", "--temperature", "a finite number >= 0 (0: greedy)", lambda v: math.isfinite(v) and v >= 0),
    ("top_p", "--top-p", "a number in (0, 1]", lambda v: v is None or 0 < v <= 1),
    ("timeout", "--timeout", "a finite number of seconds > 0", lambda v: math.isfinite(v) and v > 0),
    ("max_retries", "--max-retries", "an integer >= 0", lambda v: v >= 0),
    ("retry_deadline", "--retry-deadline", "a finite number of seconds >= 0", lambda v: math.isfinite(v) and v >= 0),
    ("concurrency", "--concurrency", "an integer >= 1", lambda v: v >= 1),
    ("batch_size", "--batch-size", "an integer >= 1", lambda v: v >= 1),
    ("max_prompt_tokens", "--max-prompt-tokens", "an integer >= 1", lambda v: v >= 1),
    ("threads", "--threads", ">= 0 (an integer; 0: by the free cores)", lambda v: v >= 0),
    ("prefix_cache_mb", "--prefix-cache-mb", "an integer >= 0 (0: off)", lambda v: v >= 0),
)


def check_agent_numbers(args: argparse.Namespace) -> None:
    """ValueError (one line naming the flag) for a number no agent can run with, before any agent is made:
    each would otherwise pass the parser and crash later (or, as --timeout inf, never end)."""
    for dest, flag, wanted, good in AGENT_NUMBERS:
        if not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if not good(value):
            raise ValueError(f"{flag} must be {wanted}, got {value!r}")


def make_agent(args: argparse.Namespace, benchmark: str) -> Agent:
    """The agent named by --agent; flags that belong to another agent are an error, not silently ignored; numbers
    no agent can run with are refused first (`check_agent_numbers`)."""
    check_agent_numbers(args)
    given = {name for name in ("base_url", "model", "base_model", "dtype") if getattr(args, name) is not None}
    if args.agent in ("expert", "random") and given:
        raise ValueError(f"--agent {args.agent} takes no {', '.join('--' + g.replace('_', '-') for g in sorted(given))}")
    if args.agent == "expert":
        from skillrise_gym.agents.expert import ExpertAgent

        return ExpertAgent()
    if args.agent == "random":
        from skillrise_gym.agents.random_agent import RandomAgent

        return RandomAgent(seed=args.seed, benchmark=benchmark)
    from skillrise_gym.extras import require

    if args.agent == "openai":
        require("bench", ["openai"], "--agent openai")
        from skillrise_gym.agents.openai_agent import OpenAIAgent, OpenAIConfig

        if not args.base_url or not args.model:
            raise ValueError("--agent openai needs --base-url and --model")
        if args.base_model is not None or args.dtype is not None:
            raise ValueError(f"--{'base-model' if args.base_model is not None else 'dtype'} belongs to --agent hf")
        return OpenAIAgent(OpenAIConfig(
            base_url=args.base_url, model=args.model, api_key_env=args.api_key_env, temperature=args.temperature,
            top_p=args.top_p, max_tokens=args.max_new_tokens, timeout_s=args.timeout, max_retries=args.max_retries,
            retry_deadline_s=args.retry_deadline, concurrency=args.concurrency, seed=args.seed,
            system_prompt=args.system_prompt, prefill=args.prefill,
            chat_template_kwargs=getattr(args, "chat_template_kwargs", None),
        ))
    if (args.base_url or args.prefill) and getattr(args, "curator_agent", None) != "openai":
        raise ValueError(f"--{'base-url' if args.base_url else 'prefill'} belongs to --agent openai (or --curator-agent "
                         "openai)")
    require("train", ["torch", "transformers"], "--agent hf")
    from skillrise_gym.agents.hf_agent import HFAgent, HFConfig

    return HFAgent(HFConfig(
        model=args.model or "smollm2", max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_p=args.top_p if args.top_p is not None else 1.0, batch_size=args.batch_size,
        max_prompt_tokens=args.max_prompt_tokens, seed=args.seed, device=args.device, threads=args.threads,
        dtype=args.dtype, prefix_cache_mb=args.prefix_cache_mb,
        system_prompt=args.system_prompt, base_model=args.base_model,
        chat_template_kwargs=getattr(args, "chat_template_kwargs", None),
    ))


def make_curator(args: argparse.Namespace, config: BenchConfig) -> Agent | None:
    """The agent that writes the documents when it is not the solver (--curator-model / --curator-agent);
    refuses a memory method or a curator that no model would write for."""
    kind = args.curator_agent or (args.agent if args.curator_model else None)
    methods = [mode for mode in config.carry if memory.is_method(mode)]
    if kind is None:
        if methods and args.agent in ("expert", "random"):
            raise ValueError(f"memory method {methods[0]} writes its documents with a model, and --agent "
                             f"{args.agent} has none: use --agent openai or hf, or --curator-agent with "
                             "--curator-model")
        return None
    if kind in ("expert", "random"):
        raise ValueError("--curator-agent must be openai or hf")
    if not args.curator_model and args.agent != kind:
        raise ValueError(f"--curator-agent {kind} needs --curator-model (the model it serves or loads)")
    curator_args = argparse.Namespace(**{**vars(args), "agent": kind, "model": args.curator_model or args.model,
                                         "base_model": None if kind == "openai" else args.base_model,
                                         "dtype": None if kind == "openai" else args.dtype,
                                         "prefill": None if kind == "hf" else args.prefill,
                                         "base_url": None if kind == "hf" else args.base_url})
    return make_agent(curator_args, config.benchmark)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _exit_promptly() -> None:
    """An interrupted run's process ends at once: at exit, `gc.freeze` takes the heap out of the last garbage
    collections of the interpreter's teardown, which would walk every object the run made (seconds on a loaded
    machine, after the files are written and closed)."""
    import atexit
    import gc

    atexit.unregister(gc.freeze)  # once, however many interrupted runs this process made
    atexit.register(gc.freeze)


def rescore_main(argv: Sequence[str]) -> int:
    """`skillrise-bench rescore RUN`: exit 0 when turns and results agree (counts included), 1 when they
    differ (a lost result line or lost turns is a difference), 2 no run or a damaged manifest or record
    (one line naming file:line), 5 RUN/rescored.json cannot be written."""
    from skillrise_gym.bench import metrics
    from skillrise_gym.bench.rescore import rescore
    from skillrise_gym.paths import atomic_write

    parser = argparse.ArgumentParser(prog="skillrise-bench rescore",
                                     description="Rebuild a run's results and summary from its turns.jsonl and "
                                     "compare them with its results.jsonl; writes RUN/rescored.json.")
    parser.add_argument("run", help="a skillrise-bench --out directory")
    args = parser.parse_args(argv)
    try:
        by_mode = rescore(args.run)
    except (FileNotFoundError, ValueError) as exc:
        print(f"skillrise-bench rescore: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"skillrise-bench rescore: error: cannot read {exc.filename or args.run}: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_USAGE
    differences = rescored = lines = 0
    for mode, summary in by_mode.items():
        print(metrics.markdown_table(summary, f"rescored from turns.jsonl: carry {mode}"))
        for d in summary["differences"]:
            print(f"  {d['note']}" if "note" in d else f"  K={d['K']} index={d['index']} {d['field']}: "
                  f"results.jsonl {d['results']!r}, turns.jsonl {d['turns']!r}")
        differences += len(summary["differences"])
        rescored += summary["sequences"]
        lines += summary["results_lines"]
    try:
        atomic_write(f"{args.run}/rescored.json", json.dumps(by_mode, indent=2) + "\n")
    except OSError as exc:
        print(f"skillrise-bench rescore: error: cannot write {args.run}/rescored.json: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_OUTPUT
    counts = f"{rescored} sequence(s) rescored, {lines} result line(s)"
    print(f"turns and results agree: no differences ({counts})" if not differences else
          f"{differences} difference(s) between turns.jsonl and results.jsonl (listed above; {counts})")
    return 0 if not differences else 1


def saved_episode(args: argparse.Namespace) -> Any:
    """The `episode.SavedEpisode` this run follows: --episode's, else (--agent hf) the --model folder's; None
    when there is none or with --episode none. --episode naming nothing that holds one is an error."""
    from skillrise_gym import episode

    if args.episode == "none":
        return None
    if args.episode is not None:
        saved = episode.load(args.episode)
        if saved is None:
            raise ValueError(f"--episode {args.episode}: no {episode.FILE} there (a training run's folder, its "
                             f"final/ or checkpoint-N/, or the file itself)")
        return saved
    if args.agent == "hf" and args.model and os.path.isdir(os.path.expanduser(args.model)):
        return episode.load(args.model)
    return None


#: the EpisodeSpec fields a saved episode gives the defaults of: each is also the bench flag's argparse destination
EPISODE_FLAGS = ("mode", "carry", "end_on_success", "max_task_steps", "prompt_style", "backend_options",
                 "max_new_tokens", "max_prompt_tokens", "system_prompt")


def ignored_episode(args: argparse.Namespace) -> Any:
    """With --episode none and --agent hf: the episode.json the --model folder holds (played it is not), or None."""
    from skillrise_gym.episode import episode_file

    if args.episode != "none" or args.agent != "hf" or not args.model:
        return None
    folder = os.path.expanduser(args.model)
    return episode_file(folder) if os.path.isdir(folder) else None


def held_out_split(saved: Any, strict: bool = True) -> str | None:
    """The held-out split a saved episode's training evaluated on, by its name here (an alias such as ALFWorld's
    valid_seen becomes the split it names; None when the file names none). One this version's backend does not
    know is refused, naming the file and --split, or with `strict=False` (it only labels the split played)
    returned as written."""
    from skillrise_gym.backends import backend_class

    split = saved.notes.get("held_out_split")
    if split is None:
        return None
    try:
        return backend_class(saved.spec.env).canonical_split(str(split))
    except ValueError as exc:
        if not strict:
            return str(split)
        raise ValueError(f"{saved.path}: its held_out_split, the split the bench plays without --split, is not "
                         f"one of this version's ({exc}); give --split") from None


def adopt_episode(args: argparse.Namespace, saved: Any, given: set[str]) -> None:
    """The saved episode's values for every flag the command line did not give (`EPISODE_FLAGS`), and its chat
    template arguments (no flag). Without --split: the held-out split its training evaluated on
    (`held_out_split`), so a trained policy is scored where its training scored it, never on its own training
    tasks by default."""
    spec = saved.spec
    held_out = None if "split" in given else held_out_split(saved)
    if held_out is not None:
        args.split = held_out
    for name in EPISODE_FLAGS:
        value = getattr(spec, name)
        if name in given or (value is None and name in ("max_new_tokens", "max_prompt_tokens")):
            continue
        if name == "carry":
            value = [value]
        elif name == "backend_options":
            value = [f"{key}={json.dumps(item)}" for key, item in value.items()]
        setattr(args, name, value)
    args.chat_template_kwargs = dict(spec.chat_template_kwargs) or None


def compare_episode(saved: Any, config: BenchConfig, agent: Agent, log: Any) -> dict[str, Any]:
    """Say once how this run's episode relates to the saved one (the same, or which fields differ: a run
    that changes one measures another episode than the one trained), and return it for the manifest."""
    from skillrise_gym.episode import FRAMING, describe_value

    trained = saved.spec
    framing = agent.framing()
    carry = trained.carry if trained.carry in config.carry else config.carry[0]
    now = config.episode(trained.K, carry, agent)
    names = tuple(n for n in trained.shape_fields() if n not in FRAMING or n in framing)
    differs = trained.differences(now, names)
    others = [mode for mode in config.carry if mode != carry]
    held_out = held_out_split(saved, strict=False)
    panel = (f"trained on split {trained.split} at K={trained.K}; measured on split {config.split} at "
             f"K={' '.join(map(str, config.K))}")
    if held_out is not None and config.split == held_out:
        panel += " (the held-out split its training evaluated on)"
    elif config.split == trained.split:
        panel += " (the tasks it was trained on" + (f"; its held-out split is {held_out}" if held_out else "") + ")"
    if differs:
        shown = "; ".join(f"{name} {describe_value(new)} (trained {describe_value(old)})"
                          for name, (old, new) in differs.items())
        log(f"skillrise-bench: warning: this run differs from the episode {saved.path} was trained on: {shown}. "
            "Its numbers measure another episode than the one trained.")
    else:
        steps = trained.max_task_steps
        log(f"skillrise-bench: playing the episode {saved.path} was trained on ({trained.prompt_style} prompts, "
            f"carry {trained.carry}, at most {steps} step{'s' if steps != 1 else ''} a task)")
    trained_t, now_t = saved.notes.get("temperature"), agent.describe().get("temperature")
    if trained_t is not None and now_t is not None and float(trained_t) != float(now_t):
        panel += f"; sampled at temperature {trained_t:g} in training, {now_t:g} here (--temperature)"
    log(f"skillrise-bench: {panel}" + (f"; also played: carry {', '.join(others)} (trained with {carry})"
                                       if others else ""))
    return {"from": str(saved.path), "differs": {name: [old, new] for name, (old, new) in differs.items()},
            **({"also_played": others} if others else {})}


def no_episode_note(model: str | None) -> str | None:
    """For --agent hf with a trained model folder that saved no episode (a run of an earlier version): the
    note that the bench's defaults are played, and the flags that would play the training's."""
    from pathlib import Path

    if not model or not os.path.isdir(os.path.expanduser(model)):
        return None
    folder = Path(model).expanduser()
    run = next((p for p in (folder, folder.parent) if (p / "config.json").is_file()
                and '"algo"' in (p / "config.json").read_text(encoding="utf-8", errors="replace")), None)
    trained = run is not None or (folder / "adapter_config.json").is_file() or (folder / "trainer_state.json").is_file()
    if not trained:
        return None
    hint = ""
    if run is not None:
        try:
            recorded = json.loads((run / "config.json").read_text(encoding="utf-8"))
            style = recorded.get("prompt_style")
            style = {"auto": "compact (auto: compact for models under 1B parameters)"}.get(style, style)
            hint = (f" {run / 'config.json'} records prompt_style {style}, max_new_tokens "
                    f"{recorded.get('max_new_tokens')}, max_task_steps {recorded.get('max_task_steps')}:"
                    " pass them as --prompt-style, --max-new-tokens and --max-task-steps.")
        except (OSError, ValueError, AttributeError):
            pass
    return (f"skillrise-bench: note: {model} holds no episode.json (trained before episodes were saved?): "
            f"playing the bench's defaults, which may not be the prompts it was trained on.{hint}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["rescore"]:
        return rescore_main(argv[1:])
    if argv[:1] == ["compare"]:
        from skillrise_gym.bench.compare import main as compare_main

        return compare_main(argv[1:])
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (a scheduler stopping the job) stops like Ctrl-C: finished sequences kept, summary written
        signal.signal(signal.SIGTERM, _interrupt)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    agent: Agent | None = None
    curator: Agent | None = None
    try:
        saved = saved_episode(args)  # a trained policy's episode: the defaults of the flags not given
        if args.env is None:
            if saved is None:
                found = (f" ({args.model} is not a folder holding a trained policy's episode.json)"
                         if args.agent == "hf" and args.model else "")
                build_parser().error(f"the following arguments are required: --env{found}")
            args.env = saved.spec.env
        elif saved is not None and saved.spec.env != args.env:
            raise ValueError(f"--env {args.env}, but {saved.path} is an episode of {saved.spec.env} (its step "
                             f"limit, prompts and engine options are {saved.spec.env}'s): drop --env to play it, or "
                             f"give --episode none to play {args.env} with the bench's own defaults")
        ignored = ignored_episode(args)
        if saved is not None:
            adopt_episode(args, saved, given_flags(build_parser(), argv))
        elif ignored is not None:
            log(f"skillrise-bench: --episode none: playing {args.env} with the bench's defaults, not the episode "
                f"{ignored} was trained on")
        elif args.agent == "hf":
            note = no_episode_note(args.model)
            if note:
                log(note)
        config = BenchConfig(**field_values(args, BenchConfig),  # --backend-option KEY=VALUE parsed here
                             admissible_actions=saved.spec.admissible_actions if saved is not None else None,
                             episode_from={"from": None, "ignored": str(ignored)} if ignored is not None else None)
        from skillrise_gym.extras import require

        if config.progress:
            require("bench", ["tqdm"], "the progress bar", "or run with --no-progress")
        if config.plots:
            require("bench", ["matplotlib"], "the plots", "or run with --no-plots")
        from skillrise_gym.tracking import check_trackers

        if "none" in config.report_to and len(config.report_to) > 1:
            raise ValueError("--report-to: none with other trackers; give the trackers, or none alone")
        check_trackers(config.report_to)
        if config.pool.ray_address:  # an unreachable cluster is refused now, before the run directory is made
            from skillrise_gym.pools.ray import connect

            connect(config.pool.ray_address)
        agent = make_agent(args, config.benchmark)
        try:
            check_prefill(agent, config.style)
            curator = make_curator(args, config)
            if curator is not None and "skill" in config.carry and not config.documents_from:
                check_prefill(curator, config.style)  # it answers the env's own CURATE prompt
            for mode in config.carry:  # each mode's agent as the run will make it: refusals now, not mid-run
                for_mode(agent, config, mode, curator)
            if config.documents_from:
                from skillrise_gym.memory.documents import check_source, documents_file

                for mode in config.carry:
                    if memory.env_carry(mode) == "skill":
                        check_source(documents_file(config.documents_from, mode), config.identity(agent, mode))
        except ValueError:
            agent.close()
            if curator is not None:
                curator.close()
            raise
        if saved is not None:
            config.episode_from = compare_episode(saved, config, agent, log)
        if config.panel == "test":
            log(f"note: {TEST_IS_FOR_REPORTING}")
    except (ValueError, RunDirError) as exc:
        log(f"skillrise-bench: error: {exc}")
        return EXIT_USAGE
    except (MissingDependencyError, ImportError, FileNotFoundError, ConfigurationError) as exc:
        log(f"skillrise-bench: error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while setting up (a model loading, a Ray address probed)
        for made in (agent, curator):
            if made is not None:
                made.close()
        log("skillrise-bench: interrupted before the run began; nothing was written.")
        _exit_promptly()
        return EXIT_INTERRUPTED
    try:
        outcome = run_bench(config, agent, log=log, curator=curator)
    except KeyboardInterrupt:  # outside the play loop (opening the run directory, or a second signal in the summary)
        log(f"skillrise-bench: interrupted; re-run the same command to resume ({args.out}).")
        _exit_promptly()
        return EXIT_INTERRUPTED
    except RunDirError as exc:
        log(f"skillrise-bench: error: {exc}")
        return EXIT_USAGE
    except OutputError as exc:
        log(f"skillrise-bench: error: {exc}. The sequences finished before it are kept in {args.out}; once it "
            "has room and is writable, re-run the same command to resume.")
        return EXIT_OUTPUT
    except (DataNotFoundError, MissingDependencyError) as exc:
        log(f"skillrise-bench: error: {exc}")
        return EXIT_ENV
    except SkillRiseError as exc:
        if isinstance(exc, ConfigurationError):  # a rerun of the same command would fail the same way
            log(f"skillrise-bench: error: {exc}")
            return EXIT_USAGE
        log(f"skillrise-bench: error: {exc}\nFinished sequences are kept in {args.out}; re-run to resume.")
        return EXIT_ENV
    finally:
        agent.close()
        if curator is not None:
            curator.close()
    if config.report_to != ["none"] and outcome.summary.get("finished"):
        from skillrise_gym.tracking import Trackers

        try:  # the run is written: a tracker that fails says so in one line and loses nothing
            trackers = Trackers(config.report_to, Path(config.out), config.identity(agent))
            try:
                trackers.log_bench_summary(outcome.summary)
            finally:
                trackers.close()
        except (ImportError, OSError, ValueError, RuntimeError) as exc:
            log(f"skillrise-bench: warning: --report-to: the summary was not logged ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())}); it is in {config.out}/summary.json")
    print(outcome.table)
    if outcome.status == "agent_error":
        advice = ("re-run the same command to resume" if outcome.resumable else
                  "a rerun of the same command would fail the same way: fix the agent's flags (model name, key, "
                  "request) and re-run to resume")
        log(f"skillrise-bench: stopped: {outcome.message}\nFinished sequences are kept in {args.out}; {advice}.")
        return EXIT_AGENT
    if outcome.status == "interrupted":
        log(f"skillrise-bench: interrupted; re-run the same command to resume ({args.out}).")
        _exit_promptly()
        return EXIT_INTERRUPTED
    records = outcome.summary.get("records") or {"skill": "turns.jsonl"}
    log(f"results: {args.out}/summary.json, " + ", ".join(f"{args.out}/{path}" for path in records.values()))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
