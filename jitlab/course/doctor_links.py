"""The course's lessons, registered with the doctor (which imports nothing of the course).

:func:`register` runs when the course's package is imported, and through the
``jitlab.doctor.lessons`` entry point when ``jitlab doctor`` runs where the course is
installed. A reference names the lesson by its number (its position in ``course.yml``)
and links its page: on the published site when ``SITE_URL`` or ``JITLAB_COURSE_URL``
says where it is, else the lesson's own file in the course's folder.
"""

from __future__ import annotations

import os

from jitlab.doctor import lessons


def reference(slug: str) -> lessons.LessonRef | None:
    """The doctor's reference for ``slug`` (None where this course has no such lesson, or
    no ``course.yml``: a wheel installed into another project)."""
    from jitlab.course.manifest import course_root, lesson_number

    try:
        number = lesson_number(slug)
    except (OSError, ValueError):  # no course.yml here, or no such lesson (CourseError)
        return None
    stem = f"{number}_{slug}"
    site = os.environ.get("SITE_URL", "")
    link = f"{site.rstrip('/')}/lessons/{stem}/" if site else lessons.published_link(stem)
    if not link:
        path = course_root() / "lessons" / f"{stem}.py"
        try:
            link = os.path.relpath(path)
        except ValueError:  # another drive
            link = str(path)
        link = link if not link.startswith("..") else str(path)
    return lessons.LessonRef(slug, number, link)


def register() -> None:
    lessons.register(reference)
