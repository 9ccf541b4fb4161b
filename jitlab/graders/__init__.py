"""One module of graders per exercise; each exercise's grader cells import its module."""
