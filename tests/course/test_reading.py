"""Lessons written for the reader: a Predict prompt's answer stays out of view until the
fold opens, and the tools that say so find what they should."""

from __future__ import annotations

import textwrap

import pytest

from jitlab.course import load_course
from jitlab.course.reading import cell_stats, misplaced_answers, predict_leaks
from jitlab.site.hooks import fold_predicted_answers

COURSE = load_course()

PREDICT = (
    '# <div class="admonition question"><p class="admonition-title">Predict</p>\n'
    "# <p>How many compilations?</p></div>\n"
)


ANSWER = '# %% tags=["answer"] jupyter={"source_hidden": true}\nprint(n)\n'


def _lesson(tmp_path, body: str):
    path = tmp_path / "00_sample.py"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize("item", COURSE.lessons, ids=lambda item: item.slug)
def test_no_predict_is_answered_before_its_fold(item):
    leaks = predict_leaks(item.path)
    assert not leaks, "\n".join(map(str, leaks))


@pytest.mark.parametrize("item", COURSE.lessons, ids=lambda item: item.slug)
def test_answer_cells_sit_under_a_predict_and_start_collapsed(item):
    problems = misplaced_answers(item.path)
    assert not problems, "\n".join(problems)


def test_a_visible_assert_after_a_predict_is_a_leak(tmp_path):
    path = _lesson(
        tmp_path,
        "# %% [markdown]\n" + PREDICT + "\n# %%\nn = run()\nassert n.compiles == 3\n\n" + ANSWER,
    )
    (leak,) = predict_leaks(path)
    assert leak.reason == "an assert" and "00_sample.py" in str(leak)


def test_an_except_naming_the_error_is_a_leak(tmp_path):
    path = _lesson(
        tmp_path,
        "# %% [markdown]\n"
        + PREDICT
        + "\n# %%\ntry:\n    f(1)\nexcept jax.errors.TracerBoolConversionError:\n    pass\n\n"
        + ANSWER,
    )
    assert [leak.reason for leak in predict_leaks(path)] == ["an except naming the error"]


def test_a_result_printed_after_a_predict_without_an_answer_cell_is_a_leak(tmp_path):
    """The answer printed a few cells later, past a text cell: no fold hides it."""
    path = _lesson(
        tmp_path,
        "# %% [markdown]\n"
        + PREDICT
        + "\n# %%\ndef f(x):\n    return x\n\n"
        + "# %% [markdown]\n# ### Step 1: count\n\n"
        + "# %%\nn = run()\n\n# %%\nprint(n.compiles, 'compilations')\n\n"
        + "# %%\nn.compiles\n",
    )
    leaks = predict_leaks(path)
    assert [(leak.cell, leak.text) for leak in leaks] == [
        (4, "print(n.compiles, 'compilations')"),
        (5, "n.compiles"),
    ], leaks
    assert all("no answer cell" in leak.reason for leak in leaks)


def test_a_predict_with_no_answer_anywhere_is_named(tmp_path):
    path = _lesson(
        tmp_path,
        "# %% [markdown]\n" + PREDICT + "\n# %%\nn = run()\n\n# %% [markdown]\n# Next.\n",
    )
    (leak,) = predict_leaks(path)
    assert leak.cell == leak.predict == 0 and "no answer cell" in leak.reason


def test_what_a_later_predict_prints_is_its_own_business(tmp_path):
    path = _lesson(
        tmp_path,
        "# %% [markdown]\n"
        + PREDICT
        + "\n# %%\nn = run()\n\n"
        + '# %% tags=["answer"] jupyter={"source_hidden": true}\nprint(n)\n\n'
        + "# %% [markdown]\n# Then.\n\n# %%\nprint(n.traces)\n",
    )
    assert predict_leaks(path) == []


def test_the_proof_in_an_answer_cell_is_not_a_leak(tmp_path):
    path = _lesson(
        tmp_path,
        "# %% [markdown]\n"
        + PREDICT
        + "\n# %%\nn = run()\n\n"
        + '# %% tags=["answer"] jupyter={"source_hidden": true}\n'
        + "print(n)\nassert n.compiles == 3\n",
    )
    assert predict_leaks(path) == [] and misplaced_answers(path) == []


def test_an_answer_cell_without_a_predict_or_collapsed_code_is_named(tmp_path):
    path = _lesson(tmp_path, '# %% tags=["answer"]\nassert True\n')
    problems = misplaced_answers(path)
    assert len(problems) == 2
    assert "no Predict box precedes it" in problems[0] and "source_hidden" in problems[1]


def test_cell_stats_counts_code_lines_and_asserts(tmp_path):
    path = _lesson(tmp_path, "# %%\nx = 1\n\nassert x == 1\n\n# %%\ny = 2\n")
    stats = cell_stats(path)
    assert (stats.code_cells, stats.code_lines, stats.asserts) == (2, 3, 1)
    assert stats.longest_cell == 2 and stats.median_cell == 1.5


def _cell(classes: str, code: str, output: str) -> str:
    return (
        f'<div class="jp-Cell jp-CodeCell {classes}"><div class="jp-InputArea">{code}</div>'
        f'<div class="jp-Cell-outputWrapper">{output}</div></div>'
    )


def test_the_site_folds_an_answer_cell_whole_and_an_experiment_output_only():
    page = (
        '<div class="jp-Cell jp-MarkdownCell"><div class="admonition question">'
        '<p class="admonition-title">Predict</p></div></div>'
        + _cell("", "n = run()", "ran")
        + _cell("celltag_answer", "assert n.compiles == 3", "3 compilations")
    )
    folded = fold_predicted_answers(page)
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(folded, "html.parser")
    details = soup.select("details.jitlab-answer")
    assert len(details) == 2
    assert "n = run()" not in details[0].get_text() and "ran" in details[0].get_text()
    assert "assert n.compiles == 3" in details[1].get_text()
