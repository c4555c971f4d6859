"""The docs run themselves: every block of README.md and docs/**/*.md is executed as pasted.

Each ```python block runs in a fresh interpreter, in an empty temporary directory, with
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` pointing at a loopback judge that answers every schema
of ours (``tests/_support/lexical_judge.py``) and ``LANGSMITH_ENDPOINT`` / ``LANGSMITH_API_KEY``
at a loopback LangSmith. Each command of a ```bash block runs the same way (``ragmetrics`` is
the installed console script), in a directory holding a copy of ``cookbook/`` so that commands
written for a checkout of the repository find its data.

One test per block, named by its file and line (``README.md:L40``,
``docs/online/index.md:L12``); a failure names the file and line too.

A block that cannot run as it is (it creates a virtualenv or installs from PyPI) is preceded by
``<!-- readme: skip <reason> -->`` (``docs: skip`` reads as well). The marker is refused on any
block holding a command other than those set-up lines; what such a block also says is checked
another way: ``ragmetrics`` commands still run (``ragmetrics demo`` offline, as on a fresh
machine), and the test line must be what ``.ci/run`` runs. A ```yaml block is a list of GitHub
Actions steps whose ``run:`` commands run the same way. Any other fence language fails, so no
block escapes by its label.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._support.langsmith_datasets import LangSmithDatasetStub
from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeServer

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOC_FILES = [README, *sorted((REPO / "docs").rglob("*.md"))]
# Pages whose blocks need a server with more than the judge; each runs in its own harness.
RUN_ELSEWHERE = {
    "docs/batch.md": "tests/evaluation/test_batch_docs.py",  # the Batch API endpoints
    "docs/offline/scaling.md": "tests/test_docs_scaling.py",  # the [ray] extra
    "docs/integrations/grafana.md": "tests/integrations/test_grafana.py",  # a /metrics scrape
    "docs/integrations/mlflow.md": "tests/integrations/test_mlflow.py",  # a real MLflow server
    "docs/integrations/phoenix.md": "tests/integrations/test_phoenix.py",  # a real Phoenix server
}
CI_RUN = REPO / ".ci" / "run"
TIMEOUT_S = 240
RUNNABLE = ("python", "bash", "yaml")
_FENCE = re.compile(r"^( *)```([\w+-]*)\s*$")
_COMMENT = re.compile(r"(^|\s)#.*$")
_SHELL_SYNTAX = re.compile(r"[|&;<>()$`*?~\\]|^\w+=")
"""Shell syntax a command runs through ``bash`` for (pipes, redirects, variables, globs)."""
_MARKER = re.compile(r"^<!--\s*(?:readme|docs):\s*(\w+)\s*(.*?)\s*-->$")
# Lines a skip marker may stand for: building an environment, never the package's own commands.
_SETUP = re.compile(
    r"^(python3? -m venv \S+|(\.|source) \S+/bin/activate|pip install .+|bash bench/run_all\.sh)$"
)


@dataclass(frozen=True)
class Block:
    """A fenced block of README.md or of a docs page."""

    path: str
    """The file, relative to the repository (``README.md``, ``docs/metrics.md``)."""
    line: int
    """1-based line of the opening fence."""
    language: str
    code: str
    skip: str | None = None
    """The reason given by a ``<!-- readme: skip ... -->`` marker right before the fence."""

    @property
    def where(self) -> str:
        return f"{self.path} line {self.line} (```{self.language} block)"


def parse_blocks(text: str, path: str = "README.md") -> list[Block]:
    """Every fenced block, with its line and the skip marker right before it (blank lines allowed).

    A fence may be indented (a block inside a list item): the block's lines lose that indent.

    Raises:
        ValueError: A fence is never closed, or a marker is not ``skip`` with a reason.
    """
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start = i
        indent = len(fence.group(1))
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            msg = f"{path} line {start + 1}: the ``` fence is never closed"
            raise ValueError(msg)
        skip = None
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = _MARKER.match(lines[before].strip()) if before >= 0 else None
        if marker:
            if marker.group(1) != "skip" or not marker.group(2):
                msg = f"{path} line {before + 1}: write <!-- readme: skip <reason> -->"
                raise ValueError(msg)
            skip = marker.group(2)
        code = "\n".join(line[indent:] for line in lines[start + 1 : end]) + "\n"
        blocks.append(Block(path, start + 1, fence.group(2), code, skip))
        i = end + 1
    return blocks


def shell_commands(code: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments dropped, ``&&`` split."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands: list[str] = []
    for line in joined.splitlines():
        line = _COMMENT.sub("", line).strip()  # noqa: PLW2901
        commands += [c.strip() for c in line.split("&&") if c.strip()]
    return commands


BLOCKS = [
    block
    for doc in DOC_FILES
    for block in parse_blocks(doc.read_text(encoding="utf-8"), doc.relative_to(REPO).as_posix())
]


def blocks_of(language: str, path: str | None = None) -> list[Block]:
    """Blocks of one language (of one file), except those run by another harness."""
    return [
        b
        for b in BLOCKS
        if b.language == language and path in (None, b.path) and b.path not in RUN_ELSEWHERE
    ]


def block_id(block: Block) -> str:
    return f"{block.path}:L{block.line}"


# --------------------------------------------------------------------------- environment


@pytest.fixture
def servers() -> Iterator[tuple[JudgeServer, LangSmithDatasetStub]]:
    with JudgeServer(lexical_judge()) as judge, LangSmithDatasetStub() as langsmith:
        langsmith.create_project("my-rag-app")  # the project the README's app traces to
        langsmith.create_project("default")  # where a block traces without LANGSMITH_PROJECT
        yield judge, langsmith


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any judge or LangSmith settings, plus ``extra``."""
    leaky = ("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "RAGMETRICS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(leaky)}
    # The interpreter running the tests, and its console scripts (``ragmetrics``), come first.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def loopback_env(servers: tuple[JudgeServer, LangSmithDatasetStub]) -> dict[str, str]:
    judge, langsmith = servers
    return clean_env(
        OPENAI_BASE_URL=judge.base_url,
        OPENAI_API_KEY="test",
        LANGSMITH_ENDPOINT=langsmith.url,
        LANGSMITH_API_KEY="test",
    )


