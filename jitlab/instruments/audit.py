"""The audit events grading raises for strict mode (``sys.audit``), named once.

Standard library only: :mod:`jitlab.learner.strict` listens for them, and the
instruments and graders below it raise them.
"""

# Raised before and after each call into the learner's code ("enter", "leave") and at each
# passed check ("check"): strict mode compares its stock of what grading relies on there.
CALL_EVENT = "jitlab.learner_call"
# Raised around grading's own change to an object it hands to the learner's code
# (``sys.audit(STATE_EVENT, obj, "before" | "after")``): that state is the grader's.
STATE_EVENT = "jitlab.grader_state"
# Raised by the verdict channel's writer with each record (a check, a grader's completion):
# strict mode keeps its own copy, and the runner reads that copy, not the learner-writable
# channel file.
VERDICT_EVENT = "jitlab.verdict"
# Raised by strict mode's JAX listener with each event's name and function name: the
# listener holds nothing of the hook's, so nothing reachable from JAX's list leads to it.
HEARD_EVENT = "jitlab.strict_heard"
