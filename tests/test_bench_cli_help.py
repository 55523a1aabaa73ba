"""`skillrise-bench --help` (and its rescore subcommand): every flag states its default at most once, and
never as "(default: None)"."""

from __future__ import annotations

import re

import pytest

from skillrise_gym.bench import cli


def _entries(text: str) -> dict[str, str]:
    """Each option's help entry (its wrapped lines joined, whitespace collapsed), keyed by its first flag."""
    entries: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"^  (-{1,2}[\w-]+)", line)
        if match:
            current = match.group(1)
            entries[current] = [line]
        elif current and line.startswith("    "):
            entries[current].append(line)
        else:
            current = None
    return {flag: " ".join(" ".join(lines).split()) for flag, lines in entries.items()}


def _helps(capsys) -> dict[str, str]:
    texts = {"skillrise-bench": cli.build_parser().format_help()}
    with pytest.raises(SystemExit) as stop:
        cli.main(["rescore", "--help"])
    assert stop.value.code == 0
    texts["skillrise-bench rescore"] = capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert capsys.readouterr().out == texts["skillrise-bench"]
    return texts


@pytest.mark.parametrize("columns", ["60", "100", "200"])
def test_help_states_each_default_once(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    texts = _helps(capsys)
    assert set(texts) == {"skillrise-bench", "skillrise-bench rescore"}
    for name, text in texts.items():
        assert text.startswith(f"usage: {name}")
        flat = " ".join(text.split())
        assert "(default: None)" not in flat and "(default: [])" not in flat and "(default: False)" not in flat
        entries = _entries(text)
        assert entries, name
        for flag, entry in entries.items():
            assert len(re.findall(r"\(default:", entry)) <= 1, (name, flag, entry)
            assert len(re.findall(r"\bdefault\b", entry, flags=re.IGNORECASE)) <= 1, (name, flag, entry)
    main = _entries(texts["skillrise-bench"])
    assert "--K" in main and main["--K"].endswith("(default: 1 2 4 6)")
    assert main["--split"].endswith("(default: with a trained policy's episode, the held-out split its training "
                                    "evaluated on; else the backend's first: test for WebShop, train for the others)")
    assert main["--env-workers"].endswith("(default: 1)") and main["--memory"].endswith("(default: skill)")
    assert "default" not in main["--out"] and "default" not in main["--no-plots"]
    assert all(entry.split(maxsplit=1)[0] != entry for entry in main.values())  # every flag has a help text
