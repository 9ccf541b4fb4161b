"""Commands for the course's maintainers (``jitlab dev ...``), kept apart from the learner's."""
