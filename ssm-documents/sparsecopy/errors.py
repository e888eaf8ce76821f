"""The one exception type the program reports to the user."""


class Failure(Exception):
    """A problem the user can act on. ``str(failure)`` is the one-line error the CLI prints."""
