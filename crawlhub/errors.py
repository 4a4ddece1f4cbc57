"""Errors every door reports the same way."""


class ActionRefused(Exception):
    """An action that the state of what it acts on does not allow, said in words for the user
    (the pages show the message, the API answers 409 with it, the CLI prints it)."""
