"""python -m audioclf <command> [--flags]: see audioclf.commands."""

from audioclf.commands import dispatch

if __name__ == "__main__":
  dispatch()
