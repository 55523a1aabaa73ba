"""skillrise-train --config FILE: YAML or JSON settings, flags beside it win (and say so), a run's own
config.json launches the same run again; bad files are one line naming the file."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from skillrise_train.cli import main, parse_config  # noqa: E402

FLAGS = ["--env", "rulebook", "--model", "tiny", "--K", "2", "--G", "2", "--S", "1", "--steps", "1",
         "--warmstart-steps", "0", "--threads", "1", "--lr", "0.001", "--backend-options", '{"rules": 1, "bins": 3}']
RECIPE = """# a recipe
env: rulebook
model: tiny
K: 2
G: 2
S: 1
steps: 1
warmstart-steps: 0
threads: 1
lr: 0.0003
backend_options: {rules: 1, bins: 3}
"""


def test_a_config_file_is_the_same_as_its_flags_and_a_flag_beside_it_wins(tmp_path, capsys):
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    from_file = parse_config(["--config", str(tmp_path / "recipe.yaml"), "--lr", "0.001"])
    assert from_file == parse_config(FLAGS)
    assert "--lr 0.001 (given) overrides lr 0.0003 from" in capsys.readouterr().err
    (tmp_path / "recipe.json").write_text(json.dumps({"env": "rulebook", "model": "tiny", "K": 2, "G": 2, "S": 1,
                                                      "steps": 1, "warmstart_steps": 0, "threads": 1, "lr": 0.001,
                                                      "backend_options": {"rules": 1, "bins": 3}}))
    assert parse_config(["--config", str(tmp_path / "recipe.json")]) == from_file


def test_a_runs_config_json_launches_the_same_run(tmp_path, capsys):
    """A run launched from flags and one launched from the first run's config.json train the same steps."""
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(FLAGS + ["--output-dir", str(first)]) == 0
    assert main(["--config", str(first / "config.json"), "--output-dir", str(second)]) == 0
    # where a run goes and what it does to a folder come from flags only: a config.json recorded with
    # --overwrite (as transfer_experiment's arms are) neither deletes its own run nor resumes it
    recorded = json.loads((first / "config.json").read_text())
    (tmp_path / "overwriting.json").write_text(json.dumps({**recorded, "overwrite": True, "resume": True}))
    again = parse_config(["--config", str(tmp_path / "overwriting.json")])
    assert (again.output_dir, again.overwrite, again.resume) == ("runs/skillrise", False, False)
    recorded = json.loads((first / "config.json").read_text())
    assert recorded["episode"]["K"] == 2  # a record of the run, read and not a setting
    relaunched = json.loads((second / "config.json").read_text())
    assert {k: v for k, v in relaunched.items() if k != "output_dir"} == {
        k: v for k, v in recorded.items() if k != "output_dir"}

    def steps(folder):
        return [{k: v for k, v in json.loads(line).items() if not k.startswith(("time/", "step_seconds", "step_time", "tokens_per_s",
                                                                                "generation_tokens_per_s"))}
                for line in (folder / "metrics.jsonl").read_text().splitlines()]

    assert steps(first) == steps(second)


def test_bad_config_files_are_refused_naming_the_file(tmp_path, capsys):
    cases = {
        "typo.yaml": ("env: rulebook\nmax_new_token: 8\n", "unknown setting 'max_new_token'; did you mean 'max_new_tokens'?"),
        "type.yaml": ("env: rulebook\nK: '4'\n", "K must be an integer, got '4'"),
        "bool.json": ('{"lora": "yes"}', "lora must be true or false, got 'yes'"),
        "list.yaml": ("- env\n- rulebook\n", "expected a mapping of settings, got list"),
        "broken.yaml": ("env: [rulebook\n", "not valid YAML"),
        "broken.json": ("{env: rulebook}", "not valid JSON"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        assert main(["--config", str(tmp_path / name), "--output-dir", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert message in err and name in err, (name, err)
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
