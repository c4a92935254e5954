"""Every code sample in the documentation (docs/, the MkDocs site) runs against the real engine
and PostgreSQL, and every ``manage.py`` command line in it names a real command and real flags.

How a page's samples run
    Each page's ``python`` blocks run in order, in one namespace, as a reader would type them
    into ``manage.py shell`` (on a database that commits, as the shell's does); ``pycon``
    blocks (``>>>``) run as doctests in the same namespace. The namespace is a module of the
    page's own, so a task defined in a block is importable by the in-process runner below,
    as if the block were in a module; a real worker process imports only ``file`` blocks.
    Then what the page left behind is run as a deployment would: its due jobs with
    the integration tests' runner (``tests.support.factories.run_due``: the real claim, the
    worker's attempt code, the fenced outcome write), each of which must succeed, and the
    schedules it declared must pass the scheduler's validation.

The marks (an HTML comment on the line right before the fence; the rendered page does not
show it)
    ``<!-- docs: file PATH -->``
        The block is the file PATH (``shop/tasks.py``), written into a folder on the import
        path (the worker's too) before the page runs and imported where it stands.
    ``<!-- docs: settings -->``
        The block is a fragment of a settings module, not shell input. It runs in a namespace
        of its own that holds ``startproject``'s ``INSTALLED_APPS``; every app it names must
        be one this project installs, and every other setting it assigns applies for the rest
        of the page and must pass the engine's checks (``manage.py check --tag jobs``); the
        backends a ``TASKS`` in it names must build.
    ``<!-- docs: run jobs -->``
        Before the block runs, the due jobs are run as above until none is left (without
        judging them: the block shows what became of them), for a page that shows what a
        worker made of its jobs ("once a worker has run the steps:").
    ``<!-- docs: worker -->`` (anywhere on the page)
        A real ``runworker`` (``tests.support.workers.running_worker``) runs on the test
        database while the page's samples run, for pages whose samples wait for a result
        (the tutorial); its jobs are not run again afterwards.

Use the marks sparingly: a sample without one is plain Python a reader can paste. Other
fences (``ini``, ``yaml``, ``text``, ``json``) are not run. Shell blocks (``sh``,
``console``) and ``manage.py ...`` in running text: the command must exist and its flags
must be in its parser (for ``jobs``, the subcommand's); a concrete line (no ``[...]``,
``...`` or ``A | B``) must also parse. A ``scripts/...`` or ``.venv/...`` file a shell block
runs must exist.
"""

from __future__ import annotations

import argparse
import doctest
import importlib
import io
import os
import re
import sys
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core.checks import run_checks
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand, CommandError
from django.tasks import task_backends
from django.test import override_settings

from jobs.models import Job, Schedule
from jobs.scheduler import declared
from jobs.scheduler.validation import describe, schedule_errors
from tests.support import factories
from tests.support.docs import (
    ROOT,
    WORKER_MARK,
    CommandLine,
    Sample,
    command_lines,
    doc_pages,
    option_tables,
    page_name,
    samples,
    script_paths,
)
from tests.support.workers import running_worker

PYTHON = ("python", "pycon")
PAGES = [page_name(page) for page in doc_pages() if any(s.lang in PYTHON for s in samples(page))]
# What `django-admin startproject` lists, for a settings fragment's `INSTALLED_APPS += [...]`.
STARTPROJECT_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
]


def test_the_docs_have_samples_of_each_kind() -> None:
    """The collection itself: a fence the pattern stopped seeing would pass every test below."""
    kinds = [(s.lang, s.mark.split(" ")[0]) for page in doc_pages() for s in samples(page)]
    assert kinds.count(("python", "")) >= 10
    assert ("python", "file") in kinds and ("python", "settings") in kinds and ("pycon", "") in kinds
    assert len(PAGES) >= 9
    assert len([line for page in doc_pages() for line in command_lines(page)]) >= 20


@pytest.mark.parametrize("name", PAGES)
def test_the_python_samples_of_a_page_run(
    name: str, transactional_db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = ROOT / "docs" / name
    blocks = samples(page)
    files = tmp_path / "modules"
    for sample in blocks:
        if sample.mark.startswith("file "):
            write_module(files, sample)
    monkeypatch.syspath_prepend(str(files))
    # A page's declare() calls are forgotten after it, as its modules are.
    monkeypatch.setattr(declared, "_declared", dict(declared._declared))
    before = declared.declared_specs()[0]
    module = types.ModuleType("docs_page_" + name.removesuffix(".md").replace("/", "_").replace("-", "_"))
    worker = WORKER_MARK in page.read_text()
    with ExitStack() as stack:
        stack.callback(forget_modules, {module.__name__, *(p.name for p in files.glob("*"))})
        sys.modules[module.__name__] = module
        if worker:
            stack.enter_context(
                running_worker(tmp_path, "--concurrency", "1", PYTHONPATH=f"{ROOT}{os.pathsep}{files}")
            )
        for sample in blocks:
            if sample.mark == "run jobs":
                assert not worker, f"{sample.where}: the page's worker runs its jobs"
                run_due_jobs()
            if sample.lang == "python" and sample.mark.startswith("file "):
                importlib.import_module(module_name(sample))
            elif sample.lang == "python" and sample.mark == "settings":
                stack.enter_context(settings_fragment(sample))
            elif sample.lang == "python":
                exec(compile(sample.code, sample.where, "exec"), module.__dict__)  # noqa: S102
            elif sample.lang == "pycon":
                run_doctest(sample, module.__dict__, tmp_path / "worker.log" if worker else None)
        assert_declared_schedules_are_valid(before)
        if not worker:
            assert_due_jobs_succeed()


def write_module(folder: Path, sample: Sample) -> None:
    path = folder / sample.mark.removeprefix("file ").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    for package in path.relative_to(folder).parents:
        if package != Path("."):
            (folder / package / "__init__.py").touch()
    path.write_text(sample.code)


def module_name(sample: Sample) -> str:
    return sample.mark.removeprefix("file ").strip().removesuffix(".py").replace("/", ".")


def forget_modules(names: set[str]) -> None:
    for module in [m for m in sys.modules if m.split(".")[0] in names]:
        del sys.modules[module]


@contextmanager
def settings_fragment(sample: Sample) -> Iterator[None]:
    namespace: dict[str, Any] = {"INSTALLED_APPS": list(STARTPROJECT_APPS)}
    exec(compile(sample.code, sample.where, "exec"), namespace)  # noqa: S102
    named = namespace.pop("INSTALLED_APPS")
    assert [app for app in named if not apps.is_installed(app)] == [], f"{sample.where}: apps not installed"
    values = {key: value for key, value in namespace.items() if key.isupper()}
    with override_settings(**values):
        # The engine's checks, and Django's own reading of TASKS: each backend is built. (Not
        # every check: this project's other apps need the rest of its settings.)
        serious = [message for message in run_checks(tags=["jobs"]) if message.is_serious()]
        assert serious == [], f"{sample.where}: {serious}"
        for alias in values.get("TASKS", {}):
            task_backends[alias]
        yield


def run_doctest(sample: Sample, namespace: dict[str, Any], worker_log: Path | None) -> None:
    test = doctest.DocTestParser().get_doctest(sample.code, namespace, sample.where, sample.page, sample.line)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=report.write, clear_globs=False)
    namespace.update(test.globs)
    log = worker_log.read_text() if worker_log else ""
    assert not runner.failures, report.getvalue() + log


