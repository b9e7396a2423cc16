"""Harness for the CLI's tests: the tao-slurm binary against the sandbox cluster (dev/sandbox) over real
SSH, through the helpers the three pytest suites share (tests/support/tao_test_support). A missing
sandbox or binary is a failure, never a skip."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))
