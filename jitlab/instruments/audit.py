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

# Code of Python's and of installed packages that asks for a frame for its own use (the
# module that called it, the line a warning or log record names) and never hands the frame
# on: any other trusted code asking while the learner's code is on the stack is asking on
# the learner's behalf (a C function handed to a library: jax.tree.map(sys._getframe, ...)).
OWN_FRAME_USE = frozenset(
    {
        ("__init__.py", "findCaller"),  # logging (its currentframe hands the frame back)
        ("jax_frames.py", "jax_local"),  # which function JAX traces or explains, by identity
        ("typing.py", "*"),  # the module a TypeVar or Generic is made in
        ("typing_extensions.py", "*"),
        ("__init__.py", "namedtuple"),  # collections
        ("enum.py", "__new__"),
        ("dataclasses.py", "_process_class"),
        ("traceback_util.py", "*"),  # JAX hides its own frames from an error's traceback
    }
)
