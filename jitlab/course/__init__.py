"""The course's content model: the ordered lessons, their front matter, exercise sources."""

from jitlab.course.manifest import Course, Exercise, Lesson, course_root, load_course
from jitlab.course.metadata import CourseError

__all__ = ["Course", "CourseError", "Exercise", "Lesson", "course_root", "load_course"]

# The doctor names this course's lessons in its reports (it imports nothing of the course).
from jitlab.course import doctor_links as _doctor_links  # noqa: E402

_doctor_links.register()
