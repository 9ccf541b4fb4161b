"""The site's hooks on small inputs: what they do to a page, without building the site."""

from __future__ import annotations

import base64
import html
import json
import re

import markdown

from jitlab.course import load_course
from jitlab.site.hooks import (
    MIN_TEXT_PX,
    course_nav,
    fold_solution,
    inline_svg_images,
    label_table_cells,
    readable_svgs,
    without_cell_chrome,
)

SVG = (
    '<svg width="720pt" height="216pt" viewBox="0 0 720 216">'
    '<text style="font-size: 10px; font-family: sans-serif">a</text>'
    '<text style="font-size: 8px">b</text></svg>'
)


def test_a_plot_never_shrinks_below_the_width_where_its_smallest_text_is_readable():
    page = readable_svgs(f"<p>before</p>{SVG}<p>after</p>")
    (width,) = re.findall(r'<svg style="min-width: (\d+)px"', page)
    # The smallest text, 8 of 720 units, is MIN_TEXT_PX high at this width, not below.
    assert int(width) * 8 / 720 >= MIN_TEXT_PX > (int(width) - 1) * 8 / 720
    assert page.startswith("<p>before</p>") and page.endswith("<p>after</p>")


def test_an_svg_without_text_or_with_its_own_style_is_handled():
    icon = '<svg viewBox="0 0 24 24"><path d="M0 0"/></svg>'
    assert readable_svgs(icon) == icon
    styled = SVG.replace("<svg ", '<svg style="color: red" ', 1)
    assert 'style="min-width: 855px; color: red"' in readable_svgs(styled)


def test_a_plot_shown_as_an_svg_image_becomes_the_svg_itself():
    data = base64.b64encode(('<?xml version="1.0"?>\n<!DOCTYPE svg>\n' + SVG).encode()).decode()
    page = inline_svg_images(
        f'<div><img alt="No description" src="data:image/svg+xml;base64,{data}">\n</div>'
    )
    assert page == f"<div>{SVG}\n</div>"
    png = '<img src="data:image/png;base64,iVBORw0KGgo=">'
    assert inline_svg_images(png) == png


def test_each_exercise_comes_once_right_after_its_lesson_and_no_solution_is_listed():
    course = load_course()
    pages = [page for entry in course_nav(course) for page in entry.values()]
    assert len(pages) == len(set(pages)) and not any(p.startswith("solutions/") for p in pages)
    for exercise in course.exercises:
        at = pages.index(f"exercises/{exercise.stem}.py")
        assert pages[at - 1] == f"lessons/{exercise.stem}.ipynb"


def test_a_solution_page_shows_its_title_cell_and_folds_the_rest():
    cell = '<div class="jp-Cell {}"><div class="inner">{}</div></div>'
    page = (
        "<article>"
        + "".join(
            cell.format(kind, text)
            for kind, text in [
                ("jp-MarkdownCell", "Title"),
                ("jp-CodeCell", "a"),
                ("jp-CodeCell", "b"),
            ]
        )
        + "</article>"
    )
    folded = fold_solution(page)
    title_end = folded.index("Title")
    summary = folded.index("<summary>Show the solution</summary>")
    assert (
        title_end < summary < folded.index(">a<") < folded.index(">b<") < folded.index("</details>")
    )
    assert (
        folded.replace(
            '<details class="jitlab-spoiler"><summary>Show the solution</summary>', ""
        ).replace("</details>", "")
        == page
    )


def test_a_quote_keeps_the_field_with_the_words_and_fits_a_table_cell(fixture_course):
    """The counters print ``name: 2 trace(s), 987.6 ms ... | reason``: the cheat sheet
    quotes the reason alone (no machine's time), and its bars survive a Markdown table."""
    from jitlab.notebooks.pipeline import executed_dir
    from jitlab.site import pages

    line = "sample: 2 trace(s), 987.6 ms in trace | types: now u32[2]({}) and 'key<fry>[]'"
    cell = {"cell_type": "code", "outputs": [{"output_type": "stream", "text": [line, "\n"]}]}
    target = executed_dir(fixture_course) / "lessons" / "01_doubling.ipynb"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps({"cells": [cell]}))
    quoted = pages.quote('doubling "now u32[2]"')
    table = markdown.markdown(f"| a | b |\n|---|---|\n| {quoted} | x |", extensions=["tables"])
    shown = re.search(r"<td><code>(.*?)</code></td>", table).group(1)
    assert html.unescape(shown) == "types: now u32[2]({}) and 'key<fry>[]'"
    assert "ms" not in quoted and "\\" not in table and table.count("<td>") == 2


def test_a_notebook_page_loses_its_tag_labels_and_copied_text_but_keeps_its_code():
    cell = (
        '<div class="jp-Cell celltag_answer"><div class="celltoolbar">'
        '<div class="button_container tags_button_container"> <span class="tag-container"> '
        '<span class="cell-tag">answer</span> </span> </div> </div>'
        '<clipboard-copy><span class="notice" hidden="">Copied!</span></clipboard-copy>'
        "<pre>assert n == 1</pre></div>"
    )
    page = without_cell_chrome(cell)
    assert "answer</span>" not in page and "Copied!" not in page
    assert 'class="jp-Cell celltag_answer"' in page and "<pre>assert n == 1</pre>" in page
    assert '<span class="notice" hidden=""></span>' in page  # the button still has it


def test_a_cards_table_labels_each_cell_with_its_column():
    table = markdown.markdown("| cause | fix |\n|---|---|\n| `a` | b |", extensions=["tables"])
    labelled = label_table_cells(table)
    assert '<td data-label="cause"><code>a</code></td>' in labelled
    assert '<td data-label="fix">b</td>' in labelled
