"""`jitlab dev renumber` renames the files and renumbers the prose that names lessons."""

from __future__ import annotations

from jitlab.course.manifest import _load, load_course
from jitlab.maintainer.renumber import renumber, renumbered


def _append(path, text):
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_swapping_two_lessons_swaps_their_numbers_in_prose(fixture_course):
    root = fixture_course.root
    lessons = root / "lessons"
    (lessons / "00_basics.py").write_text(
        (lessons / "00_basics.py").read_text().replace("# # Basics", "# # 00 · Basics")
    )
    _append(lessons / "00_basics.py", "# %% [markdown]\n# Lesson 01 doubles; see Exercise 01.\n")
    _append(
        lessons / "01_doubling.py",
        "# %% [markdown]\n# As lessons 00 and 01 say (lesson 00, in 1,000 words), 01 stays.\n",
    )
    (root / "docs").mkdir()
    (root / "docs" / "notes.md").write_text("Start with lesson 00, then exercise 01.\n")
    manifest = root / "course.yml"
    manifest.write_text(
        manifest.read_text().replace("  - basics\n  - doubling", "  - doubling\n  - basics")
    )
    doubling = lessons / "01_doubling.py"
    doubling.write_text(doubling.read_text().replace("lessons: [basics]", "other: [x]"))

    said: list[str] = []
    renumber(root, echo=said.append)

    _load.cache_clear()
    moved = load_course(root)
    assert [item.stem for item in moved.lessons] == ["00_doubling", "01_basics"]
    basics = (lessons / "01_basics.py").read_text()
    assert "# # 01 · Basics" in basics
    assert "# Lesson 00 doubles; see Exercise 00." in basics
    assert (
        "# As lessons 01 and 00 say (lesson 01, in 1,000 words), 01 stays."
        in (lessons / "00_doubling.py").read_text()
    )
    assert "# # Exercise 00 · Doubling" in (root / "solutions" / "00_doubling.py").read_text()
    assert "# # Exercise 00 · Doubling" in (root / "exercises" / "00_doubling.py").read_text()
    assert (root / "docs" / "notes.md").read_text() == "Start with lesson 01, then exercise 00.\n"
    assert any("prose" in line for line in said)


def test_numbers_that_name_no_lesson_are_left_alone():
    text = "# 02 of 03 batches; lesson 3; lessons 02, 03, and 05; Exercise 02-03.\n"
    assert renumbered(text, {"02": "03", "03": "02", "05": "06"}) == (
        "# 02 of 03 batches; lesson 3; lessons 03, 02, and 06; Exercise 03-02.\n"
    )
