"""Each sub-command's ``--help`` lists exactly the exit codes it can return."""

import ast
import importlib
import re
from pathlib import Path

import pytest

from langchain_ragmetrics import _cli as cli
from langchain_ragmetrics._cli import ExitCode, main
from langchain_ragmetrics._cli._common import _MEANING, ALWAYS

COMMANDS = ("evaluate", "compare", "report", "demo", "monitor", "check-judge")
CLI_DIR = Path(cli.__file__).parent


def _module(command: str) -> object:
    return importlib.import_module(f"langchain_ragmetrics._cli._{command.replace('-', '_')}")


def _codes_named_in(path: Path) -> set[ExitCode]:
    """Every ``ExitCode.NAME`` the source of ``path`` mentions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        ExitCode[node.attr]
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ExitCode"
    }


def _helpers_used_by(path: Path) -> set[Path]:
    """The other ``cli`` modules (besides ``_common``) that ``path`` imports from."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "langchain_ragmetrics._cli._"
        ):
            name = node.module.rsplit(".", 1)[-1]
            if name != "_common":
                out.add(CLI_DIR / f"{name}.py")
    return out


def test_every_code_has_one_meaning() -> None:
    assert set(_MEANING) == set(ExitCode)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_exactly_the_declared_codes(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    epilog = out[out.index("exit codes:") :]
    listed = {int(m) for m in re.findall(r"^\s+(\d+)  ", epilog, re.M)}
    declared = set(_module(command).EXIT_CODES) | set(ALWAYS)  # type: ignore[attr-defined]
    assert listed == {code.value for code in declared}
    assert len(listed) < len(ExitCode)  # no command returns every code


@pytest.mark.parametrize("command", COMMANDS)
def test_every_code_the_command_returns_is_declared(command: str) -> None:
    source = CLI_DIR / f"_{command.replace('-', '_')}.py"
    returned = _codes_named_in(source)
    for helper in _helpers_used_by(source):
        returned |= _codes_named_in(helper)
    declared = set(_module(command).EXIT_CODES) | set(ALWAYS)  # type: ignore[attr-defined]
    assert returned <= declared, f"{command} can return {returned - declared} but --help omits"


def test_compare_help_prints_a_plain_percent_sign(capsys: pytest.CaptureFixture[str]) -> None:
    main(["compare", "--help"])
    out = capsys.readouterr().out
    assert "95% CI" in " ".join(out.split())
    assert "%%" not in out
