"""Test-session set-up shared by every test file."""
import os

# The suite touches every op group: compile the one sweep that covers them all, instead
# of a growing series of partial ones as each group is first met.
#os.environ.setdefault("TAPEJIT_SWEEP_GROUPS", "all")
