"""The documentation's pages read as tests read them: their fenced samples, the marks that say
how a sample runs, and the ``manage.py`` command lines in their shell samples.

A mark is an HTML comment on the line right before a fence (the rendered page does not show
it); tests/integration/test_docs_samples.py says what each one means.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

DOCS = ROOT / "docs"

FENCE = re.compile(
    r"^(?:(?P<indent>[ ]*)<!-- docs: (?P<mark>[^>]*?) -->\n)?"
    r"(?P<fence_indent>[ ]*)```(?P<lang>\w+)[^\n]*\n(?P<code>.*?)^(?P=fence_indent)```[ ]*$",
    re.M | re.S,
)
# A page-wide mark, anywhere on the page.
WORKER_MARK = "<!-- docs: worker -->"
MARKS = ("settings", "run jobs")
SHELL = ("sh", "console")
# `manage.py ...` or `./manage.py ...` in running text.
INLINE_MANAGE = re.compile(r"`((?:\./)?manage\.py [^`\n]+)`")


@dataclass(frozen=True)
class Sample:
    page: str
    line: int
    lang: str
    mark: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def page_name(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def samples(page: Path) -> list[Sample]:
    """The page's fenced blocks in order, each with its mark ("" when it has none)."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        lines = match["code"].splitlines(keepends=True)
        indent = len(match["fence_indent"])
        code = "".join(line[indent:] if line[:indent].isspace() else line for line in lines)
        sample = Sample(
            page=str(page.relative_to(ROOT)),
            line=text.count("\n", 0, match.start("code")) + 1,
            lang=match["lang"],
            mark=(match["mark"] or "").strip(),
            code=code,
        )
        if sample.mark and not (sample.mark in MARKS or sample.mark.startswith("file ")):
            raise ValueError(f"{sample.where}: unknown mark <!-- docs: {sample.mark} -->")
        found.append(sample)
    return found


@dataclass(frozen=True)
class CommandLine:
    """One ``manage.py`` invocation in a page: ``argv`` after ``manage.py``. A synopsis
    (``[--json]``, ``ID...``, ``A | B``, or any mention in running text) is checked for its
    command and flags only; a concrete line is parsed by the command's own parser too."""

    where: str
    text: str
    argv: tuple[str, ...]
    synopsis: bool

    @property
    def flags(self) -> list[str]:
        return [arg.split("=", 1)[0] for arg in self.argv if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg)]


def _unquoted(text: str) -> str:
    return re.sub(r"'[^']*'|\"[^\"]*\"", "''", text)


def _shell_lines(code: str, lang: str) -> list[tuple[int, str]]:
    """(line offset, command) for each command line of a block, continuations joined."""
    lines: list[tuple[int, str]] = []
    start, command = 0, ""
    for offset, line in enumerate(code.splitlines()):
        if lang == "console" and not command:
            if not line.startswith("$ "):
                continue  # output
            line = line.removeprefix("$ ")
        if not command:
            start = offset
        command += line.strip()
        if command.endswith("\\"):
            command = command[:-1] + " "
            continue
        lines.append((start, command))
        command = ""
    if command:
        lines.append((start, command))
    return lines


def _invocations(text: str, where: str, *, synopsis: bool) -> list[CommandLine]:
    bare = re.sub(r"(^|\s)#.*$", "", _unquoted(text))
    synopsis = synopsis or bool(re.search(r"\[|\.\.\.|\s\|\s", bare))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    # Punctuation tokens end a command (&&, ;, redirections), and so does a pipe, except in
    # a synopsis, where "A | B" means either.
    found = []
    argv: list[str] | None = None
    for token in [*tokens, ";"]:
        ends = bool(re.fullmatch(r"[;&<>()]+|\|\|?", token)) and not (synopsis and token == "|")
        if ends:
            if argv is not None:
                found.append(CommandLine(where, text.strip(), tuple(argv), synopsis))
            argv = None
        elif argv is not None:
            argv.append(token.strip("[]") if synopsis else token)
        elif token.endswith("manage.py"):
            argv = []
    return [line for line in found if line.argv]


def command_lines(page: Path) -> list[CommandLine]:
    """Every ``manage.py`` invocation in the page's shell blocks and running text."""
    text = page.read_text()
    found = []
    for sample in samples(page):
        if sample.lang in SHELL:
            for offset, line in _shell_lines(sample.code, sample.lang):
                found += _invocations(line, f"{sample.page}:{sample.line + offset}", synopsis=False)
    prose = FENCE.sub(lambda match: "\n" * match.group(0).count("\n"), text)
    for match in INLINE_MANAGE.finditer(prose):
        where = f"{page.relative_to(ROOT)}:{prose.count(chr(10), 0, match.start()) + 1}"
        found += _invocations(match[1], where, synopsis=True)
    return found


def script_paths(page: Path) -> list[tuple[str, str]]:
    """(where, path) for each command in a shell block that runs a file of this repository
    (``scripts/run``, ``.venv/bin/mkdocs``), and each ``scripts/...`` in running text."""
    found = []
    prose = FENCE.sub(lambda match: "\n" * match.group(0).count("\n"), page.read_text())
    for match in re.finditer(r"`(scripts/[\w.-]+)`", prose):
        found.append((f"{page.relative_to(ROOT)}:{prose.count(chr(10), 0, match.start()) + 1}", match[1]))
    for sample in samples(page):
        if sample.lang not in SHELL:
            continue
        for offset, line in _shell_lines(sample.code, sample.lang):
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                words.pop(0)  # VAR=value before the command
            if words and re.match(r"(\./)?(scripts|\.venv)/", words[0]):
                found.append((f"{sample.page}:{sample.line + offset}", words[0].removeprefix("./")))
    return found


def option_tables(page: Path) -> dict[str, set[str]]:
    """``## name`` section -> the ``--options`` in the first column of its tables."""
    found: dict[str, set[str]] = {}
    section = ""
    for line in page.read_text().splitlines():
        if line.startswith("## "):
            section = line.removeprefix("## ").strip()
        elif match := re.match(r"^\| `(--[\w-]+)`", line):
            found.setdefault(section, set()).add(match[1])
    return found
