"""The doctor's lesson references: the course registers them (the doctor imports nothing
of the course); without a course a reference is the lesson's name, and its page on the
published site when the site's address is known."""

from __future__ import annotations

import pytest

from jitlab.course import doctor_links
from jitlab.doctor import classify, lessons


@pytest.fixture
def no_course(monkeypatch):
    """The doctor as a team's install has it: no course registered, none to discover."""
    monkeypatch.setattr(lessons, "_providers", [])
    monkeypatch.setattr(lessons, "_discovered", True)
    monkeypatch.delenv(lessons.ENVIRONMENT, raising=False)


def test_without_a_course_a_reference_is_the_lessons_name(no_course):
    ref = lessons.lookup("shapes")
    assert (ref.name, ref.short, ref.link) == ("shapes", "shapes", "")
    assert classify.CAUSES[classify.SHAPE].lesson_name == "shapes"


def test_the_published_address_links_the_page(no_course, monkeypatch):
    monkeypatch.setenv(lessons.ENVIRONMENT, "https://example.org/course")
    assert lessons.published_link("01_shapes") == "https://example.org/course/lessons/01_shapes/"


def test_the_course_registers_its_numbers_and_pages(no_course, monkeypatch):
    monkeypatch.delenv("SITE_URL", raising=False)
    doctor_links.register()
    ref = lessons.lookup("shapes")
    assert ref.name == "01 shapes" and ref.link.endswith("lessons/01_shapes.py")
    assert lessons.lookup("no_such_lesson") == lessons.LessonRef("no_such_lesson")
    monkeypatch.setenv("SITE_URL", "https://example.org/c/")
    assert lessons.lookup("shapes").link == "https://example.org/c/lessons/01_shapes/"


def test_a_broken_registration_costs_the_numbers_not_the_report(no_course):
    def broken(slug):
        raise RuntimeError("no course here")

    lessons.register(broken)
    assert lessons.lookup("dtypes") == lessons.LessonRef("dtypes")
