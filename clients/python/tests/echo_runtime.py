"""The smallest runtime: it answers every message with what it heard, through the helper's loop.
The tests of the ``agentsim_run`` fixture run scenarios against it."""

import sys

from agentsim_runtime import IO, run


def on_user(conversation: str, text: str, io: IO) -> None:
    io.send(f"you said: {text}", conversation=conversation)


if __name__ == "__main__":
    run(on_user, name="echo")
    sys.exit(0)
