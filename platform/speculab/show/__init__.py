"""What a person sees of a run: the console (`console.py`), a point's and a sweep's live progress
(`board.py`), a point's summary table (`summary.py`) and plots (`plots.py`), a sweep's ranking table and
chart (`sweep.py`), acceptance by depth across points (`acceptance.py`). It prints and draws; the tracked
runs and the report log what it draws."""
