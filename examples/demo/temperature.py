"""Unit conversions."""


def to_fahrenheit(celsius):
    """Degrees Celsius as degrees Fahrenheit."""
    return celsius * 9 / 5 - 32
