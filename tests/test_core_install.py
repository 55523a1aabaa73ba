"""A core-only install (`pip install skillrise-gym`: gymnasium and numpy, no extra): every CLI answers --help,
a scripted bench runs, and whatever needs an extra says which, in one line (skillrise_gym/extras.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from skillrise_gym.backends.base import MissingDependencyError
from skillrise_gym.extras import require

ROOT = Path(__file__).resolve().parent.parent


def test_require_names_the_modules_the_extra_and_the_flag_that_does_without():
    require("bench", ["json"], "nothing")  # present: no error
    with pytest.raises(MissingDependencyError, match=r"the plots needs no_such_module_x, from the bench extra: pip "
                                                     r"install 'skillrise-gym\[bench\]' \(or run with --no-plots\)"):
        require("bench", ["json", "no_such_module_x"], "the plots", "or run with --no-plots")


@pytest.mark.slow
def test_a_core_only_install_answers_help_and_names_the_extra(tmp_path):
    venv = tmp_path / "core"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(ROOT)],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-2000:]

    def cli(*argv):
        return subprocess.run([str(venv / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})

    for name in ("skillrise-bench", "skillrise-train", "skillrise-data"):
        done = cli(name, "--help")
        assert done.returncode == 0 and done.stdout.startswith("usage:"), (name, done.stderr[-1000:])
    bench = ["skillrise-bench", "--env", "rulebook", "--K", "2", "--num-sequences", "2"]
    done = cli(*bench, "--agent", "expert", "--out", "a", "--no-progress", "--no-plots")
    assert done.returncode == 0 and (tmp_path / "a" / "summary.json").is_file(), done.stderr[-1000:]
    for argv, message in (
            ([*bench, "--agent", "expert", "--out", "b"], "the progress bar needs tqdm, from the bench extra"),
            ([*bench, "--agent", "hf", "--out", "c", "--no-progress", "--no-plots"],
             "--agent hf needs torch, transformers, from the train extra: pip install 'skillrise-gym[train]'"),
            (["skillrise-train", "--env", "rulebook", "--output-dir", "d"], "skillrise-train needs torch")):
        done = cli(*argv)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr[-1000:]


def test_every_cli_answers_version_and_both_packages_have_one(capsys):
    import skillrise_gym
    import skillrise_train
    from skillrise_gym.bench.cli import main as bench
    from skillrise_gym.data_cli import main as data
    from skillrise_train.cli import main as train

    assert skillrise_train.__version__ == skillrise_gym.__version__
    for name, main in (("skillrise-bench", bench), ("skillrise-train", train), ("skillrise-data", data)):
        with pytest.raises(SystemExit) as exited:
            main(["--version"])
        assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"{name} {skillrise_gym.__version__}"
    assert (ROOT / "skillrise_gym" / "py.typed").is_file() and (ROOT / "skillrise_train" / "py.typed").is_file()
