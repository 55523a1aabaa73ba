"""The published memory methods (skillrise_gym/memory/): each method's protocol on a recorded attempt with a
scripted stand-in for the language model (the calls it makes and the operations it applies to its memory),
the agent that drives them in the bench, documents as an artifact (export, transplant, freeze), the cost
blocks, and one short real run of each with the hf agent on the rulebook probe."""

from __future__ import annotations

import json
from typing import Any

import pytest

from skillrise_gym import memory
from skillrise_gym.agents.base import Agent, AgentOutput
from skillrise_gym.bench.runner import BenchConfig, run_bench
from skillrise_gym.memory.ace import ACE
from skillrise_gym.memory.awm import AWM
from skillrise_gym.memory.dc import DynamicCheatsheet
from skillrise_gym.memory.expel import ExpeL
from skillrise_gym.memory.reflexion import Reflexion


def attempt(success: bool, position: int = 0, task_id: str = "t0") -> dict[str, Any]:
    return {"position": position, "family": "glass", "task_id": task_id, "task": "Put the Dalu ladle (made of "
            "glass) in its bin.", "initial_observation": "Bins: red, blue, green.",
            "trajectory": [["red bin", "Wrong bin. Glass items go in the blue bin."]] if not success else
            [["blue bin", "Correct."]], "success": success, "score": float(success), "engine_error": None}


def play(method, memory_value, the_attempt, answers):
    """Drive one update with scripted answers (a list, consumed in order); returns (new memory, prompts)."""
    update = method.update(memory_value, the_attempt, "rulebook")
    prompts, answer = [], None
    try:
        while True:
            request = update.send(answer)
            prompts.append(request)
            answer = answers.pop(0)
    except StopIteration as done:
        return done.value, prompts


# ------------------------------------------------------------------------------------------ protocols
def test_reflexion_reflects_on_failures_only_and_keeps_the_latest_three():
    method = Reflexion()
    kept, calls = play(method, method.new_memory(), attempt(True), [])
    assert kept == [] and calls == []  # a success adds nothing, with no call
    value = []
    for i in range(4):
        value, calls = play(method, value, attempt(False, i), [f"thinking <reflection>plan {i}</reflection>"])
        assert len(calls) == 1 and "did not succeed" in calls[0].prompt and "Outcome: FAILURE" in calls[0].prompt
    assert value == ["plan 1", "plan 2", "plan 3"]  # the paper's bound for ALFWorld
    assert method.render(value).splitlines()[1] == "Attempt 1: plan 1"
    untagged, _ = play(method, [], attempt(False), ["no tags here"])
    assert untagged == ["no tags here"]


def test_expel_applies_its_operations_as_its_code_does():
    method = ExpeL(max_rules=10)
    start = method.new_memory()
    nothing, calls = play(method, start, attempt(False), [])
    assert calls == [] and nothing["rules"] == []  # a failure with no success to compare: no call
    first, calls = play(method, start, attempt(True, 0, "a"), [
        "ADD: Glass items go in the blue bin.\nADD: Read the material first.\nADD: no period here\n"
        "AGREE 7: Unknown rule."])
    assert "successful attempts" in calls[0].prompt and "(none yet)" in calls[0].prompt
    assert first["rules"] == [["Glass items go in the blue bin.", 2], ["Read the material first.", 2]]
    second, calls = play(method, first, attempt(False, 1, "b"), [
        "AGREE 1: Glass items go in the blue bin.\nREMOVE 2: Read the material first.\n"
        "EDIT 1: Glass items go in the blue bin, always.\n"  # contains rule 1: an AGREE, one per rule
        "ADD: Glass items go in the blue bin. Also wood.\n"  # contains an existing rule: dropped
        "EDIT 9: Out of range."])
    assert "SUCCESSFUL ATTEMPT" in calls[0].prompt and "FAILED ATTEMPT" in calls[0].prompt
    assert "1. Glass items go in the blue bin.\n2. Read the material first." in calls[0].prompt
    assert second["rules"] == [["Glass items go in the blue bin.", 3], ["Read the material first.", 1]]
    third, _ = play(method, second, attempt(False, 2, "c"), [
        "REMOVE 2: Read the material first.\nEDIT 1: Sort by material, then bin."])
    assert third["rules"] == [["Sort by material, then bin.", 4]]  # rule 2 reached 0 and went
    full = {"rules": [[f"Rule {i}.", 1] for i in range(15)], "successes": [attempt(True)]}
    cut, calls = play(method, full, attempt(False), ["REMOVE 3: Rule 2."])
    assert "The list is full" in calls[0].prompt
    assert ["Rule 2.", 1] not in cut["rules"] and len(cut["rules"]) == 14  # -3 once the list is long
    assert method.render(third) == ("Experiences gathered on similar tasks, in decreasing order of importance:\n"
                                    "1. Sort by material, then bin.")


