"""shapecalc: every shape, FLOP, parameter and byte of a decoder-only Transformer, exactly."""

__version__ = "0.1.0"