def run(argv: list[str], *, cwd: Path, env: dict[str, str], what: str) -> str:
    """Run to completion; fail naming ``what`` (the README line) with the output's tail."""
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what} did not finish in {TIMEOUT_S} s:\n{exc.stdout}\n{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(
            f"{what} failed (exit {proc.returncode}):\n"
            f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def checkout_dir(tmp_path: Path) -> Path:
    """A working directory with a copy of the repository's cookbook (its data files)."""
    shutil.copytree(REPO / "cookbook", tmp_path / "cookbook")
    return tmp_path


def console_script() -> Callable[[list[str]], int]:
    """The function the ``ragmetrics`` console script calls, as ``pyproject.toml`` declares it."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^ragmetrics\s*=\s*"([\w.]+):(\w+)"', pyproject, re.M)
    assert found, "pyproject.toml declares no `ragmetrics` console script"
    main: Callable[[list[str]], int] = getattr(importlib.import_module(found[1]), found[2])
    return main


def run_command(
    command: str,
    *,
    cwd: Path,
    env: dict[str, str],
    what: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    """Run one command of a block as pasted; a plain ``ragmetrics ...`` line runs in-process.

    The console script is a thin ``sys.exit(main())`` (started for real by
    ``tests/test_cli.py`` and ``ragmetrics demo`` here); what a page's command checks is the
    CLI itself, so a line without shell syntax calls ``main(argv)`` with the same
    environment and working directory rather than paying for a new interpreter. Anything
    else runs in ``bash -c``.
    """
    argv = shlex.split(command)
    if argv[0] != "ragmetrics" or _SHELL_SYNTAX.search(command):
        return run(["bash", "-c", command], cwd=cwd, env=env, what=what)
    main = console_script()
    with monkeypatch.context() as patch:
        for name in list(os.environ):
            if name not in env:
                patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        capsys.readouterr()
        code = main(argv[1:])
        out, err = capsys.readouterr()
    if code != 0:
        pytest.fail(
            f"{what} failed (exit {code}):\n"
            f"--- stdout ---\n{out[-3000:]}\n--- stderr ---\n{err[-3000:]}"
        )
    return out


RunLine = Callable[[str, Path, str], str]


@pytest.fixture
def run_line(
    servers: tuple[JudgeServer, LangSmithDatasetStub],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> RunLine:
    """``run_line(command, cwd, what)``: :func:`run_command` against the loopback servers."""

    def run_line(command: str, cwd: Path, what: str) -> str:
        env = loopback_env(servers)
        return run_command(
            command, cwd=cwd, env=env, what=what, monkeypatch=monkeypatch, capsys=capsys
        )

    return run_line


# --------------------------------------------------------------------------- the blocks


def test_readme_and_docs_have_blocks_of_each_kind() -> None:
    assert len(blocks_of("python", "README.md")) >= 3
    assert len(blocks_of("bash", "README.md")) >= 2
    assert len(DOC_FILES) > 10, "the docs/ pages are missing"
    assert len(blocks_of("python")) >= 12
    assert len(blocks_of("yaml")) >= 1


@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_every_block_has_a_runnable_language(block: Block) -> None:
    assert block.language in RUNNABLE, (
        f"{block.where}: label it ```python or ```bash so that this test runs it"
    )


@pytest.mark.slow
@pytest.mark.parametrize("block", blocks_of("python"), ids=block_id)
def test_python_block_runs(
    block: Block, servers: tuple[JudgeServer, LangSmithDatasetStub], tmp_path: Path
) -> None:
    assert block.skip is None, f"{block.where}: a Python block may not be skipped"
    script = tmp_path / f"block_line_{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    # As on a machine set up for LangSmith: runs are traced, so feedback finds its run.
    env = {**loopback_env(servers), "LANGSMITH_TRACING": "true"}
    run([sys.executable, str(script)], cwd=work, env=env, what=block.where)
    judge, _ = servers
    assert not judge.script_errors, f"{block.where}: the judge could not answer"


@pytest.mark.slow
@pytest.mark.parametrize("block", blocks_of("bash"), ids=block_id)
def test_bash_block_runs(block: Block, run_line: RunLine, tmp_path: Path) -> None:
    commands = shell_commands(block.code)
    assert commands, f"{block.where}: no command"
    if block.skip is not None:
        others = [c for c in commands if not _SETUP.match(c) and c not in SEPARATELY_CHECKED]
        assert not others, (
            f"{block.where}: `<!-- readme: skip -->` is only for virtualenv / pip lines, "
            f"but the block also runs {others}"
        )
    cwd = checkout_dir(tmp_path)
    for command in commands:
        where = f"{block.where}: `{command}`"
        if command in SEPARATELY_CHECKED:
            SEPARATELY_CHECKED[command](cwd, where)
        elif block.skip is None or not _SETUP.match(command):
            run_line(command, cwd, where)


@pytest.mark.slow
@pytest.mark.parametrize("block", blocks_of("yaml"), ids=block_id)
def test_workflow_block_runs(block: Block, run_line: RunLine, tmp_path: Path) -> None:
    """A ```yaml block is a list of GitHub Actions steps: every ``run:`` command runs here.

    ``uses:`` steps are GitHub's own actions; ``pip install`` lines are set-up (the package is
    installed already), as in a skip-marked bash block.
    """
    import yaml

    steps = yaml.safe_load(block.code)
    assert isinstance(steps, list), f"{block.where}: expected a list of workflow steps"
    assert all(isinstance(step, dict) for step in steps), f"{block.where}: a step is not a map"
    cwd = checkout_dir(tmp_path)
    ran = 0
    for step in steps:
        for command in shell_commands(str(step.get("run", ""))):
            if _SETUP.match(command):
                continue
            where = f"{block.where}: `{command}`"
            run_line(command, cwd, where)
            ran += 1
    assert ran, f"{block.where}: no `run:` command to check"


def test_pages_run_elsewhere_are_run_there() -> None:
    """Each page left out here names the test module that runs its blocks, and it does."""
    for page, module in RUN_ELSEWHERE.items():
        assert (REPO / page).is_file(), page
        text = (REPO / module).read_text(encoding="utf-8")
        assert Path(page).name in text, f"{module} does not read {page}"


# --------------------------------------------------------------------------- checked another way


def _demo_offline(cwd: Path, where: str) -> None:
    # A fresh machine has no API key: the demo must run offline and say so.
    out = run(["ragmetrics", "demo"], cwd=cwd, env=clean_env(), what=where)
    assert "offline" in out.lower(), f"{where}: the demo did not run offline:\n{out[-2000:]}"


def _pytest_is_what_ci_runs(cwd: Path, where: str) -> None:
    ci = CI_RUN.read_text(encoding="utf-8")
    assert re.search(r"^pip install (-q )?-e \"\.\[test\]\"", ci, re.M), (
        f"{where}: .ci/run does not install the test extras as the README says"
    )
    assert re.search(r"^python -m pytest -q -n auto( --durations=\d+)?$", ci, re.M), (  # a report
        f"{where}: .ci/run does not run `python -m pytest -q -n auto` as the README says"
    )


def _bench_script_exists(cwd: Path, where: str) -> None:
    script = REPO / "bench" / "run_all.sh"
    assert script.is_file(), f"{where}: {script} is missing"
    run(["bash", "-n", str(script)], cwd=cwd, env=clean_env(), what=f"{where} (syntax)")


SEPARATELY_CHECKED = {
    "ragmetrics demo": _demo_offline,
    "python -m pytest -q -n auto": _pytest_is_what_ci_runs,
    "bash bench/run_all.sh": _bench_script_exists,
}
"""Commands of skip-marked blocks and how each is checked instead of being run as written."""


def test_quick_start_install_line_matches_ci() -> None:
    (quick, *_) = blocks_of("bash", "README.md")
    commands = shell_commands(quick.code)
    assert 'pip install -e ".[test]"' in commands
    assert "python -m pytest -q -n auto" in commands
    assert "ragmetrics demo" in commands


# --------------------------------------------------------------------------- the parser itself


def test_parser_finds_lines_languages_and_markers() -> None:
    text = (
        "# Title\n"
        "```python\nprint(1)\n```\n"
        "\n<!-- readme: skip makes a venv -->\n\n"
        "```bash\npython3 -m venv .venv && . .venv/bin/activate && pip install . \\\n"
        "    && ragmetrics demo  # offline\n```\n"
    )
    first, second = parse_blocks(text)
    assert (first.line, first.language, first.code, first.skip) == (2, "python", "print(1)\n", None)
    assert (second.line, second.language, second.skip) == (8, "bash", "makes a venv")
    assert shell_commands(second.code) == [
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        "pip install .",
        "ragmetrics demo",
    ]
    assert first.where == "README.md line 2 (```python block)"


def test_parser_dedents_a_fence_inside_a_list_item() -> None:
    text = "- turn one off:\n\n  ```python\n  if True:\n      print(1)\n  ```\n"
    (block,) = parse_blocks(text, "docs/judging.md")
    assert (block.path, block.line, block.language) == ("docs/judging.md", 3, "python")
    assert block.code == "if True:\n    print(1)\n"
    assert block_id(block) == "docs/judging.md:L3"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("```python\nprint(1)\n", "line 1: the ``` fence is never closed"),
        ("<!-- readme: skip -->\n```bash\nls\n```\n", "line 1: write <!-- readme: skip <reason>"),
        ("<!-- readme: ignore x -->\n```bash\nls\n```\n", "line 1: write"),
        ("<!-- docs: skip -->\n```bash\nls\n```\n", "docs/x.md line 1: write"),
    ],
)
def test_parser_rejects_bad_fences_and_markers(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_blocks(text, "docs/x.md")


def test_a_failing_block_names_its_readme_line(tmp_path: Path) -> None:
    (block,) = parse_blocks("text\n\n```python\nraise SystemExit('boom')\n```\n")
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"README.md line 3 \(```python block\) failed"):
        run([sys.executable, str(script)], cwd=tmp_path, env=clean_env(), what=block.where)


def test_setup_lines_are_the_only_ones_a_marker_may_skip() -> None:
    assert _SETUP.match("python3 -m venv .venv")
    assert _SETUP.match(". .venv/bin/activate")
    assert _SETUP.match('pip install -e ".[test]"')
    assert not _SETUP.match("ragmetrics evaluate data.jsonl --metrics context_recall")
    assert not _SETUP.match("python -c 'print(1)'")
