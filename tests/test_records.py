"""Turn records: JSONL round trip, torn last lines, schema checks."""

import json

import pytest

from skillrise_gym.records import Turn, iter_jsonl, read_turns, write_jsonl


def make_turn(**overrides):
    data = dict(role="solve", position=1, sequence_id="toy:train:cross:K3:abc", trial_id="t0", task_id="red-1",
                family="red", benchmark="toy", prompt="P ü\n", response="<action>look</action>", action="look",
                format_valid=True, reward=0.0, success=False, score=0.0, step_index=2, prompt_tokens=10,
                completion_tokens=3)
    data.update(overrides)
    return Turn(**data)


def test_round_trip(tmp_path):
    turns = [make_turn(), make_turn(role="curate", action="## doc", extra={"note": [1, 2]})]
    path = tmp_path / "runs" / "turns.jsonl"
    assert write_jsonl(path, turns) == 2
    assert read_turns(path) == turns


def test_append_and_torn_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [make_turn()])
    write_jsonl(path, [make_turn(step_index=3)])
    with open(path, "a") as handle:
        handle.write('{"role": "solve", "posi')  # a writer killed mid-line
    assert [t.step_index for t in read_turns(path)] == [2, 3]


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(make_turn().to_dict()) + "\nnot json\n" + json.dumps(make_turn().to_dict()) + "\n")
    with pytest.raises(ValueError, match=":2: not valid JSON"):
        list(iter_jsonl(path))


def test_unknown_fields_are_kept_in_extra_and_bad_role_rejected():
    data = make_turn().to_dict()
    data["latency_ms"] = 12
    assert Turn.from_dict(data).extra["latency_ms"] == 12
    with pytest.raises(ValueError, match="role"):
        make_turn(role="play")
    with pytest.raises(ValueError, match="schema"):
        Turn.from_dict({**make_turn().to_dict(), "schema": 99})
