"""sglx portable kernels: Triton implementations with torch fallbacks, chosen per op."""

__version__ = "0.1.0"
