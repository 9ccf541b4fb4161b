"""``python -m jitlab.doctor -- python train.py``: the doctor until ``jitlab doctor`` is wired."""

import sys

from jitlab.doctor.cli import main

if __name__ == "__main__":
    sys.exit(main())