def test_awm_induces_from_successes_and_replaces_its_workflows():
    method = AWM()
    value, calls = play(method, method.new_memory(), attempt(False), [])
    assert calls == [] and method.render(value) == ""
    value, calls = play(method, value, attempt(True, 0, "a"), ["## Summary Workflows\nWorkflow 1: sort\nread; put"])
    assert "Query: Put the Dalu ladle" in calls[0].prompt and "- blue bin" in calls[0].prompt
    assert method.render(value) == "Workflow 1: sort\nread; put"
    value, calls = play(method, value, attempt(True, 1, "b"), ["Workflow 1: sort by material"])
    assert calls[0].prompt.count("Query:") == 2  # the pool of every success so far
    assert method.render(value) == "Workflow 1: sort by material"  # replaced, not appended
    value, calls = play(method, value, attempt(True, 2, "b"), ["Workflow 1: again"])
    assert calls[0].prompt.count("Query:") == 2  # one trajectory per distinct task


def test_dc_rewrites_the_whole_cheatsheet_without_being_told_the_outcome():
    method = DynamicCheatsheet()
    value, calls = play(method, method.new_memory(), attempt(False), [
        "Reasoning... <cheatsheet>Version: 1\n<memory_item>glass: blue</memory_item> ** Count: 1</cheatsheet>"])
    assert "PREVIOUS CHEATSHEET:\n(empty)" in calls[0].prompt
    assert "Outcome" not in calls[0].prompt and "FAILURE" not in calls[0].prompt  # no correctness signal
    assert "Wrong bin." in calls[0].prompt  # the env's feedback stays in the trajectory, as the answer held it
    assert value.startswith("Version: 1")
    kept, _ = play(method, value, attempt(True, 1), ["no cheatsheet tag"])
    assert kept == value
    assert method.render(method.new_memory()) == ""


def test_ace_tags_bullets_and_merges_added_ones_deterministically():
    method = ACE()
    value, calls = play(method, method.new_memory(), attempt(False), [
        json.dumps({"reasoning": "r", "key_insight": "k", "bullet_tags": []}),
        json.dumps({"reasoning": "r", "operations": [
            {"type": "ADD", "section": "Common Mistakes To Avoid", "content": "Read the material first."},
            {"type": "ADD", "section": "nonsense", "content": "Bins are colours."},
            {"type": "UPDATE", "section": "others", "content": "ignored"}]})])
    assert [c.purpose for c in calls] == ["reflect", "curate"]
    assert "Outcome: FAILURE" in calls[0].prompt and "PLAYBOOK:\n(empty)" in calls[0].prompt
    assert [(b["id"], b["section"]) for b in value["bullets"]] == [("err-00001", "common_mistakes_to_avoid"),
                                                                  ("misc-00002", "others")]
    value, _ = play(method, value, attempt(True, 1), [
        "```json\n" + json.dumps({"bullet_tags": [{"id": "err-00001", "tag": "helpful"},
                                                  {"id": "misc-00002", "tag": "harmful"},
                                                  {"id": "zzz-1", "tag": "helpful"}]}) + "\n```",
        json.dumps({"operations": [{"type": "ADD", "section": "others", "content": "Third."}]})])
    assert [(b["helpful"], b["harmful"]) for b in value["bullets"]] == [(1, 0), (0, 1), (0, 0)]
    assert value["bullets"][2]["id"] == "misc-00003" and value["next"] == 4
    assert method.render(value).splitlines() == [
        "## COMMON MISTAKES TO AVOID", "[err-00001] helpful=1 harmful=0 :: Read the material first.",
        "## OTHERS", "[misc-00002] helpful=0 harmful=1 :: Bins are colours.",
        "[misc-00003] helpful=0 harmful=0 :: Third."]
    same, calls = play(method, value, attempt(False, 2), ["not json at all"])
    assert same == value and len(calls) == 1  # an unreadable reflection: no curator call, no change


