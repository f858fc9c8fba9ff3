"""Stand-in of the vendor's compressed-tensors config (the class, by name)."""


class KunlunCompressedTensorsConfig:
    pass
