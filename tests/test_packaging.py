"""The two ways to install (pip via pyproject, conda via environment.yml) and CI must agree."""

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
#: PyPI name -> conda-forge name where they differ.
CONDA_NAMES = {"torch": "pytorch"}


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def conda_requirements():
    """name -> (channel, specifier text) for everything environment.yml installs."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    found = {}
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            for line in entry["pip"]:
                if not line.startswith("-e"):
                    req = Requirement(line)
                    found[req.name.lower()] = ("pip", str(req.specifier))
            continue
        bracketed = re.fullmatch(r"([A-Za-z0-9_.-]+)\[version='([^']*)'.*\]", entry)
        name, spec = bracketed.groups() if bracketed else re.fullmatch(r"([A-Za-z0-9_.-]+)(.*)", entry).groups()
        found[name.lower()] = ("conda", spec)
    return found


def extras() -> list[str]:
    """The test and course extras: the environment holds both (students never open the course's tools)."""
    optional = pyproject()["project"]["optional-dependencies"]
    return optional["test"] + optional["course"]


def test_every_runtime_dependency_is_in_environment_yml_with_the_same_lower_bound():
    conda = conda_requirements()
    for line in pyproject()["project"]["dependencies"] + extras():
        req = Requirement(line)
        name = CONDA_NAMES.get(req.name.lower(), req.name.lower())
        assert name in conda, f"{req.name} is in pyproject.toml but not in environment.yml"
        assert conda[name][1] == str(req.specifier), f"{req.name}: pyproject {req.specifier} vs environment.yml {conda[name][1]}"


def test_environment_yml_installs_the_project_with_its_test_and_course_extras_and_nothing_unlisted():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(entry["pip"] for entry in env["dependencies"] if isinstance(entry, dict))
    assert "-e .[test,course]" in pip_section
    declared = {CONDA_NAMES.get(Requirement(x).name.lower(), Requirement(x).name.lower())
                for x in pyproject()["project"]["dependencies"] + extras()}
    assert set(conda_requirements()) - {"python", "pip"} == declared


def test_ci_runs_the_test_command_written_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^\s*(python3 run\.py test[^\n]*)$", readme, flags=re.M)
    assert commands, "README.md must show the test command"
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert commands[0].strip() in ci_lines