def test_every_method_is_registered_with_its_paper_and_an_unknown_one_is_refused():
    assert list(memory.METHODS) == ["reflexion", "expel", "awm", "dc", "ace"]
    assert all(cls.paper and cls.summary for cls in memory.METHODS.values())
    with pytest.raises(ValueError, match="unknown memory method 'memgpt'; known: reflexion, expel, awm, dc, ace"):
        memory.method("memgpt")


# ------------------------------------------------------------------------------------------ in the bench
class ScriptedModel(Agent):
    """A stand-in for a chat model: answers each prompt by what it asks for, and counts its act calls."""

    name = "scripted-model"
    batch_size = 8

    def __init__(self) -> None:
        self.batches: list[int] = []

    def act(self, observations, infos=None):
        self.batches.append(len(observations))
        out = []
        for o in observations:
            prompt = str(o["prompt"])
            if "<cheatsheet>" in prompt:
                text = f"<cheatsheet>cheat {prompt.count('Correct.')}-{prompt.count('Wrong')}</cheatsheet>"
            elif "<reflection>" in prompt:
                text = "<reflection>look at the material</reflection>"
            else:
                text = "<skill>glass items go in the blue bin</skill>"
            out.append(AgentOutput(text, prompt_tokens=len(prompt) // 4, completion_tokens=5, latency_s=0.01))
        return out

    def describe(self):
        return {"name": self.name, "model": "scripted"}


def bench(out, carry, **config):
    return BenchConfig(env="rulebook", out=str(out), K=[3], num_sequences=4, carry=carry, workers=0, progress=False,
                       plots=False, **config)


def documents(folder):
    return [json.loads(line) for line in (folder / "documents.jsonl").read_text().splitlines()]


def test_a_method_curates_for_a_scripted_solver_with_its_calls_recorded_and_costed(tmp_path):
    """The expert solves, the scripted model runs DC: one curate call per curate turn, all sequences' calls
    batched together; every call is in the turn's record, tokens are the calls' sums, cost blocks split the
    curate share, and documents.jsonl holds what the env carried."""
    from skillrise_gym.agents.expert import ExpertAgent

    model = ScriptedModel()
    outcome = run_bench(bench(tmp_path / "dc", ["dc"], parallel=4, price=[1.0, 2.0]), ExpertAgent(), curator=model)
    assert outcome.status == "complete"
    assert max(model.batches) == 4  # the four sequences' curate calls in one batch
    folder = tmp_path / "dc" / "carry-dc"  # a mode other than skill alone: the carry-set layout
    turns = [json.loads(line) for line in (folder / "turns.jsonl").read_text().splitlines()]
    curate = [t for t in turns if t["role"] == "curate"]
    assert len(curate) == 8 and all(len(t["extra"]["agent"]["calls"]) == 1 for t in curate)
    assert all(t["prompt_tokens"] == t["extra"]["agent"]["calls"][0]["prompt_tokens"] for t in curate)
    assert curate[0]["extra"]["agent"]["writer"]["model"] == "scripted"
    block = outcome.summary["by_carry"]["dc"]["blocks"][0]
    assert block["cost"]["curate"]["model_calls"] == 8 and block["cost"]["total"]["model_calls"] == 8  # expert: 0
    assert block["cost"]["per_solved_task"]["model_calls"] == 8 / 12
    assert block["cost"]["total"]["dollars"] == pytest.approx(
        (block["cost"]["total"]["prompt_tokens"] + 2 * block["cost"]["total"]["completion_tokens"]) / 1e6)
    docs = documents(folder)
    assert len(docs) == 8 and {d["writer"] for d in docs} == {"scripted"}
    assert all(d["text"].startswith("cheat ") for d in docs)
    solve = [t for t in turns if t["role"] == "solve" and t["position"] == 1]
    assert all(any(d["text"] in t["prompt"] for d in docs) for t in solve)  # what the env carried to task 1
    assert all(d["hash"] == memory.documents.text_hash(d["text"]) for d in docs)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["identity"]["agent"]["memory"] == "dc" and manifest["identity"]["carry"] == "dc"


def test_documents_round_trip_a_transplant_and_freeze(tmp_path):
    """Documents one run wrote are replayed by another, position by position on the same sequences (the
    replayed run's documents.jsonl equals the source's); --freeze-after keeps the document of a position
    for every later one; a source that played other sequences is refused naming the difference."""
    from skillrise_gym.agents.expert import ExpertAgent
    from skillrise_gym.memory.documents import Documents, check_source, documents_file

    run_bench(bench(tmp_path / "a", ["skill"]), ExpertAgent(), curator=ScriptedModel())
    run_bench(bench(tmp_path / "b", ["dc", "skill"], documents_from=str(tmp_path / "a")), ExpertAgent())
    source = {(d["sequence_id"], d["position"]): d["text"] for d in documents(tmp_path / "a")}
    for mode in ("dc", "skill"):
        replayed = {(d["sequence_id"], d["position"]): d["text"] for d in documents(tmp_path / "b" / f"carry-{mode}")}
        assert replayed == source
    run_bench(bench(tmp_path / "f", ["dc"], freeze_after=0), ExpertAgent(), curator=ScriptedModel())
    frozen = documents(tmp_path / "f" / "carry-dc")
    assert all(d["text"] == next(e["text"] for e in frozen if e["index"] == d["index"] and e["position"] == 0)
               for d in frozen)
    other = bench(tmp_path / "c", ["skill"], seed=3)
    with pytest.raises(ValueError, match="its run played other sequences: seed 0 there, 3 here"):
        check_source(documents_file(tmp_path / "a"), other.identity(ExpertAgent(), "skill"))
    missing = Documents(documents_file(tmp_path / "a"))
    with pytest.raises(Exception, match="has no document for sequence nope"):
        missing.text(3, "nope", 0)


def test_bad_memory_input_is_refused_with_the_fix(tmp_path, capsys):
    from skillrise_gym.bench.cli import main

    base = ["--env", "rulebook", "--K", "2", "--num-sequences", "2", "--no-progress", "--no-plots"]
    cases = [
        (["--agent", "expert", "--memory", "memgpt"], "unknown mode 'memgpt'; known: skill, none, reflect"),
        (["--agent", "expert", "--memory", "expel"], "memory method expel writes its documents with a model, and "
                                                     "--agent expert has none"),
        (["--agent", "expert", "--price", "1"], "--price takes two numbers >= 0"),
        (["--agent", "expert", "--freeze-after", "-1"], "--freeze-after must be a task position >= 0"),
        (["--agent", "expert", "--memory", "none", "--freeze-after", "1"], "act on documents"),
        (["--agent", "expert", "--documents-from", str(tmp_path)], "no documents.jsonl there"),
        (["--agent", "expert", "--curator-agent", "hf", "--curator-model", "tiny", "--memory", "skill", "reflect"],
         "--curator-model writes documents; carry reflect writes reflections with the solver"),
        (["--agent", "hf", "--model", "tiny", "--curator-agent", "openai", "--curator-model", "m", "--base-url",
          "http://127.0.0.1:9/v1", "--prompt-style", "compact"], "which the openai agent cannot do as configured"),
    ]
    for argv, message in cases:
        assert main(base + argv + ["--out", str(tmp_path / "x")]) == 2
        assert message in capsys.readouterr().err, argv
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit):
        main(base + ["--agent", "expert", "--price", "one", "two", "--out", str(tmp_path / "y")])
    assert "invalid float value: 'one'" in capsys.readouterr().err


def test_each_method_runs_with_the_hf_agent_on_the_rulebook_probe(tmp_path):
    """One short real run of every method with a real (tiny, offline) model solving and curating: the runs
    finish, every curate turn's calls are recorded, the documents are exported. A 2-layer model writes
    nothing useful: this shows the machinery, not what a method achieves (docs/memory.md)."""
    from skillrise_gym.agents.hf_agent import HFAgent, HFConfig

    agent = HFAgent(HFConfig(model="tiny", max_new_tokens=12, batch_size=8, threads=1))
    try:
        outcome = run_bench(BenchConfig(env="rulebook", out=str(tmp_path / "all"), K=[3], num_sequences=2,
                                        carry=list(memory.METHODS), workers=0, progress=False, plots=False,
                                        prompt_style="compact"), agent)
    finally:
        agent.close()
    assert outcome.status == "complete"
    for name in memory.METHODS:
        block = outcome.summary["by_carry"][name]["blocks"][0]
        assert block["sequences"] == 2 and block["cost"]["curate"]["model_calls"] is not None
        assert len(documents(tmp_path / "all" / f"carry-{name}")) == 4
    ace = [json.loads(line) for line in (tmp_path / "all" / "carry-ace" / "turns.jsonl").read_text().splitlines()]
    assert all(t["extra"]["agent"]["calls"][0]["purpose"] == "reflect" for t in ace if t["role"] == "curate")


def test_a_curator_that_fails_mid_run_stops_it_cleanly_and_a_rerun_resumes(tmp_path):
    """The curator's model failing (an AgentError after its retries) ends the run as an agent error with the
    finished sequences kept; the same run with the curator back finishes the rest."""
    from skillrise_gym.agents.base import AgentError
    from skillrise_gym.agents.expert import ExpertAgent

    class Failing(ScriptedModel):
        def act(self, observations, infos=None):
            if len(self.batches) >= 2:
                raise AgentError("the curator's endpoint is down")
            return super().act(observations, infos)

    config = bench(tmp_path / "run", ["dc"], parallel=1)
    first = run_bench(config, ExpertAgent(), curator=Failing())
    assert first.status == "agent_error" and "endpoint is down" in first.message and first.resumable
    done = len((tmp_path / "run" / "carry-dc" / "results.jsonl").read_text().splitlines())
    assert done == 1  # the sequence whose curate calls succeeded
    second = run_bench(config, ExpertAgent(), curator=ScriptedModel())
    assert second.status == "complete" and second.summary["by_carry"]["dc"]["finished"] == 4


def test_review_fixes_memory_release_ace_shapes_and_panel_sources(tmp_path):
    """A sequence's memory is released after its last curate turn; ACE survives JSON of any shape; a
    transplant source drawn by the same named panel is accepted whatever its --seed."""
    from skillrise_gym.agents.expert import ExpertAgent
    from skillrise_gym.memory.agent import MemoryAgent
    from skillrise_gym.memory.documents import check_source, documents_file

    agent = MemoryAgent(ExpertAgent(), Reflexion(), "rulebook", curator=ScriptedModel())
    run_bench(bench(tmp_path / "r", ["reflexion"]), agent)
    assert agent.memories == {}  # every sequence ended: nothing held
    method = ACE()
    weird, _ = play(method, method.new_memory(), attempt(False), [
        json.dumps({"bullet_tags": [{"id": ["str-00001"], "tag": "helpful"}, 3]}), json.dumps({"operations": 3})])
    assert weird == {"bullets": [], "next": 1}
    weird, _ = play(method, method.new_memory(), attempt(False), [json.dumps({"bullet_tags": 3}), "{}"])
    assert weird["bullets"] == []
    run_bench(bench(tmp_path / "p", ["skill"], panel="dev", seed=0), ExpertAgent(), curator=ScriptedModel())
    here = bench(tmp_path / "q", ["skill"], panel="dev", seed=1)
    check_source(documents_file(tmp_path / "p"), here.identity(ExpertAgent(), "skill"))  # no refusal
