"""Stand-in of the vendor's attention backend module (the class, by name)."""


class KunlunAttentionBackend:
    pass
