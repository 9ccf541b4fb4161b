"""Where the doctor sends a reader for each fix: a lesson, by its slug, and its page.

The doctor stands alone: it imports nothing of the course. The course registers its
lessons here (:func:`register`), from its own package when it is imported and through the
``jitlab.doctor.lessons`` entry point of an installed course, so that a report in the
course's folder says "lesson 01 shapes" and links the lesson's page. Without a course (a
team's install), a reference is the lesson's name and, when the course's published
address is known (``JITLAB_COURSE_URL``, or :data:`PUBLISHED`), its page there; the report
names the fix itself either way, so it never depends on the link.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

ENTRY_POINTS = "jitlab.doctor.lessons"
ENVIRONMENT = "JITLAB_COURSE_URL"
PUBLISHED = ""
"""The course's published site (``https://<owner>.github.io/<repository>/``), where a
team's install links lessons; empty while the course has no published address."""


@dataclasses.dataclass(frozen=True)
class LessonRef:
    """A lesson as a report names it: ``number`` ("01", "" unknown), ``slug`` and a link
    (a URL or a path, "" when there is none)."""

    slug: str
    number: str = ""
    link: str = ""

    @property
    def name(self) -> str:
        """``01 shapes``, or ``shapes`` without a course to number it."""
        return f"{self.number} {self.slug}" if self.number else self.slug

    @property
    def short(self) -> str:
        """``01``, or the slug without a number."""
        return self.number or self.slug


Provider = Callable[[str], "LessonRef | None"]
_providers: list[Provider] = []
_discovered = False


def register(provider: Provider) -> None:
    """The course registers a function from a lesson's slug to its reference (None for a
    slug it does not know). The last registered answers first."""
    if provider not in _providers:
        _providers.insert(0, provider)


def unregister(provider: Provider) -> None:
    if provider in _providers:
        _providers.remove(provider)


def _discover() -> None:
    """Load the installed course's registration (an entry point), once. A broken one
    costs the numbers, never the report."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    try:
        from importlib.metadata import entry_points

        for point in entry_points(group=ENTRY_POINTS):
            try:
                point.load()()
            except Exception:  # noqa: BLE001 - a course that cannot load: plain references
                continue
    except Exception:  # noqa: BLE001
        return


def published_link(stem: str) -> str:
    """The lesson's page on the published site ("" when no address is known)."""
    base = os.environ.get(ENVIRONMENT, "") or PUBLISHED
    return f"{base.rstrip('/')}/lessons/{stem}/" if base else ""


def lookup(slug: str) -> LessonRef:
    """The reference for ``slug``: the registered course's, else the slug alone."""
    _discover()
    for provider in _providers:
        try:
            found = provider(slug)
        except Exception:  # noqa: BLE001 - a course that cannot answer: plain reference
            found = None
        if found is not None:
            return found
    return LessonRef(slug)
