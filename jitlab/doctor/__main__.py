"""``python -m jitlab.doctor -- python train.py``: the same as ``jitlab doctor -- ...``."""

import sys

from jitlab.doctor.cli import main

if __name__ == "__main__":
    sys.exit(main())