def assert_declared_schedules_are_valid(before: dict[str, declared.ScheduleSpec]) -> None:
    """What a scheduler checks when it starts, for the schedules the page declared."""
    specs, broken = declared.declared_specs()
    assert broken == {}, broken
    for name, spec in specs.items():
        if before.get(name) != spec:
            errors = schedule_errors(Schedule(name=name, **spec.row_values()))
            assert errors == {}, f"schedule {name}: {describe(errors)}"


def run_due_jobs() -> list[dict[str, Any]]:
    """Run the due jobs (and those they make due: a workflow's next steps) as a worker
    would, until none is left; their outcomes."""
    outcomes: list[dict[str, Any]] = []
    for _ in range(50):
        queues = sorted(set(Job.objects.values_list("queue_name", flat=True)))
        ran = factories.run_due(queues=queues, limit=1000) if queues else []
        if not ran:
            return outcomes
        outcomes += ran
    raise AssertionError(f"jobs still due after 50 rounds: {outcomes[-5:]}")


def assert_due_jobs_succeed() -> None:
    failed = [outcome for outcome in run_due_jobs() if outcome["state"] != "succeeded"]
    assert failed == [], failed


def parser_for(name: str) -> argparse.ArgumentParser:
    return load_command_class(get_commands()[name], name).create_parser("manage.py", name)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_problem(line: CommandLine) -> str | None:
    """What is wrong with a manage.py line, or None."""
    name, *rest = line.argv
    if name not in get_commands():
        return f"no command {name!r}"
    parser = parser_for(name)
    parsers = [parser]
    subs = subcommands(parser)
    positional = [arg for arg in rest if not arg.startswith("-")]
    if subs and positional:
        if positional[0] not in subs:
            return f"{name} has no subcommand {positional[0]!r} (it has {', '.join(subs)})"
        parsers.insert(0, subs[positional[0]])
        name = f"{name} {positional[0]}"
    unknown = [flag for flag in line.flags if not any(flag in p._option_string_actions for p in parsers)]
    if unknown:
        return f"{name}: no option {', '.join(unknown)}"
    if not line.synopsis and not {"-h", "--help"} & set(line.argv):
        try:
            parser.parse_args(rest)
        except (CommandError, SystemExit) as exc:
            return f"{name} does not parse: {exc}"
    return None


def test_the_manage_py_commands_in_the_docs_exist_with_their_flags() -> None:
    problems = []
    for page in doc_pages():
        for line in command_lines(page):
            problem = command_problem(line)
            if problem:
                problems.append(f"{line.where}: {line.text}\n    {problem}")
    assert problems == [], "\n".join(problems)


def test_the_scripts_the_docs_run_exist() -> None:
    found = [(where, path) for page in doc_pages() for where, path in script_paths(page)]
    assert found, "no scripts/... in the docs' shell samples"
    assert [f"{where}: {path}" for where, path in found if not (ROOT / path).is_file()] == []


def own_options(name: str) -> set[str]:
    """The options a command adds to the ones every Django command has."""
    common = set(BaseCommand().create_parser("manage.py", name)._option_string_actions)
    return {option for option in parser_for(name)._option_string_actions if option not in common}


def test_the_commands_reference_lists_every_option_of_the_engines_commands() -> None:
    page = ROOT / "docs" / "reference" / "commands.md"
    sections = set(re.findall(r"^## (\S+)$", page.read_text(), re.M))
    tables = option_tables(page)
    for name in sorted(name for name, app in get_commands().items() if app == "jobs"):
        assert name in sections, f"docs/reference/commands.md has no ## {name}"
        assert tables.get(name, set()) == own_options(name), f"docs/reference/commands.md, ## {name}"


def test_the_docs_show_every_subcommand_of_manage_py_jobs() -> None:
    lines = [line for page in doc_pages() for line in command_lines(page)]
    shown = {line.argv[1] for line in lines if line.argv[0] == "jobs" and len(line.argv) > 1}
    assert set(subcommands(parser_for("jobs"))) - shown == set()
