"""`python -m speculab.report`: the same command as `speculab-report`."""

from speculab.report.cli import main

main()
