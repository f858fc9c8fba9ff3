"""sglx SGLang platform plugin: how SGLang picks the right defaults and code paths per arch."""

__version__ = "0.1.0"
