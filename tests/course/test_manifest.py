"""course.yml and the typed front matter: a misspelled, missing or unknown key stops
everything with a message that names the file and the key."""

from __future__ import annotations

import pytest

from jitlab.course import CourseError, load_course
from jitlab.course.manifest import _load


def _edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))
    _load.cache_clear()


def test_the_fixture_course_loads_with_numbers_from_positions(fixture_course):
    assert [(item.number, item.slug) for item in fixture_course.lessons] == [
        ("00", "basics"),
        ("01", "doubling"),
    ]
    assert fixture_course.lessons[0].exercise is None
    exercise = fixture_course.lesson("doubling").exercise
    assert exercise.stem == "01_doubling" and exercise.meta.hints
    for key in ("doubling", "01", "1", "01_doubling", "exercises/01_doubling.py"):
        assert fixture_course.lesson(key).slug == "doubling"


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        ("lessons/00_basics.py", "#     keypoints:", "#     keypoint:", "unknown key 'keypoint'"),
        ("lessons/00_basics.py", "#     fix: nothing yet\n", "", "missing key 'fix'"),
        ("lessons/00_basics.py", "teaching: 5", "teaching: five", "whole number"),
        (
            "lessons/01_doubling.py",
            "lessons: [basics]",
            "lessons: [basic]",
            "'basic' is not a lesson",
        ),
        ("solutions/01_doubling.py", "#     hints:", "#     hint:", "unknown key 'hint'"),
        ("course.yml", "  - doubling", "  - doubling\n  - doubling", "listed twice"),
        ("course.yml", "  - basics", "  - Basics!", "not a slug"),
    ],
    ids=[
        "misspelled",
        "missing",
        "wrong-type",
        "unknown-prerequisite",
        "exercise-key",
        "twice",
        "slug",
    ],
)
def test_a_bad_course_file_names_the_file_and_the_key(fixture_course, file, old, new, message):
    _edit(fixture_course.root / file, old, new)
    with pytest.raises(CourseError, match=message) as info:
        load_course(fixture_course.root)
    assert file.split("/")[-1] in str(info.value)


def test_a_lesson_file_missing_from_course_yml_is_an_error(fixture_course):
    (fixture_course.root / "lessons" / "02_extra.py").write_text("# stray\n")
    _load.cache_clear()
    with pytest.raises(CourseError, match="02_extra.py: not a lesson in course.yml"):
        load_course(fixture_course.root)


def test_moving_a_lesson_is_one_line_and_renumber(fixture_course):
    from jitlab.maintainer.renumber import renumber

    manifest = fixture_course.root / "course.yml"
    manifest.write_text(
        manifest.read_text().replace("  - basics\n  - doubling", "  - doubling\n  - basics")
    )
    _load.cache_clear()
    with pytest.raises(CourseError, match="jitlab dev renumber"):
        load_course(fixture_course.root)
    _edit(fixture_course.root / "lessons" / "01_doubling.py", "lessons: [basics]", "other: [x]")
    renumber(fixture_course.root, echo=lambda _: None)
    _load.cache_clear()
    moved = load_course(fixture_course.root)
    assert [item.stem for item in moved.lessons] == ["00_doubling", "01_basics"]
    assert (fixture_course.root / "solutions" / "00_doubling.py").exists()
    assert moved.lesson("doubling").exercise.learner_copy.exists()
