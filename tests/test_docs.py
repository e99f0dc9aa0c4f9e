"""The documentation stands alone and stays true: docs/ops/ is what tools/op_docs.py makes of the
op docstrings, every Python example of the README and docs/ runs, and nothing cites a file outside
the repository."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "ops").glob("*.md")])
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)


def op_docs():
    spec = importlib.util.spec_from_file_location("op_docs", ROOT / "tools" / "op_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------------
# docs/ops/ from the docstrings


def test_op_pages_are_what_the_docstrings_make():
    assert op_docs().stale() == [], "docs/ops/ is stale: run python tools/op_docs.py"


def test_notes_are_kept_in_place_and_notes_without_their_op_refused():
    tool = op_docs()
    family = tool.families()["simulated"]
    page = tool.render("simulated", family, {})
    written_at_the_end = (
        page + "<!-- notes: generate_simulated_accept_index -->\nA hand note.\n<!-- end notes -->\n"
    )
    again = tool.render("simulated", family, tool.read_notes(written_at_the_end))
    entry, note = again.index("## `generate_simulated_accept_index`"), again.index("A hand note.")
    assert entry < note < again.index("## `sample_simulated_acc_len`")  # moved to its entry
    assert tool.render("simulated", family, tool.read_notes(again)) == again
    with pytest.raises(tool.DocsError, match="notes for no_such_op"):
        tool.render("simulated", family, {"no_such_op": "x\n"})


def test_docstring_sections_become_lists_and_literals_code():
    tool = op_docs()
    doc = """Do it.

    Uses :func:`other` on ``x``.

    Args:
        values: ``[n]`` floating,
            continued here with ``a
            literal`` across lines.
        page_size, topk: both >= 1.

    Returns:
        ``out``.
    """
    assert tool.markdown(doc) == (
        "Do it.\n\nUses `other` on `x`.\n\n**Args**\n\n"
        "- `values`: `[n]` floating, continued here with `a literal` across lines.\n"
        "- `page_size`, `topk`: both >= 1.\n\n**Returns**\n\n`out`.\n"
    )


# --------------------------------------------------------------------------------------------------
# The examples run


def python_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line, flags, code) of each fenced ``python`` block: flags ``no-run`` (never run: it needs
    an accelerator), ``needs=pkg,...`` (run where those packages import) or ``interpret`` (launches
    Triton kernels on CPU tensors: the document runs under ``TRITON_INTERPRET=1``, where Triton
    imports)."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        language, _, flags = match.group("info").strip().partition(" ")
        if language == "python":
            line = text.count("\n", 0, match.start("code")) + 1
            found.append((line, flags.strip(), match.group("code")))
    return found


# Each block runs from a file of its own (named after the document and line) so that tracebacks
# point at it and code that reads its own source (triton.jit) works.
DRIVER = """
import json, sys
namespace = {"__name__": "__doc_example__"}
for path in json.load(sys.stdin):
    with open(path, encoding="utf-8") as handle:
        exec(compile(handle.read(), path, "exec"), namespace)
"""


def _importable(names: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in names.split(","))


@pytest.mark.parametrize(
    "path", [p for p in DOCUMENTS if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_python_examples_run(path, tmp_path):
    """Each document's blocks run in order, in one namespace, in a fresh interpreter."""
    runnable = []
    interpret = False
    for line, flags, code in python_blocks(path):
        name = f"{path.relative_to(ROOT)}:{line}"
        compile(code, name, "exec")  # every block parses, also those that do not run here
        needs = flags.partition("needs=")[2]
        if "interpret" in flags.split():
            needs, interpret = ",".join(filter(None, (needs, "triton"))), True
        if "no-run" in flags.split() or (needs and not _importable(needs)):
            continue
        block = tmp_path / (re.sub(r"\W", "_", name) + ".py")
        block.write_text(code, encoding="utf-8")
        runnable.append(str(block))
    if not runnable:
        pytest.skip("no block of this document runs here")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_HAL_")}
    if interpret:
        environment["TRITON_INTERPRET"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps(runnable),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_readme_has_a_runnable_example():
    assert [flags for _, flags, _ in python_blocks(ROOT / "README.md")] == [""]


# --------------------------------------------------------------------------------------------------
# Standing alone


@pytest.mark.parametrize("area", ["README.md and docs", "the package"])
def test_nothing_cites_a_spec_outside_the_repository(area):
    if area == "the package":
        files = sorted((ROOT / "spec_hal").rglob("*.py"))
    else:
        files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    citing = [
        str(path.relative_to(ROOT))
        for path in files
        if re.search(r"(?<![\w-])ops\.md|\.\./shared|shared/spec", path.read_text(encoding="utf-8"))
    ]
    assert citing == []


# --------------------------------------------------------------------------------------------------
# Links resolve


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
#: A file of the repository named in a code span (`spec_hal/bench/report.py`, `docs/bench/x.json`).
REPOSITORY_PATH = re.compile(r"(?:spec_hal|docs|tests|tools)/[\w./-]+")
LINKED = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


def dead_references(path: Path) -> list[str]:
    """The relative links of ``path`` (outside code) to no file, and the repository files named in
    its code spans that do not exist."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    dead = []
    for match in CODE_SPAN.finditer(text):
        named = match.group(2).strip().split(":")[0].rstrip(".,")
        if REPOSITORY_PATH.fullmatch(named) and not (ROOT / named).exists():
            dead.append(named)
    for match in LINK.finditer(CODE_SPAN.sub("", text)):
        target = match.group(1)
        if re.match(r"[a-z][\w+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor of the same page
        if not (path.parent / target.split("#")[0]).exists():
            dead.append(target)
    return dead


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_named_file_exists(path):
    assert dead_references(path) == []


def test_a_dead_link_or_named_file_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x\n", encoding="utf-8")
    page.write_text(
        "[here](there.md#part) [gone](gone.md) ![plot](plots/gone.png) [web](https://example.org)\n"
        "`spec_hal/bench/report.py` `spec_hal/devices/cpu/gone.py` `kernel[grid](...)`\n"
        "```\n[in a block](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert dead_references(page) == ["spec_hal/devices/cpu/gone.py", "gone.md", "plots/gone.png"]


# --------------------------------------------------------------------------------------------------
# docs/performance.md: short, and what the report makes of the run files at the top of docs/bench/

PERFORMANCE = ROOT / "docs" / "performance.md"
GENERATED_BY = re.compile(
    r"<!-- Generated by `python -m spec_hal\.bench\.page (?P<args>[^`]*) > docs/performance\.md`"
)


def test_the_performance_page_reads_in_five_minutes():
    assert len(PERFORMANCE.read_text(encoding="utf-8").splitlines()) <= 250


def test_the_performance_page_is_what_the_report_makes_of_the_runs_at_the_top_of_docs_bench(monkeypatch):
    from spec_hal.bench.page import load_runs, render_page

    page = PERFORMANCE.read_text(encoding="utf-8")
    args = GENERATED_BY.search(page).group("args").split()
    plot = args[1] if args[0] == "--plot" else None
    runs = args[2:] if plot else args
    monkeypatch.chdir(ROOT)
    assert render_page(load_runs(runs), plot) == page, (
        "docs/performance.md is stale: run the command at its top from the repository root"
    )
    top = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "bench").iterdir() if p.is_file()}
    assert top == {*runs, plot}, (
        "the top of docs/bench/ holds only the page's runs and plot (the rest: history/)"
    )
