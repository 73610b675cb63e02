"""``python -m jobs.validate --warehouse W --stage normalize|analyze [--job J …]``: the Great Expectations gate."""

from jobs.validate.gate import main

if __name__ == "__main__":
    raise SystemExit(main())
