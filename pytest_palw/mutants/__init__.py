"""The suite's mutation check: catalog (the mutants), engine (apply, build, run, judge), plugin (inside each run)."""
