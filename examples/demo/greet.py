"""Greetings."""


def greet(name):
    """A friendly greeting for name."""
    return "Helo, " + name + "!"
